"""Reads a dlcheck trace or golden with h5py, checks the layout of schema 1
(checks/store/trace_io.h) and prints one line per part, so that test_trace_io can
tell that h5py sees what dlcheck wrote. Exits 1 with a message on the first
layout violation.

usage: h5py_read_trace.py FILE
"""
import json
import sys
from urllib.parse import unquote

import h5py
import numpy as np


def text(v):
    return v.decode("utf-8") if isinstance(v, (bytes, np.bytes_)) else str(v)


def texts(ds):
    return [text(v) for v in ds[()]]


def expect(cond, what):
    if not cond:
        raise SystemExit(f"layout violation: {what}")


def dtype_name(ds):
    # bfloat16 is a 2-byte float numpy has no name for
    try:
        return str(ds.dtype)
    except (TypeError, ValueError):
        return "unnamed-float16"


def read_root(f):
    a = f.attrs
    expect(int(a["schema_version"]) == 1, "schema_version is not 1")
    kind = text(a["kind"])
    expect(kind in ("trace", "golden"), f"kind {kind}")
    print("kind", kind)
    for key in ("run", "scenario", "backend"):
        print(key, text(a[key]))
    print("seed", int(a["seed"]))
    hex_hash = text(a["scenario_hash_hex"])
    expect(int(hex_hash, 16) == int(a["scenario_hash"]), "scenario_hash_hex differs")
    print("scenario_hash", hex_hash)
    return kind


def read_series(f):
    for name, ds in f["series"].items():
        expect(ds.dtype == np.float64 and ds.ndim == 1, f"series {name}")
        print(f"series/{unquote(name)} float64 {ds.shape} first {ds[:1].tolist()}")


def read_digests(f):
    names = texts(f["digests/names"])
    values = f["digests/values"]
    expect(values.dtype == np.uint64, "digest values are not uint64")
    expect(values.ndim == 2 and values.shape[1] == len(names), "digest shape")
    print(f"digests {names} {values.shape}")


def read_stats(f):
    for k in sorted(f["stats"], key=int):
        g = f["stats"][k]
        v = g["values"]
        cols = texts(v.attrs["columns"]) if v.attrs["columns"].shape else []
        layers = texts(g["layers"])
        expect(v.shape == (len(layers), 6), f"stats/{k} shape")
        print(f"stats/{k} step {int(g.attrs['step'])} layers {layers} columns {cols}")


def read_finals(f):
    for name, ds in f["finals"].items():
        print(f"finals/{unquote(name)} {dtype_name(ds)} {ds.shape}")


def read_named(f, group, a, b):
    names, values = f[group][a][()], f[group][b][()]
    expect(len(names) == len(values), f"{group} lengths")
    return [(text(n), v) for n, v in zip(names, values)]


def main(path):
    with open(path, "rb") as raw:
        header = raw.read(512)
    expect(header.startswith(b"dlcheck trace 1\nxxh64 "), "no dlcheck header")
    with h5py.File(path, "r") as f:
        kind = read_root(f)
        read_series(f)
        read_digests(f)
        read_stats(f)
        read_finals(f)
        for name, value in read_named(f, "metrics", "names", "values"):
            print(f"metric {name} {value!r}")
        for name, note in read_named(f, "notes", "names", "texts"):
            print(f"note {name} {len(text(note))} chars")
        if kind == "golden":
            env = json.loads(text(f.attrs["env_fingerprint"]))
            print(f"env {len(env)} keys, hdf5 {env['hdf5']}")
            print("recorded_at", text(f.attrs["recorded_at"]))
            for q, r in read_named(f, "tolerances", "quantities", "rules"):
                print(f"tolerance {q} {text(r)}")
    print("ok")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    main(sys.argv[1])
