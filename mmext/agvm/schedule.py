"""When AGVM applies its factors and when it re-estimates them.

Pure bookkeeping on mmengine's micro-batch counter (the optim wrapper's
inner count, equal to ``runner.iter``), so it survives ``--resume`` (the
runner restores the counter) and needs no state of its own.
"""
import math
from typing import List, Optional, Sequence, Tuple

__all__ = ['AGVMSchedule']


class AGVMSchedule:
    """Active window and re-estimation steps of AGVM.

    Iterations are runner iterations (micro-batches, what param schedulers,
    ``start_iter`` and the log count). One optimizer step covers the window
    ``[k * K, (k + 1) * K)`` of ``K = accumulative_counts`` iterations; it is
    *active* if its first iteration lies in ``[start_iter, end_iter)`` and it
    *re-estimates* the factors every ``update_interval`` active steps,
    starting with the first active one (the reference implementation counts
    ``runner.iter % interval``; counting from the start makes the first
    estimate happen at ``start_iter`` whatever the interval).

    Gradient clipping has a window of its own: the released recipes clip
    only in the iterations before AGVM starts.

    Args:
        update_interval (int): tau, optimizer steps between re-estimates.
        start_iter (int): First runner iteration with AGVM.
        end_iter (int, optional): First runner iteration without AGVM again;
            None for the end of training.
        accumulative_counts (int): K, micro-batches per optimizer step.
        clip_grad_window (tuple[int, int], optional): Runner iterations
            ``[begin, end)`` in which ``clip_grad`` applies; None for all.

    Raises:
        ValueError: If ``update_interval < 1``, ``start_iter < 0``,
            ``end_iter <= start_iter``, ``accumulative_counts < 1`` or
            ``clip_grad_window`` is not ``(begin, end)`` with begin < end.
    """

    def __init__(self,
                 update_interval: int = 10,
                 start_iter: int = 0,
                 end_iter: Optional[int] = None,
                 accumulative_counts: int = 1,
                 clip_grad_window: Optional[Sequence[int]] = None):
        if int(update_interval) != update_interval or update_interval < 1:
            raise ValueError('update_interval must be an integer >= 1, got '
                             f'{update_interval}')
        if start_iter < 0:
            raise ValueError(f'start_iter must be >= 0, got {start_iter}')
        if end_iter is not None and end_iter <= start_iter:
            raise ValueError(f'end_iter ({end_iter}) must be greater than '
                             f'start_iter ({start_iter}), or None')
        if accumulative_counts < 1:
            raise ValueError('accumulative_counts must be >= 1')
        if clip_grad_window is not None and (
                len(clip_grad_window) != 2
                or clip_grad_window[0] >= clip_grad_window[1]):
            raise ValueError('clip_grad_window must be (begin, end) with '
                             f'begin < end, got {clip_grad_window}')
        self.clip_grad_window: Optional[Tuple[int, int]] = (
            None if clip_grad_window is None else tuple(clip_grad_window))
        self.update_interval = int(update_interval)
        self.start_iter = start_iter
        self.end_iter = math.inf if end_iter is None else end_iter
        self.accumulative_counts = accumulative_counts
        self._first_step = math.ceil(start_iter / accumulative_counts)

    def step_index(self, iteration: int) -> int:
        """Index of the optimizer step that ``iteration`` belongs to."""
        return iteration // self.accumulative_counts

    def window_start(self, iteration: int) -> int:
        """First iteration of the step that ``iteration`` belongs to."""
        return self.step_index(iteration) * self.accumulative_counts

    def is_active(self, iteration: int) -> bool:
        """Whether the step containing ``iteration`` applies the factors."""
        return self.start_iter <= self.window_start(
            iteration) < self.end_iter

    def is_measurement(self, iteration: int, max_iters: int = -1) -> bool:
        """Whether the step containing ``iteration`` re-estimates them.

        Args:
            iteration (int): Runner iteration.
            max_iters (int): Iterations of the run; a last window cut short
                by it has no two complete halves and does not re-estimate.
                -1 (mmengine's value before training) for unknown.
        """
        if not self.is_active(iteration) or (
                self.step_index(iteration) -
                self._first_step) % self.update_interval:
            return False
        end = self.window_start(iteration) + self.accumulative_counts
        return max_iters < 0 or end <= max_iters

    def clips(self, iteration: int) -> bool:
        """Whether ``clip_grad`` applies at ``iteration``."""
        if self.clip_grad_window is None:
            return True
        begin, end = self.clip_grad_window
        return begin <= iteration < end

    def unused_values(self, max_iters: int) -> List[str]:
        """What of ``start_iter``/``end_iter``/``clip_grad_window`` a run of
        ``max_iters`` iterations cannot honour, one message per value."""
        messages = []
        start, end = self.start_iter, self.end_iter
        if start >= max_iters:
            messages.append(
                f'AGVM start_iter={start} is not before the end of training '
                f'(max_iters={max_iters}), so AGVM never modulates the LR. '
                f'Lower start_iter (the paper starts after the warm-up) or '
                f'train longer.')
        elif end != math.inf and end > max_iters:
            messages.append(
                f'AGVM end_iter={end} lies after the end of training '
                f'(max_iters={max_iters}); AGVM runs to the end, as with '
                f'end_iter=None.')
        if self.clip_grad_window is not None:
            begin, stop = self.clip_grad_window
            if begin >= max_iters:
                messages.append(
                    f'clip_grad_window={self.clip_grad_window} begins '
                    f'after the end of training (max_iters={max_iters}), so '
                    f'gradients are never clipped.')
            elif stop > max_iters:
                messages.append(
                    f'clip_grad_window={self.clip_grad_window} ends '
                    f'after the end of training (max_iters={max_iters}); '
                    f'gradients are clipped to the end.')
        return messages
