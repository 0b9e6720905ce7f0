"""Effective batch, ``auto_scale_lr``'s rules and per-step LR scaling,
shared by both methods and the runner.

The effective batch of an optimizer step is loader ``batch_size`` x world
size x ``accumulative_counts``; mmengine's ``auto_scale_lr`` leaves out the
third factor, and knows the linear rule only."""
import math
from contextlib import contextmanager
from typing import (Callable, Dict, Iterator, List, Optional, Sequence,
                    Tuple)

from mmengine.optim import OptimWrapper, OptimWrapperDict

from .compat import accumulative_counts
from .log import refuse
from .options import LR_RULES, is_number  # LR_RULES: auto_scale_lr.rule
from .registry import unexpected

__all__ = [
    'RUNNER_TYPE', 'EFFECTIVE_BATCH_INFO', 'LR_RULES', 'optim_wrappers',
    'auto_scale_lr_options', 'is_adam_family', 'check_auto_scale_lr',
    'scale_lrs', 'scaled_lrs'
]

# ``runner_type`` of :class:`mmext.runner.Runner` in configs.
RUNNER_TYPE = 'mmext.Runner'
# Message hub runtime info ``{wrapper name ('' for one): effective batch}``,
# set by :class:`mmext.runner.Runner`.
EFFECTIVE_BATCH_INFO = 'effective_batch_size'
AUTO_SCALE_LR_KEYS = ('enable', 'base_batch_size', 'rule')
# Above this linear factor an Adam-family or LAMB optimizer gets a warning.
ADAM_LINEAR_LIMIT = 4.


def optim_wrappers(optim_wrapper) -> Dict[str, OptimWrapper]:
    """The wrappers of a runner's ``optim_wrapper`` by name.

    Args:
        optim_wrapper (OptimWrapper | OptimWrapperDict): The runner's.

    Returns:
        dict[str, OptimWrapper]: ``{'': optim_wrapper}`` for a single one, the
        names of an ``OptimWrapperDict`` otherwise.
    """
    if isinstance(optim_wrapper, OptimWrapperDict):
        return dict(optim_wrapper.items())
    return {'': optim_wrapper}


def auto_scale_lr_options(auto_scale_lr: Optional[dict]
                          ) -> Optional[Tuple[float, str]]:
    """The run's ``auto_scale_lr``, checked.

    Its keys: ``enable`` (default False), ``base_batch_size`` (the effective
    batch the LR was tuned for) and ``rule``, a key of :data:`LR_RULES`
    (default ``'linear'``, mmengine's).

    Args:
        auto_scale_lr (dict, optional): The config's ``auto_scale_lr``.

    Returns:
        tuple[float, str] | None: ``(base_batch_size, rule)`` if enabled, else
        None.

    Raises:
        TypeError: For an ``auto_scale_lr`` that is not a dict, a key other
            than enable, base_batch_size and rule (even when not enabled: a
            misspelt ``enable`` would leave the LR unscaled; a close one is
            named), an ``enable`` that is not a bool, or a
            ``base_batch_size`` that is not a number.
        ValueError: For a ``base_batch_size`` that is not finite and > 0, or
            an unknown rule (also when not enabled).
    """
    if auto_scale_lr is None:
        return None
    if not isinstance(auto_scale_lr, dict):
        raise refuse(TypeError(f'auto_scale_lr={auto_scale_lr!r}: expected '
                               f'dict(enable=True, base_batch_size=...)'))
    message = unexpected('auto_scale_lr', 'key', auto_scale_lr,
                         AUTO_SCALE_LR_KEYS)
    if message:
        raise refuse(TypeError(message))
    enable = auto_scale_lr.get('enable', False)
    if not isinstance(enable, bool):
        raise refuse(TypeError(f'auto_scale_lr.enable={enable!r}: expected '
                               f'True or False'))
    rule = auto_scale_lr.get('rule', 'linear')
    if rule not in LR_RULES:
        raise refuse(ValueError(f'auto_scale_lr.rule={rule!r}: expected '
                                f'one of {list(LR_RULES)}'))
    if not enable:
        return None
    base = auto_scale_lr.get('base_batch_size')
    if not is_number(base):
        raise refuse(TypeError(f'auto_scale_lr.base_batch_size={base!r}: '
                               f'set the batch the LR was tuned for'))
    if not (math.isfinite(base) and base > 0):
        raise refuse(ValueError(f'auto_scale_lr.base_batch_size={base!r}: '
                                f'expected finite and > 0'))
    return base, rule


def is_adam_family(optimizer) -> bool:
    """Whether an optimizer keeps Adam's moments (Adam, AdamW, NAdam, RAdam,
    Adamax, LAMB...).

    The param groups, not ``optimizer.defaults``, are read:
    ``ZeroRedundancyOptimizer`` keeps only the options it was given in
    ``defaults``.

    Args:
        optimizer (Optimizer): The optimizer.

    Returns:
        bool: Whether its param groups have ``betas``.
    """
    return any('betas' in group for group in optimizer.param_groups)


def check_auto_scale_lr(auto_scale_lr: Optional[dict], optim_wrapper,
                        message_hub) -> None:
    """Refuse a run where mmengine's own ``auto_scale_lr`` sets another LR than
    :class:`mmext.runner.Runner` would.

    mmengine's ``Runner.scale_lr`` leaves out ``accumulative_counts = K``,
    setting an LR K times too small, and ignores ``rule`` (scaling
    linearly). :class:`mmext.runner.Runner` checks ``auto_scale_lr``, counts
    K and records ``EFFECTIVE_BATCH_INFO`` in the run's ``message_hub``,
    which clears the run.

    Args:
        auto_scale_lr (dict, optional): The config's ``auto_scale_lr``.
        optim_wrapper (OptimWrapper | OptimWrapperDict): The runner's.
        message_hub (MessageHub): The run's message hub.

    Raises:
        ValueError: If ``auto_scale_lr`` is enabled, the runner is not
            mmext's, and some wrapper has K > 1 or the rule is not linear;
            and as :func:`auto_scale_lr_options`.
        TypeError: As :func:`auto_scale_lr_options`.
    """
    if message_hub.get_info(EFFECTIVE_BATCH_INFO) is not None:
        return
    options = auto_scale_lr_options(auto_scale_lr)
    if options is None:
        return
    if options[1] != 'linear':
        raise refuse(ValueError(f'auto_scale_lr.rule={options[1]!r} needs '
                                f"runner_type='{RUNNER_TYPE}'"))
    for wrapper in optim_wrappers(optim_wrapper).values():
        counts = accumulative_counts(wrapper)
        if counts > 1:
            raise refuse(ValueError(
                f'auto_scale_lr is leaving out optim_wrapper.'
                f"accumulative_counts={counts}. Set runner_type='"
                f"{RUNNER_TYPE}'"))


def scale_lrs(param_groups: Sequence[dict],
              factors: Sequence[float]) -> Callable[[], None]:
    """Multiply the ``lr`` of each param group by its factor, for one step.

    Args:
        param_groups (Sequence[dict]): ``optimizer.param_groups``, not the
            wrapper's, which may hold a fake extra group.
        factors (Sequence[float]): One factor per group.

    Returns:
        Callable[[], None]: Restores the LRs.

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
    """Context manager form of :func:`scale_lrs` (restores on exceptions).

    Args:
        param_groups (Sequence[dict]): ``optimizer.param_groups``.
        factors (Sequence[float]): One factor per group.

    Yields:
        None: Inside, the scaled LRs.
    """
    restore = scale_lrs(param_groups, factors)
    try:
        yield
    finally:
        restore()
