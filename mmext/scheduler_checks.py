"""A recipe's ``param_scheduler`` configs: what a run cannot honour, where
the warm-ups end, and the iteration counts rescaled to another batch.

Used by :class:`mmext.runner.Runner` and ``MultigridPlan``; rescaling
(``auto_scale_schedule``) is described in docs/en/design.md.
"""
import copy
from typing import Dict, List, Optional, Sequence, Tuple

from .compat import SCHEDULER_INF

__all__ = [
    'STEP_TYPES', 'WARMUP_TYPES', 'scheduler_configs',
    'unused_scheduler_values', 'scheduler_states', 'resumed_batch_mismatch',
    'warmup_ends', 'schedule_ratio', 'rescale_iterations',
    'rescale_schedulers', 'warmup_images'
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
                            max_iters: Optional[int],
                            axis: str = '') -> List[str]:
    """What of the ``param_scheduler`` configs a run cannot honour.

    One message per value: a scheduler that begins at or after the end of
    training, one (not a step schedule) that ends after it, and
    ``milestones`` at or after the end.

    Args:
        schedulers (dict | list): The ``param_scheduler`` config value.
        max_epochs (int, optional): Epochs of the run; None: epoch-based
            values are not checked (e.g. an iteration-based loop).
        max_iters (int, optional): Iterations of the run; None:
            iteration-based values are not checked.
        axis (str): Names the axis in the messages (``'recipe'``: ``recipe
            epoch 5``) when it is not the run's.

    Returns:
        list[str]: The messages.
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
        kind = str(cfg['type']).split('.')[-1]
        if end != SCHEDULER_INF and end > length and kind not in STEP_TYPES:
            final = ('the warm-up never reaches its target LR'
                     if kind in WARMUP_TYPES else
                     'it never reaches its final value')
            messages.append(
                f'{name} ends at {unit} {end}, after the end of training '
                f'({length} {unit}s): it is cut short ({final}). Shorten it '
                f'or train longer.')
        late = [m for m in cfg.get('milestones', []) if m >= length]
        if late:
            messages.append(
                f'{name} milestones {late} lie at or after the end of '
                f'training ({length} {unit}s): those LR steps never happen. '
                f'Remove them or train longer.')
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

    mmengine restores their ``begin``/``end``, computed (for
    ``convert_to_iter_based`` ones too) for the checkpoint's iterations per
    epoch.

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
        f'accumulative_counts), this run has {_batches(batches)}: its '
        f'iteration-based param schedulers keep the bounds computed for '
        f'that batch ({", ".join(late)}), so they end elsewhere than the '
        f"config says. Resume with the checkpoint's world size, "
        f'train_dataloader.batch_size and accumulative_counts, or start '
        f'from its weights with load_from={filename} (no --resume).')


def warmup_ends(schedulers, epoch_length: int) -> List[tuple]:
    """Where the LR warm-ups of a ``param_scheduler`` config end.

    Args:
        schedulers (dict | list): The ``param_scheduler`` config value.
        epoch_length (int): Iterations per epoch, for warm-ups counted in
            epochs (``by_epoch=True``).

    Returns:
        list[tuple[str, int, int]]: ``(type, begin, end)`` per warm-up, in
        iterations; the LR is the scheduled one from ``end`` on.
    """
    ends = []
    for cfg in scheduler_configs(schedulers):
        name = str(cfg['type']).split('.')[-1]
        end = cfg.get('end', SCHEDULER_INF)
        if name not in _WARMUPS or not _WARMUPS[name](cfg) or (
                end == SCHEDULER_INF):
            continue
        scale = epoch_length if cfg.get('by_epoch', True) else 1
        ends.append((cfg['type'], cfg.get('begin', 0) * scale, end * scale))
    return ends


# Iteration-valued keys of mmengine's scheduler configs (by_epoch=False).
_SCALAR_KEYS = ('begin', 'end', 'T_max', 'step_size', 'total_steps')
_LIST_KEYS = ('milestones', 'periods')


def schedule_ratio(loader_batch: int, world_size: int, base_batch_size: int,
                   base_accumulative_counts: int = 1) -> float:
    """Images per runner iteration of the run (``loader_batch x
    world_size``, whatever its accumulation) over the recipe's
    (``base_batch_size / base_accumulative_counts``).

    Args:
        loader_batch (int): ``train_dataloader.batch_size``.
        world_size (int): Processes.
        base_batch_size (int): Images per optimizer step the recipe's
            iteration counts were written for.
        base_accumulative_counts (int): Micro-batches per step the recipe
            was written with (1: recipes are written without accumulation).

    Returns:
        float: r; iteration counts are divided by it.

    Raises:
        ValueError: Unless ``base_batch_size`` and
            ``base_accumulative_counts`` are integers >= 1.
    """
    for name, value in (('base_batch_size', base_batch_size),
                        ('base_accumulative_counts',
                         base_accumulative_counts)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f'auto_scale_schedule.{name}={value!r}: expected '
                             f'an integer >= 1, e.g. {name}=16')
    return (loader_batch * world_size * base_accumulative_counts /
            base_batch_size)


def rescale_iterations(value: int, ratio: float, minimum: int = 1) -> int:
    """``round(value / ratio)``, at least ``minimum`` (0 stays 0)."""
    if value == 0:
        return 0
    return max(minimum, int(round(value / ratio)))


def warmup_images(schedulers, scaled, recipe_images: float,
                  run_images: int) -> List[str]:
    """The images each iteration-based warm-up from 0 spans before and after
    :func:`rescale_schedulers`.

    Args:
        schedulers (dict | list): The recipe's ``param_scheduler`` config.
        scaled (dict | list): Its rescaled copy.
        recipe_images (float): Images per runner iteration of the recipe.
        run_images (int): Images per runner iteration of the run.

    Returns:
        list[str]: One line per warm-up.
    """
    lines = []
    for old, new in zip(scheduler_configs(schedulers),
                        scheduler_configs(scaled)):
        if (str(old['type']).split('.')[-1] in WARMUP_TYPES
                and not old.get('by_epoch', True) and not old.get('begin')
                and old.get('end', SCHEDULER_INF) != SCHEDULER_INF):
            lines.append(
                f"warm-up {old['type']}: {old['end']} iterations x "
                f'{recipe_images:g} = {old["end"] * recipe_images:g} images '
                f"in the recipe, {new['end']} x {run_images} = "
                f"{new['end'] * run_images} images in this run")
    return lines


def rescale_schedulers(schedulers, ratio: float
                       ) -> Tuple[object, List[str]]:
    """The ``param_scheduler`` config with the iteration counts of its
    ``by_epoch=False`` schedulers / ratio.

    Args:
        schedulers (dict | list): The ``param_scheduler`` config.
        ratio (float): From :func:`schedule_ratio`.

    Returns:
        tuple: The rescaled copy, and one ``'<type>.<key> a -> b'`` line per
        changed value.
    """
    scaled = copy.deepcopy(schedulers)
    changes = []
    for cfg in scheduler_configs(scaled):
        if cfg.get('by_epoch', True):
            continue
        old = {k: cfg[k] for k in _SCALAR_KEYS + _LIST_KEYS if k in cfg}
        for key in _SCALAR_KEYS:
            if cfg.get(key) not in (None, SCHEDULER_INF):
                cfg[key] = rescale_iterations(cfg[key], ratio,
                                              0 if key == 'begin' else 1)
        for key in _LIST_KEYS:
            if cfg.get(key):
                cfg[key] = [rescale_iterations(v, ratio) for v in cfg[key]]
        begin, end = cfg.get('begin', 0), cfg.get('end', SCHEDULER_INF)
        if end != SCHEDULER_INF and end <= begin:
            cfg['end'] = begin + 1  # a schedule needs one step at least
        changes += [f"{cfg['type']}.{key} {value} -> {cfg[key]}"
                    for key, value in old.items() if cfg[key] != value]
    return scaled, changes
