"""A recipe's ``param_scheduler`` on the multigrid epoch axis.

Reading its LR stages (:func:`find_lr_steps`), moving the scheduler configs
onto the multigrid axis (:func:`remap_param_schedulers`), and naming what of
them a multigrid run cannot honour (:func:`dropped_recipe_values`). Configs
only, no runner.
"""
import copy
from typing import Callable, List, Optional, Sequence, Tuple

from mmext.compat import SCHEDULER_INF as INF
from mmext.scheduler_checks import STEP_TYPES, WARMUP_TYPES

__all__ = [
    'STEP_TYPES', 'find_lr_steps', 'remap_param_schedulers',
    'dropped_recipe_values'
]


def find_lr_steps(schedulers: Sequence[dict],
                  max_epochs: int) -> Tuple[List[int], float]:
    """LR stage starts and decay of a recipe's schedule.

    Args:
        schedulers (Sequence[dict]): ``param_scheduler`` configs.
        max_epochs (int): ``train_cfg.max_epochs``.

    Returns:
        tuple: ``([0] + milestones, gamma)`` of the epoch-based
        ``MultiStepLR``; ``([0, max_epochs], None)`` for other schedules and
        for a ``MultiStepLR`` without milestones inside the run (one long
        cycle over the whole run, no fine-tune stage).
    """
    for s in schedulers:
        if s['type'].split('.')[-1] in STEP_TYPES and s.get(
                'by_epoch', True) and s.get('param_name', 'lr') == 'lr':
            steps = [0] + [m for m in s['milestones'] if 0 < m < max_epochs]
            if len(steps) > 1:
                return steps, s.get('gamma', 0.1)
    return [0, max_epochs], None


def remap_param_schedulers(schedulers: Sequence[dict],
                           epoch_map: Callable[[float], float],
                           iter_at: Callable[[float], int],
                           base_epoch_len: int) -> List[dict]:
    """Edited copies of scheduler configs for the multigrid run.

    Every epoch quantity (``begin``, ``end``, ``milestones``, ``T_max``) is
    moved through ``epoch_map``. Schedulers that are or become iteration
    based (``by_epoch=False`` or ``convert_to_iter_based=True``) get
    iteration bounds from ``iter_at``, the exact iteration count of the
    multigrid run at an epoch: mmengine's conversion multiplies by the first
    epoch's length, which is wrong once epoch lengths change.

    Args:
        schedulers (Sequence[dict]): Recipe ``param_scheduler`` configs.
        epoch_map (callable): Recipe epoch -> multigrid epoch.
        iter_at (callable): Multigrid epoch (float) -> iterations done.
        base_epoch_len (int): Iterations per epoch of the recipe's loader,
            to read ``by_epoch=False`` recipes in epochs.

    Returns:
        list[dict]: New configs (the input is not modified).
    """
    out = []
    for cfg in schedulers:
        cfg = copy.deepcopy(dict(cfg))
        by_epoch = cfg.get('by_epoch', True)
        to_iters = not by_epoch or cfg.pop('convert_to_iter_based', False)

        def point(x, by_epoch=by_epoch, to_iters=to_iters):
            epoch = x if by_epoch else x / base_epoch_len
            new = epoch_map(epoch)
            return iter_at(new) if to_iters else int(round(new))

        begin = cfg.get('begin', 0)
        if cfg.get('end', INF) != INF:
            cfg['end'] = point(cfg['end'])
        if 'milestones' in cfg:
            cfg['milestones'] = [point(m) for m in cfg['milestones']]
        if 'T_max' in cfg:
            cfg['T_max'] = point(begin + cfg['T_max']) - point(begin)
        cfg['begin'] = point(begin)
        cfg['by_epoch'] = not to_iters
        out.append(cfg)
    return out


def _recipe_epochs_of(scheduler: dict, value: float,
                      recipe_iters_per_epoch: Optional[int]
                      ) -> Optional[float]:
    """A scheduler bound in recipe epochs (None if unknown)."""
    if scheduler.get('by_epoch', True):
        return value
    if not recipe_iters_per_epoch:
        return None
    return value / recipe_iters_per_epoch


