"""AGVM (Xue et al., NeurIPS 2022, arXiv 2210.11078) for mmdet and mmseg.

Importing it registers ``mmext.AGVMOptimWrapper``, ``AGVMAmpOptimWrapper``
and ``AGVMOptimWrapperConstructor``."""
from .constructor import AGVMOptimWrapperConstructor
from .optim_wrapper import (SCALAR_ESTIMATE, SCALAR_FACTOR, SCALAR_VARIANCE,
                            AGVMAmpOptimWrapper, AGVMOptimWrapper)

__all__ = [
    'AGVMOptimWrapper', 'AGVMAmpOptimWrapper', 'AGVMOptimWrapperConstructor',
    'SCALAR_FACTOR', 'SCALAR_VARIANCE', 'SCALAR_ESTIMATE'
]
