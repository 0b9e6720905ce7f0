"""Param groups by module: AGVM's optimizer wrapper constructor.

The recipe's own constructor builds the param groups; they are split by
module. Every parameter the recipe's optimizer holds belongs to a listed
module or to ``'others'`` (the reference ``GroupOptimizerConstructor``
dropped those); frozen ones stay, as mmengine keeps them."""
import copy
import inspect
from typing import Dict, List, Optional, Sequence

from mmengine.optim import OptimWrapper
from mmengine.registry import OPTIM_WRAPPER_CONSTRUCTORS as ALL_CONSTRUCTORS
from mmengine.registry import OPTIMIZERS
from torch import nn
from torch.optim import Optimizer

from mmext.compat import calling_runner
from mmext.log import logs_refusals, warn
from mmext.options import type_name
from mmext.registry import (OPTIM_WRAPPER_CONSTRUCTORS, OPTIM_WRAPPERS,
                            closest)
from .optim_wrapper import is_agvm_type

__all__ = [
    'OTHERS', 'default_module_names', 'resolve_module_names',
    'assign_parameters', 'split_groups_by_module', 'build_optimizer',
    'AGVMOptimWrapperConstructor'
]

# The group of trainable parameters outside ``module_names`` (factor 1).
OTHERS = 'others'
DEFAULT_BASE_CONSTRUCTOR = 'DefaultOptimWrapperConstructor'
# ``DefaultOptimWrapperConstructor.__init__`` type-checks these for every
# subclass: only reads while the groups are built count.
_VALIDATED_AT_INIT = ('custom_keys', 'bias_decay_mult', 'norm_decay_mult',
                      'dwconv_decay_mult')


def _trainable_names(model: nn.Module) -> List[str]:
    """The names of the model's trainable parameters; a parameter several
    modules share (tied weights) is named once, by its first module, which
    owns it (the one mmengine's ``bypass_duplicate`` keeps it in)."""
    return [n for n, p in model.named_parameters() if p.requires_grad]


def _owns(trainable: Sequence[str], prefix: str) -> bool:
    """Whether submodule ``prefix`` owns one of ``trainable``."""
    return any(name.startswith(prefix + '.') for name in trainable)


# Heads modulated apart when a child has both (reference
# ``GroupOptimizerConstructor``).
SPLIT_HEADS = ('bbox_head', 'mask_head')


def default_module_names(model: nn.Module) -> List[str]:
    """The default modulated modules of a model.

    Its top-level children that own trainable parameters (one whose
    parameters are all tied to an earlier child's owns none); a child with a
    trainable ``bbox_head`` and ``mask_head`` (Mask R-CNN's ``roi_head``) is
    replaced by those two, as in the reference (``GroupOptimizerConstructor``).

    Args:
        model (nn.Module): The unwrapped model.

    Returns:
        list[str]: The module names, in the model's order (the first is the
        anchor).
    """
    trainable = _trainable_names(model)
    names = []
    for name, child in model.named_children():
        if not _owns(trainable, name):
            continue
        heads = [
            head for head in SPLIT_HEADS
            if isinstance(getattr(child, head, None), nn.Module)
            and _owns(trainable, f'{name}.{head}')
        ]
        names += ([f'{name}.{head}' for head in heads]
                  if len(heads) == len(SPLIT_HEADS) else [name])
    return names


def _warn_if_anchor_moved(model: nn.Module, names: Sequence[str]) -> None:
    """Warn when the default anchor is not the model's first module."""
    first = next((n for n, m in model.named_children()
                  if next(m.parameters(), None) is not None), None)
    if first is None or not names or names[0].split('.')[0] == first:
        return
    warn(f'AGVM anchor (module 0) is {names[0]!r}, not the frozen {first!r}: '
         'unfreeze it or set module_names')


