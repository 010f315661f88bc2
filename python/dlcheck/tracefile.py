"""dlcheck trace files (and goldens), exactly as checks/store/trace_write.c writes
them and checks/store/trace_read.c reads them (schema_version 1).

    user block       512 bytes: "dlcheck trace 1\\nxxh64 <16 lowercase hex>\\n"
                     NUL-padded; the hex is the xxhash64 (seed 0) of every
                     byte after the user block
    /                attributes schema_version (int64 1), kind ("trace" or
                     "golden"), run, scenario, backend, seed (uint64),
                     scenario_hash (uint64), scenario_hash_hex, and
                     env_fingerprint (flat JSON object of strings; optional on
                     a trace), recorded_at and dlcheck_version (goldens)
    /series/<name>   float64 [steps]
    /digests/names   strings [n];  /digests/values uint64 [steps, n]
    /stats/<k>       attribute step (int64); layers strings [nlayers];
                     values float64 [nlayers, 6], attribute columns
    /finals/<name>   float32, float16, bfloat16, int32 or int64, rank 0..4
    /metrics/names   strings [n];  /metrics/values float64 [n]
    /notes/names     strings [n];  /notes/texts strings [n]
    /tolerances/quantities, /tolerances/rules   strings [n] (goldens)

Series and finals names are percent-encoded into link names ('%' -> %25,
'/' -> %2F, the name "." -> %2E); a read refuses any other encoding.
Strings are fixed-length, NUL-terminated UTF-8. The same trace writes to
the same bytes as the C writer (no timestamps, creation-ordered groups,
file format bounds 1.8..latest). Writes are atomic; reads check the seal
before HDF5 parses the file.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Optional, Union

import h5py
import numpy as np
import torch
import xxhash
from h5py import h5f, h5p

from . import _h5
from .limits import (BACKEND_MAX, ENV_JSON_MAX, KIND_MAX, MAGIC, NAME_MAX, SCHEMA_VERSION,
                     SHORT_TEXT_MAX, TOL_RULE_MAX, USERBLOCK)

STAT_COLUMNS = ("mean", "std", "min", "max", "frac_zero", "nonfinite")
_HASH_CHUNK = 1 << 20

ArrayLike = Union[np.ndarray, torch.Tensor]


class TraceError(Exception):
    """A trace cannot be written or read."""


class TraceFormatError(TraceError, ValueError):
    """A file is not a dlcheck trace, or is damaged: the message names it."""


# ---- names ------------------------------------------------------------------

def encode_name(name: str) -> str:
    """The link name of a series or final, as trace_names.c's dlc_trace_encode_name."""
    if name == ".":
        return "%2E"
    return name.replace("%", "%25").replace("/", "%2F")


def decode_name(encoded: str, where: str = "") -> str:
    """Inverse of encode_name; only what encode_name produces is accepted
    (uppercase hex), so no two links decode to the same name."""
    out, i, ok = [], 0, bool(encoded)
    while ok and i < len(encoded):
        c = encoded[i]
        if c == "%":
            digits = encoded[i + 1:i + 3]
            ok = len(digits) == 2 and all(d in "0123456789ABCDEF" for d in digits)
            c = chr(int(digits, 16)) if ok else ""
            i += 2
        out.append(c)
        i += 1
    name = "".join(out)
    if not ok or encode_name(name) != encoded or len(name.encode("utf-8")) > NAME_MAX:
        raise TraceFormatError(f"{where}/{encoded}: not a name dlcheck writes (percent-encoded, "
                               f"at most {NAME_MAX} bytes)")
    return name


# ---- the trace ---------------------------------------------------------------

@dataclass
class LayerStats:
    """Statistics of layer outputs (and "grad <layer>" gradients) at one step:
    values[i] = mean, std, min, max, frac_zero, nonfinite of layers[i]."""
    step: int
    layers: list[str]
    values: np.ndarray


