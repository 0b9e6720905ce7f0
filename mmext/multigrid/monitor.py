"""Is a run waiting for data? Shared by ``MultigridHook`` and the benchmark.

Multigrid saves iterations at constant compute per iteration; the time spent
waiting for the loader does not shrink with the coarse shapes (decoding costs
the same per clip at every grid shape), so a data-bound run gains little and
can even slow down (1.5x more data epochs). The share of iteration time spent
waiting for the next batch tells which side bounds a run.
"""
import logging
from typing import List, Optional, Tuple

__all__ = [
    'DATA_WAIT_THRESHOLD', 'data_wait_share', 'bound_by', 'data_wait_warning',
    'DataWaitWatch'
]

# Share of iteration time above which a run counts as data-bound. With a
# prefetching loader a compute-bound run waits ~0; 0.2 leaves room for timer
# noise and the occasional slow clip.
DATA_WAIT_THRESHOLD = 0.2

_REMEDIES = (
    'more train_dataloader.num_workers (if cores are free), cheaper decoding '
    '(DecordInit(num_threads=...), decode only the sampled frames, decode or '
    'store videos at the training resolution), or pre-extracted frames '
    '(RawFrameDataset)')


def data_wait_share(data_seconds: float, total_seconds: float) -> float:
    """Share of iteration time spent waiting for data.

    Args:
        data_seconds (float): Time waiting for batches (s), e.g. the sum of
            mmengine's ``data_time``.
        total_seconds (float): Time of the same iterations including the wait
            (s), e.g. the sum of mmengine's ``time``.

    Returns:
        float: ``data_seconds / total_seconds`` in [0, 1]; 0 for no time.
    """
    if total_seconds <= 0:
        return 0.0
    return min(max(data_seconds / total_seconds, 0.0), 1.0)


def bound_by(share: float, threshold: float = DATA_WAIT_THRESHOLD) -> str:
    """``'data'`` if ``share`` exceeds ``threshold``, else ``'compute'``."""
    return 'data' if share > threshold else 'compute'


def data_wait_warning(share: float, threshold: float, where: str) -> str:
    """Text of the data-bound warning (share, why it matters, remedies).

    Args:
        share (float): Measured data-wait share of iteration time.
        threshold (float): The threshold it exceeded.
        where (str): Which iterations were measured, e.g.
            ``'epoch 0 (batch 16, T=8, S=40)'``.
    """
    return (f'Multigrid: waiting for data took {share:.0%} of the iteration '
            f'time at {where} (threshold {threshold:.0%}): this run is '
            f'data-bound, and multigrid only saves compute, so it cannot '
            f'speed it up (its coarse shapes need more clips per second). '
            f'Remedies: {_REMEDIES}.')


class DataWaitWatch:
    """Measure the first iterations of each stage; warn once per run.

    Call :meth:`start_stage` when a stage's loader is swapped in, then
    :meth:`record` once per iteration. The first ``skip`` iterations of a
    stage (worker start and first batch) count as the stage-change cost; the
    next ``iters`` are summed. When they are complete, :meth:`record` returns
    an INFO summary (stage-change cost in seconds and in iterations, data-wait
    share) and, if the share exceeds ``threshold``, the warning of
    :func:`data_wait_warning`, at most once over the whole run. A stage
    shorter than ``skip + iters`` iterations gives no figures.

    Args:
        threshold (float, optional): Data-wait share in (0, 1]; 0 or None
            disables the warning (the summary is still given).
        iters (int): Iterations measured per stage (>= 1).
        skip (int): Leading iterations of a stage counted as stage change.
    """

    def __init__(self, threshold: Optional[float] = DATA_WAIT_THRESHOLD,
                 iters: int = 10, skip: int = 1):
        self.threshold = threshold
        self.iters = iters
        self.skip = skip
        self.warned = False
        self.start_stage('')

    def start_stage(self, where: str, rebuild_seconds: float = 0.0) -> None:
        """Begin measuring a stage.

        Args:
            where (str): The stage, for the messages.
            rebuild_seconds (float): Time spent rebuilding its loader (s).
        """
        self.where = where
        self.change_seconds = rebuild_seconds
        self._rebuild = rebuild_seconds
        self._seen = 0
        self._data = self._total = 0.0

    def record(self, data_seconds: float,
               compute_seconds: float) -> List[Tuple[int, str]]:
        """Add one iteration; return the ``(logging level, text)`` due now.

        Args:
            data_seconds (float): Time waiting for this iteration's batch (s).
            compute_seconds (float): Time of the iteration without the wait
                (s).
        """
        self._seen += 1
        if self._seen <= self.skip:
            self.change_seconds += data_seconds
            return []
        if self._seen > self.skip + self.iters:
            return []
        self._data += data_seconds
        self._total += data_seconds + compute_seconds
        if self._seen < self.skip + self.iters:
            return []
        share = data_wait_share(self._data, self._total)
        per_iter = self._total / self.iters
        out = [(logging.INFO, (
            f'Multigrid: stage change at {self.where}: '
            f'{self.change_seconds:.2f} s (loader rebuild {self._rebuild:.2f}'
            f' s, worker start and first {self.skip} batch(es) '
            f'{self.change_seconds - self._rebuild:.2f} s) = '
            f'{self.change_seconds / per_iter:.1f} iterations of '
            f'{per_iter:.3f} s; data wait {share:.0%} of the next '
            f'{self.iters} iterations'))]
        if self.threshold and not self.warned and share > self.threshold:
            self.warned = True
            out.append((logging.WARNING,
                        data_wait_warning(share, self.threshold, self.where)))
        return out