def resolve_module_names(model: nn.Module,
                         module_names: Optional[Sequence[str]]) -> List[str]:
    """Validate ``module_names`` (dotted submodule names) against ``model``.

    The one check of the option: the wrapper trusts it.

    Args:
        model (nn.Module): The unwrapped model.
        module_names (Sequence[str], optional): Modulated modules, the first
            is the anchor; None for :func:`default_module_names` (warned when
            the model's first module is frozen: the anchor is then the next
            one).

    Returns:
        list[str]: The module names, anchor first.

    Raises:
        ValueError: If ``module_names`` is not None or a list of names, if a
            name is not a submodule, is listed twice or is ``'others'``, if
            the list is empty, or if a module owns no trainable parameter
            (frozen, tied to another module's, or claimed by a longer listed
            name).
    """
    if module_names is not None and not (
            isinstance(module_names, (list, tuple))
            and all(isinstance(name, str) for name in module_names)):
        raise ValueError(f'module_names={module_names!r}: expected a list of '
                         'submodule names')
    if module_names is None:
        names = default_module_names(model)
        _warn_if_anchor_moved(model, names)
    else:
        names = list(module_names)
    trainable = _trainable_names(model)
    available = [n for n, _ in model.named_children() if _owns(trainable, n)]
    if not names:
        if module_names is not None:
            raise ValueError(f'module_names is empty: list modules, anchor '
                             f'first, e.g. {available}')
        raise ValueError(f'{type(model).__name__} has no trainable module '
                         'for AGVM')
    if len(set(names)) != len(names) or OTHERS in names:
        raise ValueError(f'module_names must be distinct and not '
                         f'{OTHERS!r}, got {names}')
    for name in names:
        if not name:
            raise ValueError("module_names: '' names the whole model; list "
                             f'submodules, e.g. {available}')
        try:
            model.get_submodule(name)
        except AttributeError:
            raise ValueError(f'module_names: {name!r} is not a submodule; '
                             f'trainable ones: {available}') from None
    owners = assign_parameters(model, names)
    owned = {owners[id(p)] for p in model.parameters() if p.requires_grad}
    for index, name in enumerate(names):
        if name in owned:
            continue
        why = _why_owns_nothing(model, name, owners)
        if index == 0:
            raise ValueError(f'module_names: the anchor {name!r} owns no '
                             f'trainable parameter ({why}); put one of '
                             f'{available} first')
        raise ValueError(f'module_names: {name!r} owns no trainable '
                         f'parameter ({why}): remove it')
    return names


def _why_owns_nothing(model: nn.Module, name: str,
                      owners: Dict[int, str]) -> str:
    """Why the listed module ``name`` owns no trainable parameter."""
    module = model.get_submodule(name)
    params = [p for p in module.parameters() if p.requires_grad]
    if not params:
        return ('frozen' if next(module.parameters(), None) is not None else
                'no parameters')
    first_names = {id(p): n for n, p in model.named_parameters()}
    tied = [first_names[id(p)] for p in params
            if not first_names[id(p)].startswith(name + '.')]
    if tied:
        return f'tied to {tied[0]}'
    return f'claimed by {sorted({owners[id(p)] for p in params})}'


def assign_parameters(model: nn.Module,
                      module_names: Sequence[str]) -> Dict[int, str]:
    """Map each parameter to its modulated module or ``'others'``.

    A parameter belongs to the longest listed name that prefixes its own (so
    ``roi_head`` and ``roi_head.mask_head`` may both be listed). Frozen ones
    too: the optimizer keeps them, so that a hook can unfreeze them.

    Args:
        model (nn.Module): The unwrapped model.
        module_names (Sequence[str]): From :func:`resolve_module_names`.

    Returns:
        dict[int, str]: ``id(param)`` to module name.
    """
    by_length = sorted(module_names, key=len, reverse=True)
    owners = {}
    for param_name, param in model.named_parameters():
        owners[id(param)] = next(
            (m for m in by_length if param_name.startswith(m + '.')), OTHERS)
    return owners


