"""Multigrid training (Wu et al., CVPR 2020): everything of the method.

Configs and arithmetic, no model and no runner:

* :mod:`.schedule`: grid shapes, long/short cycles, stages, iteration counts;
* :mod:`.options`: :class:`MultigridOptions`, the hook's options;
* :mod:`.lr`: the recipe's LR stages and schedulers on the multigrid axis,
  and what of them a run cannot honour;
* :mod:`.pipeline`: reading and rewriting (T, S) in a train pipeline;
* :mod:`.plan`: :class:`MultigridPlan`, the one description of a run that
  the hook and the tools share;
* :mod:`.report`: the plan as data and as the logged table;
* :mod:`.resume`: the schedule a checkpoint records, and its check;
* :mod:`.monitor`: data-wait share and the data-bound warning.

Glue to mmengine/mmaction2:

* :mod:`.bn`: sub-batch BN and precise BN;
* :mod:`.model_checks`: a recognizer checked against a plan;
* :mod:`.shape_probe`: every planned shape forwarded through the model;
* :mod:`.transformers`: video transformers at every grid shape;
* :mod:`.data`: the shape-aware dataset wrapper and short-cycle batch
  sampler;
* :mod:`.hook`: ``mmext.MultigridHook``;
* :mod:`.memory_format`: ``mmext.ChannelsLastHook`` (channels_last_3d
  training, with or without multigrid);
* :mod:`.amp`: ``mmext.Float32HeadHook`` (class scores in float32 under
  bfloat16 autocast);
* :mod:`.allocator`: glibc told to keep freed memory (CPU training);
* :mod:`.compiled`: ``torch.compile`` under multigrid (dynamo's recompile
  limit sized to the plan, graphs counted).
"""
from .hook import (SCALAR_BATCH_SIZE, SCALAR_CLIP_LEN, SCALAR_CROP_SIZE,
                   SCALAR_PRECISE_BN, MultigridHook)
from .amp import Float32HeadHook
from .memory_format import ChannelsLastHook
from .options import MultigridOptions, is_multigrid_hook
from .plan import MultigridPlan, ShapeIterations
from .report import describe, summary
from .schedule import (DEFAULT_LONG_CYCLE_FACTORS, DEFAULT_SHORT_CYCLE_FACTORS,
                       GridShape, MultigridStage, build_multigrid_schedule,
                       iterations_per_epoch, map_recipe_epoch,
                       short_cycle_shapes, stage_at_epoch, total_flops_ratio)

__all__ = [
    'DEFAULT_LONG_CYCLE_FACTORS', 'DEFAULT_SHORT_CYCLE_FACTORS', 'GridShape',
    'MultigridStage', 'build_multigrid_schedule', 'iterations_per_epoch',
    'map_recipe_epoch', 'short_cycle_shapes', 'stage_at_epoch',
    'total_flops_ratio', 'MultigridOptions', 'is_multigrid_hook',
    'MultigridPlan', 'ShapeIterations', 'describe', 'summary',
    'MultigridHook', 'SCALAR_BATCH_SIZE', 'SCALAR_CLIP_LEN',
    'SCALAR_CROP_SIZE', 'SCALAR_PRECISE_BN', 'ChannelsLastHook',
    'Float32HeadHook'
]
