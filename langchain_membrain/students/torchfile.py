"""Read and write ``torch.save`` checkpoints without importing torch.

A process that only places facts (``membrain add``) reads the models' checkpoint, runs
the networks in numpy (nets.py) and writes the checkpoint back with its new counters; it
never trains, so importing torch (and ``torch._dynamo``, which every optimiser imports)
would be all of its start-up. This
module reads the zip archive ``torch.save`` writes (its ``data.pkl`` and one record per
tensor storage) into the same nested dicts, lists and tuples, with numpy arrays in place
of tensors, and writes such a structure back as an archive ``torch.load(...,
weights_only=True)`` reads: the same records, tensors rebuilt by
``torch._utils._rebuild_tensor_v2`` from typed storages, as torch itself writes them.
Every checkpoint of the package (both trainers' and the priors) is read by
:func:`read_checkpoint` and written by :func:`write_checkpoint`.

Only what the checkpoints hold is understood: float, double, int64, int32 and bool tensors
on the CPU, ``collections.OrderedDict``, and plain containers and scalars. Anything else
raises :class:`UnsupportedFile`, and the caller reads the file with torch instead.
"""

from __future__ import annotations

import io
import pickle
import struct
import zipfile
from collections import OrderedDict
from typing import Any, Callable, cast

import numpy as np

# torch's legacy typed storage classes, as torch.save names them, and their dtypes.
_STORAGE_DTYPES: dict[str, np.dtype] = {
    "FloatStorage": np.dtype("<f4"),
    "DoubleStorage": np.dtype("<f8"),
    "LongStorage": np.dtype("<i8"),
    "IntStorage": np.dtype("<i4"),
    "BoolStorage": np.dtype("bool"),
}
_DTYPE_STORAGES = {dt: name for name, dt in _STORAGE_DTYPES.items()}
_ALIGNMENT = 64  # torch aligns each storage record's data to 64 bytes (.storage_alignment)
_ARCHIVE = "archive"


class UnsupportedFile(Exception):
    """Not a ``torch.save`` archive this module understands (read it with torch)."""


class _StorageType:
    def __init__(self, name: str):
        self.name = name
        self.dtype = _STORAGE_DTYPES[name]


def _rebuild_tensor_v2(storage: np.ndarray, offset: int, size: tuple, stride: tuple, requires_grad: bool = False,
                       hooks: Any = None, metadata: Any = None) -> np.ndarray:
    if not size:
        return np.array(storage[offset], dtype=storage.dtype)
    item = storage.dtype.itemsize
    view = np.lib.stride_tricks.as_strided(storage[offset:], shape=tuple(size),
                                           strides=tuple(s * item for s in stride), writeable=False)
    return np.array(view)  # a writable, contiguous copy


class _Unpickler(pickle.Unpickler):
    def __init__(self, data: bytes, archive: zipfile.ZipFile, prefix: str):
        super().__init__(io.BytesIO(data))
        self._archive, self._prefix = archive, prefix
        self._storages: dict[str, np.ndarray] = {}

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) == ("collections", "OrderedDict"):
            return OrderedDict
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return _rebuild_tensor_v2
        if module == "torch" and name in _STORAGE_DTYPES:
            return _StorageType(name)
        raise UnsupportedFile(f"{module}.{name}")

    def persistent_load(self, pid: Any) -> np.ndarray:
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"
                and isinstance(pid[1], _StorageType) and isinstance(pid[3], str)):  # any device: read to the CPU
            raise UnsupportedFile(f"storage {pid!r}")
        key, numel, dtype = str(pid[2]), int(pid[4]), pid[1].dtype
        found = self._storages.get(key)
        if found is None:
            raw = self._archive.read(f"{self._prefix}data/{key}")
            found = np.frombuffer(raw, dtype=dtype, count=numel)
            self._storages[key] = found
        return found


def load(data: bytes) -> Any:
    """What ``torch.load(io.BytesIO(data), weights_only=True)`` returns, with numpy arrays
    in place of tensors. Raises UnsupportedFile for anything else (another format,
    another kind of object or storage)."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(bytes(data)))
        names = archive.namelist()
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise UnsupportedFile(f"not a zip archive: {exc}") from None
    pkl = [n for n in names if n.endswith("/data.pkl") and n.count("/") == 1]
    if len(pkl) != 1:
        raise UnsupportedFile("no data.pkl")
    prefix = pkl[0][: -len("data.pkl")]
    if f"{prefix}byteorder" in names and archive.read(f"{prefix}byteorder") != b"little":
        raise UnsupportedFile("big-endian archive")
    try:
        return _Unpickler(archive.read(pkl[0]), archive, prefix).load()
    except UnsupportedFile:
        raise
    except Exception as exc:  # noqa: BLE001 - a damaged archive: the caller reads it with torch
        raise UnsupportedFile(f"{type(exc).__name__}: {exc}") from None


def read_checkpoint(data: bytes, *, torch_first: bool = False) -> Any:
    """A checkpoint's structure: read by :func:`load` (numpy arrays, torch not imported),
    or, for a file it does not understand, by ``torch.load(weights_only=True)`` onto the
    CPU (tensors). ``torch_first``: go to torch at once (a caller whose networks are in
    torch already gains nothing from the numpy reading). torch's own errors propagate."""
    if not torch_first:
        try:
            return load(data)
        except UnsupportedFile:
            pass
    import torch

    return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)


def write_checkpoint(state: Any, *, tensors: bool) -> bytes:
    """``state`` as checkpoint bytes, the archive ``torch.save`` writes: by torch when it
    holds torch tensors (``tensors``), else by :func:`save` without importing torch."""
    if not tensors:
        return save(state)
    import torch

    buf = io.BytesIO()
    torch.save(state, buf)
    return buf.getvalue()


