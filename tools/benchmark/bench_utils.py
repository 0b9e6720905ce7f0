"""Helpers of the benchmarks and tests: process groups on one machine,
timing records of training runs, random in-memory clips (imported as a
sibling module, through pytest's ``pythonpath`` and by ``custom_imports``).
"""
import bisect
import functools
import math
import os
import socket
import statistics
import threading
import time
from typing import (Callable, Dict, List, NamedTuple, Optional, Sequence,
                    Tuple)

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from mmaction.registry import TRANSFORMS
from mmcv.transforms import BaseTransform
from mmengine.hooks import Hook


# ---------------------------------------------------------------- processes
def find_free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now (for ``MASTER_PORT``)."""
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


def _worker(rank: int, world_size: int, port: int, backend: str,
            fn: Callable, args: Sequence) -> None:
    os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT=str(port))
    if backend == 'nccl':
        torch.cuda.set_device(rank)
    dist.init_process_group(backend, rank=rank, world_size=world_size)
    try:
        fn(rank, world_size, *args)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def run_processes(fn: Callable, world_size: int, args: Sequence = (),
                  timeout: Optional[float] = None,
                  backend: str = 'gloo') -> None:
    """Run the picklable ``fn(rank, world_size, *args)`` in spawned
    processes, each in a default process group (``backend``; nccl: rank r
    on GPU r) on 127.0.0.1; kill them after ``timeout`` s (TimeoutError).
    """
    ctx = mp.start_processes(
        _worker,
        args=(world_size, find_free_port(), backend, fn, tuple(args)),
        nprocs=world_size, join=False, start_method='spawn')
    deadline = None if timeout is None else time.monotonic() + timeout
    while not ctx.join(timeout=1):
        if deadline is not None and time.monotonic() > deadline:
            for proc in ctx.processes:
                proc.kill()
            raise TimeoutError(f'{world_size} processes hung for {timeout}s')


# ---------------------------------------------------------------- timing
class IterationRecord(NamedTuple):
    """One training iteration: its first input's shape, seconds waiting for
    the batch and in all, and when it ended (``time.perf_counter``)."""
    epoch: int
    batch_size: int
    input_shape: Tuple[int, ...]
    loss: float
    data_seconds: float
    seconds: float
    end: float


class RunRecorder(Hook):
    """Record every training iteration (``iters``) and ``(epoch, seconds)``
    from the previous epoch's last iteration (``epoch_gaps``) and from an
    epoch's last iteration to its end (``epoch_tails``); ``LOWEST``, so the
    gaps hold what the other hooks do."""

    priority = 'LOWEST'

    def __init__(self):
        self.iters: List[IterationRecord] = []
        self.epoch_gaps: List[Tuple[int, float]] = []
        self.epoch_tails: List[Tuple[int, float]] = []
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
            hub.get_scalar('train/time').current(), time.perf_counter()))
        self._mark = self.iters[-1].end

    def after_train_epoch(self, runner) -> None:
        now = time.perf_counter()
        self.epoch_tails.append((runner.epoch, now - self._mark))
        self._mark = now


class LoadSampler:
    """Context manager: every ``interval`` s, a thread samples
    ``(perf_counter, 1-minute load average, other cores)``, other cores
    being those busy outside this process tree (the direct measure of
    contention; the load average counts this run's threads too);
    ``cpu_seconds``: CPU time of this process tree inside the context."""

    def __init__(self, interval: float = 2.0):
        self.interval = interval
        self.samples: List[Tuple[float, float, float]] = []
        self._stop = threading.Event()

    @staticmethod
    def _cpu() -> Tuple[float, float]:
        """System busy CPU seconds and those of this process tree."""
        import psutil
        times = psutil.cpu_times()
        busy = sum(times) - times.idle - getattr(times, 'iowait', 0.0)
        me = psutil.Process()
        own = sum(me.cpu_times()[:4])
        for child in me.children(recursive=True):
            try:
                own += sum(child.cpu_times()[:2])
            except psutil.Error:  # ended meanwhile
                pass
        return busy, own

    def _run(self) -> None:
        last, (busy, own) = time.perf_counter(), self._cpu()
        while not self._stop.wait(self.interval):
            now, (busy2, own2) = time.perf_counter(), self._cpu()
            self.samples.append((now, os.getloadavg()[0], max(
                0.0, (busy2 - busy - (own2 - own)) / (now - last))))
            last, busy, own = now, busy2, own2

    def __enter__(self) -> 'LoadSampler':
        self.cpu_seconds = -self._cpu()[1]
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.cpu_seconds += self._cpu()[1]

    def during(self, times: Sequence[float]) -> Dict[str, float]:
        """Mean load average and other cores over the samples that follow
        each of ``times`` first (NaN without samples)."""
        stamps = [t for t, _, _ in self.samples]
        picked = [self.samples[min(bisect.bisect(stamps, t),
                                   len(stamps) - 1)]
                  for t in times] if stamps else []
        if not picked:
            return dict(load_average=math.nan, other_cores=math.nan)
        return dict(load_average=statistics.fmean(p[1] for p in picked),
                    other_cores=statistics.fmean(p[2] for p in picked))


class WorkTimer:
    """Wall time of instrumented methods: one entry of ``seconds`` per
    outermost call (nested calls among them count once)."""

    def __init__(self):
        self.seconds: List[float] = []
        self._depth = threading.local()

    def instrument(self, obj, names: Sequence[str]) -> None:
        """Time the methods ``names`` of ``obj`` (missing ones skipped)."""
        for name in names:
            if hasattr(obj, name):
                setattr(obj, name, self._timed(getattr(obj, name)))

    def _timed(self, method):

        # wraps: DDP checks a comm hook's parameter names.
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


# ------------------------------------------------------- synthetic clips
@TRANSFORMS.register_module(force=True)
class SyntheticVideoInit(BaseTransform):
    """Stand-in for ``DecordInit``: a video of ``total_frames`` frames."""

    def __init__(self, total_frames: int = 64):
        self.total_frames = total_frames

    def transform(self, results: dict) -> dict:
        results['total_frames'] = self.total_frames
        results['start_index'] = 0
        return results


@TRANSFORMS.register_module(force=True)
class SyntheticVideoDecode(BaseTransform):
    """Stand-in for ``DecordDecode``: random uint8 frames of ``size``."""

    def __init__(self, size=(64, 64)):
        self.size = tuple(size)

    def transform(self, results: dict) -> dict:
        n = len(results['frame_inds'])
        frames = np.random.randint(0, 256, (n, ) + self.size + (3, ),
                                   dtype=np.uint8)
        results['imgs'] = list(frames)
        results['original_shape'] = results['img_shape'] = self.size
        return results
