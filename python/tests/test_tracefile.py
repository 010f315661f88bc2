"""Trace files: the C writer's files read in Python (every group), Python's
files read by the C binary, the seal, names, dtypes, checks and atomicity."""
from __future__ import annotations

import os
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from dlcheck import _h5, tracefile as tf
from dlcheck.tracefile import LayerStats, Trace, TraceFormatError, read_trace, write_trace


def small_trace(**kw) -> Trace:
    t = Trace(run="r", scenario="s", backend="cpu", seed=7, scenario_hash=2 ** 64 - 1,
              series={"loss": np.array([1.0, 0.5]), "a/b%c": np.array([1.0, 2.0])},
              digest_names=["param/w"], digests=np.array([[1], [2 ** 64 - 1]], dtype=np.uint64),
              stats=[LayerStats(0, ["fc", "grad fc"], np.arange(12.0).reshape(2, 6))],
              finals={"param/w": np.ones((2, 3), np.float32), ".": np.int64(3)},
              metrics={"m": 1.5}, notes={"n": "text ü"})
    for k, v in kw.items():
        setattr(t, k, v)
    return t


def test_reads_every_group_of_a_c_golden(c_golden):
    t = read_trace(c_golden)
    assert (t.kind, t.run, t.scenario, t.backend, t.seed) == ("golden", "big", "small", "cpu", 1)
    assert t.attrs["scenario_hash_hex"] == f"0x{t.scenario_hash:016x}"
    assert list(t.series) == ["loss", "grad_norm", "grad_norm_clipped", "lr", "loss_scale",
                              "skipped"]
    assert all(v.shape == (6,) for v in t.series.values())
    assert t.digests.shape == (6, 4) and t.digests.dtype == np.uint64
    steps = [s.step for s in t.stats]  # the scenario's stats_every decides which
    assert steps[0] == 0 and steps == sorted(set(steps)) and steps[-1] < 6
    assert t.stats[0].values.shape == (len(t.stats[0].layers), 6)
    assert "param/1.weight" in t.finals and t.finals["init/1.weight"].dtype == np.float32
    assert t.metrics["requires_grad/1.weight"] == 1.0 and "backend" in t.notes
    assert t.tolerances["loss"] == "bitwise"
    assert t.env["dlcheck_version"] and t.recorded_at and t.dlcheck_version


def test_rewrite_of_a_c_golden_is_byte_identical(c_golden, tmp_path):
    # The same trace gives the same bytes: groups, types and layout as C writes them.
    out = write_trace(tmp_path / "again.h5", read_trace(c_golden))
    assert Path(out).read_bytes() == c_golden.read_bytes()


def test_python_trace_passes_the_c_reader(tmp_path, run_c):
    path = write_trace(tmp_path / "t.h5", small_trace())
    r = run_c("compare", path, path)
    assert r.returncode == 0, r.stdout + r.stderr
    back = read_trace(path)
    assert back.series.keys() == {"loss", "a/b%c"} and back.finals["."] == 3
    assert back.notes == {"n": "text ü"} and back.env is None and back.kind == "trace"
    with h5py.File(path, "r") as f:  # names percent-encoded, as C
        assert sorted(f["series"]) == ["a%2Fb%25c", "loss"] and "%2E" in f["finals"]


def test_every_final_dtype_round_trips_and_passes_c(tmp_path, run_c):
    finals = {"f32": torch.randn(2, 3), "f16": torch.randn(4).half(),
              "bf16": torch.randn(2, 2).bfloat16(), "i32": torch.arange(3, dtype=torch.int32),
              "i64": torch.tensor(5), "r4": torch.zeros(1, 2, 1, 2), "empty": torch.zeros(0, 3)}
    path = write_trace(tmp_path / "d.h5", small_trace(finals=finals))
    assert run_c("compare", path, path).returncode == 0
    t = read_trace(path)
    assert t.bfloat16 == {"bf16"}
    for name, v in finals.items():
        got = t.final_tensor(name)
        assert got.dtype == v.dtype and torch.equal(got, v), name


