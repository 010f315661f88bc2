"""Low-level HDF5 writing shared by the trace and state-dict writers.

Files are written the way the C side writes them (checks/store/h5util.c,
engine/io/state_dict.c): creation-ordered groups, no timestamps, fixed-length
NUL-terminated UTF-8 strings, contiguous datasets, and default link
creation properties (ASCII link names, as HDF5's C API uses), so that the
same content gives the same bytes. `atomic_file` gives the temporary file
beside the target, fsync, rename and directory fsync of both writers.
"""
from __future__ import annotations

import contextlib
import itertools
import os
from typing import Iterator, Optional, Sequence

import numpy as np
from h5py import h5a, h5d, h5g, h5p, h5s, h5t

from .limits import MAX_RANK

_counter = itertools.count()


# ---- atomic files -----------------------------------------------------------

def check_parent_dir(path: str) -> None:
    """FileNotFoundError / NotADirectoryError if the folder `path` would be
    written into does not exist."""
    if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
        raise ValueError(f"expected a file name, got {path!r}")
    parent = os.path.dirname(os.path.abspath(os.fspath(path)))
    if not os.path.exists(parent):
        raise FileNotFoundError(f"{os.fspath(path)}: the folder {parent} does not exist")
    if not os.path.isdir(parent):
        raise NotADirectoryError(f"{os.fspath(path)}: {parent} is not a folder")
    if os.path.isdir(os.fspath(path)):
        raise IsADirectoryError(f"{os.fspath(path)}: is a folder, not a file name")


def _fsync_dir(path: str) -> None:
    try:
        fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
    except OSError:  # pragma: no cover - best effort, as in C
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover - some filesystems refuse it
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_file(path: str) -> Iterator[str]:
    """Yields the name of a new, empty temporary file beside `path` (created
    with O_EXCL, mode 0666 & ~umask). When the block ends normally the file
    is fsynced and renamed over `path` and the folder fsynced; on any
    exception it is removed and `path` is left as it was."""
    path = os.fspath(path)
    check_parent_dir(path)
    while True:
        tmp = f"{path}.tmp.{os.getpid()}.{next(_counter)}"
        try:
            fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666)
            break
        except FileExistsError:  # pragma: no cover - another writer's name
            continue
    os.close(fd)
    try:
        yield tmp
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync_dir(path)


# ---- property lists and types ----------------------------------------------

def ordered_gcpl() -> h5p.PropGCID:
    """Links tracked and indexed in creation order, no timestamps."""
    gcpl = h5p.create(h5p.GROUP_CREATE)
    gcpl.set_link_creation_order(h5p.CRT_ORDER_TRACKED | h5p.CRT_ORDER_INDEXED)
    gcpl.set_obj_track_times(False)
    return gcpl


def str_type(width: int) -> h5t.TypeID:
    """Fixed-length string `width` bytes wide (NUL included), NUL-terminated
    UTF-8: the C writer's str_type."""
    t = h5t.C_S1.copy()
    t.set_size(max(1, width))
    t.set_strpad(h5t.STR_NULLTERM)
    t.set_cset(h5t.CSET_UTF8)
    return t


def half_type(brain: bool) -> h5t.TypeFloatID:
    """The 2-byte float of engine/io/state_dict.c: float16 (5 exponent bits) or
    bfloat16 (8 exponent bits, 7 mantissa bits, bias 127)."""
    t = h5t.IEEE_F32LE.copy()
    if brain:
        t.set_fields(15, 7, 8, 0, 7)
        t.set_size(2)
        t.set_ebias(127)
    else:
        t.set_fields(15, 10, 5, 0, 10)
        t.set_size(2)
        t.set_ebias(15)
    return t


def pack_strs(values: Sequence[str]) -> tuple[np.ndarray, int]:
    """UTF-8 strings side by side, as wide as the longest plus its NUL."""
    raw = [v.encode("utf-8") for v in values]
    width = max([len(r) + 1 for r in raw] + [1])
    return np.array(raw, dtype=f"S{width}").reshape(len(raw)), width


# ---- objects ------------------------------------------------------------------

def create_group(parent, name: str, intermediate: bool = False) -> h5g.GroupID:
    lcpl: Optional[h5p.PropLCID] = None
    if intermediate:
        lcpl = h5p.create(h5p.LINK_CREATE)
        lcpl.set_create_intermediate_group(True)
    return h5g.create(parent, name.encode("utf-8"), lcpl=lcpl, gcpl=ordered_gcpl())


def write_dataset(loc, name: str, ftype: h5t.TypeID, data: np.ndarray,
                  mtype: Optional[h5t.TypeID] = None) -> None:
    """A contiguous dataset without timestamps; rank 0 is a scalar space."""
    data = np.require(data, requirements="C")
    space = h5s.create(h5s.SCALAR) if data.ndim == 0 else h5s.create_simple(data.shape)
    dcpl = h5p.create(h5p.DATASET_CREATE)
    dcpl.set_obj_track_times(False)
    ds = h5d.create(loc, name.encode("utf-8"), ftype, space, dcpl=dcpl)
    try:
        if data.size:
            ds.write(h5s.ALL, h5s.ALL, data, mtype=mtype if mtype is not None else ftype)
    finally:
        ds.close()


