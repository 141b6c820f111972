"""glibc malloc settings for a process that moves large, short-lived buffers.

Every read the event loop hands kqp is a fresh ``bytes`` of up to 256 KiB, and kqp keeps the reads
a frame spans until the frame is whole, then frees them together. Under glibc's dynamic thresholds
such a block sits at the mmap threshold and the heap top is trimmed as soon as twice that is free,
so a frame's reads are unmapped and faulted in again page by page for the next frame (figures in
proxy/README.md, "Tools"). A fixed mmap threshold above any read and a trim threshold of tens of MB
let freed reads be reused, as a relay that frees each read at once reuses one block.

At most ``TRIM_THRESHOLD_BYTES`` of free heap top stays resident. Where the environment sets
malloc's own knobs (``MALLOC_*_`` variables, ``GLIBC_TUNABLES``), or the C library is not glibc,
nothing is changed.
"""

from __future__ import annotations

import ctypes
import os
import sys

__all__ = ["MMAP_THRESHOLD_BYTES", "TRIM_THRESHOLD_BYTES", "tune_malloc"]

# mallopt parameters, from glibc's <malloc.h>.
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3

MMAP_THRESHOLD_BYTES = 4 << 20  # above any read (256 KiB) and any frame kqp joins in practice
TRIM_THRESHOLD_BYTES = 32 << 20
_OWN_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "GLIBC_TUNABLES")


def tune_malloc() -> bool:
    """Apply the settings to this process (forked workers inherit them); whether they were applied."""
    if not sys.platform.startswith("linux") or any(name in os.environ for name in _OWN_SETTINGS):
        return False
    try:
        libc = ctypes.CDLL(None)  # the symbols the process already has: its C library's
        libc.gnu_get_libc_version  # noqa: B018  # glibc only: other libcs' mallopt differ or do nothing
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES))