def split_groups_by_module(groups: List[Dict], owners: Dict[int, str],
                           module_names: Sequence[str]) -> List[Dict]:
    """Split param groups so each holds parameters of one module only.

    Each group keeps its options and gets ``'agvm_module'``; a parallel
    ``'param_names'`` list is split alongside; a parameter not in ``owners``
    goes to ``'others'``.

    Args:
        groups (list[dict]): Param groups (``'params'`` plus options).
        owners (dict[int, str]): ``id(param)`` to module name
            (:func:`assign_parameters`).
        module_names (Sequence[str]): The listed modules.

    Returns:
        list[dict]: The tagged groups, in input order, empty ones left out.

    Raises:
        ValueError: If the groups hold no trainable parameter of a listed
            module (a recipe constructor that leaves them out).
    """
    tagged = []
    for group in groups:
        names = group.get('param_names')
        if names is not None and len(names) != len(group['params']):
            names = None
        by_module: Dict[str, Dict[str, list]] = {}
        for i, param in enumerate(group['params']):
            split = by_module.setdefault(owners.get(id(param), OTHERS),
                                         dict(params=[], param_names=[]))
            split['params'].append(param)
            if names is not None:
                split['param_names'].append(names[i])
        for module, split in by_module.items():
            new_group = dict(group, params=split['params'],
                             agvm_module=module)
            if names is not None:
                new_group['param_names'] = split['param_names']
            tagged.append(new_group)
    tags = {group['agvm_module'] for group in tagged
            if any(param.requires_grad for param in group['params'])}
    empty = [name for name in module_names if name not in tags]
    if empty:
        raise ValueError(f'the optimizer holds no trainable parameter of '
                         f'module_names {empty}: remove them')
    return tagged


def _reads(method, every: bool = False):
    """``method`` of ``dict`` marking its key (``every``: all keys) as
    read."""

    def read(self, *args):
        self.read.update(dict.keys(self) if every else args[:1])
        return method(self, *args)

    return read


