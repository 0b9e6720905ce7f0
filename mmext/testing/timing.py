"""Timing records of training runs, shared by the benchmarks.

:class:`RunRecorder` is a hook that keeps, per training iteration, what
mmengine's ``IterTimerHook`` measured (``data_time``: waiting for the batch,
``time``: the whole iteration), the batch's size and input shape and its
loss, plus the time spent between epochs and the last validation metrics.
:class:`WorkTimer` sums the wall time of chosen methods of an object.
"""
import functools
import threading
import time
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

from mmengine.hooks import Hook

__all__ = ['IterationRecord', 'RunRecorder', 'WorkTimer']


class IterationRecord(NamedTuple):
    """One training iteration.

    Attributes:
        epoch (int): The runner's epoch (0-based).
        batch_size (int): Samples of the batch.
        input_shape (tuple): Shape of the batch's first input, e.g.
            ``(C, T, H, W)`` for a clip or ``(C, H, W)`` for an image.
        loss (float): The iteration's total loss.
        data_seconds (float): Time waiting for the batch (s).
        seconds (float): Time of the whole iteration, wait included (s).
    """
    epoch: int
    batch_size: int
    input_shape: Tuple[int, ...]
    loss: float
    data_seconds: float
    seconds: float


class RunRecorder(Hook):
    """Record every training iteration and epoch boundary of a run.

    Runs after every other hook (``LOWEST``), so the time between epochs
    brackets what other hooks do there (e.g. a multigrid loader rebuild or
    precise BN).

    Attributes:
        iters (list[IterationRecord]): One per training iteration.
        epoch_gaps (list[tuple[int, float]]): ``(epoch, seconds)`` from the
            end of the previous epoch's last iteration to its start.
        epoch_tails (list[tuple[int, float]]): ``(epoch, seconds)`` from its
            last iteration to its end.
        metrics (dict): The last validation metrics.
    """

    priority = 'LOWEST'

    def __init__(self):
        self.iters: List[IterationRecord] = []
        self.epoch_gaps: List[Tuple[int, float]] = []
        self.epoch_tails: List[Tuple[int, float]] = []
        self.metrics: Dict[str, float] = {}
        self._mark: Optional[float] = None

    def before_train_epoch(self, runner) -> None:
        now = time.perf_counter()
        if self._mark is not None:
            self.epoch_gaps.append((runner.epoch, now - self._mark))
        self._mark = now

    def after_train_iter(self, runner, batch_idx: int, data_batch=None,
                         outputs=None) -> None:
        hub = runner.message_hub
        inputs = data_batch['inputs']
        loss = (outputs or {}).get('loss')
        self.iters.append(IterationRecord(
            runner.epoch, len(inputs), tuple(inputs[0].shape),
            float('nan') if loss is None else float(loss),
            hub.get_scalar('train/data_time').current(),
            hub.get_scalar('train/time').current()))
        self._mark = time.perf_counter()

    def after_train_epoch(self, runner) -> None:
        now = time.perf_counter()
        self.epoch_tails.append((runner.epoch, now - self._mark))
        self._mark = now

    def after_val_epoch(self, runner, metrics=None) -> None:
        self.metrics = dict(metrics or {})

    @property
    def data_seconds(self) -> float:
        """float: Time all iterations waited for data (s)."""
        return sum(r.data_seconds for r in self.iters)

    @property
    def iter_seconds(self) -> float:
        """float: Time of all iterations, waits included (s)."""
        return sum(r.seconds for r in self.iters)

    def epoch_losses(self) -> List[float]:
        """Mean training loss of each epoch, in order."""
        by_epoch: Dict[int, List[float]] = {}
        for r in self.iters:
            by_epoch.setdefault(r.epoch, []).append(r.loss)
        return [sum(v) / len(v) for _, v in sorted(by_epoch.items())]


class WorkTimer:
    """Sum the wall time of instrumented methods, outermost calls only.

    ``instrument(obj, names)`` replaces each named bound method of ``obj``
    by a timed one (nested calls among them count once); ``seconds`` holds
    one entry per outermost call.
    """

    def __init__(self):
        self.seconds: List[float] = []
        self._depth = threading.local()

    def instrument(self, obj, names: Sequence[str]) -> None:
        """Time the methods ``names`` of ``obj`` (missing ones are skipped).
        """
        for name in names:
            if hasattr(obj, name):
                setattr(obj, name, self._timed(getattr(obj, name)))

    def _timed(self, method):

        # wraps: callers that inspect the signature (DDP checks a comm
        # hook's parameter names) see the method's own.
        @functools.wraps(method)
        def timed(*args, **kwargs):
            depth = getattr(self._depth, 'value', 0)
            self._depth.value = depth + 1
            start = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                self._depth.value = depth
                if depth == 0:
                    self.seconds.append(time.perf_counter() - start)

        return timed
