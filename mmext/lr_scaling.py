"""Effective batch and per-step LR scaling, shared by both methods.

The effective batch of an optimizer step is loader ``batch_size`` x world
size x ``accumulative_counts``; mmengine's ``auto_scale_lr`` leaves out the
third factor.
"""
from contextlib import contextmanager
from typing import Callable, Dict, Iterator, List, Optional, Sequence

from mmengine.optim import OptimWrapper, OptimWrapperDict

from .compat import accumulative_counts

__all__ = [
    'RUNNER_TYPE', 'EFFECTIVE_BATCH_INFO', 'optim_wrappers',
    'check_auto_scale_lr', 'scale_lrs', 'scaled_lrs'
]

# ``runner_type`` of :class:`mmext.runner.Runner` in configs.
RUNNER_TYPE = 'mmext.Runner'
# Message hub runtime info ``{wrapper name ('' for one): effective batch}``,
# set by :class:`mmext.runner.Runner`.
EFFECTIVE_BATCH_INFO = 'effective_batch_size'


def optim_wrappers(optim_wrapper) -> Dict[str, OptimWrapper]:
    """The wrappers of a runner's ``optim_wrapper`` by name (``''`` for a
    single one; the names of an ``OptimWrapperDict`` otherwise)."""
    if isinstance(optim_wrapper, OptimWrapperDict):
        return dict(optim_wrapper.items())
    return {'': optim_wrapper}


def check_auto_scale_lr(auto_scale_lr: Optional[dict], optim_wrapper,
                        message_hub) -> None:
    """Raise if mmengine's own ``auto_scale_lr`` missed the accumulation.

    mmengine's ``Runner.scale_lr`` leaves out ``accumulative_counts = K``,
    setting an LR K times too small; :class:`mmext.runner.Runner` counts K
    and records ``EFFECTIVE_BATCH_INFO``, which clears the run.

    Args:
        auto_scale_lr (dict, optional): The run's ``auto_scale_lr``.
        optim_wrapper (OptimWrapper | OptimWrapperDict): The run's wrappers.
        message_hub (MessageHub): The run's message hub.

    Raises:
        ValueError: If ``auto_scale_lr`` is enabled, some wrapper has K > 1
            and the runner did not count K.
    """
    if not (auto_scale_lr and auto_scale_lr.get('enable', False)) or (
            message_hub.get_info(EFFECTIVE_BATCH_INFO) is not None):
        return
    for wrapper in optim_wrappers(optim_wrapper).values():
        counts = accumulative_counts(wrapper)
        if counts > 1:
            raise ValueError(
                f'auto_scale_lr is leaving out optim_wrapper.'
                f"accumulative_counts={counts}. Set runner_type='"
                f"{RUNNER_TYPE}'")


def scale_lrs(param_groups: Sequence[dict],
              factors: Sequence[float]) -> Callable[[], None]:
    """Multiply each param group's ``lr`` by its factor, for one step.

    Args:
        param_groups (Sequence[dict]): The optimizer's param groups
            (``optimizer.param_groups``, not the wrapper's, which may hold a
            fake extra group).
        factors (Sequence[float]): One factor per group.

    Returns:
        callable: Restores the LRs as they were before the call.

    Raises:
        ValueError: If the lengths differ.
    """
    if len(param_groups) != len(factors):
        raise ValueError(f'{len(factors)} LR factors for '
                         f'{len(param_groups)} param groups')
    saved: List[float] = [group['lr'] for group in param_groups]
    for group, factor in zip(param_groups, factors):
        group['lr'] = group['lr'] * factor

    def restore() -> None:
        for group, lr in zip(param_groups, saved):
            group['lr'] = lr

    return restore


@contextmanager
def scaled_lrs(param_groups: Sequence[dict],
               factors: Sequence[float]) -> Iterator[None]:
    """Context manager form of :func:`scale_lrs` (restores on exceptions)."""
    restore = scale_lrs(param_groups, factors)
    try:
        yield
    finally:
        restore()
