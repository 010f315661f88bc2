"""ci/examples: the GitHub Actions and GitLab CI jobs a PyTorch team copies.
Both parse, run the same pytest steps and keep the reports those steps
write; the steps themselves run here on a small team project (an adapter
under adapters/, a golden-gated test under tests/), as the job would after
`pip install` (the plugin loaded with -p, as this checkout does not
install it). Needs the dlcheck binary (DLCHECK_BIN)."""
from __future__ import annotations

import glob
import os
import shlex
import subprocess
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "ci" / "examples"

#: the team's training code: an MLP under SGD with its adapter functions
TEAM_CODE = Path(__file__).resolve().parent / "audit_models" / "layernorm_mlp.py"

GATED_TEST = '''
import torch
from mlp import batches, make_model, make_optimizer, train_step

def test_training_still_matches(dlcheck_recorder, dlcheck_golden):
    torch.manual_seed(0)
    model = make_model()
    opt = make_optimizer(model)
    rec = dlcheck_recorder(model, opt)
    data = batches(0, 16)
    for _ in range(3):
        rec.step(float(train_step(model, opt, [next(data)])))
    dlcheck_golden(rec, "tests/golden/mlp.h5")
'''


def github_steps() -> list[str]:
    job = yaml.safe_load((EXAMPLES / "github-actions.yml").read_text())["jobs"]["dlcheck"]
    return [s["run"] for s in job["steps"] if "run" in s]


def gitlab_job() -> dict:
    return yaml.safe_load((EXAMPLES / "gitlab-ci.yml").read_text())["dlcheck"]


def pytest_steps(commands: list[str]) -> list[str]:
    return [c for c in commands if c.startswith("pytest ")]


def test_both_jobs_install_with_pip_and_run_the_same_pytest_steps() -> None:
    gh, gl = github_steps(), gitlab_job()
    assert pytest_steps(gh) == pytest_steps(gl["script"]) and len(pytest_steps(gh)) == 2
    for commands in (gh, gl["before_script"]):
        assert any("pip install" in c and "subdirectory=python" in c for c in commands)
        assert any("libhdf5-dev" in c and "libfyaml-dev" in c for c in commands)
    kept = yaml.safe_load((EXAMPLES / "github-actions.yml").read_text())["jobs"]["dlcheck"]
    upload = next(s for s in kept["steps"] if s.get("uses", "").startswith("actions/upload"))
    assert upload["if"] == "always()"
    assert "audit-report/" in gl["artifacts"]["paths"]
    assert gl["artifacts"]["reports"]["junit"] == ["audit-junit.xml", "tests-junit.xml"]


def test_the_pytest_steps_run_on_a_team_project(tmp_path: Path, dlcheck_bin: str) -> None:
    (tmp_path / "adapters").mkdir()
    (tmp_path / "adapters" / "mlp.py").write_text(TEAM_CODE.read_text())
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "mlp.py").write_text(TEAM_CODE.read_text())
    (tmp_path / "tests" / "test_training.py").write_text(GATED_TEST)
    env = dict(os.environ, DLCHECK_BIN=os.path.abspath(dlcheck_bin),
               PYTHONPATH=str(ROOT / "python"), DLCHECK_NO_CUDA_PROBE="1")

    def pytest(args: list[str]) -> subprocess.CompletedProcess:
        return subprocess.run(["/usr/bin/python3", "-m", "pytest", "-p", "dlcheck.pytest_plugin",
                               "-p", "no:cacheprovider", *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=600)

    # once, by the team: the golden the job gates against, committed with the code
    recorded = pytest(["tests/", "--dlcheck-record-goldens"])
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    for step in pytest_steps(github_steps()):
        r = pytest(shlex.split(step)[1:])
        assert r.returncode == 0, f"{step}\n{r.stdout}{r.stderr}"
    assert glob.glob(str(tmp_path / "audit-report" / "**" / "report.html"), recursive=True)
    assert "dlcheck_catalogue" in (tmp_path / "audit-junit.xml").read_text()
    assert "dlcheck_golden" in (tmp_path / "tests-junit.xml").read_text()
