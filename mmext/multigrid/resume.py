"""A multigrid run's resume identity: what its checkpoints record of the
schedule (``meta[CHECKPOINT_KEY]``) and the check that a resumed run
continues that very schedule."""
from typing import Optional

__all__ = ['CHECKPOINT_KEY', 'resume_signature', 'check_resume']

# Where a multigrid run's checkpoints record its schedule (``meta``).
CHECKPOINT_KEY = 'mmext_multigrid'
# Signature keys (as earlier checkpoints saved them) as messages name them.
_LABELS = {'max_epochs': 'multigrid epochs', 'recipe_epochs': 'recipe epochs'}
# The iteration axis: what the iterations per epoch follow.
_AXIS = ('world_size', 'batch_size', 'samples_per_rank', 'max_iters')
# Keys a checkpoint may lack, not compared then: the options of a cycle it
# did not run, and those earlier checkpoints did not record.
_OPTIONAL = ('long_cycle_factors', 'short_cycle_factors', 'short_cycle_mode',
             'lr_rule', 'bn_base_size')


def resume_signature(plan) -> dict:
    """What defines a run's schedule, its training and its epoch and
    iteration axes (``meta[CHECKPOINT_KEY]`` of its checkpoints).

    Args:
        plan (MultigridPlan): The run's plan.

    Returns:
        dict: The options that act in the run (the schedule's, ``lr_rule``
        and ``bn_base_size``, 0 as None; without
        :meth:`MultigridOptions.unused_options`; sequences as lists),
        ``lr_steps``, ``recipe_epochs``, ``max_epochs``, ``world_size``,
        ``batch_size`` (per process), ``samples_per_rank`` and
        ``max_iters`` (None without exact counts).
    """
    options = plan.options
    signature = dict(
        options.schedule_kwargs(), lr_rule=options.lr_rule,
        bn_base_size=options.bn_base_size or None,
        long_cycle_factors=[tuple(f) for f in options.long_cycle_factors],
        short_cycle_factors=list(options.short_cycle_factors),
        lr_steps=list(plan.lr_steps), recipe_epochs=plan.recipe_epochs,
        max_epochs=plan.max_epochs, world_size=plan.world_size,
        batch_size=plan.base_batch, samples_per_rank=plan.samples_per_rank,
        max_iters=plan.max_iters if plan.exact else None)
    for name in options.unused_options():
        del signature[name]
    return signature


def check_resume(plan, saved: Optional[dict], epoch: Optional[int] = None,
                 iteration: Optional[int] = None) -> None:
    """Refuse to resume a checkpoint that did not train this very schedule.

    The schedule of :func:`resume_signature` must match, and the iteration
    axis where both runs count it exactly (another world size, batch or
    dataset changes the iterations of every epoch); a checkpoint without an
    iteration record must have ``iteration`` inside this plan's ``epoch``.

    Args:
        plan (MultigridPlan): The resumed run's plan.
        saved (dict, optional): The checkpoint's :func:`resume_signature`;
            None: a run without multigrid.
        epoch (int, optional): ``runner.epoch`` after the load. Defaults to
            None.
        iteration (int, optional): ``runner.iter`` after the load. Defaults
            to None.

    Raises:
        ValueError: Naming the differences and the fix.
    """
    if saved is None:
        raise ValueError('Not a multigrid checkpoint: use load_from=CKPT '
                         'without --resume.')
    ours = resume_signature(plan)
    axis = plan.exact and 'max_iters' in saved and (
        saved['max_iters'] != ours['max_iters'])
    # Checkpoints from before batch_policy trained the paper's batches.
    saved = dict({'batch_policy': 'paper'}, **saved)
    differ = [f'{_LABELS.get(k, k)} {saved.get(k)!r} (config {v!r})'
              for k, v in ours.items()
              if (axis or k not in _AXIS) and (
                  k in saved or k not in _OPTIONAL) and saved.get(k) != v]
    if differ:
        raise ValueError(f'Checkpoint of another multigrid schedule: '
                         f'{", ".join(differ)}. Resume with those or use '
                         f'load_from=CKPT.')
    if 'max_iters' in saved or not plan.exact or None in (epoch, iteration):
        return
    cum = plan.cum_iters
    first, end = (cum[epoch], cum[epoch + 1]) if epoch + 1 < len(cum) else (
        cum[-1], cum[-1] + 1)
    if not first <= iteration < end:
        raise ValueError(f'Checkpoint iteration {iteration} is outside epoch '
                         f'{epoch} [{first}, {end}): resume with its world '
                         f'size, batch and data.')
