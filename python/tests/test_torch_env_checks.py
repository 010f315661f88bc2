"""E1-E3 on the team's own PyTorch: `dlcheck env TRACE` judges the wheel
that recorded a trace against the machine it ran on, from the recorder's
fingerprint. Debian's torch here is CPU-only, so the fingerprints of a CUDA
wheel on a GPU machine are faked: the values are those torch and the
driver report (torch.version.cuda, get_arch_list(), get_device_properties,
cudnn.version(), cuDNN's compile version, nccl.version(), ncclGetVersion).
On a GPU the same keys come from the real process (GPU-checked only where a
GPU is at hand)."""
from __future__ import annotations

import json
import re

import pytest

from dlcheck import fingerprint

from test_envinfo import golden_with

#: a PyPI wheel for CUDA 12.1 on an H100 with a driver for CUDA 12.4, as it should be
GOOD = {
    "cuda_driver": "12.4",
    "torch_cuda": "12.1",
    "torch_gpus": "0: NVIDIA H100 80GB HBM3 (sm_90); 1: NVIDIA H100 80GB HBM3 (sm_90)",
    "torch_arch_list": "sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_90",
    "torch_cudnn": "8902", "torch_cudnn_built": "8902",
    "torch_nccl": "2.18.1", "torch_nccl_loaded": "2.18.1",
}


def env_checks(run_c, tmp_path, **values: str):
    env = {**fingerprint(), **GOOD, **values}
    r = run_c("env", golden_with(env, tmp_path / "t.h5"))
    section = r.stdout.split("CUDA environment checks of the PyTorch that recorded", 1)
    assert len(section) == 2, r.stdout + r.stderr
    lines = {m.group(1): (m.group(2), m.group(3))
             for m in re.finditer(r"^  (E[123])  (ok|FAIL|n/a) +(.*)$", section[1], re.M)}
    assert sorted(lines) == ["E1", "E2", "E3"], section[1]
    return r.returncode, lines


def test_a_matching_wheel_passes(run_c, tmp_path):
    code, lines = env_checks(run_c, tmp_path)
    assert code == 0
    assert [v[0] for v in lines.values()] == ["ok", "ok", "ok"], lines
    assert "runs the SASS built for '90-real'" in lines["E2"][1]
    assert "cuDNN 8.9.2" in lines["E3"][1] and "NCCL 2.18.1" in lines["E3"][1]


@pytest.mark.parametrize("values, check, text", [
    # E1: a wheel for CUDA 12.1 on a driver for CUDA 11.8
    ({"cuda_driver": "11.8"}, "E1", "torch wheel built for the CUDA this driver supports"),
    # E2: a T4 (sm_75) under a wheel built for Ampere and Hopper only
    ({"torch_gpus": "0: Tesla T4 (sm_75)", "torch_arch_list": "sm_80 sm_86 sm_90"}, "E2",
     "TORCH_CUDA_ARCH_LIST"),
    # E2: the second GPU of two is the uncovered one
    ({"torch_gpus": "0: NVIDIA H100 (sm_90); 1: Tesla V100 (sm_70)",
      "torch_arch_list": "sm_80 sm_90"}, "E2", "compute capability 7.0 has no kernel image"),
    # E3: cuDNN 8.7 found first on LD_LIBRARY_PATH under a torch built with 8.9.2
    ({"torch_cudnn": "8700"}, "E3", "cuDNN built against 8.9.2 but 8.7.0 is loaded"),
    ({"torch_nccl_loaded": "2.14.3"}, "E3", "NCCL built against 2.18.1 but 2.14.3 is loaded"),
])
def test_each_mismatch_fails_with_its_fix(run_c, tmp_path, values, check, text):
    code, lines = env_checks(run_c, tmp_path, **values)
    assert code == 1
    assert lines[check][0] == "FAIL" and text in lines[check][1], lines[check]
    assert all(v[0] == "ok" for k, v in lines.items() if k != check), lines
    assert "CMAKE_CUDA_ARCHITECTURES" not in lines[check][1]  # a fix for PyTorch, not dlcheck


