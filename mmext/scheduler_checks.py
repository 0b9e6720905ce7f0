"""A recipe's ``param_scheduler`` configs: what a run cannot honour and
where the warm-ups end (used by ``MultigridPlan`` and
``AGVMOptimWrapper``)."""
from typing import List, Optional

from .compat import SCHEDULER_INF
from .options import type_name

__all__ = [
    'STEP_TYPES', 'WARMUP_TYPES', 'scheduler_configs',
    'unused_scheduler_values', 'warmup_ends'
]

# Schedulers whose value changes only at their milestones.
STEP_TYPES = ('MultiStepLR', 'MultiStepParamScheduler')
# Warm-up LR schedulers: whether a config of the type raises the LR (with
# mmengine's defaults).
_WARMUPS = {
    'LinearLR': lambda c: c.get('start_factor', 1 / 3) < c.get(
        'end_factor', 1.0),
    'ConstantLR': lambda c: c.get('factor', 1 / 3) < 1,
    'ExpWarmupLR': lambda c: c.get('start_factor', 0.001) < 1,
}
# Schedulers used as warm-ups, LR and generic forms.
WARMUP_TYPES = (*_WARMUPS, 'LinearParamScheduler', 'ConstantParamScheduler')


def scheduler_configs(schedulers) -> List[dict]:
    """The config dicts of a ``param_scheduler`` value, in order.

    Args:
        schedulers (dict | list | None): A dict, a list, or a dict of lists
            per optimizer.

    Returns:
        list[dict]: The configs; built schedulers left out.
    """
    if isinstance(schedulers, dict):
        if 'type' in schedulers:
            return [schedulers]
        return [c for v in schedulers.values() for c in scheduler_configs(v)]
    if isinstance(schedulers, (list, tuple)):
        return [c for v in schedulers for c in scheduler_configs(v)]
    return []


def unused_scheduler_values(schedulers, max_epochs: Optional[int],
                            max_iters: Optional[int],
                            axis: str = '') -> List[str]:
    """The ``param_scheduler`` values a run cannot honour.

    A scheduler that begins at or after the end of training, one (not a step
    schedule) that ends after it, ``milestones`` at or after the end.

    Args:
        schedulers (dict | list | None): The ``param_scheduler`` value.
        max_epochs (int, optional): The run's epochs; None: that axis is not
            checked.
        max_iters (int, optional): The run's iterations; None: that axis is
            not checked.
        axis (str): Names the axis in the messages (``'recipe'``: ``recipe
            epoch 5``) when it is not the run's. Defaults to ``''``.

    Returns:
        list[str]: A message per value, with its fix.
    """
    messages = []
    for cfg in scheduler_configs(schedulers):
        by_epoch = cfg.get('by_epoch', True)
        length = max_epochs if by_epoch else max_iters
        if length is None:
            continue
        unit = (f'{axis} ' if axis else '') + (
            'epoch' if by_epoch else 'iteration')
        name = f"param_scheduler {cfg['type']}"
        begin, end = cfg.get('begin', 0), cfg.get('end', SCHEDULER_INF)
        if begin >= length:
            messages.append(
                f'{name} begins at {unit} {begin}, not before the end of '
                f'training ({length} {unit}s): it never applies. Move its '
                f'begin or remove it.')
            continue
        kind = type_name(cfg['type'])
        if end != SCHEDULER_INF and end > length and kind not in STEP_TYPES:
            final = ('the warm-up never reaches its target LR'
                     if kind in WARMUP_TYPES else
                     'it never reaches its final value')
            messages.append(
                f'{name} ends at {unit} {end}, after the end of training '
                f'({length} {unit}s): {final}. Shorten it or train longer.')
        late = [m for m in cfg.get('milestones', []) if m >= length]
        if late:
            messages.append(
                f'{name} milestones {late} lie at or after the end of '
                f'training ({length} {unit}s): those LR steps never happen. '
                f'Remove them or train longer.')
    return messages


def warmup_ends(schedulers, epoch_length: int) -> List[tuple]:
    """Where each LR warm-up of a ``param_scheduler`` config ends.

    The LR is the scheduled one from ``end`` on.

    Args:
        schedulers (dict | list | None): The ``param_scheduler`` value.
        epoch_length (int): Iterations per epoch, for ``by_epoch=True``.

    Returns:
        list[tuple[str, int, int]]: ``(type, begin, end)`` in iterations.
    """
    ends = []
    for cfg in scheduler_configs(schedulers):
        name = type_name(cfg['type'])
        end = cfg.get('end', SCHEDULER_INF)
        if name not in _WARMUPS or not _WARMUPS[name](cfg) or (
                end == SCHEDULER_INF):
            continue
        scale = epoch_length if cfg.get('by_epoch', True) else 1
        ends.append((cfg['type'], cfg.get('begin', 0) * scale, end * scale))
    return ends
