"""Move a recipe's ``param_scheduler`` configs onto the multigrid epoch axis."""
import copy
from typing import Callable, List, Sequence, Tuple

__all__ = ['STEP_TYPES', 'find_lr_steps', 'remap_param_schedulers']

INF = 1000000000  # mmengine's default ``end`` of a scheduler
# Schedulers whose epoch milestones are the recipe's LR stages.
STEP_TYPES = ('MultiStepLR', 'MultiStepParamScheduler')


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
