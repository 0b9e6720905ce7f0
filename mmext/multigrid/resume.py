"""What a multigrid checkpoint records of its schedule, and the resume check.

The epochs, iterations and param scheduler states of a multigrid run are on
the multigrid epoch axis; a checkpoint can only be resumed by a run with the
same axis. :class:`~mmext.multigrid.MultigridHook` saves
:func:`resume_signature` under ``meta[CHECKPOINT_KEY]`` and checks it with
:func:`check_resume` when training resumes.
"""
from typing import Optional

__all__ = ['CHECKPOINT_KEY', 'resume_signature', 'check_resume']

# Where a multigrid run's checkpoints record its schedule (``meta``).
CHECKPOINT_KEY = 'mmext_multigrid'
# How the signature's epoch counts read in messages (their keys stay as
# earlier checkpoints saved them).
_LABELS = {
    'max_epochs': 'multigrid epochs',
    'recipe_epochs': 'recipe epochs (train_cfg.max_epochs)',
}


def resume_signature(plan) -> dict:
    """What defines the run's epoch and iteration axes, saved in its
    checkpoints.

    Args:
        plan (MultigridPlan): The run's plan.

    Returns:
        dict: The schedule options, ``lr_steps``, ``recipe_epochs`` and
        ``max_epochs`` (the epoch axis), and ``world_size``, ``batch_size``
        (per process), ``samples_per_rank`` and ``max_iters`` (the iteration
        axis; None without exact counts). Plain values, picklable.
    """
    options = plan.options
    signature = options.schedule_kwargs()
    # Lists, as checkpoints of earlier versions hold them.
    signature.update(
        long_cycle_factors=[tuple(f) for f in options.long_cycle_factors],
        short_cycle_factors=list(options.short_cycle_factors))
    signature.update(lr_steps=list(plan.lr_steps),
                     recipe_epochs=plan.recipe_epochs,
                     max_epochs=plan.max_epochs)
    signature.update(_iteration_axis(plan))
    return signature


def _iteration_axis(plan) -> dict:
    return dict(world_size=plan.world_size, batch_size=plan.base_batch,
                samples_per_rank=plan.samples_per_rank,
                max_iters=plan.max_iters if plan.exact else None)


def check_resume(plan, saved: Optional[dict], epoch: Optional[int] = None,
                 iteration: Optional[int] = None) -> None:
    """Raise unless a resumed checkpoint trained this very schedule.

    The epoch axis (schedule options, LR stages, recipe and multigrid
    epochs) must be the checkpoint's. So must the iteration axis: a
    multigrid epoch has ``len(sampler) / cycle batch`` iterations, so the
    world size, the per-process batch and the dataset size decide where
    each stage and each iteration-based scheduler bound lies (warm-up and
    cosine with ``convert_to_iter_based=True``, whose bounds mmengine
    restores from the checkpoint). A checkpoint on another axis is refused
    rather than re-planned: its iteration counter, optimizer step count and
    scheduler positions would all have to be moved. Checkpoints of earlier
    versions (no iteration record) are checked by where they stand: their
    ``iteration`` must lie in this plan's ``epoch``.

    Args:
        plan (MultigridPlan): The run's plan.
        saved (dict, optional): The checkpoint's
            :func:`resume_signature` (``meta[CHECKPOINT_KEY]``); None
            for a checkpoint of a run without multigrid.
        epoch (int, optional): The resumed epoch (``runner.epoch``).
        iteration (int, optional): The resumed iteration (``runner.iter``).

    Raises:
        ValueError: Naming the differences and what to do instead.
    """
    if saved is None:
        raise ValueError(
            'resuming a checkpoint of a run without multigrid: its '
            'epoch, iteration and param scheduler states are on the '
            'recipe\'s schedule, not on the multigrid schedule of this '
            f'config ({plan.max_epochs} epochs). Start the multigrid run '
            'from its weights with load_from=CKPT (no --resume), or '
            'resume without mmext.MultigridHook.')
    current = resume_signature(plan)
    axis = _iteration_axis(plan)
    differ = [f'{_LABELS.get(k, k)}: checkpoint {saved.get(k)!r}, config '
              f'{v!r}' for k, v in current.items()
              if k not in axis and saved.get(k) != v]
    if differ:
        raise ValueError(
            'the checkpoint was trained on another multigrid schedule ('
            + '; '.join(differ) + '). Resume with the checkpoint\'s '
            'MultigridHook options and recipe epochs, or start from its '
            'weights with load_from=CKPT (no --resume).')
    if 'max_iters' in saved:
        if plan.exact and saved['max_iters'] != axis['max_iters']:
            _refuse_iteration_axis(plan, saved, axis)
    elif plan.exact and epoch is not None and iteration is not None:
        span = _epoch_span(plan, epoch)
        if not span[0] <= iteration < span[1]:
            _refuse_iteration_axis(plan, dict(
                iteration=iteration, epoch=epoch), axis)


def _epoch_span(plan, epoch: int):
    """``[first, end)`` iterations of ``epoch`` (the end of training for
    an epoch past the last)."""
    cum = plan.cum_iters
    if epoch + 1 < len(cum):
        return cum[epoch], cum[epoch + 1]
    return cum[-1], cum[-1] + 1


def _refuse_iteration_axis(plan, saved: dict, axis: dict) -> None:
    """Raise for a checkpoint trained on another iteration axis."""
    if 'max_iters' in saved:
        then = (f"{saved['world_size']} process(es), {saved['batch_size']} "
                f"clips per process and batch, {saved['samples_per_rank']} "
                f"clips per process and epoch: {saved['max_iters']} "
                f'iterations')
        processes = f"{saved['world_size']} process(es)"
    else:
        first, end = _epoch_span(plan, saved['epoch'])
        then = (f"iteration {saved['iteration']} in epoch {saved['epoch']}, "
                f'which this run trains in iterations [{first}, {end})')
        processes = "the checkpoint's number of processes"
    raise ValueError(
        f'the checkpoint was trained on another multigrid iteration axis '
        f'({then}; this run: {axis["world_size"]} process(es), '
        f'{axis["batch_size"]} clips per process and batch, '
        f'{axis["samples_per_rank"]} clips per process and epoch: '
        f'{axis["max_iters"]} iterations). Multigrid\'s iterations per '
        f'epoch follow the clips per process, so the stages, the iteration '
        f'counter and the resumed iteration-based param scheduler bounds '
        f'(warm-up, cosine with convert_to_iter_based=True) would not match '
        f'this run. Resume with {processes}, the same '
        f'train_dataloader.batch_size and dataset (tools/dist_train.sh '
        f'CONFIG N --resume), or start from its weights with '
        f'load_from=CKPT (no --resume).')
