"""glibc keeping freed memory for reuse when multigrid trains on CPUs.

Multigrid changes the tensor sizes at every iteration, and glibc then
returns the activations' memory to the system and maps it again, iteration
after iteration; ``mallopt`` keeps it in the heap instead (as PyTorch's
caching allocator keeps GPU memory)."""
import ctypes
import os
from typing import Optional

__all__ = ['glibc_version', 'keep_freed_memory']

# mallopt parameters (glibc's malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4


def glibc_version() -> Optional[str]:
    """The C library's version.

    Returns:
        str | None: E.g. ``'2.36'``; None if the C library is not glibc.
    """
    try:
        name = os.confstr('CS_GNU_LIBC_VERSION')
    except (ValueError, OSError):
        return None
    if not name or not name.startswith('glibc '):
        return None
    return name.split(' ', 1)[1]


def keep_freed_memory() -> bool:
    """Make glibc keep freed memory for reuse (process-wide, idempotent).

    ``mallopt(M_MMAP_MAX, 0)`` and ``mallopt(M_TRIM_THRESHOLD, -1)``: the
    large buffers of changing grid shapes are reused instead of returned to
    the system and faulted in again.

    Returns:
        bool: True once set; False if the C library is not glibc.

    Raises:
        OSError: If glibc refused a setting (``mallopt`` returned 0).
    """
    if glibc_version() is None:
        return False
    # The process's own symbol table holds the libc it runs with.
    mallopt = ctypes.CDLL(None).mallopt
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    for param, value in ((M_MMAP_MAX, 0), (M_TRIM_THRESHOLD, -1)):
        if mallopt(param, value) != 1:
            raise OSError(f'glibc mallopt({param}, {value}) failed')
    return True
