"""mmext optimizer wrappers and constructors (registered in scope mmext)."""
from .agvm_constructor import AGVMOptimWrapperConstructor
from .agvm_optim_wrapper import AGVMAmpOptimWrapper, AGVMOptimWrapper

__all__ = [
    'AGVMOptimWrapperConstructor', 'AGVMOptimWrapper', 'AGVMAmpOptimWrapper'
]
