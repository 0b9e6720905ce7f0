"""AGVM's start-of-run summary: one log block saying what it will do.

Modules with their parameter counts and the anchor, how the two halves are
formed, the active window, the re-estimate interval, the clipping window and
the statistic; :class:`mmext.agvm.AGVMOptimWrapper` logs it when training
starts (``initialize_count_status``). Pure formatting.
"""
import math
from typing import Optional, Sequence

from .schedule import AGVMSchedule
from .statistics import split_ranks

__all__ = ['halves_description', 'run_summary']


def _ranks(ranks: Sequence[int]) -> str:
    return (f'rank {ranks[0]}' if len(ranks) == 1 else
            f'ranks {ranks[0]}-{ranks[-1]}')


def halves_description(world_size: int, accumulative_counts: int) -> str:
    """How the halves A and B are formed.

    Args:
        world_size (int): Processes.
        accumulative_counts (int): K, micro-batches per optimizer step.

    Returns:
        str: e.g. ``'ranks 0-3 vs ranks 4-7 (world size 8)'`` or
        ``'micro-batch 1 vs micro-batch 2 of the 2 accumulated per step (one
        process)'``.
    """
    if world_size >= 2:
        half_a, half_b = split_ranks(world_size)
        text = (f'{_ranks(half_a)} vs {_ranks(half_b)} (world size '
                f'{world_size}')
        if world_size % 2:
            text += f'; rank {world_size - 1} is in neither half, its ' \
                    f'gradient only enters the update'
        return text + ')'
    half = accumulative_counts // 2
    first = ('micro-batch 1' if half == 1 else f'micro-batches 1-{half}')
    second = (f'micro-batch {half + 1}' if half == 1 else
              f'micro-batches {half + 1}-{accumulative_counts}')
    return (f'{first} vs {second} of the {accumulative_counts} accumulated '
            f'per optimizer step (one process)')


def run_summary(module_names: Sequence[str], sizes: Sequence[int],
                halves: str, schedule: AGVMSchedule, clipping: bool,
                statistic: str, max_iters: Optional[int] = None) -> str:
    """The block AGVM logs when training starts.

    Args:
        module_names (Sequence[str]): Modulated modules, anchor first.
        sizes (Sequence[int]): Trainable parameters per module, then
            ``'others'`` (one more entry).
        halves (str): From :func:`halves_description`.
        schedule (AGVMSchedule): The window, interval and clipping window.
        clipping (bool): Whether ``clip_grad`` is set.
        statistic (str): ``'grad'`` or ``'adam'``.
        max_iters (int, optional): Iterations of the run.

    Returns:
        str: Several lines, each starting with ``AGVM``.
    """
    width = max(len(n) for n in list(module_names) + ['others'])
    lines = [f'AGVM: {len(module_names)} modulated modules, anchor (module '
             f'0) {module_names[0]!r}:']
    for name, size in zip(module_names, sizes):
        lines.append(f'AGVM:   {name:<{width}} {size:>12,d} parameters')
    if sizes[len(module_names)]:
        lines.append(f"AGVM:   {'others':<{width}} "
                     f'{sizes[len(module_names)]:>12,d} parameters '
                     f'(outside module_names: factor 1)')
    lines.append(f'AGVM: halves: {halves}')
    end = ('the end of training' if schedule.end_iter == math.inf else
           f'iteration {schedule.end_iter}')
    if max_iters is not None and schedule.end_iter != math.inf:
        end = f'{end} of {max_iters}'
    lines.append(
        f'AGVM: active from iteration {schedule.start_iter} to {end} '
        f'(runner iterations); re-estimates every {schedule.update_interval}'
        f' optimizer step(s) of {schedule.accumulative_counts} iteration(s) '
        f"from the first active one; statistic '{statistic}'")
    if not clipping:
        clip = 'off (no clip_grad)'
    elif schedule.clip_grad_window is None:
        clip = 'at every step'
    else:
        begin, stop = schedule.clip_grad_window
        clip = f'in iterations [{begin}, {stop}) only (clip_grad_window)'
    lines.append(f'AGVM: gradient clipping {clip}')
    return '\n'.join(lines)
