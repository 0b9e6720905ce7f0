"""Distributed set-up that also works on CPU-only machines (gloo backend)."""
import os
import socket
import subprocess
import time
from typing import Callable, Optional, Sequence

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from mmengine.config import Config

__all__ = ['setup_cpu_distributed', 'find_free_port', 'run_gloo_processes']


def _slurm_env_to_torch_env(port: str) -> None:
    """Export torchrun's variables from Slurm's, as mmengine's slurm init does.

    Raises:
        KeyError: If the Slurm variables (``SLURM_PROCID`` ...) are missing.
    """
    node_list = os.environ['SLURM_NODELIST']
    os.environ.setdefault('MASTER_PORT', port)
    os.environ.setdefault(
        'MASTER_ADDR',
        subprocess.getoutput(f'scontrol show hostname {node_list} | head -n1'))
    os.environ['WORLD_SIZE'] = os.environ['SLURM_NTASKS']
    os.environ['RANK'] = os.environ['SLURM_PROCID']
    os.environ['LOCAL_RANK'] = os.environ['SLURM_LOCALID']


def setup_cpu_distributed(cfg: Config, launcher: str) -> None:
    """Initialise gloo distributed training when there is no CUDA device.

    mmengine's ``init_dist`` and ``Runner.wrap_model`` call
    ``torch.cuda.set_device`` and pass ``device_ids=[LOCAL_RANK]``, which fail
    without CUDA. On a CPU-only machine this initialises the default process
    group with the gloo backend before the Runner (which then skips its own
    ``init_dist``) and makes ``MMDistributedDataParallel`` run without device
    ids. With CUDA available it does nothing, so NCCL/GPU runs are unchanged.

    Args:
        cfg (Config): The full config; ``model_wrapper_cfg`` is edited in place.
        launcher (str): ``'none'``, ``'pytorch'`` (torchrun) or ``'slurm'``.
    """
    if launcher == 'none' or torch.cuda.is_available():
        return
    if launcher == 'slurm':
        _slurm_env_to_torch_env(str(cfg.get('env_cfg', {}).get(
            'dist_cfg', {}).get('port', 29500)))
    if not dist.is_initialized():
        dist.init_process_group(backend='gloo')
    # The same defaults as Runner.wrap_model when no wrapper is configured.
    wrapper_cfg = cfg.get('model_wrapper_cfg') or dict(
        type='MMDistributedDataParallel',
        broadcast_buffers=False,
        find_unused_parameters=cfg.get('find_unused_parameters', False))
    wrapper_cfg['device_ids'] = None
    cfg.model_wrapper_cfg = wrapper_cfg


def find_free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now (for ``MASTER_PORT``)."""
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


def _gloo_worker(rank: int, world_size: int, port: int, fn: Callable,
                 args: Sequence) -> None:
    os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT=str(port))
    dist.init_process_group('gloo', rank=rank, world_size=world_size)
    try:
        fn(rank, world_size, *args)
    finally:
        dist.destroy_process_group()


def run_gloo_processes(fn: Callable,
                       world_size: int,
                       args: Sequence = (),
                       timeout: Optional[float] = None) -> None:
    """Run ``fn(rank, world_size, *args)`` in spawned gloo processes.

    Each process joins a default process group on 127.0.0.1 (a free port)
    and leaves it when ``fn`` returns. Used by tests and benchmarks that
    compare distributed runs on one CPU machine.

    Args:
        fn (callable): A picklable (module-level) function.
        world_size (int): Number of processes.
        args (Sequence): Extra arguments of ``fn``.
        timeout (float, optional): Seconds after which the processes are
            killed; None waits forever.

    Raises:
        TimeoutError: If the processes do not finish within ``timeout``.
        ProcessRaisedException: If a process raised (from
            ``torch.multiprocessing``).
    """
    ctx = mp.start_processes(
        _gloo_worker, args=(world_size, find_free_port(), fn, tuple(args)),
        nprocs=world_size, join=False, start_method='spawn')
    deadline = None if timeout is None else time.monotonic() + timeout
    while not ctx.join(timeout=1):
        if deadline is not None and time.monotonic() > deadline:
            for proc in ctx.processes:
                proc.kill()
            raise TimeoutError(f'{world_size} processes hung for {timeout}s')
