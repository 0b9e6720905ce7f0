"""What of a recipe's ``param_scheduler`` a run cannot honour.

Used by :class:`mmext.runner.Runner` before the schedulers are built (a
component that moves the schedulers onto its own axis, ``MultigridHook``,
checks them there instead), and when it resumes schedulers that a run with
another effective batch built (:func:`resumed_batch_mismatch`).
"""
from typing import Dict, List, Optional, Sequence

from .compat import SCHEDULER_INF

__all__ = [
    'STEP_TYPES', 'WARMUP_TYPES', 'scheduler_configs',
    'unused_scheduler_values', 'scheduler_states', 'resumed_batch_mismatch'
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


def scheduler_states(saved) -> List[dict]:
    """The scheduler state dicts of a checkpoint's ``param_schedulers``.

    Args:
        saved (list | dict): A list of state dicts, or a dict of such lists
            per optimizer (mmengine's checkpoint format).

    Returns:
        list[dict]: The state dicts, in order.
    """
    if isinstance(saved, dict) and 'last_step' not in saved:
        return [s for v in saved.values() for s in scheduler_states(v)]
    if isinstance(saved, (list, tuple)):
        return [s for v in saved for s in scheduler_states(v)]
    return [saved] if isinstance(saved, dict) else []


def _batches(batches: Dict[str, int]) -> str:
    if list(batches) == ['']:
        return str(batches[''])
    return ', '.join(f'{k}: {v}' for k, v in batches.items())


def resumed_batch_mismatch(saved_batches: Optional[Dict[str, int]],
                           batches: Optional[Dict[str, int]],
                           states: Sequence[dict],
                           names: Optional[Sequence[str]] = None,
                           filename: str = 'the checkpoint'
                           ) -> Optional[str]:
    """The warning for iteration-based schedulers resumed onto another
    effective batch.

    mmengine restores a scheduler's ``begin``/``end`` from the checkpoint.
    For iteration-based schedulers (``by_epoch=False``, including those
    built with ``convert_to_iter_based=True``, whose bounds are epochs x the
    iterations per epoch of the run that built them) those bounds were
    computed for the checkpoint's effective batch; with another one an
    epoch has another number of iterations, and they end elsewhere in the
    run than the config says.

    Args:
        saved_batches (dict, optional): Effective batch per optimizer
            (``''`` for a single one) the checkpoint's run used; None if
            it recorded none.
        batches (dict, optional): The same for this run.
        states (Sequence[dict]): The resumed scheduler state dicts
            (:func:`scheduler_states`).
        names (Sequence[str], optional): Their types, in order (from the
            config), for the message.
        filename (str): The checkpoint, for the message.

    Returns:
        str, optional: The message; None if the batches match, either is
        unknown, or no resumed scheduler is iteration-based.
    """
    if not saved_batches or not batches or saved_batches == batches:
        return None
    names = list(names or [])
    if len(names) != len(states):
        names = [f'param_scheduler {i}' for i in range(len(states))]
    late = [f"{name} iterations [{state.get('begin', 0)}, "
            f"{state.get('end', SCHEDULER_INF)})"
            for name, state in zip(names, states)
            if state.get('by_epoch', True) is False]
    if not late:
        return None
    return (
        f'{filename} was trained with effective batch '
        f'{_batches(saved_batches)} (loader batch x world size x '
        f'accumulative_counts), this run has {_batches(batches)}. Its '
        f'iteration-based param schedulers are resumed with the iteration '
        f'bounds computed for that batch: {", ".join(late)}; an epoch now '
        f'has another number of iterations, so they end elsewhere in the '
        f'run than the config says (a warm-up of one epoch at twice the '
        f'batch lasts two). Resume with the checkpoint\'s world size, '
        f'train_dataloader.batch_size and accumulative_counts, or start '
        f'from its weights with load_from={filename} (no --resume).')
