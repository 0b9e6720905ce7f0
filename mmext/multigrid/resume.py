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
    """What defines the run's epoch axis, saved in its checkpoints.

    Args:
        plan (MultigridPlan): The run's plan.

    Returns:
        dict: The schedule options, ``lr_steps``, ``recipe_epochs`` and
        ``max_epochs`` (plain values, picklable).
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
    return signature


def check_resume(plan, saved: Optional[dict]) -> None:
    """Raise unless a resumed checkpoint trained this very schedule.

    Args:
        plan (MultigridPlan): The run's plan.
        saved (dict, optional): The checkpoint's
            :func:`resume_signature` (``meta[CHECKPOINT_KEY]``); None
            for a checkpoint of a run without multigrid.

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
    differ = [f'{_LABELS.get(k, k)}: checkpoint {saved.get(k)!r}, config '
              f'{v!r}' for k, v in current.items() if saved.get(k) != v]
    if differ:
        raise ValueError(
            'the checkpoint was trained on another multigrid schedule ('
            + '; '.join(differ) + '). Resume with the checkpoint\'s '
            'MultigridHook options and recipe epochs, or start from its '
            'weights with load_from=CKPT (no --resume).')
