"""What of a recipe's ``param_scheduler`` a run cannot honour.

Used by :class:`mmext.runner.Runner` before the schedulers are built; a
component that moves the schedulers onto its own axis (``MultigridHook``)
checks them there instead.
"""
from typing import List, Optional

from .compat import SCHEDULER_INF

__all__ = [
    'STEP_TYPES', 'WARMUP_TYPES', 'scheduler_configs',
    'unused_scheduler_values'
]

# Schedulers whose value only changes at their milestones: an ``end`` after
# the run changes nothing, milestones after it do.
STEP_TYPES = ('MultiStepLR', 'MultiStepParamScheduler')
# Schedulers used as warm-ups (from a start factor up to the LR).
WARMUP_TYPES = ('LinearLR', 'ConstantLR', 'LinearParamScheduler',
                'ConstantParamScheduler')


def scheduler_configs(schedulers) -> List[dict]:
    """The config dicts in a ``param_scheduler`` value.

    Args:
        schedulers (dict | list): A dict, a list, or a dict of lists per
            optimizer; built schedulers are left out.

    Returns:
        list[dict]: The scheduler configs, in order.
    """
    if isinstance(schedulers, dict):
        if 'type' in schedulers:
            return [schedulers]
        return [c for v in schedulers.values() for c in scheduler_configs(v)]
    if isinstance(schedulers, (list, tuple)):
        return [c for v in schedulers for c in scheduler_configs(v)]
    return []


def unused_scheduler_values(schedulers, max_epochs: Optional[int],
                            max_iters: int) -> List[str]:
    """What of the ``param_scheduler`` configs a run cannot honour.

    One message per value: a scheduler that begins at or after the end of
    training (never applies), one other than a step schedule that ends after
    it (cut short: a warm-up or a cosine never reaches its final value), and
    ``milestones`` at or after the end (those LR steps never happen).

    Args:
        schedulers (dict | list): The ``param_scheduler`` config value.
        max_epochs (int, optional): Epochs of the run; None for an
            iteration-based loop (epoch-based values are then not checked).
        max_iters (int): Iterations of the run.

    Returns:
        list[str]: The messages.
    """
    messages = []
    for cfg in scheduler_configs(schedulers):
        by_epoch = cfg.get('by_epoch', True)
        length = max_epochs if by_epoch else max_iters
        if length is None:
            continue
        unit = 'epoch' if by_epoch else 'iteration'
        name = f"param_scheduler {cfg['type']}"
        begin, end = cfg.get('begin', 0), cfg.get('end', SCHEDULER_INF)
        if begin >= length:
            messages.append(
                f'{name} begins at {unit} {begin}, not before the end of '
                f'training ({length} {unit}s): it never applies.')
            continue
        kind = cfg['type'].split('.')[-1]
        if end != SCHEDULER_INF and end > length and kind not in STEP_TYPES:
            final = ('the warm-up never reaches its target LR'
                     if kind in WARMUP_TYPES else
                     'it never reaches its final value')
            messages.append(
                f'{name} ends at {unit} {end}, after the end of training '
                f'({length} {unit}s): it is cut short ({final}).')
        late = [m for m in cfg.get('milestones', []) if m >= length]
        if late:
            messages.append(
                f'{name} milestones {late} lie at or after the end of '
                f'training ({length} {unit}s): those LR steps never happen.')
    return messages