def test_bad_finals_are_refused_before_writing(tmp_path):
    bad = [({"x": np.zeros(2, np.float64)}, TypeError), ({"x": np.zeros((1,) * 5, np.float32)},
           ValueError), ({"": np.zeros(1, np.float32)}, ValueError)]
    for finals, err in bad:
        with pytest.raises(err):
            write_trace(tmp_path / "x.h5", small_trace(finals=finals))
    with pytest.raises(ValueError, match="bfloat16"):
        write_trace(tmp_path / "x.h5", small_trace(bfloat16={"nope"}))
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("change, err", [
    (dict(run="x" * 128), ValueError), (dict(backend="b" * 32), ValueError),
    (dict(seed=-1), ValueError), (dict(kind="other"), ValueError),
    (dict(digests=np.zeros((2, 3), np.uint64)), ValueError),
    (dict(digests=np.zeros((1, 1), np.float32)), TypeError),
    (dict(series={"loss": np.zeros((2, 2))}), ValueError),
    (dict(stats=[LayerStats(0, ["a"], np.zeros((2, 6)))]), ValueError),
    (dict(notes={"n": "a\0b"}), ValueError), (dict(run=3), TypeError),
    (dict(kind="golden"), ValueError), (dict(env={"k": 1}), TypeError),
    (dict(env={"k": "\0"}), ValueError),
    (dict(kind="golden", env={"k": "v"}, recorded_at="t", dlcheck_version="0",
          tolerances={"loss": "r" * 64}), ValueError),
])
def test_invalid_traces_raise_and_write_nothing(tmp_path, change, err):
    with pytest.raises(err):
        write_trace(tmp_path / "x.h5", small_trace(**change))
    assert os.listdir(tmp_path) == []


def test_golden_and_env_on_a_plain_trace_round_trip(tmp_path, run_c):
    env = {"dlcheck_version": "0.1.0", "cpu_model": "Ω"}
    g = small_trace(kind="golden", env=env, recorded_at="2025-01-31T12:00:00Z",
                    dlcheck_version="0.1.0", tolerances={"loss": "close(1e-05, 1e-06)"})
    path = write_trace(tmp_path / "g.h5", g)
    assert run_c("compare", path, path).returncode == 0
    back = read_trace(path)
    assert back.env == env and back.tolerances == g.tolerances
    plain = read_trace(write_trace(tmp_path / "p.h5", small_trace(env=env)))
    assert plain.env == env and plain.kind == "trace"


def flip_byte(path: str, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x01]))


def test_a_flipped_byte_is_refused_by_c_and_python(tmp_path, run_c):
    path = write_trace(tmp_path / "t.h5", small_trace())
    flip_byte(path, os.path.getsize(path) - 100)
    r = run_c("compare", path, path)
    assert r.returncode == 2 and "checksum mismatch" in r.stderr
    with pytest.raises(TraceFormatError, match=r"t\.h5: checksum mismatch"):
        read_trace(path)


@pytest.mark.parametrize("offset", [39, 100, 511])
def test_a_flipped_byte_in_the_unused_header_is_refused_by_c_and_python(tmp_path, run_c,
                                                                      offset):
    # The seal hashes bytes 512 on; bytes 39-511 of the header must be zero.
    path = write_trace(tmp_path / "t.h5", small_trace())
    assert read_trace(path).run  # zero there as written
    flip_byte(path, offset)
    r = run_c("compare", path, path)
    assert r.returncode == 2 and f"byte {offset} of the 512-byte header" in r.stderr
    with pytest.raises(TraceFormatError, match=rf"t\.h5: byte {offset} of the 512-byte header"):
        read_trace(path)


def test_headers_that_are_not_ours_are_refused(tmp_path):
    path = write_trace(tmp_path / "t.h5", small_trace())
    flip_byte(path, 3)
    with pytest.raises(TraceFormatError, match="does not start with the 'dlcheck trace 1'"):
        read_trace(path)
    short = tmp_path / "short.h5"
    short.write_bytes(b"dlcheck")
    with pytest.raises(TraceFormatError):
        read_trace(short)
    with pytest.raises(FileNotFoundError):
        read_trace(tmp_path / "missing.h5")
    with pytest.raises(IsADirectoryError):
        read_trace(tmp_path)


