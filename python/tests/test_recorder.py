"""Recorder: names as the engine records them, statistics, norms, the
scaler, wrappers, conversions, and bad use (clear errors, no file)."""
from __future__ import annotations

import math
import os

import numpy as np
import pytest
import torch

import dlcheck
from conftest import make_model, train
from dlcheck import Recorder, read_trace
from dlcheck.recorder import SERIES, tensor_stats


def new_run(tmp_path, **kw):
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    rec = Recorder(model, opt, path=tmp_path / "run.h5", **kw)
    return model, opt, rec


def test_a_recorded_run_passes_the_c_reader_with_the_engine_names(tmp_path, run_c):
    model, opt, rec = new_run(tmp_path, run="reference", scenario="mlp", seed=3)
    train(rec, model, opt, steps=3, clip=0.5)
    rec.metric("eval_accuracy", torch.tensor(0.75))
    rec.note("data", "16 random rows per step")
    path = rec.save()
    r = run_c("compare", path, path)
    assert r.returncode == 0, r.stdout + r.stderr
    t = read_trace(path)
    assert (t.run, t.scenario, t.seed, t.backend) == ("reference", "mlp", 3, "cpu")
    assert list(t.series) == list(SERIES) and t.steps == 3
    keys = [k for k, _ in model.named_parameters()]
    buffers = ["2.running_mean", "2.running_var", "2.num_batches_tracked"]
    assert t.digest_names == [f"param/{k}" for k in keys] + [f"buffer/{k}" for k in buffers]
    assert list(t.finals) == ([f"init/{k}" for k in keys] + [f"init_buffer/{k}" for k in buffers]
                              + [n for k in keys for n in (f"param/{k}", f"grad/{k}")]
                              + [f"buffer/{k}" for k in buffers])
    assert t.finals["buffer/2.num_batches_tracked"].dtype == np.int64
    assert t.finals["buffer/2.num_batches_tracked"].shape == ()
    assert t.metrics["requires_grad/1.weight"] == 1.0 and t.metrics["in_optimizer/4.bias"] == 1.0
    assert t.metrics["skipped_steps"] == 0.0 and t.metrics["eval_accuracy"] == 0.75
    assert t.notes == {"data": "16 random rows per step"}
    assert np.all(t.series["lr"] == np.float64(0.1)) and np.all(t.series["loss_scale"] == 1.0)
    # clipped at 0.5: the norm after clipping is 0.5 up to float32 rounding of the scaling
    assert np.all(t.series["grad_norm"] > 0.5)
    assert np.allclose(t.series["grad_norm_clipped"], 0.5, rtol=1e-5)
    for j, name in enumerate(t.digest_names):  # the last row digests the finals
        assert int(t.digests[-1, j]) == dlcheck.digest(t.final_tensor(name))
    assert t.env["torch_version"] == str(torch.__version__)


def test_the_same_run_twice_gives_the_same_numbers(tmp_path):
    paths = []
    for name in ("a", "b"):
        model, opt, rec = new_run(tmp_path)
        train(rec, model, opt, steps=2)
        paths.append(rec.save(tmp_path / f"{name}.h5"))
    a, b = (read_trace(p) for p in paths)
    assert np.array_equal(a.digests, b.digests)
    assert all(np.array_equal(a.series[k], b.series[k]) for k in SERIES)


def c_tensor_stats(values):
    """runner_record.c's tensor_stats, line by line, in Python floats."""
    s = sq = 0.0
    mn, mx = math.inf, -math.inf
    zeros = bad = n = 0
    for v in values:
        if not math.isfinite(v):
            bad += 1
            continue
        s += v
        sq += v * v
        mn, mx = min(mn, v), max(mx, v)
        zeros += v == 0.0
        n += 1
    mean = s / n if n else 0.0
    std = math.sqrt(max(sq / n - mean * mean, 0.0)) if n else 0.0
    return [mean, std, mn if n else 0.0, mx if n else 0.0,
            zeros / len(values) if values else 0.0, float(bad)]


