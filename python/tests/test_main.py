"""python -m dlcheck: the audit command is reached through the package's
entry point, with its own options."""
from __future__ import annotations

import pytest

from dlcheck.__main__ import main


def test_audit_help_is_the_audits_own(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["audit", "--help"])
    assert stop.value.code == 0
    assert "usage: python -m dlcheck audit" in capsys.readouterr().out


def test_audit_of_a_missing_adapter_is_bad_usage(tmp_path, capsys):
    assert main(["audit", str(tmp_path / "missing.py"), "--out", str(tmp_path / "out")]) == 2
    assert "missing.py" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_top_level_help_lists_audit(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "audit" in capsys.readouterr().out
