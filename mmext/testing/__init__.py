"""Helpers for tests and benchmarks: process groups on one machine.

Not used by training itself; kept in the package because the benchmarks in
``tools/benchmark`` spawn processes with them too.
"""
import os
import socket
import time
from typing import Callable, Optional, Sequence

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

__all__ = ['find_free_port', 'run_gloo_processes', 'run_processes']


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


def run_gloo_processes(fn: Callable,
                       world_size: int,
                       args: Sequence = (),
                       timeout: Optional[float] = None) -> None:
    """:func:`run_processes` with the gloo backend (CPU or CUDA tensors)."""
    run_processes(fn, world_size, args, timeout, backend='gloo')


def run_processes(fn: Callable,
                  world_size: int,
                  args: Sequence = (),
                  timeout: Optional[float] = None,
                  backend: str = 'gloo') -> None:
    """Run ``fn(rank, world_size, *args)`` in spawned processes.

    Each process joins a default process group on 127.0.0.1 (a free port)
    and leaves it when ``fn`` returns. Used by tests and benchmarks that
    compare distributed runs on one machine.

    Args:
        fn (callable): A picklable (module-level) function.
        world_size (int): Number of processes.
        args (Sequence): Extra arguments of ``fn``.
        timeout (float, optional): Seconds after which the processes are
            killed; None waits forever.
        backend (str): ``'gloo'`` (CPU tensors, and CUDA tensors of a GPU
            the processes may share) or ``'nccl'`` (rank r uses GPU r, set
            as the current device before ``fn`` runs).

    Raises:
        TimeoutError: If the processes do not finish within ``timeout``.
        ProcessRaisedException: If a process raised (from
            ``torch.multiprocessing``).
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
