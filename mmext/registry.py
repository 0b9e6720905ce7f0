"""mmext's registries: children of mmengine's in scope ``mmext``.

Their ``locations`` let a config in any default scope write
``type='mmext.MultigridHook'`` without ``custom_imports``. Only classes a
config builds are registered.
"""
from mmengine.registry import HOOKS as MMENGINE_HOOKS
from mmengine.registry import \
    OPTIM_WRAPPER_CONSTRUCTORS as MMENGINE_OPTIM_WRAPPER_CONSTRUCTORS
from mmengine.registry import OPTIM_WRAPPERS as MMENGINE_OPTIM_WRAPPERS
from mmengine.registry import PARAM_SCHEDULERS as MMENGINE_PARAM_SCHEDULERS
from mmengine.registry import RUNNERS as MMENGINE_RUNNERS
from mmengine.registry import Registry

__all__ = [
    'HOOKS', 'OPTIM_WRAPPERS', 'OPTIM_WRAPPER_CONSTRUCTORS',
    'PARAM_SCHEDULERS', 'RUNNERS'
]


def _child(name: str, parent: Registry, *locations: str) -> Registry:
    """A child of ``parent`` in scope ``mmext``, filled by ``locations``."""
    return Registry(name, parent=parent, scope='mmext',
                    locations=list(locations))


HOOKS = _child('hook', MMENGINE_HOOKS, 'mmext.multigrid', 'mmext.nan_guard')
OPTIM_WRAPPERS = _child('optim_wrapper', MMENGINE_OPTIM_WRAPPERS, 'mmext.agvm')
OPTIM_WRAPPER_CONSTRUCTORS = _child('optimizer wrapper constructor',
                                    MMENGINE_OPTIM_WRAPPER_CONSTRUCTORS,
                                    'mmext.agvm')
PARAM_SCHEDULERS = _child('parameter scheduler', MMENGINE_PARAM_SCHEDULERS,
                          'mmext.warmup')
RUNNERS = _child('runner', MMENGINE_RUNNERS, 'mmext.runner')