def dropped_recipe_values(schedulers: Sequence[dict],
                          recipe_epochs: int,
                          lr_steps: Sequence[int],
                          explicit_lr_steps: bool = False,
                          recipe_iters_per_epoch: Optional[int] = None
                          ) -> List[str]:
    """Messages about recipe values a multigrid run cannot honour.

    * ``MultiStepLR`` milestones outside ``(0, max_epochs)`` are not LR
      stages of the run; an iteration-based ``MultiStepLR`` gives no LR
      stages (one long cycle over the whole run);
    * an LR scheduler that begins after the run never acts, and one
      (other than a step schedule) that ends after it, e.g. a warm-up or
      cosine longer than the run, is cut before its final value;
    * a warm-up (``LinearLR``/``ConstantLR``) longer than the first LR
      stage covers the whole first long cycle.

    Args:
        schedulers (Sequence[dict]): The recipe's ``param_scheduler``.
        recipe_epochs (int): The recipe's ``train_cfg.max_epochs``.
        lr_steps (Sequence[int]): The run's LR stage starts (recipe epochs).
        explicit_lr_steps (bool): Whether ``lr_steps`` was given as the
            hook's option (step schedules then do not define the stages).
        recipe_iters_per_epoch (int, optional): Iterations per epoch of the
            recipe's loader; iteration-based bounds are checked only with
            it.

    Returns:
        list[str]: One message per value.
    """
    messages = []
    stage_end = lr_steps[1]
    for s in schedulers:
        if s.get('param_name', 'lr') != 'lr':
            continue
        kind = s['type'].split('.')[-1]
        if kind in STEP_TYPES and not explicit_lr_steps:
            messages += _step_warnings(s, kind, recipe_epochs, lr_steps)
            continue
        begin = _recipe_epochs_of(s, s.get('begin', 0),
                                  recipe_iters_per_epoch)
        end = _recipe_epochs_of(s, s.get('end', INF), recipe_iters_per_epoch)
        warmup = kind in WARMUP_TYPES and s.get('begin', 0) == 0
        name = f'The {kind} warm-up' if warmup else kind
        if begin is not None and begin >= recipe_epochs:
            messages.append(
                f'{kind} begins at recipe epoch {begin:g}, not before '
                f'the end of the recipe\'s {recipe_epochs} epochs, '
                f'so it never acts. Move its begin or raise '
                f'train_cfg.max_epochs.')
        elif end is not None and s.get('end', INF) != INF and (
                end > recipe_epochs):
            messages.append(
                f'{name} ends at recipe epoch {end:g}, after the '
                f'recipe\'s {recipe_epochs} epochs: it is cut at '
                f'the end of the run and never reaches its final value. '
                f'Shorten it (end) or raise train_cfg.max_epochs.')
        elif warmup and end is not None and end > stage_end:
            messages.append(
                f'{name} ends at recipe epoch {end:g}, after '
                f'the first LR stage [0, {stage_end}): the whole first '
                f'long cycle trains in warm-up. Shorten the warm-up or '
                f'check the MultiStepLR milestones.')
    return messages


def _step_warnings(scheduler: dict, kind: str, recipe_epochs: int,
                   lr_steps: Sequence[int]) -> List[str]:
    """Milestones of a step schedule that are not multigrid LR stages."""
    milestones = list(scheduler.get('milestones', []))
    if not scheduler.get('by_epoch', True):
        return [
            f'{kind} with by_epoch=False: its iteration milestones '
            f'{milestones} do not make multigrid LR stages, so the long '
            f'cycle runs once over the whole run (LR stages start at '
            f'{list(lr_steps)}). Use an epoch-based {kind} or the '
            f'hook\'s lr_steps.'
        ]
    dropped = [m for m in milestones if not 0 < m < recipe_epochs]
    if not dropped:
        return []
    return [
        f'{kind} milestones {dropped} lie outside the recipe\'s '
        f'{recipe_epochs} epochs, so they are not LR stages of the '
        f'multigrid schedule (LR stages start at {list(lr_steps)}).'
    ]
