"""When AGVM applies its factors, re-estimates them and clips gradients;
stateless: it reads mmengine's micro-batch counter (``runner.iter``), which
``--resume`` restores."""
import math
from typing import List, Optional, Sequence, Tuple

__all__ = ['AGVMSchedule']


class AGVMSchedule:
    """Active window and re-estimation steps of AGVM.

    Iterations are runner iterations (micro-batches). Optimizer step k covers
    ``[k * K, (k + 1) * K)``; it is active if its first iteration lies in
    ``[start_iter, end_iter)`` and re-estimates every ``update_interval``
    active steps from the first active one (the reference counts
    ``runner.iter % interval``). The arguments, trusted (the wrapper
    checks them), are the wrapper's options (``update_interval`` tau,
    ``accumulative_counts`` K); the ``clip_grad_window`` includes both ends,
    as the reference's ``grad_clip_iter_range``."""

    def __init__(self,
                 update_interval: int = 10,
                 start_iter: int = 0,
                 end_iter: Optional[int] = None,
                 accumulative_counts: int = 1,
                 clip_grad_window: Optional[Sequence[int]] = None):
        self.clip_grad_window: Optional[Tuple[int, int]] = (
            None if clip_grad_window is None else tuple(clip_grad_window))
        self.update_interval = update_interval
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
        """Whether the step containing runner ``iteration`` re-estimates
        them; a last window cut short by ``max_iters`` (-1, mmengine's value
        before training: unknown) has no two complete halves and does not."""
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
        return begin <= iteration <= end

    def unused_values(self, max_iters: int) -> List[str]:
        """A message per window value a run of ``max_iters`` cannot honour."""
        messages = []
        start, end = self.start_iter, self.end_iter
        window = self.clip_grad_window
        if start >= max_iters:
            messages.append(f'AGVM never applies: start_iter={start} >= '
                            f'max_iters={max_iters}; lower start_iter')
        elif end != math.inf and end > max_iters:
            messages.append(f'AGVM end_iter={end} > max_iters={max_iters}: '
                            'AGVM runs to the end')
        if window is not None and window[0] >= max_iters:
            messages.append(f'clip_grad_window={window} begins after '
                            f'max_iters={max_iters}: no clipping')
        elif window is not None and window[1] >= max_iters:
            messages.append(f'clip_grad_window={window} ends after '
                            f'max_iters={max_iters}: clips to the end')
        return messages

    def inside_warmup(self, warmups: Sequence[Tuple[str, int, int]]
                      ) -> List[str]:
        """A message for each LR warm-up ``(type, begin, end)`` (runner
        iterations, :func:`mmext.scheduler_checks.warmup_ends`) that
        ``start_iter`` falls inside, as the reference
        ``AgvmOptimizerHook`` warns when ``lr_update_start_iter <
        warmup_iters``."""
        return [
            f'AGVM start_iter={self.start_iter} is inside the {kind} warm-up '
            f'[{begin}, {end}): set start_iter >= {end}'
            for kind, begin, end in warmups if begin <= self.start_iter < end
        ]
