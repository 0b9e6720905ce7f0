"""Multigrid training (Wu et al., CVPR 2020): everything of the method.

Pure math, no runner:

* :mod:`.schedule`: grid shapes, long/short cycles, stages, iteration counts;
* :mod:`.lr`: the recipe's LR stages and schedulers on the multigrid axis;
* :mod:`.pipeline`: reading and rewriting (T, S) in a train pipeline;
* :mod:`.plan`: :class:`MultigridPlan`, the one description of a run that
  the hook and ``tools/analysis/multigrid_schedule.py`` share.

Glue to mmengine/mmaction2:

* :mod:`.bn`: sub-batch BN and precise BN;
* :mod:`.data`: the shape-aware dataset wrapper and short-cycle batch
  sampler;
* :mod:`.hook`: ``mmext.MultigridHook``.
"""
from .hook import MultigridHook
from .plan import MultigridPlan
from .schedule import (DEFAULT_LONG_CYCLE_FACTORS, DEFAULT_SHORT_CYCLE_FACTORS,
                       GridShape, MultigridStage, build_multigrid_schedule,
                       iterations_per_epoch, map_recipe_epoch,
                       short_cycle_shapes, stage_at_epoch, total_flops_ratio)

__all__ = [
    'DEFAULT_LONG_CYCLE_FACTORS', 'DEFAULT_SHORT_CYCLE_FACTORS', 'GridShape',
    'MultigridStage', 'build_multigrid_schedule', 'iterations_per_epoch',
    'map_recipe_epoch', 'short_cycle_shapes', 'stage_at_epoch',
    'total_flops_ratio', 'MultigridPlan', 'MultigridHook'
]
