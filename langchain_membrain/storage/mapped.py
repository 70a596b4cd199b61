"""The large arrays at the end of a saved index or tree (index_cache.py, tree_cache.py):
written raw after the pickle, each starting at a multiple of :data:`ALIGN` bytes and
checked by its CRC32, and read back mapped from the file.

Why mapped: a 200,000-fact namespace's rows are 300 MB. Read into the process's memory,
each page is first faulted in and zeroed, then copied from the page cache: most of a large
open's time went there. Mapped copy-on-write (``mmap.ACCESS_COPY``), the array *is* the
page cache's pages until the process writes to one, which then gets its own copy; the file
is never written through the map. A later save replaces the file by a rename, so the pages
a process mapped stay those of the file it read (a file cut short in place while mapped
would fault on access; the library never writes one in place).

Where mapping would get in the way of that rename (Windows, where a mapped file cannot be
replaced) or is not offered, :data:`MAP` is False and the arrays are read.
"""

from __future__ import annotations

import io
import mmap
import os
import zlib
from typing import Any

import numpy as np

#: Every raw array starts at a multiple of this many bytes from the file's start, so that a
#: mapped array is aligned as numpy's own are.
ALIGN = 64
#: Arrays are mapped rather than read (module docstring).
MAP = os.name == "posix"


def padding(offset: int) -> bytes:
    """The zero bytes that take a file from ``offset`` to the next multiple of :data:`ALIGN`."""
    return bytes(-offset % ALIGN)


def laid_out(parts: list[bytes | memoryview], arrays: list[np.ndarray]) -> list[bytes | memoryview]:
    """A file's parts: ``parts``, then each of ``arrays``' bytes after the padding that starts
    it at a multiple of :data:`ALIGN` (as :func:`read_array` reads them back)."""
    out, offset = list(parts), sum(memoryview(p).nbytes for p in parts)
    for array in arrays:
        pad, raw = padding(offset), np.ascontiguousarray(array).data.cast("B")
        out += [pad, raw]
        offset += len(pad) + raw.nbytes
    return out


def crc(array: np.ndarray) -> int:
    """The CRC32 of a contiguous array's bytes."""
    return zlib.crc32(array.data.cast("B"))


def read_array(f: io.BufferedReader, shape: tuple[int, ...], dtype: Any, crc32: int) -> np.ndarray | None:
    """The array of ``shape`` and ``dtype`` written raw at ``f``'s position (after the zero
    padding to :data:`ALIGN`), ``f`` moved past it; None when the file ends before it, the
    padding is not zeros, or its bytes do not have the CRC32 ``crc32``. Mapped copy-on-write
    where :data:`MAP`, else read."""
    dtype = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    nbytes = count * dtype.itemsize
    pad = -f.tell() % ALIGN
    if pad and f.read(pad) != bytes(pad):
        return None
    offset = f.tell()
    if MAP and nbytes:
        if offset + nbytes > os.fstat(f.fileno()).st_size:
            return None
        # The map lives as long as the array (its base) does; the file may be closed.
        array = np.frombuffer(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY), dtype, count, offset)
        f.seek(offset + nbytes)
    else:
        array = np.empty(count, dtype)
        if f.readinto(array.data.cast("B")) != nbytes:
            return None
    array = array.reshape(shape)
    return array if crc(array) == crc32 else None


__all__ = ["ALIGN", "MAP", "crc", "laid_out", "padding", "read_array"]