class _ReadKeys(dict):
    """A ``paramwise_cfg`` that records which keys its reader looked at.

    Lookups mark one key; whole-dict reads (iteration, ``items``, copies)
    mark all; membership tests none."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.read = set()

    __getitem__, get = _reads(dict.__getitem__), _reads(dict.get)
    pop, setdefault = _reads(dict.pop), _reads(dict.setdefault)
    __iter__, keys = _reads(dict.__iter__, True), _reads(dict.keys, True)
    items, values = _reads(dict.items, True), _reads(dict.values, True)
    copy = _reads(lambda self: dict(dict.items(self)), True)
    __deepcopy__ = _reads(
        lambda self, memo: copy.deepcopy(dict(dict.items(self)), memo), True)


def _warn_unmatched_custom_keys(model: nn.Module,
                                paramwise_cfg: dict) -> None:
    """Warn about ``custom_keys`` that match no trainable parameter."""
    names = [
        '.' + name for name, param in model.named_parameters()
        if param.requires_grad
    ]
    unmatched = [
        key for key in dict.get(paramwise_cfg, 'custom_keys') or {}
        if not any(key in name for name in names)
    ]
    if unmatched:
        warn(f'paramwise_cfg.custom_keys {unmatched} match no trainable '
             f'parameter of {type(model).__name__}')


def _refuse_optim_wrapper_dict() -> None:
    """Refuse AGVM as one optimizer of several (an ``OptimWrapperDict``).

    mmengine's ``OptimWrapperDict.initialize_count_status`` leaves its
    wrappers uninitialized: AGVM's counters would not follow a resume, and
    its summary and start checks would never run. Seen while the runner
    builds the optim wrapper: its ``optim_wrapper`` is then the config, of
    several optimizers when it has no ``optimizer`` of its own."""
    cfg = getattr(calling_runner(), 'optim_wrapper', None)
    if isinstance(cfg, dict) and 'optimizer' not in cfg:
        names = [name for name, value in cfg.items()
                 if isinstance(value, dict)]
        raise ValueError(f'AGVM in an OptimWrapperDict {names}: not '
                         'supported, use one optim_wrapper')


def build_optimizer(optimizer_cfg: dict, groups: List[Dict]) -> Optimizer:
    """Build an optimizer config on given param groups.

    As mmengine's default constructor builds it: the optimizer's first
    argument takes them (e.g. ``model_params`` of colossalai's
    ``HybridAdam``). A new optimizer rather than the recipe's regrouped in
    place: ZeRO's ``add_param_group`` also feeds its local shard, which
    emptying ``param_groups`` does not empty.

    Args:
        optimizer_cfg (dict): The ``optimizer`` config; a string ``type`` is
            looked up in mmengine's ``OPTIMIZERS`` and the default scope.
        groups (list[dict]): The param groups.

    Returns:
        Optimizer: The optimizer.
    """
    optimizer_type = optimizer_cfg['type']
    if isinstance(optimizer_type, str):
        with OPTIMIZERS.switch_scope_and_registry(None) as registry:
            optimizer_type = registry.get(optimizer_type)
    first = next(iter(inspect.signature(optimizer_type).parameters))
    return OPTIMIZERS.build(dict(copy.deepcopy(optimizer_cfg),
                                 **{first: groups}))


@OPTIM_WRAPPER_CONSTRUCTORS.register_module()
class AGVMOptimWrapperConstructor:
    """Build the recipe's optimizer, with its param groups split by module.

    ``base_constructor`` (the recipe's former ``constructor``; mmengine's
    default if unset, looked up in the default scope) builds the groups;
    each keeps its options, and ``optimizer`` is built again on them
    (:func:`build_optimizer`). ``base_constructor`` is built with this
    one, so its own checks (``optimizer`` missing, ``custom_keys`` not a
    dict, ...) raise what they raise without AGVM.

    Args:
        optim_wrapper_cfg (dict): The ``optim_wrapper`` config (mmengine's
            constructor protocol), with these keys:

            - ``optimizer`` (dict): The optimizer config.
            - ``base_constructor`` (str | type): The recipe's constructor.
              Defaults to ``'DefaultOptimWrapperConstructor'``.
            - ``type`` (str): An AGVM wrapper. Defaults to
              ``'mmext.AGVMOptimWrapper'``.
            - ``module_names`` (list[str], optional): Checked here
              (:func:`resolve_module_names`). Defaults to None.
            - the other options of :class:`mmext.agvm.AGVMOptimWrapper`.
        paramwise_cfg (dict, optional): Read by ``base_constructor`` only.
            Defaults to None.

    Raises:
        TypeError: At construction if ``optim_wrapper`` or ``paramwise_cfg``
            is not a dict, as mmengine's constructor.
        ValueError: At construction if ``optim_wrapper.type`` is not an AGVM
            wrapper or ``base_constructor`` is this class; when called, for a
            wrong ``module_names`` or a ``paramwise_cfg`` key that
            ``base_constructor`` does not read.
        KeyError: If ``base_constructor`` is not registered.
    """

    @logs_refusals
    def __init__(self,
                 optim_wrapper_cfg: dict,
                 paramwise_cfg: Optional[dict] = None):
        if not isinstance(optim_wrapper_cfg, dict):
            raise TypeError('optim_wrapper should be a dict, got '
                            f'{type(optim_wrapper_cfg).__name__}')
        if not (paramwise_cfg is None or isinstance(paramwise_cfg, dict)):
            raise TypeError('paramwise_cfg should be None or a dict, got '
                            f'{type(paramwise_cfg).__name__}')
        wrapper_cfg = copy.deepcopy(optim_wrapper_cfg)
        self.base_constructor = wrapper_cfg.pop('base_constructor',
                                                DEFAULT_BASE_CONSTRUCTOR)
        if self.base_constructor in ('AGVMOptimWrapperConstructor',
                                     'mmext.AGVMOptimWrapperConstructor',
                                     type(self)):
            raise ValueError("base_constructor is AGVM's own: name the "
                             f"recipe's, e.g. {DEFAULT_BASE_CONSTRUCTOR!r}")
        self.optimizer_cfg = wrapper_cfg.pop('optimizer', None)
        recipe_cfg = dict(type='OptimWrapper')
        if self.optimizer_cfg is not None:
            recipe_cfg['optimizer'] = copy.deepcopy(self.optimizer_cfg)
        # Its own checks of the optimizer and paramwise_cfg, as it raises
        # them without AGVM.
        self.paramwise_cfg = _ReadKeys(paramwise_cfg or {})
        self.base = ALL_CONSTRUCTORS.build(
            dict(type=self.base_constructor, optim_wrapper_cfg=recipe_cfg,
                 paramwise_cfg=self.paramwise_cfg))
        self.paramwise_cfg.read.difference_update(_VALIDATED_AT_INIT)
        wrapper_cfg.setdefault('type', 'mmext.AGVMOptimWrapper')
        if not is_agvm_type(wrapper_cfg['type']):
            raise ValueError(f"optim_wrapper.type={wrapper_cfg['type']!r} is "
                             "not AGVM's: set type='mmext.AGVMOptimWrapper'")
        self.wrapper_cfg = wrapper_cfg

    def _recipe_optimizer(self, model: nn.Module) -> Optimizer:
        """The optimizer ``base_constructor`` builds for ``model``;
        ``ValueError`` if it left ``paramwise_cfg`` keys unread: misspelt
        ones (close to a key it looked up) with that key, the others with
        the ``base_constructor`` hint."""
        optimizer = self.base(model).optimizer
        unread = sorted(set(dict.keys(self.paramwise_cfg)) -
                        self.paramwise_cfg.read)
        name = type_name(self.base_constructor)
        # A key close to one the constructor looked up is a typo; any other
        # belongs to another constructor (the recipe's former one).
        close = {key: closest(key, self.paramwise_cfg.read, 0.8)
                 for key in unread}
        typos = {key: match for key, match in close.items() if match}
        if typos:
            raise ValueError(f'unknown paramwise_cfg keys {list(typos)}: did '
                             f'you mean {list(typos.values())}?')
        if unread:
            raise ValueError(f'{name} reads no paramwise_cfg keys {unread}: '
                             "set the recipe's base_constructor or drop them")
        if 'custom_keys' in self.paramwise_cfg.read:
            _warn_unmatched_custom_keys(model, self.paramwise_cfg)
        return optimizer

    @logs_refusals
    def __call__(self, model: nn.Module) -> OptimWrapper:
        """Build the AGVM wrapper for a model.

        A warning if the default names are one module (the others frozen,
        perhaps unfrozen later by a hook).

        Args:
            model (nn.Module): The model, DDP-wrapped or not.

        Returns:
            OptimWrapper: The AGVM wrapper of ``optim_wrapper.type``, on the
            recipe's optimizer with its groups split by module.

        Raises:
            ValueError: For AGVM in an ``OptimWrapperDict``, for one listed
                module (never modulated), or from :func:`resolve_module_names`
                and the recipe's constructor.
        """
        _refuse_optim_wrapper_dict()
        # As mmengine's DefaultOptimWrapperConstructor: any ``module``.
        model = getattr(model, 'module', model)
        listed = self.wrapper_cfg.get('module_names')
        names = resolve_module_names(model, listed)
        # The anchor's factor is 1 and 'others' keep 1: with one module
        # nothing is modulated (analysis tools may still measure one).
        if len(names) == 1 and listed is not None:
            raise ValueError(f'module_names={names}: list 2+ modules, anchor '
                             'first')
        if len(names) == 1:
            warn(f'AGVM modulates nothing: {names[0]!r} is the only trainable '
                 'module; set module_names')
        groups = split_groups_by_module(
            self._recipe_optimizer(model).param_groups,
            assign_parameters(model, names), names)
        optimizer = build_optimizer(self.optimizer_cfg, groups)
        wrapper_cfg = dict(self.wrapper_cfg, module_names=names)
        return OPTIM_WRAPPERS.build(
            wrapper_cfg, default_args=dict(optimizer=optimizer))
