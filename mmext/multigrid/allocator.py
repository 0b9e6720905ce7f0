"""glibc's allocator told to keep freed memory, for CPU training.

On CPU, tensors live in memory from ``malloc``. glibc serves blocks above
its mmap threshold (at most 32 MiB on 64-bit systems) with a fresh ``mmap``
and returns them with ``munmap`` when freed, and it trims free memory at
the top of its heap. A training step frees and re-allocates its activations
every iteration; when their sizes stay the same the heap reuses them, but
multigrid changes the sizes at every iteration (short cycle), so each
iteration maps, zero-fills (page faults) and unmaps hundreds of MiB again:
on the 2-core benchmark 94 s of kernel time in a 345 s run
(``docs/en/benchmarks.md``). ``mallopt(M_MMAP_MAX, 0)`` serves every block
from the heap and ``mallopt(M_TRIM_THRESHOLD, -1)`` stops trimming it
(``mallopt(3)``: -1 disables trimming), so the process keeps its peak
memory and reuses it, as PyTorch's caching allocator does for GPU memory.
The same as starting the process with ``MALLOC_MMAP_MAX_=0
MALLOC_TRIM_THRESHOLD_=<huge>`` in the environment, but applied by the run.
Loader workers forked afterwards inherit it.
"""
import ctypes
import os
from typing import Optional

__all__ = [
    'glibc_version', 'keep_freed_memory', 'keep_freed_memory_for',
    'mmapped_bytes'
]

# mallopt parameters (glibc's malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4


class _MallInfo2(ctypes.Structure):
    """glibc's ``struct mallinfo2`` (glibc >= 2.33), fields in order."""
    _fields_ = [(name, ctypes.c_size_t) for name in (
        'arena', 'ordblks', 'smblks', 'hblks', 'hblkhd', 'usmblks',
        'fsmblks', 'uordblks', 'fordblks', 'keepcost')]


def glibc_version() -> Optional[str]:
    """The C library's version, e.g. ``'2.36'``; None if it is not glibc."""
    try:
        name = os.confstr('CS_GNU_LIBC_VERSION')
    except (ValueError, OSError):
        return None
    if not name or not name.startswith('glibc '):
        return None
    return name.split(' ', 1)[1]


def _libc():
    # The process's own symbol table, which holds the libc it runs with.
    return ctypes.CDLL(None)


def keep_freed_memory() -> bool:
    """Make glibc keep freed memory for reuse (process-wide, idempotent).

    Returns:
        bool: True if applied; False if the C library is not glibc (nothing
        is changed then).

    Raises:
        OSError: If glibc refused a setting (``mallopt`` returned 0).
    """
    if glibc_version() is None:
        return False
    mallopt = _libc().mallopt
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    for param, value in ((M_MMAP_MAX, 0), (M_TRIM_THRESHOLD, -1)):
        if mallopt(param, value) != 1:
            raise OSError(f'glibc mallopt({param}, {value}) failed')
    return True


def keep_freed_memory_for(model) -> Optional[str]:
    """:func:`keep_freed_memory` if ``model`` trains on the CPU.

    Args:
        model (nn.Module): The unwrapped model; its first parameter's device
            decides (CUDA runs allocate their tensors through PyTorch's
            caching allocator and are left alone).

    Returns:
        str | None: What was done, for the log; None if nothing was (not on
        the CPU, no parameters, or not glibc).
    """
    param = next(model.parameters(), None)
    if param is None or param.device.type != 'cpu' or not keep_freed_memory():
        return None
    return (f'glibc {glibc_version()} keeps freed memory for reuse '
            f'(mallopt M_MMAP_MAX=0, M_TRIM_THRESHOLD=-1): multigrid '
            f'changes tensor sizes every iteration, which otherwise maps and '
            f'unmaps the activations each time; keep_cpu_memory=False '
            f'leaves malloc alone')


def mmapped_bytes() -> Optional[int]:
    """Bytes glibc currently holds in mmapped blocks (``mallinfo2().hblkhd``);
    None without glibc >= 2.33."""
    version = glibc_version()
    if version is None or tuple(map(int, version.split('.')[:2])) < (2, 33):
        return None
    mallinfo2 = _libc().mallinfo2
    mallinfo2.restype = _MallInfo2
    return mallinfo2().hblkhd