def assert_like_c(got, want):
    # mean and std come from double sums in another order than the C loop
    # (pairwise, not sequential): a few double ulp apart, 1e-12 relative is
    # a thousand times that and a million times below float32's resolution.
    # min, max, frac_zero and the non-finite count are exact.
    assert got[2:] == want[2:]
    for g, w in zip(got[:2], want[:2]):
        assert g == pytest.approx(w, rel=1e-12, abs=1e-300)


def test_tensor_stats_are_the_c_loop():
    torch.manual_seed(5)
    x = torch.randn(1000) * 1e3
    x[::7] = 0.0
    x[3], x[11], x[13] = math.inf, -math.inf, math.nan
    assert_like_c(tensor_stats(x), c_tensor_stats([float(v) for v in x]))
    assert tensor_stats(torch.tensor([math.nan, math.inf])) == [0, 0, 0, 0, 0, 2]
    assert tensor_stats(torch.arange(4)) == [0.0] * 6  # not floating: zeros, as C
    assert tensor_stats(torch.zeros(0)) == [0.0] * 6
    half = torch.randn(50).half()
    assert_like_c(tensor_stats(half), c_tensor_stats([float(v) for v in half]))


def test_layer_statistics_at_the_chosen_steps(tmp_path):
    model, opt, rec = new_run(tmp_path, stats_every=2, stats_steps=[1])
    seen = {}

    def keep(module, inputs, output):  # returns None: the output stays as it is
        seen.setdefault(rec.steps, output.detach().clone())
    model[1].register_forward_hook(keep)
    train(rec, model, opt, steps=4)
    with torch.no_grad():  # an evaluation forward is not recorded
        model(torch.zeros(4, 8))
    t = read_trace(rec.save())
    assert [s.step for s in t.stats] == [0, 1, 2]
    st = t.stats[1]
    assert st.layers == ["0", "1", "2", "3", "4", "grad 4", "grad 3", "grad 2", "grad 1"]
    assert st.values[1].tolist() == tensor_stats(seen[1])


def test_default_statistics_step_zero_only(tmp_path):
    model, opt, rec = new_run(tmp_path)
    train(rec, model, opt, steps=2)
    assert [s.step for s in rec.trace().stats] == [0]


def test_observe_grads_measures_before_clipping(tmp_path):
    model, opt, rec = new_run(tmp_path)
    x, y = torch.randn(16, 8), torch.randint(0, 3, (16,))
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    before = rec.observe_grads()
    torch.nn.utils.clip_grad_norm_(model.parameters(), before / 10)
    opt.step()
    rec.step(loss.item())
    assert rec.series["grad_norm"] == [before]
    assert rec.series["grad_norm_clipped"][0] == pytest.approx(before / 10, rel=1e-5)


class FakeScaler:
    """A GradScaler's interface on the CPU (torch's disables itself without
    CUDA): scale, unscale with an inf check, backoff, growth."""

    def __init__(self, scale=1024.0):
        self.scale, self.found_inf, self._per_optimizer_states = scale, False, {}

    def is_enabled(self):
        return True

    def get_scale(self):
        return self.scale

    def unscale_(self, params):
        self.found_inf = False
        for p in params:
            p.grad /= self.scale
            self.found_inf |= not bool(torch.isfinite(p.grad).all())

    def update(self):
        self.scale = self.scale / 2 if self.found_inf else self.scale


def test_scaler_loss_scale_skipped_steps_and_unscaled_gradient_stats(tmp_path):
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = FakeScaler()
    rec = Recorder(model, opt, scaler, stats_steps=[0, 1])
    grads = {}
    for step in range(2):
        x, y = torch.randn(16, 8), torch.randint(0, 3, (16,))
        opt.zero_grad()
        out = model(x)
        out.register_hook(lambda g, s=step: grads.setdefault(s, g.clone()))
        loss = torch.nn.functional.cross_entropy(out, y)
        (loss * scaler.scale).backward()
        if step == 1:
            model[1].weight.grad[0, 0] = math.inf  # an overflow: the step is skipped
        assert rec.observe_grads() == pytest.approx(rec._norm(rec._grads()) / scaler.scale)
        scaler.unscale_(model.parameters())
        if not scaler.found_inf:
            opt.step()
        scaler.update()
        rec.step(loss)
    t = rec.trace()
    assert t.series["loss_scale"].tolist() == [1024.0, 512.0]
    assert t.series["skipped"].tolist() == [0.0, 1.0] and t.metrics["skipped_steps"] == 1.0
    row = t.stats[0].layers.index("grad 4")
    expected = tensor_stats(grads[0])
    assert t.stats[0].values[row, :4] == pytest.approx(np.array(expected[:4]) / 1024, rel=1e-6)