@dataclass
class Trace:
    """Everything one run recorded (checks/trace/trace.h), plus a golden's
    additions. Finals are numpy arrays; a bfloat16 final is held as its
    uint16 bits and named in `bfloat16` (final_tensor() gives a torch
    tensor of the right dtype for any final)."""
    run: str = "reference"
    scenario: str = ""
    backend: str = "cpu"
    seed: int = 0
    scenario_hash: int = 0
    series: dict[str, np.ndarray] = field(default_factory=dict)
    digest_names: list[str] = field(default_factory=list)
    digests: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.uint64))
    stats: list[LayerStats] = field(default_factory=list)
    finals: dict[str, np.ndarray] = field(default_factory=dict)
    bfloat16: set[str] = field(default_factory=set)
    metrics: dict[str, float] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)
    env: Optional[dict[str, str]] = None
    kind: str = "trace"
    recorded_at: str = ""
    dlcheck_version: str = ""
    tolerances: dict[str, str] = field(default_factory=dict)
    #: every root attribute as read (empty on a trace built in Python)
    attrs: dict[str, Any] = field(default_factory=dict)

    def final_tensor(self, name: str) -> torch.Tensor:
        """Final `name` as a CPU torch tensor (bfloat16 for a bfloat16 final)."""
        arr = self.finals[name]
        if name in self.bfloat16:
            return torch.from_numpy(np.require(arr, requirements="C").view(np.int16)).view(torch.bfloat16)
        return torch.from_numpy(np.require(arr, requirements="C"))

    @property
    def steps(self) -> int:
        return int(self.digests.shape[0])


def _as_final(name: str, value: ArrayLike, bf16: bool) -> tuple[np.ndarray, bool]:
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu().contiguous()
        if t.dtype == torch.bfloat16:
            return t.view(torch.int16).numpy().view(np.uint16), True
        value = t.numpy()
    arr = np.asarray(value)
    if arr.dtype.byteorder == ">":
        arr = arr.astype(arr.dtype.newbyteorder("<"))
    if bf16 != (arr.dtype == np.uint16) or (not bf16 and arr.dtype not in _h5.TENSOR_DTYPES):
        raise TypeError(f"final {name}: dtype {arr.dtype}{' (bfloat16 bits)' if bf16 else ''} is "
                        "not float32, float16, bfloat16, int32 or int64")
    if arr.ndim > _h5.MAX_RANK:
        raise ValueError(f"final {name}: rank {arr.ndim}; traces hold rank 0..{_h5.MAX_RANK}")
    return arr, bf16


# ---- checking before writing ---------------------------------------------------

def _check_text(path: str, what: str, value: Any, limit: Optional[int], empty_ok: bool = True
                ) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{path}: {what} must be a str, got {type(value).__name__}")
    raw = value.encode("utf-8")  # a lone surrogate raises UnicodeEncodeError, a ValueError
    if b"\0" in raw:
        raise ValueError(f"{path}: {what} contains a NUL character")
    if limit is not None and len(raw) > limit:
        raise ValueError(f"{path}: {what} '{value[:40]}...' is {len(raw)} bytes; at most "
                         f"{limit} fit")
    if not empty_ok and not raw:
        raise ValueError(f"{path}: {what} is empty")
    return value


def _check_names(path: str, what: str, names: Iterable[str], empty_ok: bool = True) -> None:
    for n in names:
        _check_text(path, f"a {what} name", n, NAME_MAX, empty_ok)


