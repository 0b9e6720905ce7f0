"""Exponential LR warm-up, as mmcv 1.x's ``warmup='exp'``.

The released AGVM recipes (Sense-X/AGVM
``configs/object_detection/agvm/faster_rcnn_res50_bs512.py``) use
``warmup='exp', warmup_ratio=0.001, warmup_iters=460``: at iteration t < T,
``lr_t = lr * ratio ** (1 - t / T)`` (mmcv 1.x
``LrUpdaterHook.get_warmup_lr``), about 3.4x less LR over the warm-up than a
linear one from the same ratio. mmengine has no such scheduler."""
from mmengine.optim.scheduler.lr_scheduler import LRSchedulerMixin
from mmengine.optim.scheduler import ExponentialParamScheduler

from .compat import SCHEDULER_INF
from .log import refuse
from .options import is_int, is_number
from .registry import PARAM_SCHEDULERS

__all__ = ['ExpWarmupParamScheduler', 'ExpWarmupLR']


class ExpWarmupParamScheduler(ExponentialParamScheduler):
    """Exponential warm-up of a parameter from ``start_factor`` to 1.

    At step t of ``[begin, end)`` the value is ``value * start_factor ** (1
    - (t - begin) / (end - begin))``, and ``value`` from step ``end`` on
    (mmcv 1.x's ``warmup='exp'``); chainable with other schedulers.

    Args:
        optimizer (Optimizer | OptimWrapper): As in mmengine's schedulers.
        param_name (str): The group value to warm up (``'lr'``).
        start_factor (float): The factor at ``begin``, in (0, 1]. Defaults
            to 0.001 (the released AGVM recipes).
        begin (int): First step of the warm-up. Defaults to 0.
        end (int): Step at which the full value is reached.
        last_step (int), by_epoch (bool), verbose (bool): As in mmengine's
            schedulers (usually ``by_epoch=False``).

    Raises:
        ValueError: If ``start_factor`` is not in (0, 1], or ``end`` is not
            a finite step after ``begin``.
    """

    def __init__(self, optimizer, param_name: str,
                 start_factor: float = 0.001, begin: int = 0,
                 end: int = SCHEDULER_INF, last_step: int = -1,
                 by_epoch: bool = True, verbose: bool = False):
        if not (is_number(start_factor) and 0 < start_factor <= 1):
            raise refuse(ValueError(f'ExpWarmupLR start_factor='
                                    f'{start_factor!r}: expected a number in '
                                    f'(0, 1]'))
        if not (is_int(end) and is_int(begin)
                and begin < end != SCHEDULER_INF):
            raise refuse(ValueError(f'ExpWarmupLR begin={begin!r}, end='
                                    f'{end!r}: expected an integer end after '
                                    f'begin'))
        self.start_factor = start_factor
        self.warmup_steps = end - begin
        super().__init__(
            optimizer, param_name=param_name,
            gamma=start_factor**(-1.0 / self.warmup_steps), begin=begin,
            end=end + 1, last_step=last_step, by_epoch=by_epoch,
            verbose=verbose)

    @classmethod
    def build_iter_from_epoch(cls, *args, begin=0, end=SCHEDULER_INF,
                              by_epoch=True, epoch_length=None, **kwargs):
        """An iteration-based instance from an epoch-based config
        (``convert_to_iter_based=True``).

        Args:
            *args: As the constructor (the optimizer).
            begin (int): First epoch. Defaults to 0.
            end (int): End epoch (exclusive). Defaults to ``INF``.
            by_epoch (bool): Must be True. Defaults to True.
            epoch_length (int, optional): Iterations per epoch, > 0. Defaults
                to None.
            **kwargs: As the constructor.

        Returns:
            ExpWarmupParamScheduler: The instance, ``begin`` and ``end`` in
            iterations.

        Raises:
            ValueError: Without ``by_epoch=True`` and the epoch length.
        """
        if not by_epoch or not epoch_length or epoch_length <= 0:
            raise refuse(ValueError('convert_to_iter_based needs '
                                    'by_epoch=True and the epoch length'))
        end = end if end == SCHEDULER_INF else int(end * epoch_length)
        return cls(*args, begin=int(begin * epoch_length), end=end,
                   by_epoch=False, **kwargs)

    def _get_value(self):
        """Chainable form: x start_factor at ``begin``, x gamma after."""
        factor = self.start_factor if self.last_step == 0 else self.gamma
        return [group[self.param_name] * factor
                for group in self.optimizer.param_groups]

    def _get_closed_form_value(self):
        """Closed form: ``base * start_factor ** (1 - t / T)``, t <= T."""
        exponent = 1 - min(self.last_step, self.warmup_steps) / (
            self.warmup_steps)
        return [base * self.start_factor**exponent
                for base in self.base_values]


@PARAM_SCHEDULERS.register_module()
class ExpWarmupLR(LRSchedulerMixin, ExpWarmupParamScheduler):
    """Exponential LR warm-up (mmcv 1.x ``warmup='exp'``), for configs::

        param_scheduler = [
            dict(type='mmext.ExpWarmupLR', start_factor=0.001,
                 by_epoch=False, begin=0, end=460),
            dict(type='MultiStepLR', by_epoch=True, milestones=[12, 14])]

    Arguments as :class:`ExpWarmupParamScheduler` without ``param_name``.
    """