def test_wrapped_models_are_recorded_under_the_inner_keys(tmp_path):
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    rec = Recorder(torch.nn.DataParallel(model), opt)
    train(rec, model, opt, steps=1)
    assert rec.trace().digest_names[0] == "param/1.weight"


def test_frozen_params_and_dtypes_the_trace_cannot_hold(tmp_path, run_c):
    model = make_model()
    model[1].weight.requires_grad_(False)
    model.register_buffer("mask", torch.ones(2, dtype=torch.bool))
    model.register_buffer("f64", torch.ones(2, dtype=torch.float64))
    model.register_buffer("vol", torch.ones(1, 1, 1, 1, 2))
    model.register_buffer("bf", torch.ones(2, dtype=torch.bfloat16))
    model.register_buffer("scratch", torch.ones(1), persistent=False)
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    rec = Recorder(model, opt)
    train(rec, model, opt, steps=1)
    path = rec.save(tmp_path / "f.h5")
    assert run_c("compare", path, path).returncode == 0
    t = read_trace(path)
    assert t.metrics["requires_grad/1.weight"] == 0.0 and t.metrics["in_optimizer/1.weight"] == 0
    assert "grad/1.weight" not in t.finals and "buffer/scratch" not in t.finals
    assert t.finals["buffer/mask"].dtype == np.int32 and t.finals["buffer/f64"].dtype == np.float32
    assert t.finals["buffer/vol"].shape == (1, 1, 1, 2) and "buffer/bf" in t.bfloat16
    assert "buffer/f64 float64 -> float32" in t.notes["finals_converted"]
    assert "buffer/vol shape [1, 1, 1, 1, 2] -> rank 4" in t.notes["finals_converted"]


@pytest.mark.parametrize("call, err, match", [
    (lambda m, o, p: Recorder(torch.nn.ReLU(), o), ValueError, "no parameters"),
    (lambda m, o, p: Recorder(m, o, path=p / "missing" / "r.h5"), FileNotFoundError, "missing"),
    (lambda m, o, p: Recorder(m, o, run=""), ValueError, "run"),
    (lambda m, o, p: Recorder(m, o, seed=-1), ValueError, "seed"),
    (lambda m, o, p: Recorder(m, o, stats_every=-1), ValueError, "stats_every"),
    (lambda m, o, p: Recorder(m, o, stats_steps=[-1]), ValueError, "stats_steps"),
    (lambda m, o, p: Recorder(m, "sgd"), TypeError, "optimizer"),
    (lambda m, o, p: Recorder("m", o), TypeError, "model"),
    (lambda m, o, p: Recorder(m, o, scaler=object()), TypeError, "scaler"),
    (lambda m, o, p: Recorder(m, o).step(1.0), RuntimeError, "before any backward"),
    (lambda m, o, p: Recorder(m, o).observe_grads(), RuntimeError, "before any backward"),
    (lambda m, o, p: Recorder(m, o).save(p / "r.h5"), RuntimeError, "never called"),
    (lambda m, o, p: Recorder(m, o).save(), ValueError, "no path"),
    (lambda m, o, p: Recorder(m, o).metric("skipped_steps", 1), ValueError, "recorder writes"),
    (lambda m, o, p: Recorder(m, o).metric("x", "1"), TypeError, "metric x"),
    (lambda m, o, p: Recorder(m, o).note("rank_mismatch", "x"), ValueError, "recorder writes"),
    (lambda m, o, p: Recorder(m, o).note("n", 3), TypeError, "text"),
    (lambda m, o, p: Recorder(m, o).note("", "x"), ValueError, "note name"),
    (lambda m, o, p: Recorder(m, o).note(3, "x"), TypeError, "note name"),
])
def test_bad_use_raises_and_leaves_no_file(tmp_path, call, err, match):
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(err, match=match):
        call(model, opt, tmp_path)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("loss, err", [
    (torch.ones(2), TypeError), ("1", TypeError), (True, TypeError),
    (torch.tensor(1 + 1j), TypeError)])
