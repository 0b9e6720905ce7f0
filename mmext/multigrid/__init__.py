"""Multigrid training (Wu et al., CVPR 2020) for mmaction2 recipes.

Importing the package registers ``mmext.MultigridHook``."""
from .frame_cache import CachedVideoDataset, FrameCache
from .hook import (SCALAR_BATCH_SIZE, SCALAR_CLIP_LEN, SCALAR_CROP_SIZE,
                   SCALAR_PRECISE_BN, MultigridHook)
from .plan import MultigridOptions, MultigridPlan
from .schedule import GridShape, MultigridStage, build_multigrid_schedule

__all__ = [
    'CachedVideoDataset', 'FrameCache', 'MultigridHook', 'MultigridOptions', 'MultigridPlan', 'GridShape',
    'MultigridStage', 'build_multigrid_schedule', 'SCALAR_BATCH_SIZE',
    'SCALAR_CLIP_LEN', 'SCALAR_CROP_SIZE', 'SCALAR_PRECISE_BN'
]
