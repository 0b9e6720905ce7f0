"""Multigrid training (Wu et al., CVPR 2020) for mmaction2 recipes.

* :mod:`.schedule`: the pure math (grid shapes, long/short cycles, stages);
* :mod:`.plan`: :class:`MultigridOptions` and :class:`MultigridPlan`, what a
  run trains (configs and arithmetic);
* :mod:`.hook`: ``mmext.MultigridHook``, the runner glue;
* :mod:`.data`: grid shapes in pipelines, the shape-aware dataset and the
  short-cycle batch sampler;
* :mod:`.bn`: sub-batch BN and precise BN;
* :mod:`.checks`: a recognizer checked against a plan (the shape probe);
* :mod:`.transformers`: video transformers at every grid shape;
* :mod:`.speed`: what makes the runs fast (allocator, ``torch.compile``,
  ``mmext.ChannelsLastHook``, ``mmext.Float32HeadHook``).

Importing the package registers the three hooks.
"""
from .hook import (SCALAR_BATCH_SIZE, SCALAR_CLIP_LEN, SCALAR_CROP_SIZE,
                   SCALAR_PRECISE_BN, MultigridHook)
from .plan import MultigridOptions, MultigridPlan
from .schedule import GridShape, MultigridStage, build_multigrid_schedule
from .speed import ChannelsLastHook, Float32HeadHook

__all__ = [
    'MultigridHook', 'ChannelsLastHook', 'Float32HeadHook',
    'MultigridOptions', 'MultigridPlan', 'GridShape', 'MultigridStage',
    'build_multigrid_schedule', 'SCALAR_BATCH_SIZE', 'SCALAR_CLIP_LEN',
    'SCALAR_CROP_SIZE', 'SCALAR_PRECISE_BN'
]
