"""mmext's registries: children of mmengine's root registries in scope ``mmext``.

Every registry here names the modules that fill it (``locations``), so a config
in any default scope (``mmdet``, ``mmaction``, ``mmseg``) can write
``type='mmext.MultigridHook'`` without ``custom_imports``: mmengine imports
``mmext.registry`` for the ``mmext.`` prefix and then these locations.
"""
from mmengine.registry import DATA_SAMPLERS as MMENGINE_DATA_SAMPLERS
from mmengine.registry import DATASETS as MMENGINE_DATASETS
from mmengine.registry import HOOKS as MMENGINE_HOOKS
from mmengine.registry import \
    OPTIM_WRAPPER_CONSTRUCTORS as MMENGINE_OPTIM_WRAPPER_CONSTRUCTORS
from mmengine.registry import OPTIM_WRAPPERS as MMENGINE_OPTIM_WRAPPERS
from mmengine.registry import Registry

__all__ = [
    'HOOKS', 'OPTIM_WRAPPERS', 'OPTIM_WRAPPER_CONSTRUCTORS', 'DATA_SAMPLERS',
    'DATASETS'
]

HOOKS = Registry(
    'hook', parent=MMENGINE_HOOKS, scope='mmext',
    locations=['mmext.engine.hooks'])
OPTIM_WRAPPERS = Registry(
    'optim_wrapper', parent=MMENGINE_OPTIM_WRAPPERS, scope='mmext',
    locations=['mmext.engine.optimizers'])
OPTIM_WRAPPER_CONSTRUCTORS = Registry(
    'optimizer wrapper constructor',
    parent=MMENGINE_OPTIM_WRAPPER_CONSTRUCTORS, scope='mmext',
    locations=['mmext.engine.optimizers'])
DATA_SAMPLERS = Registry(
    'data sampler', parent=MMENGINE_DATA_SAMPLERS, scope='mmext',
    locations=['mmext.datasets'])
DATASETS = Registry(
    'dataset', parent=MMENGINE_DATASETS, scope='mmext',
    locations=['mmext.datasets'])
