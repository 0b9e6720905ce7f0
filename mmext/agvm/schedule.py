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
    ``runner.iter % interval``). The arguments are trusted: the wrapper
    checks them.

    Args:
        update_interval (int): tau, active optimizer steps between
            re-estimates. Defaults to 10.
        start_iter (int): First runner iteration with AGVM. Defaults to 0.
        end_iter (int, optional): First iteration without AGVM again; None for
            the end of training. Defaults to None.
        accumulative_counts (int): K, micro-batches per optimizer step.
            Defaults to 1.
        clip_grad_window (Sequence[int], optional): Runner iterations
            ``[begin, end]`` in which ``clip_grad`` applies, both ends
            included, as the reference's ``grad_clip_iter_range``; None for
            all. Defaults to None.
    """

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
        """Index of the optimizer step a runner iteration belongs to.

        Args:
            iteration (int): Runner iteration.

        Returns:
            int: ``iteration // K``.
        """
        return iteration // self.accumulative_counts

    def window_start(self, iteration: int) -> int:
        """First iteration of the step a runner iteration belongs to.

        Args:
            iteration (int): Runner iteration.

        Returns:
            int: ``K * (iteration // K)``.
        """
        return self.step_index(iteration) * self.accumulative_counts

    def is_active(self, iteration: int) -> bool:
        """Whether the step containing a runner iteration applies the factors.

        Args:
            iteration (int): Runner iteration.

        Returns:
            bool: Whether its step's first iteration is in
            ``[start_iter, end_iter)``.
        """
        return self.start_iter <= self.window_start(
            iteration) < self.end_iter

    def is_measurement(self, iteration: int, max_iters: int = -1) -> bool:
        """Whether the step containing a runner iteration re-estimates the
        factors.

        A last window cut short by ``max_iters`` has no two complete halves and
        does not.

        Args:
            iteration (int): Runner iteration.
            max_iters (int): The run's iterations; -1 (mmengine's value before
                training) for unknown. Defaults to -1.

        Returns:
            bool: True on every ``update_interval``-th active step.
        """
        if not self.is_active(iteration) or (
                self.step_index(iteration) -
                self._first_step) % self.update_interval:
            return False
        end = self.window_start(iteration) + self.accumulative_counts
        return max_iters < 0 or end <= max_iters

    def clips(self, iteration: int) -> bool:
        """Whether ``clip_grad`` applies at a runner iteration.

        Args:
            iteration (int): Runner iteration.

        Returns:
            bool: True inside ``clip_grad_window`` (or without one).
        """
        if self.clip_grad_window is None:
            return True
        begin, end = self.clip_grad_window
        return begin <= iteration <= end

    def unused_values(self, max_iters: int) -> List[str]:
        """The window values a run cannot honour.

        Args:
            max_iters (int): The run's iterations.

        Returns:
            list[str]: A message per value (``start_iter``, ``end_iter``,
            ``clip_grad_window``) past the run's end, with what happens or the
            fix.
        """
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
        """The LR warm-ups that ``start_iter`` falls inside.

        As the reference ``AgvmOptimizerHook`` warns when
        ``lr_update_start_iter < warmup_iters``.

        Args:
            warmups (Sequence[tuple[str, int, int]]): ``(type, begin, end)`` of
                each warm-up in runner iterations
                (:func:`mmext.scheduler_checks.warmup_ends`).

        Returns:
            list[str]: A message per such warm-up, naming the ``start_iter`` to
            set.
        """
        return [
            f'AGVM start_iter={self.start_iter} is inside the {kind} warm-up '
            f'[{begin}, {end}): set start_iter >= {end}'
            for kind, begin, end in warmups if begin <= self.start_iter < end
        ]
