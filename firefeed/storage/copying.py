"""Copying a file's bytes in the kernel, the one loop the kept copy of a feed and an export's spare share."""

from __future__ import annotations

import os


def copy_in_kernel(src: int, dst: int) -> int:
    """All of open file `src`'s bytes (from its start) appended to open file `dst` by `os.copy_file_range`: a
    reflink where the file system shares extents, else an in-kernel copy, with no user-space buffer. The
    bytes left uncopied (0: all; more when the source ended early). OSError where the kernel or the file
    systems do not allow it (the caller copies otherwise)."""
    left = os.fstat(src).st_size
    while left > 0:
        n = os.copy_file_range(src, dst, left)
        if n == 0:
            break
        left -= n
    return left