@pytest.mark.parametrize("values, reason", [
    ({"torch_cuda": "not available"}, "PyTorch built without CUDA"),
    ({"cuda_driver": "not available"}, "no CUDA driver where PyTorch ran"),
])
def test_nothing_to_judge_is_not_applicable(run_c, tmp_path, values, reason):
    code, lines = env_checks(run_c, tmp_path, **values)
    assert code == 0
    assert all(v[0] == "n/a" and reason in v[1] for v in lines.values()), lines


def test_what_the_process_did_not_load_is_not_compared(run_c, tmp_path):
    # NCCL linked statically into torch: nothing loaded to compare with
    code, lines = env_checks(run_c, tmp_path, torch_nccl_loaded="not loaded",
                             torch_gpus="not available")
    assert code == 0
    assert "NCCL 2.18.1 at build, not loaded" in lines["E3"][1]
    assert lines["E2"][0] == "n/a" and "saw no GPU" in lines["E2"][1]


def test_an_older_trace_without_the_new_keys_still_reads(run_c, tmp_path):
    env = {k: v for k, v in {**fingerprint(), **GOOD}.items()
           if k not in ("torch_cudnn_built", "torch_nccl_loaded")}
    r = run_c("env", golden_with(env, tmp_path / "old.h5"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "  E3  ok" in r.stdout


def test_an_unreadable_value_is_named(run_c, tmp_path):
    env = {**fingerprint(), **GOOD, "torch_cuda": "12.x"}
    r = run_c("env", golden_with(env, tmp_path / "bad.h5"))
    assert r.returncode == 2
    assert "torch_cuda '12.x' is not a version" in r.stderr


def test_this_debian_torch_is_judged_not_applicable(run_c, tmp_path):
    env = fingerprint()  # the real process: Debian's torch has no CUDA
    r = run_c("env", golden_with(env, tmp_path / "real.h5"))
    assert r.returncode == 0, r.stderr
    assert "PyTorch built without CUDA" in r.stdout


def run_scenario(run_c, tmp_path, env: dict) -> tuple[int, dict]:
    """A scenario whose run is a trace recorded under `env`, with the three
    torch_environment checks an audit declares, through `dlcheck run`."""
    trace = golden_with(env, tmp_path / "team.h5")
    folder = tmp_path / "scenarios" / "wheel"
    folder.mkdir(parents=True)
    checks = "\n".join(f"  - {{name: wheel_{i.lower()}, kind: torch_environment, a: team, "
                       f"quantities: [{i}], catalogue: [{i}]}}" for i in ("E1", "E2", "E3"))
    (folder / "scenario.yaml").write_text(f"name: wheel\ndescription: the team's wheel\n"
                                          f"runs:\n  team: {{trace: {trace}}}\n"
                                          f"checks:\n{checks}\n")
    out = tmp_path / "out"
    r = run_c("run", "--out", str(out), "--golden-dir", str(tmp_path / "none"),
              str(tmp_path / "scenarios"))
    assert (out / "report.json").exists(), r.stdout + r.stderr
    report = json.loads((out / "report.json").read_text())
    return r.returncode, {c["name"]: c for c in report["scenarios"][0]["checks"]}


def test_a_scenario_check_names_the_failing_id_with_its_fix(run_c, tmp_path):
    env = {**fingerprint(), **GOOD, "torch_gpus": "0: Tesla T4 (sm_75)",
           "torch_arch_list": "sm_80 sm_86 sm_90"}
    code, checks = run_scenario(run_c, tmp_path, env)
    assert code == 1
    assert checks["wheel_e1"]["verdict"] == "pass" and checks["wheel_e3"]["verdict"] == "pass"
    e2 = checks["wheel_e2"]
    assert e2["verdict"] == "fail" and e2["catalogue"] == ["E2"], e2
    assert "7.5 has no kernel image in this PyTorch" in e2["evidence"]


def test_a_scenario_on_a_cpu_torch_reports_not_tested(run_c, tmp_path):
    code, checks = run_scenario(run_c, tmp_path, fingerprint())
    assert code == 0
    assert {c["verdict"] for c in checks.values()} == {"not_tested"}, checks
