"""mmext's registries: children of mmengine's root registries in scope ``mmext``.

Every registry here names the modules that fill it (``locations``), so a config
in any default scope (``mmdet``, ``mmaction``, ``mmseg``) can write
``type='mmext.MultigridHook'`` without ``custom_imports``: mmengine imports
``mmext.registry`` for the ``mmext.`` prefix and then these locations. Only
classes a config can build are registered (the multigrid dataset wrapper and
batch sampler are built by the hook, not from configs).
"""
from mmengine.registry import HOOKS as MMENGINE_HOOKS
from mmengine.registry import \
    OPTIM_WRAPPER_CONSTRUCTORS as MMENGINE_OPTIM_WRAPPER_CONSTRUCTORS
from mmengine.registry import OPTIM_WRAPPERS as MMENGINE_OPTIM_WRAPPERS
from mmengine.registry import PARAM_SCHEDULERS as MMENGINE_PARAM_SCHEDULERS
from mmengine.registry import RUNNERS as MMENGINE_RUNNERS
from mmengine.registry import TRANSFORMS as MMENGINE_TRANSFORMS
from mmengine.registry import Registry

__all__ = [
    'HOOKS', 'OPTIM_WRAPPERS', 'OPTIM_WRAPPER_CONSTRUCTORS',
    'PARAM_SCHEDULERS', 'RUNNERS', 'TRANSFORMS'
]

HOOKS = Registry(
    'hook', parent=MMENGINE_HOOKS, scope='mmext',
    locations=['mmext.multigrid', 'mmext.nan_guard'])
OPTIM_WRAPPERS = Registry(
    'optim_wrapper', parent=MMENGINE_OPTIM_WRAPPERS, scope='mmext',
    locations=['mmext.agvm'])
OPTIM_WRAPPER_CONSTRUCTORS = Registry(
    'optimizer wrapper constructor',
    parent=MMENGINE_OPTIM_WRAPPER_CONSTRUCTORS, scope='mmext',
    locations=['mmext.agvm'])
PARAM_SCHEDULERS = Registry(
    'parameter scheduler', parent=MMENGINE_PARAM_SCHEDULERS, scope='mmext',
    locations=['mmext.warmup'])
RUNNERS = Registry(
    'runner', parent=MMENGINE_RUNNERS, scope='mmext',
    locations=['mmext.runner'])
# Benchmark stand-ins for video decoding (random in-memory clips).
TRANSFORMS = Registry(
    'transform', parent=MMENGINE_TRANSFORMS, scope='mmext',
    locations=['mmext.testing.synthetic'])