def write_strs(loc, name: str, values: Sequence[str]) -> None:
    packed, width = pack_strs(values)
    write_dataset(loc, name, str_type(width), packed)


def _write_attr(obj, name: str, ftype: h5t.TypeID, data: np.ndarray,
                mtype: h5t.TypeID) -> None:
    space = h5s.create(h5s.SCALAR) if data.ndim == 0 else h5s.create_simple(data.shape)
    attr = h5a.create(obj, name.encode("utf-8"), ftype, space)
    try:
        attr.write(np.require(data, requirements="C"), mtype=mtype)
    finally:
        attr.close()


def attr_str(obj, name: str, value: str) -> None:
    raw = value.encode("utf-8")
    t = str_type(len(raw) + 1)
    _write_attr(obj, name, t, np.array(raw, dtype=f"S{len(raw) + 1}"), t)


def attr_strs(obj, name: str, values: Sequence[str]) -> None:
    packed, width = pack_strs(values)
    t = str_type(width)
    _write_attr(obj, name, t, packed, t)


def attr_u64(obj, name: str, value: int) -> None:
    _write_attr(obj, name, h5t.STD_U64LE, np.array(value, dtype=np.uint64), h5t.NATIVE_UINT64)


def attr_i64(obj, name: str, value: int) -> None:
    _write_attr(obj, name, h5t.STD_I64LE, np.array(value, dtype=np.int64), h5t.NATIVE_INT64)


# ---- tensors as engine state dicts store them -------------------------------

#: numpy dtypes stored as they are; bfloat16 travels as its uint16 bits.
TENSOR_DTYPES = (np.dtype(np.float32), np.dtype(np.float16), np.dtype(np.int32),
                 np.dtype(np.int64))


def write_tensor(loc, name: str, data: np.ndarray, bfloat16: bool = False) -> None:
    """A state-dict dataset: float32, float16, int32, int64, or bfloat16 (its
    bits as uint16 with bfloat16=True), rank 0..4, in engine/io/state_dict.c's
    types (the file type is the memory type)."""
    if data.ndim > MAX_RANK:
        raise ValueError(f"{name}: rank {data.ndim}; the engine reads rank 0..{MAX_RANK}")
    if bfloat16:
        if data.dtype != np.uint16:
            raise TypeError(f"{name}: bfloat16 data must be its uint16 bits, got {data.dtype}")
        write_dataset(loc, name, half_type(True), data)
        return
    if data.dtype == np.float16:
        write_dataset(loc, name, half_type(False), data.view(np.uint16))
        return
    native = {np.dtype(np.float32): h5t.NATIVE_FLOAT, np.dtype(np.int32): h5t.NATIVE_INT32,
              np.dtype(np.int64): h5t.NATIVE_INT64}.get(data.dtype)
    if native is None:
        raise TypeError(f"{name}: dtype {data.dtype} is not one the engine stores "
                        "(float32, float16, bfloat16, int32, int64)")
    write_dataset(loc, name, native.copy(), data)


def read_tensor(ds: h5d.DatasetID, where: str) -> tuple[np.ndarray, bool]:
    """A state-dict dataset as (array, is_bfloat16), as engine/io/state_dict.c
    reads it: 4-byte floats as float32, 2-byte floats with 5/10 exponent and
    mantissa bits as float16 and with 8/7 as bfloat16 (returned as its uint16
    bits), signed 4- and 8-byte integers; rank 0..4. TypeError otherwise."""
    ftype = ds.get_type()
    space = ds.get_space()
    if space.get_simple_extent_type() == h5s.NULL or space.get_simple_extent_ndims() > MAX_RANK:
        raise ValueError(f"{where}: not a tensor of rank 0..{MAX_RANK}")
    shape = space.shape if space.get_simple_extent_type() == h5s.SIMPLE else ()
    cls, size = ftype.get_class(), ftype.get_size()
    bf16 = False
    if cls == h5t.FLOAT and size == 4:
        dtype, mtype = np.float32, h5t.NATIVE_FLOAT
    elif cls == h5t.FLOAT and size == 2 and ftype.get_fields()[2:5:2] in ((5, 10), (8, 7)):
        bf16 = ftype.get_fields()[2] == 8
        dtype, mtype = np.uint16, half_type(bf16)
    elif cls == h5t.INTEGER and ftype.get_sign() == h5t.SGN_2 and size in (4, 8):
        dtype = np.int32 if size == 4 else np.int64
        mtype = h5t.NATIVE_INT32 if size == 4 else h5t.NATIVE_INT64
    else:
        raise TypeError(f"{where}: stored type is not float32, float16, bfloat16, int32 or "
                        "int64")
    out = np.empty(shape, dtype=dtype)
    if out.size:
        ds.read(h5s.ALL, h5s.ALL, out, mtype=mtype)
    if dtype == np.uint16 and not bf16:
        out = out.view(np.float16)
    return out, bf16
