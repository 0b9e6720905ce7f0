"""Helpers of the benchmarks and tests: runners built as ``tools/train.py``
builds them, process groups on one machine, timing records of training
runs, the speed options of ``multigrid_speedup.py`` (``ChannelsLastHook``,
``Float32HeadHook``), random in-memory clips (imported as a sibling module,
through pytest's ``pythonpath`` and by ``custom_imports``).
"""
import bisect
import functools
import gc
import math
import os
import os.path as osp
import socket
import statistics
import tempfile
import threading
import time
from typing import (Callable, Dict, List, NamedTuple, Optional, Sequence,
                    Tuple)

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from mmaction.registry import HOOKS, TRANSFORMS
from mmcv.transforms import BaseTransform
from mmengine.config import Config
from mmengine.hooks import Hook
from mmengine.logging import print_log
from mmengine.registry import RUNNERS

import mmext.registry  # noqa: F401  (the mmext scope of RUNNERS)
from mmext.compat import unwrap_model


# ---------------------------------------------------------------- runners
def load_run_config(config: str, cfg_options: Optional[dict] = None,
                    work_dir: Optional[str] = None) -> Config:
    """``config`` read as the toolboxes' ``tools/train.py`` read it:
    ``cfg_options`` merged, ``work_dir`` defaulting to
    ``./work_dirs/<config name>``."""
    cfg = Config.fromfile(config)
    if cfg_options:
        cfg.merge_from_dict(cfg_options)
    if work_dir is not None:
        cfg.work_dir = work_dir
    elif cfg.get('work_dir') is None:
        cfg.work_dir = osp.join('./work_dirs',
                                osp.splitext(osp.basename(config))[0])
    return cfg


def build_runner(cfg: Config):
    """The runner ``tools/train.py`` builds: the config's ``runner_type``,
    ``mmext.Runner`` if it names none."""
    cfg.setdefault('runner_type', 'mmext.Runner')
    return RUNNERS.build(cfg)


# ---------------------------------------------------------------- processes
def find_free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now (for ``MASTER_PORT``)."""
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


def _worker(rank: int, world_size: int, init_method: str, backend: str,
            fn: Callable, args: Sequence) -> None:
    if backend == 'nccl':
        torch.cuda.set_device(rank)
    dist.init_process_group(backend, init_method=init_method, rank=rank,
                            world_size=world_size)
    try:
        fn(rank, world_size, *args)
        dist.barrier()  # no rank tears down while a peer still reduces
    finally:
        # What fn built can hold the group in a reference cycle (a runner
        # and its ZeroRedundancyOptimizer): destroy_process_group then left
        # gloo's threads running until the interpreter's last collection at
        # exit, where a gloo thread that needs the GIL aborts the process
        # ("terminate called without an active exception").
        gc.collect()
        if dist.is_initialized():
            dist.destroy_process_group()


def run_processes(fn: Callable, world_size: int, args: Sequence = (),
                  timeout: Optional[float] = None,
                  backend: str = 'gloo') -> None:
    """Run the picklable ``fn(rank, world_size, *args)`` in spawned
    processes, each in a default process group (``backend``; nccl: rank r
    on GPU r) met through a file of a new temporary folder (no TCP port: a
    free port picked here can be taken before rank 0 listens on it); kill
    them after ``timeout`` s (TimeoutError). Each process frees what ``fn``
    built and its process group (gloo's threads joined) before it exits.
    """
    with tempfile.TemporaryDirectory() as folder:
        ctx = mp.start_processes(
            _worker, args=(world_size, 'file://' + osp.join(folder, 'store'),
                           backend, fn, tuple(args)),
            nprocs=world_size, join=False, start_method='spawn')
        deadline = None if timeout is None else time.monotonic() + timeout
        while not ctx.join(timeout=1):
            if deadline is not None and time.monotonic() > deadline:
                for proc in ctx.processes:
                    proc.kill()
                raise TimeoutError(
                    f'{world_size} processes hung for {timeout}s')


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


# ---------------------------------------------------------- speed options
def to_channels_last_3d(model: torch.nn.Module) -> int:
    """Store every 5-D parameter and buffer in channels_last_3d, in place
    (4-D ones, e.g. TSM's, stay); return how many were converted."""
    count = 0
    with torch.no_grad():
        for tensor in list(model.parameters()) + list(model.buffers()):
            if tensor.dim() == 5 and not tensor.is_contiguous(
                    memory_format=torch.channels_last_3d):
                tensor.data = tensor.data.contiguous(
                    memory_format=torch.channels_last_3d)
                count += 1
    return count


def _inputs_to_channels_last(module, args):
    """Forward pre-hook: the first 5-D positional input in channels_last."""
    if args and isinstance(args[0], torch.Tensor) and args[0].dim() == 5:
        return (args[0].contiguous(memory_format=torch.channels_last_3d),
                ) + tuple(args[1:])
    return None


@HOOKS.register_module(force=True)
class ChannelsLastHook(Hook):
    """Train and evaluate a recognizer's backbone in channels_last_3d
    (``multigrid_speedup.py --channels-last``; mmengine has no memory-format
    option).

    A forward pre-hook converts the backbone's 5-D input; 5-D parameters,
    buffers and optimizer state are converted in ``before_train`` (after
    loading, before ``compile`` traces) and ``before_val``/``before_test``.

    Raises:
        ValueError: In ``before_run`` if the model has no ``backbone``.
    """

    priority = 'VERY_HIGH'

    def __init__(self):
        self._handle = None

    def before_run(self, runner) -> None:
        model = unwrap_model(runner.model)
        backbone = getattr(model, 'backbone', None)
        if backbone is None:
            raise ValueError(f'{type(model).__name__} has no backbone to '
                             f'convert; use an mmaction2 recognizer.')
        if self._handle is None:
            self._handle = backbone.register_forward_pre_hook(
                _inputs_to_channels_last)

    def before_train(self, runner) -> None:
        count = to_channels_last_3d(unwrap_model(runner.model))
        optimizer = getattr(runner.optim_wrapper, 'optimizer', None)
        for state in getattr(optimizer, 'state', {}).values():
            for key, value in state.items():
                if torch.is_tensor(value) and value.dim() == 5:
                    state[key] = value.contiguous(
                        memory_format=torch.channels_last_3d)
        print_log(f'ChannelsLastHook: {count} 5-D parameters/buffers and '
                  f'the backbone inputs in channels_last_3d',
                  logger='current')

    def before_val(self, runner) -> None:
        to_channels_last_3d(unwrap_model(runner.model))

    before_test = before_val

    def after_run(self, runner) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None


def _to_float32(module, args, output):
    if torch.is_tensor(output) and output.is_floating_point():
        return output.float()
    return None


@HOOKS.register_module(force=True)
class Float32HeadHook(Hook):
    """Class scores in float32 under bfloat16 AMP
    (``multigrid_speedup.py --amp bfloat16``): mmaction2 computes its top-k
    accuracy in numpy, which has no bfloat16."""

    priority = 'VERY_HIGH'

    def before_run(self, runner) -> None:
        head = unwrap_model(runner.model).cls_head
        if not getattr(head, 'float32_outputs', False):
            head.register_forward_hook(_to_float32)
            head.float32_outputs = True


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
