"""mmext's registries: children of mmengine's in scope ``mmext``.

Their ``locations`` let a config in any default scope write
``type='mmext.MultigridHook'`` without ``custom_imports``. Only classes a
config builds are registered. Importing this module also makes the builds
of mmengine's registries of these kinds (those of any runner, whatever the
toolbox) name the mmext type or option meant when a config misspells one
or leaves out the ``mmext.`` prefix."""
import difflib
import inspect
from typing import Callable, Iterable, Optional

from mmengine.registry import DATASETS as MMENGINE_DATASETS
from mmengine.registry import HOOKS as MMENGINE_HOOKS
from mmengine.registry import \
    OPTIM_WRAPPER_CONSTRUCTORS as MMENGINE_OPTIM_WRAPPER_CONSTRUCTORS
from mmengine.registry import OPTIM_WRAPPERS as MMENGINE_OPTIM_WRAPPERS
from mmengine.registry import PARAM_SCHEDULERS as MMENGINE_PARAM_SCHEDULERS
from mmengine.registry import RUNNERS as MMENGINE_RUNNERS
from mmengine.registry import Registry

from .log import refuse
from .options import type_name

__all__ = [
    'DATASETS', 'HOOKS', 'OPTIM_WRAPPERS', 'OPTIM_WRAPPER_CONSTRUCTORS',
    'PARAM_SCHEDULERS', 'RUNNERS'
]


def closest(name: str, known: Iterable[str],
            cutoff: float = 0.6) -> Optional[str]:
    """The known name most like a misspelt one.

    Args:
        name (str): The misspelt name.
        known (Iterable[str]): The names it may mean.
        cutoff (float): The least similarity of ``difflib.get_close_matches``,
            in [0, 1]. Defaults to 0.6.

    Returns:
        str | None: The closest name, or None.
    """
    match = difflib.get_close_matches(name, sorted(known), 1, cutoff)
    return match[0] if match else None


def unexpected(owner: str, what: str, given: Iterable[str],
               known: Iterable[str]) -> Optional[str]:
    """The refusal of the first given name that is not known.

    Args:
        owner (str): What got the names, e.g. ``'auto_scale_lr'``.
        what (str): What they are, e.g. ``'key'``.
        given (Iterable[str]): The names given.
        known (Iterable[str]): The names allowed.

    Returns:
        str | None: The message naming the one meant (or the names allowed);
        None when all are known.
    """
    known = list(known)
    unknown = sorted(set(given) - set(known))
    if not unknown:
        return None
    meant = closest(unknown[0], known)
    return f'{owner} got an unexpected {what} {unknown[0]!r}: ' + (
        f'did you mean {meant!r}?' if meant else f'expected one of {known}')


def init_options(cls: type) -> Optional[set]:
    """The keywords a class's constructor takes.

    Follows ``**kwargs`` into the bases' ``__init__``.

    Args:
        cls (type): The class.

    Returns:
        set[str] | None: The keyword names; None if it takes any.
    """
    names = set()
    for klass in cls.__mro__:
        if '__init__' in vars(klass):
            params = inspect.signature(klass.__init__).parameters.values()
            names |= {p.name for p in params if p.kind in (
                p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
            if all(p.kind is not p.VAR_KEYWORD for p in params):
                return names - {'self'}
    return None


def _hint(cfg, registry: Registry, mmext: Registry, exc: Exception,
          default_args: Optional[dict]) -> Optional[str]:
    """What ``exc`` of building ``cfg`` missed: the mmext type meant by an
    unknown ``type``, or the option meant by one an mmext class lacks."""
    kind = cfg.get('type') if isinstance(cfg, dict) else None
    if not isinstance(kind, str):
        return None
    with registry.switch_scope_and_registry(cfg.get('_scope_')) as scoped:
        cls = scoped.get(kind)
    if cls is None and isinstance(exc, KeyError):
        mmext.import_from_location()
        meant = closest(type_name(kind), mmext.module_dict, 0.75)
        return meant and (f'{kind!r} is not in the {scoped.scope}::'
                          f'{scoped.name} registry: did you mean '
                          f"'mmext.{meant}'?")
    if (isinstance(exc, TypeError) and inspect.isclass(cls)
            and cls.__module__.startswith('mmext.')):
        known = init_options(cls)
        given = set(cfg) - {'type', '_scope_'} | set(default_args or {})
        return known is not None and unexpected(cls.__name__, 'option',
                                                given, sorted(known))
    return None


def _with_hints(build: Callable, mmext: Registry) -> Callable:
    """``build`` (a registry's build function) whose KeyError for an
    unknown type and TypeError for an unknown option of an mmext class name
    the mmext type or option meant (:func:`_hint`)."""

    def build_with_hints(cfg, *args, registry: Registry, **kwargs):
        try:
            return build(cfg, *args, registry=registry, **kwargs)
        except (KeyError, TypeError) as exc:
            hint = _hint(cfg, registry, mmext, exc,
                         kwargs.get('default_args', args[0] if args else None))
            if not hint:
                raise
            raise refuse((KeyError if isinstance(exc, KeyError) else
                          TypeError)(hint)) from exc

    return build_with_hints


def _child(name: str, parent: Registry, *locations: str,
           hints: bool = True) -> Registry:
    """A child of ``parent`` in scope ``mmext``, filled by ``locations``;
    with ``hints`` the builds of both name the type or option meant."""
    child = Registry(name, parent=parent, scope='mmext',
                     locations=list(locations))
    if not hints:
        return child
    child.build_func = _with_hints(child.build_func, child)
    if not getattr(parent.build_func, 'mmext_hints', False):
        parent.build_func = _with_hints(parent.build_func, child)
        parent.build_func.mmext_hints = True
    return child


DATASETS = _child('dataset', MMENGINE_DATASETS, 'mmext.multigrid')
HOOKS = _child('hook', MMENGINE_HOOKS, 'mmext.multigrid', 'mmext.nan_guard')
OPTIM_WRAPPERS = _child('optim_wrapper', MMENGINE_OPTIM_WRAPPERS, 'mmext.agvm')
OPTIM_WRAPPER_CONSTRUCTORS = _child('optimizer wrapper constructor',
                                    MMENGINE_OPTIM_WRAPPER_CONSTRUCTORS,
                                    'mmext.agvm')
PARAM_SCHEDULERS = _child('parameter scheduler', MMENGINE_PARAM_SCHEDULERS,
                          'mmext.warmup')
# A runner takes the config's known keys only: no option hint.
RUNNERS = _child('runner', MMENGINE_RUNNERS, 'mmext.runner', hints=False)
