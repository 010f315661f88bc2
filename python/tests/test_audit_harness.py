"""Where the audit finds the C harness: --bin, $DLCHECK_BIN, `dlcheck` on
PATH (a pip-installed package has no source tree around it), then the
tree's release build; none of them is exit 3 with what to do."""
from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from dlcheck.audit import harness
from dlcheck.audit.cli import main

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "audit" / "g1_no_zero_grad_fixed.py"


def fake_binary(folder: Path) -> str:
    folder.mkdir(exist_ok=True)
    path = folder / "dlcheck"
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_explicit_then_environment_then_path(tmp_path: Path, monkeypatch) -> None:
    explicit = fake_binary(tmp_path / "explicit")
    from_env = fake_binary(tmp_path / "env")
    on_path = fake_binary(tmp_path / "bin")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.setenv("DLCHECK_BIN", from_env)
    assert harness.find_binary(explicit) == explicit
    assert harness.find_binary() == from_env
    monkeypatch.delenv("DLCHECK_BIN")
    assert harness.find_binary() == on_path


def test_no_binary_anywhere_is_exit_3(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.delenv("DLCHECK_BIN", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(harness, "repo_root", lambda: str(tmp_path))
    with pytest.raises(harness.HarnessError) as err:
        harness.find_binary()
    assert err.value.exit_code == 3 and "DLCHECK_BIN" in str(err.value)
    assert EXAMPLE.exists(), EXAMPLE
    assert main([str(EXAMPLE), "--out", str(tmp_path / "out")]) == 3
    assert "nor on PATH" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "out")