def sealed_h5(path: Path, build) -> str:
    """An HDF5 file with a valid seal whose contents `build` makes."""
    fcpl = h5py.h5p.create(h5py.h5p.FILE_CREATE)
    fcpl.set_userblock(tf.USERBLOCK)
    with h5py.File(h5py.h5f.create(str(path).encode(), h5py.h5f.ACC_TRUNC, fcpl=fcpl)) as f:
        build(f)
    tf.seal(str(path))
    return str(path)


def test_sealed_files_that_are_not_traces_are_refused(tmp_path):
    def wrong_version(f):
        f.attrs["schema_version"] = np.int64(2)

    def no_run(f):
        f.attrs["schema_version"] = np.int64(1)
        f.attrs["kind"] = np.bytes_(b"trace")

    def vlen_kind(f):
        f.attrs["schema_version"] = np.int64(1)
        f.attrs["kind"] = "trace"

    for build, match in ((wrong_version, "schema_version is 2"), (no_run, "run is missing"),
                         (vlen_kind, "not a fixed-length string")):
        with pytest.raises(TraceFormatError, match=match):
            read_trace(sealed_h5(tmp_path / "x.h5", build))


def test_damaged_contents_are_reported(tmp_path):
    src = write_trace(tmp_path / "t.h5", small_trace())

    def copy_with(edit):
        def build(f):
            with h5py.File(src, "r") as s:
                for k, v in s.attrs.items():
                    f.attrs.create(k, v, dtype=s.attrs.get_id(k).dtype)
                for k in s:
                    s.copy(s[k], f, k)
            edit(f)
        return sealed_h5(tmp_path / "e.h5", build)

    edits = [(lambda f: f["series"].create_dataset("bad%zz", data=[1.0]), "not a name"),
             (lambda f: f["series"].create_dataset("i", data=[1]), "not float64"),
             (lambda f: f["finals"].create_dataset("u8", data=np.zeros(2, np.uint8)),
              "not float32"),
             (lambda f: f.__delitem__("notes"), "notes is missing"),
             (lambda f: (f["metrics"].__delitem__("values"),
                         f["metrics"].create_dataset("values", data=[1.0, 2.0])), "entries"),
             (lambda f: (f["digests"].__delitem__("names"),
                         f["digests"].create_dataset("names", data=np.array([b"x" * 200]))),
              "at most"),
             (lambda f: (f["notes"].__delitem__("texts"),
                         f["notes"].create_dataset("texts", data=["vlen"])), "fixed-length")]
    for edit, match in edits:
        with pytest.raises(TraceFormatError, match=match):
            read_trace(copy_with(edit))


def test_names_encode_as_c(tmp_path):
    assert tf.encode_name("param/0.weight") == "param%2F0.weight"
    assert tf.encode_name("100%") == "100%25" and tf.encode_name(".") == "%2E"
    assert tf.decode_name("a%2Fb%25") == "a/b%"
    for bad in ("", "a%2f", "a%2", "%41", "a/%ZZ", "x" * 128):
        with pytest.raises(TraceFormatError):
            tf.decode_name(bad, "f.h5:/series")


def test_a_failure_while_writing_leaves_the_old_file(tmp_path, monkeypatch):
    path = write_trace(tmp_path / "t.h5", small_trace(run="old"))
    before = Path(path).read_bytes()

    def broken(*a, **k):
        raise OSError("disk full (simulated)")
    monkeypatch.setattr(_h5, "write_tensor", broken)
    with pytest.raises(OSError, match="disk full"):
        write_trace(path, small_trace(run="new"))
    assert Path(path).read_bytes() == before and os.listdir(tmp_path) == ["t.h5"]
    monkeypatch.undo()
    assert read_trace(write_trace(path, small_trace(run="new"))).run == "new"


def test_writing_into_a_missing_folder_fails_cleanly(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        write_trace(tmp_path / "no" / "t.h5", small_trace())
    with pytest.raises(IsADirectoryError):
        write_trace(tmp_path, small_trace())
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotADirectoryError):
        write_trace(tmp_path / "file" / "t.h5", small_trace())
