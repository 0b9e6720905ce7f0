"""Which module of a model each trainable parameter belongs to, for AGVM.

AGVM compares gradient noise per module (backbone, neck, heads). These
helpers resolve and validate ``module_names`` against a model and assign
every trainable parameter to one of them, or to the unmodulated ``others``
group, so no parameter is ever left out of the optimizer (the reference
implementation's optimizer constructor dropped such parameters).
"""
import warnings
from typing import Dict, List, Optional, Sequence

from torch import nn

__all__ = ['OTHERS', 'default_module_names', 'resolve_module_names',
           'assign_parameters']

# Name of the group of trainable parameters outside ``module_names``; its
# factor is always 1.
OTHERS = 'others'


def _has_trainable(module: nn.Module) -> bool:
    return any(p.requires_grad for p in module.parameters())


# Heads of a RoI head that the reference implementation modulates apart
# when both exist (Sense-X/AGVM ``GroupOptimizerConstructor``: a component
# with a ``mask_head`` gives its ``bbox_head`` and ``mask_head`` one param
# group each).
SPLIT_HEADS = ('bbox_head', 'mask_head')


def default_module_names(model: nn.Module) -> List[str]:
    """The model's top-level children that have trainable parameters, with a
    child that holds both a trainable ``bbox_head`` and ``mask_head`` (Mask
    R-CNN's ``roi_head``) replaced by those two, as in the reference.

    For mmdet two-stage detectors this is ``backbone, neck, rpn_head,
    roi_head`` (Mask R-CNN: ``..., roi_head.bbox_head,
    roi_head.mask_head``); for mmseg ``backbone, [neck], decode_head,
    auxiliary_head``.
    """
    names = []
    for name, child in model.named_children():
        if not _has_trainable(child):
            continue
        heads = [
            head for head in SPLIT_HEADS
            if isinstance(getattr(child, head, None), nn.Module)
            and _has_trainable(getattr(child, head))
        ]
        names += ([f'{name}.{head}' for head in heads]
                  if len(heads) == len(SPLIT_HEADS) else [name])
    return names


def _warn_if_anchor_moved(model: nn.Module, names: Sequence[str]) -> None:
    """Warn when the default anchor is not the model's first module.

    The first child with parameters (the backbone) is the anchor the paper
    means; if it has no trainable parameter (``frozen_stages`` covering
    every stage, ``requires_grad=False``) the defaults silently start with
    the next module.
    """
    first = next((n for n, m in model.named_children()
                  if next(m.parameters(), None) is not None), None)
    if first is None or not names or names[0].split('.')[0] == first:
        return
    warnings.warn(
        f"AGVM's anchor (module 0, whose gradient variance every factor is "
        f'relative to) is {names[0]!r}, not the model\'s first module '
        f'{first!r}: {first!r} has no trainable parameters (frozen, e.g. by '
        f'frozen_stages covering all its stages or requires_grad=False), so '
        f"the default module_names start with {names[0]!r}. Unfreeze "
        f'{first!r}, or set optim_wrapper.module_names with the anchor you '
        f'mean first.')


def resolve_module_names(model: nn.Module,
                         module_names: Optional[Sequence[str]]) -> List[str]:
    """Validate ``module_names`` (dotted submodule names) against ``model``.

    Args:
        model (nn.Module): The unwrapped model.
        module_names (Sequence[str], optional): Modulated modules, the first
            is the anchor; None for :func:`default_module_names`.

    Returns:
        list[str]: The module names, anchor first.

    Raises:
        ValueError: If a name is not a submodule, is listed twice or is
            ``'others'``, if the list is empty, or if the anchor has no
            trainable parameters.

    Warns:
        UserWarning: With the default names, if the model's first module has
        no trainable parameters (the anchor is then the next one).
    """
    if module_names is None:
        names = default_module_names(model)
        _warn_if_anchor_moved(model, names)
    elif isinstance(module_names, str):
        raise ValueError('module_names must be a list of module names, got '
                         f'the string {module_names!r}')
    else:
        names = list(module_names)
    available = [n for n, m in model.named_children() if _has_trainable(m)]
    if not names:
        if module_names is not None:
            raise ValueError('module_names is empty; list the modules to '
                             f'modulate, anchor first (e.g. {available}), or '
                             'leave it out for the default')
        raise ValueError(f'{type(model).__name__} has no module with '
                         'trainable parameters for AGVM to modulate')
    if len(set(names)) != len(names) or OTHERS in names:
        raise ValueError(f'module_names must be distinct and not '
                         f'{OTHERS!r}, got {names}')
    for name in names:
        if not name:
            raise ValueError(
                "module_names: '' would name the whole model; list its "
                f'submodules instead (e.g. {available})')
        try:
            model.get_submodule(name)
        except AttributeError:
            raise ValueError(
                f'module_names: {name!r} is not a submodule of '
                f'{type(model).__name__}; its top-level modules with '
                f'trainable parameters are {available}') from None
    if not _has_trainable(model.get_submodule(names[0])):
        raise ValueError(
            f'module_names: the anchor module {names[0]!r} (the first name) '
            'has no trainable parameters, so its gradient variance is '
            f'undefined; put a trainable module first (one of {available})')
    return names


def assign_parameters(model: nn.Module,
                      module_names: Sequence[str]) -> Dict[int, str]:
    """Map each trainable parameter to its modulated module or ``'others'``.

    A parameter belongs to the longest listed name that prefixes its own
    (so ``roi_head`` and ``roi_head.mask_head`` may both be listed).

    Args:
        model (nn.Module): The unwrapped model.
        module_names (Sequence[str]): From :func:`resolve_module_names`.

    Returns:
        dict[int, str]: ``id(param)`` to module name, trainable params only.
    """
    by_length = sorted(module_names, key=len, reverse=True)
    owners = {}
    for param_name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        owners[id(param)] = next(
            (m for m in by_length if param_name.startswith(m + '.')), OTHERS)
    return owners
