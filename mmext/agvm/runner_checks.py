"""What AGVM checks through :class:`mmext.runner.Runner`.

* A resume guard: an AGVM checkpoint resumed into a config without AGVM
  (its optimizer param groups are split by module).
* Start checks, once the run is built: ``start_iter`` inside the LR warm-up
  (the reference implementation warns the same), and an ``EMAHook`` that
  updates every micro-batch of an accumulated step.
"""
from typing import List

from mmengine.hooks import EMAHook
from mmengine.optim import BaseOptimWrapper
from mmengine.runner import EpochBasedTrainLoop

from mmext.compat import accumulative_counts
from mmext.lr_scaling import optim_wrappers
from mmext.runner import (register_resume_guard, register_start_check,
                          restart_hint)
from mmext.scheduler_checks import warmup_ends
from .optim_wrapper import AGVMOptimWrapper

__all__ = ['ema_interval_messages', 'agvm_start_checks']


@register_resume_guard
def agvm_checkpoint_needs_the_wrapper(runner, checkpoint: dict,
                                       filename: str,
                                       resume_optimizer: bool) -> None:
    """Refuse to resume AGVM optimizer state into another wrapper.

    Raises:
        ValueError: Naming the AGVM wrapper to use, or to start from the
            weights.
    """
    saved = (checkpoint.get('optimizer') or {}) if resume_optimizer else {}
    if 'param_groups' in saved:
        saved = {'': saved}
    for name, wrapper in optim_wrappers(runner.optim_wrapper).items():
        agvm = (saved.get(name) or {}).get('agvm')
        if (agvm is not None and isinstance(wrapper, BaseOptimWrapper)
                and not isinstance(wrapper, AGVMOptimWrapper)):
            raise ValueError(
                f'{filename} comes from an AGVM run (module_names '
                f"{list(agvm['module_names'])}): its optimizer param "
                f'groups are split by module, which the config\'s '
                f'{type(wrapper).__name__} cannot map. Resume with that '
                f"run's AGVM optim_wrapper (type='mmext.AGVMOptimWrapper',"
                f" constructor='mmext.AGVMOptimWrapperConstructor'), " +
                restart_hint(filename))


def ema_interval_messages(hooks, accumulative_counts: int) -> List[str]:
    """An ``EMAHook`` averaging every micro-batch of an accumulated step.

    mmengine's ``EMAHook`` updates its average after every runner iteration
    (its ``interval``, default 1, counts iterations), but with
    ``accumulative_counts = K`` the weights change once per K iterations, so
    the average takes the same weights K times per optimizer step and its
    momentum acts K times faster than the recipe means (AGVM in one process
    needs K >= 2). ``interval=K`` updates it once per optimizer step.

    Args:
        hooks (Sequence[Hook]): The runner's hooks.
        accumulative_counts (int): K.

    Returns:
        list[str]: One message per such hook.
    """
    messages = []
    for hook in hooks:
        if not isinstance(hook, EMAHook):
            continue
        interval = hook.ema_cfg.get('interval', 1)
        if accumulative_counts > 1 and interval % accumulative_counts:
            messages.append(
                f'{type(hook).__name__} updates its average every '
                f'interval={interval} runner iteration(s), but with '
                f'optim_wrapper.accumulative_counts={accumulative_counts} '
                f'the weights change once every {accumulative_counts} '
                f'iterations: it averages the same weights several times '
                f'per optimizer step, so its momentum acts faster than the '
                f'recipe means. Set interval={accumulative_counts} in its '
                f"config (e.g. custom_hooks=[dict(type='EMAHook', ..., "
                f'interval={accumulative_counts})]).')
    return messages


@register_start_check
def agvm_start_checks(runner) -> List[str]:
    """The warm-up and EMA checks for every AGVM wrapper of ``runner``.

    Returns:
        list[str]: The warnings (:meth:`AGVMSchedule.inside_warmup`,
        :func:`ema_interval_messages`).
    """
    messages = []
    loop = runner.train_loop
    epoch_length = (len(loop.dataloader)
                    if isinstance(loop, EpochBasedTrainLoop) else 1)
    schedulers = runner.cfg.get('param_scheduler')
    for name, wrapper in optim_wrappers(runner.optim_wrapper).items():
        if not isinstance(wrapper, AGVMOptimWrapper):
            continue
        own = schedulers.get(name) if name and isinstance(
            schedulers, dict) and 'type' not in schedulers else schedulers
        messages += wrapper.schedule.inside_warmup(
            warmup_ends(own, epoch_length))
        messages += ema_interval_messages(runner.hooks,
                                          accumulative_counts(wrapper))
    return messages