# ------------------------------------------------------------------ conversions
def as_numpy(state: Any) -> Any:
    """A state (dict) with its tensors as numpy arrays (the form torchfile.load gives)."""
    if hasattr(state, "detach") and hasattr(state, "numpy"):
        return state.detach().cpu().numpy().copy()
    if isinstance(state, OrderedDict):
        out = OrderedDict((k, as_numpy(v)) for k, v in state.items())
        out.__dict__.update(state.__dict__)
        return out
    if isinstance(state, dict):
        return {k: as_numpy(v) for k, v in state.items()}
    if isinstance(state, (list, tuple)):
        return type(state)(as_numpy(v) for v in state)
    return state


def as_tensors(state: Any, device: Any = None) -> Any:
    """A state (dict) with its numpy arrays as tensors (on ``device``)."""
    import torch

    if isinstance(state, np.ndarray):
        t = torch.from_numpy(np.array(state))
        return t if device is None else t.to(device)
    if isinstance(state, OrderedDict):
        out = OrderedDict((k, as_tensors(v, device)) for k, v in state.items())
        out.__dict__.update(state.__dict__)
        return out
    if isinstance(state, dict):
        return {k: as_tensors(v, device) for k, v in state.items()}
    if isinstance(state, (list, tuple)):
        return type(state)(as_tensors(v, device) for v in state)
    return state


# ----------------------------------------------------------------------------- writing
class _Global:
    """A name written as pickle's GLOBAL opcode (``module name``), never imported here."""

    def __init__(self, module: str, name: str):
        self.module, self.name = module, name

    def __call__(self, *args: Any) -> Any:  # pickle's save_reduce wants a callable
        raise TypeError("a placeholder for pickling")


_REBUILD = _Global("torch._utils", "_rebuild_tensor_v2")


class _Storage:
    def __init__(self, key: str, array: np.ndarray):
        self.key, self.array = key, array


class _Pickler(pickle._Pickler):  # the Python pickler: its dispatch table can be extended
    dispatch = dict(pickle._Pickler.dispatch)
    # The Python pickler's own methods, which typeshed's stub of pickle._Pickler leaves out.
    write: Callable[[bytes], Any]
    memoize: Callable[[Any], None]

    def __init__(self, file: io.BytesIO):
        super().__init__(file, protocol=2)
        self.storages: list[_Storage] = []
        self._types: dict[str, _Global] = {}

    def _save_global_ref(self, obj: _Global) -> None:
        self.write(pickle.GLOBAL + f"{obj.module}\n{obj.name}\n".encode("utf-8"))
        self.memoize(obj)

    dispatch[_Global] = cast(Any, _save_global_ref)  # typeshed types the table's functions as an Unpickler's

    def persistent_id(self, obj: Any) -> Any:
        if isinstance(obj, _Storage):
            name = _DTYPE_STORAGES[obj.array.dtype]
            kind = self._types.setdefault(name, _Global("torch", name))
            return ("storage", kind, obj.key, "cpu", int(obj.array.size))
        return None

    def reducer_override(self, obj: Any) -> Any:
        if not isinstance(obj, np.ndarray):
            return NotImplemented
        array = obj if obj.flags.c_contiguous else obj.copy(order="C")  # (ascontiguousarray makes 0-d 1-d)
        if array.dtype.newbyteorder("<") not in _DTYPE_STORAGES:
            raise UnsupportedFile(f"cannot store a {obj.dtype} array")
        array = array.astype(array.dtype.newbyteorder("<"), copy=False)
        storage = _Storage(str(len(self.storages)), array)
        self.storages.append(storage)
        stride, acc = [], 1
        for n in reversed(array.shape):
            stride.append(acc)
            acc *= n
        return (_REBUILD, (storage, 0, tuple(int(n) for n in array.shape), tuple(reversed(stride)), False,
                           OrderedDict()))


def _plain(obj: Any) -> Any:
    """``obj`` with numpy scalars as Python numbers (torch's weights-only reader refuses
    numpy objects other than arrays written as tensors)."""
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, OrderedDict):
        out = OrderedDict((k, _plain(v)) for k, v in obj.items())
        out.__dict__.update(obj.__dict__)  # a state dict's _metadata
        return out
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_plain(v) for v in obj)
    return obj


def save(obj: Any) -> bytes:
    """``obj`` (dicts, lists, tuples, scalars, strings and numpy arrays) as the bytes
    ``torch.save`` would write for the same structure with tensors."""
    buf = io.BytesIO()
    pickler = _Pickler(buf)
    pickler.dump(_plain(obj))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_STORED) as archive:
        records = [("data.pkl", buf.getvalue()), (".format_version", b"1"),
                   (".storage_alignment", str(_ALIGNMENT).encode()), ("byteorder", b"little")]
        records += [(f"data/{s.key}", s.array.tobytes()) for s in pickler.storages]
        records += [("version", b"3\n"), (".data/serialization_id", b"0" * 40)]
        for name, payload in records:
            _write_aligned(archive, out, f"{_ARCHIVE}/{name}", payload)
    return out.getvalue()


def _write_aligned(archive: zipfile.ZipFile, out: io.BytesIO, name: str, payload: bytes) -> None:
    """One stored record, its data starting at a multiple of 64 bytes (a padding extra
    field in its local header, as torch's writer does)."""
    info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
    info.compress_type = zipfile.ZIP_STORED
    header = 30 + len(name.encode("utf-8"))
    start = out.tell() + header + 4  # 4: the extra field's own header
    pad = (-start) % _ALIGNMENT
    info.extra = b"FB" + struct.pack("<H", pad) + b"Z" * pad
    archive.writestr(info, payload)