def test_bad_losses_are_refused_and_nothing_is_recorded(tmp_path, loss, err):
    model, opt, rec = new_run(tmp_path)
    train(rec, model, opt, steps=1)
    with pytest.raises(err):
        rec.step(loss)
    assert rec.steps == 1 and all(len(v) == 1 for v in rec.series.values())
    assert os.listdir(tmp_path) == []


def test_the_lr_a_step_used_can_be_given(tmp_path):
    # Lightning steps a per-step scheduler before its batch-end hook: the
    # caller passes the lr read before, and a bad one records nothing.
    model, opt, rec = new_run(tmp_path)
    train(rec, model, opt, steps=1)
    rec.step(1.0, lr=torch.tensor(0.25))
    assert rec.series["lr"] == [opt.param_groups[0]["lr"], 0.25]
    with pytest.raises(TypeError, match="lr"):
        rec.step(1.0, lr="0.1")
    assert rec.steps == 2 and all(len(v) == 2 for v in rec.series.values())


def test_a_diverged_run_is_recorded_and_the_c_check_finds_it(tmp_path, run_c):
    # N1 needs the inf/NaN in the trace: the recorder keeps it, and the C
    # harness's nonfinite check names the step.
    model, opt, rec = new_run(tmp_path)
    train(rec, model, opt, steps=1)
    rec.step(torch.tensor(math.inf))  # as if the next step's loss had overflowed
    path = rec.save(str(tmp_path / "diverged.h5"))
    assert math.isinf(read_trace(path).series["loss"][1])
    scenario = tmp_path / "diverged"
    scenario.mkdir()
    (scenario / "scenario.yaml").write_text(
        "name: diverged\ndescription: a recorded run that went non-finite\n"
        f"runs:\n  recorded: {{trace: {path}}}\n"
        "checks:\n  - {name: finite, kind: nonfinite, a: recorded}\n")
    r = run_c("run", "--golden-dir", str(tmp_path / "g"), str(scenario))
    assert r.returncode == 1, r.stdout + r.stderr
    assert "FAIL" in r.stdout and "step 1" in r.stdout, r.stdout


def test_long_keys_are_refused_at_construction():
    model = torch.nn.Module()
    model.add_module("m" * 120, torch.nn.Linear(1, 1))
    with pytest.raises(ValueError, match="bytes"):
        Recorder(model, torch.optim.SGD(model.parameters(), lr=0.1))


def test_save_to_a_removed_folder_fails_and_writes_nothing(tmp_path):
    folder = tmp_path / "out"
    folder.mkdir()
    model, opt, _ = new_run(tmp_path)
    rec = Recorder(model, opt, path=folder / "r.h5")
    train(rec, model, opt, steps=1)
    folder.rmdir()
    with pytest.raises(FileNotFoundError):
        rec.save()
    assert not folder.exists()


def test_save_replaces_a_file_atomically_and_close_removes_hooks(tmp_path):
    model, opt, rec = new_run(tmp_path)
    train(rec, model, opt, steps=1)
    first = rec.save()
    train(rec, model, opt, steps=1)
    assert rec.save(first) == first and read_trace(first).steps == 2
    assert sorted(os.listdir(tmp_path)) == ["run.h5"]
    rec.close()
    assert not any(m._forward_hooks for m in model.modules())


def test_check_ranks_without_a_process_group(tmp_path):
    model, opt, rec = new_run(tmp_path, check_ranks=True)
    train(rec, model, opt, steps=1)
    assert rec.check_ranks() == 0
    t = read_trace(rec.save())
    assert t.metrics["rank_param_mismatch"] == 0 and t.metrics["rank_buffer_mismatch"] == 0
    assert "rank_mismatch" not in t.notes
