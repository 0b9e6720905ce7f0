"""Multigrid training (Wu et al., CVPR 2020): schedule, data and BN pieces."""
from .schedule import (DEFAULT_LONG_CYCLE_FACTORS, DEFAULT_SHORT_CYCLE_FACTORS,
                       GridShape, MultigridStage, build_multigrid_schedule,
                       iterations_per_epoch, map_recipe_epoch,
                       short_cycle_shapes, stage_at_epoch, total_flops_ratio)

__all__ = [
    'DEFAULT_LONG_CYCLE_FACTORS', 'DEFAULT_SHORT_CYCLE_FACTORS', 'GridShape',
    'MultigridStage', 'build_multigrid_schedule', 'iterations_per_epoch',
    'map_recipe_epoch', 'short_cycle_shapes', 'stage_at_epoch',
    'total_flops_ratio'
]
