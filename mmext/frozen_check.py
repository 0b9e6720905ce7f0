"""BN layers kept in eval mode, or frozen stages, in a model that loads no
weights.

mmdet's and mmseg's ResNet recipes set ``norm_eval=True`` and
``frozen_stages=1`` for ImageNet weights; without the weights those layers
keep their random initialisation (and BN statistics mean 0, variance 1).
"""
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from mmengine.model import is_model_wrapper
from torch import nn

from .compat import BatchNormBase

__all__ = ['FREEZING_KEYS', 'pretrained_paths', 'frozen_without_weights']

# Config keys that freeze layers, and the value that trains everything.
FREEZING_KEYS = {'norm_eval': False, 'frozen_stages': -1}


def _loads_weights(cfg: Mapping) -> bool:
    """Whether a module config has a ``Pretrained`` ``init_cfg`` or a
    ``pretrained`` value."""
    init = cfg.get('init_cfg')
    inits = init if isinstance(init, (list, tuple)) else [init]
    return bool(cfg.get('pretrained')) or any(
        isinstance(i, Mapping) and i.get('type') == 'Pretrained'
        for i in inits)


def pretrained_paths(cfg, prefix: str = '') -> List[str]:
    """Dotted paths of the config dicts in ``cfg`` that load weights.

    Args:
        cfg (dict | list): A model config (or part of one).
        prefix (str): Path of ``cfg`` itself ('' for the model).

    Returns:
        list[str]: E.g. ``['backbone']``; ``['']`` for the whole model.
    """
    found = []
    if isinstance(cfg, Mapping):
        if _loads_weights(cfg):
            found.append(prefix)
        for key, value in cfg.items():
            found += pretrained_paths(value, f'{prefix}.{key}'.lstrip('.'))
    elif isinstance(cfg, (list, tuple)):
        for i, value in enumerate(cfg):
            found += pretrained_paths(value, f'{prefix}.{i}')
    return found


def _freezing_keys(cfg, prefix: str) -> List[Tuple[str, object, object]]:
    """``(path, value, fix)`` of every key in ``cfg`` that freezes."""
    keys = []
    if isinstance(cfg, Mapping):
        for key, value in cfg.items():
            path = f'{prefix}.{key}'
            if key == 'norm_eval' and value is True:
                keys.append((path, value, False))
            elif (key == 'frozen_stages' and isinstance(value, int)
                  and value >= 0):
                keys.append((path, value, -1))
            elif key == 'requires_grad' and value is False:
                keys.append((path, value, True))
            else:
                keys += _freezing_keys(value, path)
    elif isinstance(cfg, (list, tuple)):
        for i, value in enumerate(cfg):
            keys += _freezing_keys(value, f'{prefix}.{i}')
    return keys


def _frozen_in_training(model: nn.Module) -> Dict[str, Dict[str, int]]:
    """Per top-level module: its BN layers, those in eval mode and its frozen
    parameters after ``model.train()``; every module's mode is restored."""
    modes = [(m, m.training) for m in model.modules()]
    try:
        model.train()
        found = {}
        for name, child in model.named_children():
            norms = [m for m in child.modules()
                     if isinstance(m, BatchNormBase)]
            found[name] = dict(
                bn=len(norms),
                bn_eval=sum(not m.training for m in norms),
                frozen=sum(p.numel() for p in child.parameters()
                           if not p.requires_grad))
        return found
    finally:
        for m, training in modes:
            m.training = training


def frozen_without_weights(model: nn.Module,
                           model_cfg: Optional[Mapping] = None,
                           loaded: Sequence[str] = ()) -> List[str]:
    """Messages for each top-level module that ``model.train()`` leaves with
    BN layers in eval mode or frozen parameters, while no weights are
    loaded into it (from its config or the model's, or ``loaded``).

    Args:
        model (nn.Module): The model (a model wrapper is unwrapped).
        model_cfg (dict, optional): Its config, to name the keys.
        loaded (Sequence[str]): Further loaded module paths; ``['']`` for
            the whole model (``load_from``, resume).

    Returns:
        list[str]: One message per module, naming what is frozen, the
        config keys that do it and the fix.
    """
    if is_model_wrapper(model):
        model = model.module
    cfg = model_cfg if isinstance(model_cfg, Mapping) else {}
    weights = set(pretrained_paths(cfg)) | set(loaded)
    if '' in weights:
        return []
    messages = []
    for name, found in _frozen_in_training(model).items():
        if any(name == w or w.startswith(name + '.') for w in weights):
            continue
        if not (found['bn_eval'] or found['frozen']):
            continue
        what = []
        if found['bn_eval']:
            what.append(f"{found['bn_eval']} of {found['bn']} BN layers stay "
                        f'in eval mode while training (their running mean '
                        f'and variance never update)')
        if found['frozen']:
            what.append(f"{found['frozen']} parameters are frozen "
                        f'(requires_grad=False)')
        keys = _freezing_keys(cfg.get(name), f'model.{name}')
        if keys:
            cause = 'Set by ' + ', '.join(f'{p}={v}' for p, v, _ in keys)
            fix = ', '.join(f'{p}={f}' for p, _, f in keys)
        else:
            cause = 'No config key of it does this (its code does)'
            fix = ', '.join(f'model.{name}.{k}={v}'
                            for k, v in FREEZING_KEYS.items())
        messages.append(
            f"model.{name}: {' and '.join(what)}, but no weights are "
            f'loaded into it (no Pretrained init_cfg, no load_from), so '
            f'they keep their random initialisation. {cause}. Train them '
            f'with {fix}, or load pretrained weights (init_cfg=dict('
            f"type='Pretrained', checkpoint=...) or load_from).")
    return messages