def _check_u64(path: str, what: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or not 0 <= int(v) < 2 ** 64:
        raise ValueError(f"{path}: {what} must be an integer in 0..2^64-1, got {v!r}")
    return int(v)


def _prepare(path: str, t: Trace) -> dict[str, Any]:
    """Everything write_trace stores, checked and converted, before a byte
    is written."""
    if t.kind not in ("trace", "golden"):
        raise ValueError(f"{path}: kind must be 'trace' or 'golden', got {t.kind!r}")
    for what, value, limit in (("run", t.run, NAME_MAX), ("scenario", t.scenario, NAME_MAX),
                               ("backend", t.backend, BACKEND_MAX)):
        _check_text(path, what, value, limit)
    seed = _check_u64(path, "seed", t.seed)
    scenario_hash = _check_u64(path, "scenario_hash", t.scenario_hash)
    series = {}
    _check_names(path, "series", t.series, empty_ok=False)
    for name, v in t.series.items():
        arr = np.asarray(v.detach().cpu() if isinstance(v, torch.Tensor) else v, dtype="<f8")
        if arr.ndim != 1:
            raise ValueError(f"{path}: series {name} must be one value per step")
        series[name] = arr
    digests = np.asarray(t.digests)
    if digests.ndim != 2 or digests.shape[1] != len(t.digest_names):
        raise ValueError(f"{path}: digests must be [steps, {len(t.digest_names)}], got "
                         f"{list(digests.shape)}")
    if digests.size and digests.dtype.kind not in "ui":
        raise TypeError(f"{path}: digests must be integers, got {digests.dtype}")
    _check_names(path, "digest", t.digest_names)
    stats = []
    for k, st in enumerate(t.stats):
        vals = np.asarray(st.values, dtype="<f8")
        if vals.size == 0 and not st.layers:
            vals = vals.reshape(0, len(STAT_COLUMNS))
        if vals.shape != (len(st.layers), len(STAT_COLUMNS)):
            raise ValueError(f"{path}: layer statistics {k} must be [{len(st.layers)}, 6]")
        _check_names(path, "layer", st.layers)
        stats.append((int(st.step), list(st.layers), vals))
    _check_names(path, "final", t.finals, empty_ok=False)
    unknown = set(t.bfloat16) - set(t.finals)
    if unknown:
        raise ValueError(f"{path}: bfloat16 names finals that do not exist: {sorted(unknown)}")
    finals = {n: _as_final(n, v, n in t.bfloat16) for n, v in t.finals.items()}
    _check_names(path, "metric", t.metrics)
    metrics = np.array([float(v) for v in t.metrics.values()], dtype="<f8")
    _check_names(path, "note", t.notes)
    for n, text in t.notes.items():
        _check_text(path, f"note {n}", text, None)
    env_json = None
    if t.env is not None:
        env_json = env_to_json(t.env)
        _check_text(path, "env_fingerprint", env_json, ENV_JSON_MAX)
    if t.kind == "golden":
        if env_json is None:
            raise ValueError(f"{path}: a golden needs an environment fingerprint (env)")
        _check_text(path, "recorded_at", t.recorded_at, SHORT_TEXT_MAX)
        _check_text(path, "dlcheck_version", t.dlcheck_version, SHORT_TEXT_MAX)
        _check_names(path, "tolerance quantity", t.tolerances, empty_ok=False)
        for q, rule in t.tolerances.items():
            _check_text(path, f"tolerance rule of {q}", rule, TOL_RULE_MAX, empty_ok=False)
    return dict(seed=seed, scenario_hash=scenario_hash, series=series,
                digests=digests.astype("<u8"), stats=stats, finals=finals,
                metrics=metrics, env_json=env_json)


def env_to_json(env: Mapping[str, str]) -> str:
    """A flat JSON object of strings in the layout of the C dlc_env_to_json
    (keys in the mapping's order), UTF-8 kept as is (no surrogate escapes,
    which the C parser refuses)."""
    clean = {}
    for k, v in env.items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise TypeError(f"environment fingerprint: {k!r}: keys and values must be str")
        if "\0" in k or "\0" in v:
            raise ValueError(f"environment fingerprint: {k!r} holds a NUL character")
        clean[k] = v
    return json.dumps(clean, ensure_ascii=False, indent=2)


def env_from_json(text: str, where: str = "") -> dict[str, str]:
    try:
        obj = json.loads(text)
    except ValueError as e:
        raise TraceFormatError(f"{where}: env_fingerprint is not JSON ({e})") from None
    if not isinstance(obj, dict) or not all(isinstance(v, str) for v in obj.values()):
        raise TraceFormatError(f"{where}: env_fingerprint is not a flat object of strings")
    return obj


# ---- writing --------------------------------------------------------------------

def _write_contents(fid: h5f.FileID, t: Trace, p: dict[str, Any]) -> None:
    root = h5py.h5g.open(fid, b"/")
    _h5.attr_i64(root, "schema_version", SCHEMA_VERSION)
    _h5.attr_str(root, "kind", t.kind)
    _h5.attr_str(root, "run", t.run)
    _h5.attr_str(root, "scenario", t.scenario)
    _h5.attr_str(root, "backend", t.backend)
    _h5.attr_u64(root, "seed", p["seed"])
    _h5.attr_u64(root, "scenario_hash", p["scenario_hash"])
    _h5.attr_str(root, "scenario_hash_hex", f"0x{p['scenario_hash']:016x}")
    if p["env_json"] is not None:
        _h5.attr_str(root, "env_fingerprint", p["env_json"])
    if t.kind == "golden":
        _h5.attr_str(root, "recorded_at", t.recorded_at)
        _h5.attr_str(root, "dlcheck_version", t.dlcheck_version)

    g = _h5.create_group(fid, "series")
    for name, v in p["series"].items():
        _h5.write_dataset(g, encode_name(name), h5py.h5t.IEEE_F64LE, v, h5py.h5t.NATIVE_DOUBLE)
    g = _h5.create_group(fid, "digests")
    _h5.write_strs(g, "names", t.digest_names)
    _h5.write_dataset(g, "values", h5py.h5t.STD_U64LE, p["digests"], h5py.h5t.NATIVE_UINT64)
    g = _h5.create_group(fid, "stats")
    for k, (step, layers, vals) in enumerate(p["stats"]):
        kg = _h5.create_group(g, str(k))
        _h5.attr_i64(kg, "step", step)
        _h5.write_strs(kg, "layers", layers)
        _h5.write_dataset(kg, "values", h5py.h5t.IEEE_F64LE, vals, h5py.h5t.NATIVE_DOUBLE)
        ds = h5py.h5d.open(kg, b"values")
        _h5.attr_strs(ds, "columns", STAT_COLUMNS)
        ds.close()
    g = _h5.create_group(fid, "/finals", intermediate=True)
    for name, (arr, bf16) in p["finals"].items():
        _h5.write_tensor(g, encode_name(name), arr, bf16)
    g = _h5.create_group(fid, "metrics")
    _h5.write_strs(g, "names", list(t.metrics))
    _h5.write_dataset(g, "values", h5py.h5t.IEEE_F64LE, p["metrics"], h5py.h5t.NATIVE_DOUBLE)
    g = _h5.create_group(fid, "notes")
    _h5.write_strs(g, "names", list(t.notes))
    _h5.write_strs(g, "texts", list(t.notes.values()))
    if t.kind == "golden":
        g = _h5.create_group(fid, "tolerances")
        _h5.write_strs(g, "quantities", list(t.tolerances))
        _h5.write_strs(g, "rules", list(t.tolerances.values()))


def _hash_after_userblock(f) -> int:
    h = xxhash.xxh64(seed=0)
    f.seek(USERBLOCK)
    while chunk := f.read(_HASH_CHUNK):
        h.update(chunk)
    return h.intdigest()


def seal(path: str, magic: bytes = MAGIC) -> None:
    """Writes the user block header of a closed HDF5 file created with a
    512-byte user block."""
    with open(path, "r+b") as f:
        header = magic + b"xxh64 %016x\n" % _hash_after_userblock(f)
        f.seek(0)
        f.write(header.ljust(USERBLOCK, b"\0"))


def write_trace(path: Union[str, os.PathLike], trace: Trace) -> str:
    """Writes `trace` (a golden when trace.kind == "golden") atomically to
    path and returns the path. Everything is checked first (ValueError /
    TypeError, nothing written); a failure while writing leaves the old
    file and no temporary."""
    path = os.fspath(path)
    prepared = _prepare(path, trace)
    with _h5.atomic_file(path) as tmp:
        fcpl = h5p.create(h5p.FILE_CREATE)
        fcpl.set_userblock(USERBLOCK)
        fcpl.set_obj_track_times(False)
        fapl = h5p.create(h5p.FILE_ACCESS)
        fapl.set_fclose_degree(h5f.CLOSE_STRONG)
        fapl.set_libver_bounds(h5f.LIBVER_V18, h5f.LIBVER_LATEST)
        fid = h5f.create(tmp.encode(), h5f.ACC_TRUNC, fcpl=fcpl, fapl=fapl)
        try:
            _write_contents(fid, trace, prepared)
        finally:
            fid.close()
        seal(tmp)
    return path


# ---- reading ------------------------------------------------------------------------

def check_seal(path: Union[str, os.PathLike], magic: bytes = MAGIC) -> None:
    """TraceFormatError naming the file if its header is not dlcheck's or
    the xxhash64 of the bytes after the user block differs from it."""
    path = os.fspath(path)
    with open(path, "rb") as f:
        header = f.read(USERBLOCK)
        m = len(magic)
        digits = header[m + 6:m + 22]
        if (len(header) < USERBLOCK or header[:m] != magic or header[m:m + 6] != b"xxh64 "
                or len(digits) != 16 or any(c not in b"0123456789abcdef" for c in digits)
                or header[m + 22:m + 23] != b"\n"):
            first = magic.decode().split("\n")[0]
            raise TraceFormatError(f"{path}: not a file dlcheck wrote, or a damaged one: it does "
                                   f"not start with the '{first}' header")
        end = m + 23
        if any(header[end:USERBLOCK]):
            at = end + next(i for i, c in enumerate(header[end:USERBLOCK]) if c)
            raise TraceFormatError(f"{path}: byte {at} of the 512-byte header is not zero: the "
                                   f"unused part of the header (bytes {end}-511) must be zero; "
                                   "the file was changed after dlcheck wrote it")
        stored, computed = int(digits, 16), _hash_after_userblock(f)
    if stored != computed:
        raise TraceFormatError(f"{path}: checksum mismatch (stored {stored:016x}, computed "
                               f"{computed:016x}): the file is damaged, truncated or was "
                               "changed after dlcheck wrote it")


def _text(raw: bytes, where: str) -> str:
    try:
        return raw.split(b"\0", 1)[0].decode("utf-8")
    except UnicodeDecodeError:
        raise TraceFormatError(f"{where}: not UTF-8 text") from None


def _attr_str(obj, where: str, name: str, limit: int) -> str:
    if name not in obj.attrs:
        raise TraceFormatError(f"{where} attribute {name} is missing: not a dlcheck trace, or "
                               "a damaged one")
    a = obj.attrs.get_id(name)
    t = a.get_type()
    if t.get_class() != h5py.h5t.STRING or t.is_variable_str() or a.shape != ():
        raise TraceFormatError(f"{where} attribute {name} is not a fixed-length string")
    value = _text(bytes(obj.attrs[name]), f"{where} attribute {name}")
    if len(value.encode()) > limit:
        raise TraceFormatError(f"{where} attribute {name} is {len(value.encode())} bytes long; "
                               f"at most {limit} fit")
    return value


def _attr_int(obj, where: str, name: str) -> int:
    if name not in obj.attrs:
        raise TraceFormatError(f"{where} attribute {name} is missing: not a dlcheck trace, or "
                               "a damaged one")
    v = obj.attrs[name]
    if not isinstance(v, np.integer) or obj.attrs.get_id(name).shape != ():
        raise TraceFormatError(f"{where} attribute {name} is not a scalar integer")
    return int(v)


def _group(parent, where: str, name: str) -> h5py.Group:
    g = parent.get(name)
    if not isinstance(g, h5py.Group):
        raise TraceFormatError(f"{where}/{name} is missing: not a dlcheck trace, or a damaged one")
    return g


def _links(g: h5py.Group) -> list[str]:
    """Link names in creation order (name order where not tracked), as C."""
    order = h5py.h5.INDEX_NAME
    if g.id.get_create_plist().get_link_creation_order() & h5p.CRT_ORDER_INDEXED:
        order = h5py.h5.INDEX_CRT_ORDER
    names: list[bytes] = []
    g.id.links.iterate(lambda n: names.append(n), idx_type=order)
    return [n.decode("utf-8") for n in names]


def _dataset(g: h5py.Group, where: str, name: str) -> h5py.Dataset:
    ds = g.get(name)
    if not isinstance(ds, h5py.Dataset):
        raise TraceFormatError(f"{where}/{name} is missing: not a dlcheck trace, or a damaged one")
    return ds


def _num(g: h5py.Group, where: str, name: str, kind: str, rank: int) -> np.ndarray:
    ds = _dataset(g, where, name)
    dt = ds.dtype
    ok = (dt.kind == "f" and dt.itemsize == 8) if kind == "f64" else (
        dt.kind == "u" and dt.itemsize == 8)
    if not ok:
        raise TraceFormatError(f"{where}/{name} is not {'float64' if kind == 'f64' else 'uint64'}")
    if ds.ndim != rank or ds.shape is None:
        raise TraceFormatError(f"{where}/{name} has rank {ds.ndim}; expected {rank}")
    return np.asarray(ds[()], dtype="=f8" if kind == "f64" else "=u8")


def _strs(g: h5py.Group, where: str, name: str, limit: Optional[int] = NAME_MAX) -> list[str]:
    ds = _dataset(g, where, name)
    t = ds.id.get_type()
    if t.get_class() != h5py.h5t.STRING or t.is_variable_str() or ds.ndim != 1:
        raise TraceFormatError(f"{where}/{name} is not an array of fixed-length strings")
    out = [_text(bytes(b), f"{where}/{name}") for b in ds[()]]
    for i, s in enumerate(out):
        if limit is not None and len(s.encode()) > limit:
            raise TraceFormatError(f"{where}/{name}: string {i} is {len(s.encode())} bytes long; "
                                   f"at most {limit} fit")
    return out


def _same_count(where: str, a: str, na: int, b: str, nb: int) -> None:
    if na != nb:
        raise TraceFormatError(f"{where}: {a} has {na} entries but {b} has {nb}")


def _string_pairs(f: h5py.File, path: str, group: str, keys: str, values: str,
                  limit: Optional[int]) -> dict[str, str]:
    """Two string datasets of one group as a mapping (notes, tolerances)."""
    w = f"{path}:/{group}"
    g = _group(f, f"{path}:", group)
    names = _strs(g, w, keys)
    texts = _strs(g, w, values, limit)
    _same_count(w, values, len(texts), keys, len(names))
    return dict(zip(names, texts))


def _read_contents(f: h5py.File, path: str) -> Trace:
    where = f"{path}:"
    t = Trace()
    version = _attr_int(f, where, "schema_version")
    if version != SCHEMA_VERSION:
        raise TraceFormatError(f"{where} schema_version is {version}; this dlcheck reads "
                               f"{SCHEMA_VERSION}{': update dlcheck' if version > 1 else ''}")
    t.kind = _attr_str(f, where, "kind", KIND_MAX)
    if t.kind not in ("trace", "golden"):
        raise TraceFormatError(f"{where} kind is '{t.kind}'; expected 'trace' or 'golden'")
    t.run = _attr_str(f, where, "run", NAME_MAX)
    t.scenario = _attr_str(f, where, "scenario", NAME_MAX)
    t.backend = _attr_str(f, where, "backend", BACKEND_MAX)
    t.seed = _attr_int(f, where, "seed")
    t.scenario_hash = _attr_int(f, where, "scenario_hash")
    golden = t.kind == "golden"
    if golden or "env_fingerprint" in f.attrs:
        t.env = env_from_json(_attr_str(f, where, "env_fingerprint", ENV_JSON_MAX), where)
    if golden:
        t.recorded_at = _attr_str(f, where, "recorded_at", SHORT_TEXT_MAX)
        t.dlcheck_version = _attr_str(f, where, "dlcheck_version", SHORT_TEXT_MAX)
    t.attrs = {k: (_text(bytes(v), k) if isinstance(v, bytes) else
                   v.item() if isinstance(v, np.generic) else v) for k, v in f.attrs.items()}

    w = f"{path}:/series"
    g = _group(f, where, "series")
    for link in _links(g):
        t.series[decode_name(link, w)] = _num(g, w, link, "f64", 1)

    w = f"{path}:/digests"
    g = _group(f, where, "digests")
    t.digest_names = _strs(g, w, "names")
    values = _num(g, w, "values", "u64", 2)
    _same_count(w, "values' second dimension", values.shape[1], "names", len(t.digest_names))
    t.digests = values

    w = f"{path}:/stats"
    g = _group(f, where, "stats")
    for k in range(len(g)):
        kw = f"{w}/{k}"
        kg = _group(g, w, str(k))
        layers = _strs(kg, kw, "layers")
        vals = _num(kg, kw, "values", "f64", 2)
        _same_count(kw, "values", vals.shape[0], "layers", len(layers))
        if vals.shape[1] != len(STAT_COLUMNS):
            raise TraceFormatError(f"{kw}/values has {vals.shape[1]} columns; expected 6")
        t.stats.append(LayerStats(_attr_int(kg, kw, "step"), layers, vals))

    w = f"{path}:/finals"
    g = _group(f, where, "finals")
    for link in _links(g):
        obj = g.get(link)
        if not isinstance(obj, h5py.Dataset):
            continue  # the engine reads datasets only
        name = decode_name(link, w)
        try:
            t.finals[name], bf16 = _h5.read_tensor(obj.id, f"{w}/{link}")
        except (TypeError, ValueError) as e:
            raise TraceFormatError(str(e)) from None
        if bf16:
            t.bfloat16.add(name)

    w = f"{path}:/metrics"
    g = _group(f, where, "metrics")
    names = _strs(g, w, "names")
    values = _num(g, w, "values", "f64", 1)
    _same_count(w, "values", len(values), "names", len(names))
    t.metrics = {n: float(v) for n, v in zip(names, values)}

    t.notes = _string_pairs(f, path, "notes", "names", "texts", None)
    if golden:
        t.tolerances = _string_pairs(f, path, "tolerances", "quantities", "rules", TOL_RULE_MAX)
    return t


def read_trace(path: Union[str, os.PathLike]) -> Trace:
    """Reads a trace or golden. The seal is checked before HDF5 parses the
    file: a damaged, truncated or edited file raises TraceFormatError naming
    it, as does a file that is not a dlcheck trace; a missing file raises
    FileNotFoundError."""
    path = os.fspath(path)
    if os.path.isdir(path):
        raise IsADirectoryError(f"{path}: is a folder, not a trace file")
    check_seal(path)
    try:
        with h5py.File(path, "r", locking=False) as f:
            return _read_contents(f, path)
    except TraceError:
        raise
    except (OSError, KeyError, ValueError, TypeError) as e:
        raise TraceFormatError(f"{path}: not a readable dlcheck trace ({e})") from None
