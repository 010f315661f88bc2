"""Runs the C harness on the audit's scenarios: `dlcheck run --out DIR`
evaluates every check and writes report.json, junit.xml and report.html;
the audit reads report.json back (verdicts, and the catalogue entries
its checks name: what each mistake is and the line that fixes it)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from typing import Any, Optional

from .. import installation
from . import scenario as scen


class HarnessError(Exception):
    """The C harness is missing or refused the audit's scenarios."""

    def __init__(self, message: str, exit_code: int = 3):
        super().__init__(message)
        self.exit_code = exit_code


def repo_root() -> str:
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.dirname(os.path.dirname(os.path.dirname(here)))


def find_binary(explicit: Optional[str] = None) -> str:
    """The dlcheck executable: explicit, $DLCHECK_BIN, the one installed
    with this package (`pip install ./python` builds it), `dlcheck` on
    PATH, or the release build of the tree this package runs from."""
    path = explicit or os.environ.get("DLCHECK_BIN") or installation.bundled_binary() or \
        shutil.which("dlcheck") or os.path.join(repo_root(), "build", "release", "cli", "dlcheck")
    if not os.access(path, os.X_OK):
        raise HarnessError(f"no dlcheck binary at {path} (nor on PATH): pip install ./python "
                           "(it builds one), or build it (cmake --preset release && cmake "
                           "--build build/release), put it on PATH, or set DLCHECK_BIN")
    return path


def _run(binary: str, scenarios: str, out: str, timeout: float) -> subprocess.CompletedProcess:
    golden = os.path.join(out, ".no-golden")  # the audit's runs have no golden
    env = dict(os.environ, DLCHECK_NO_CUDA_PROBE="1")
    return subprocess.run([binary, "run", "--out", out, "--golden-dir", golden, scenarios],
                          capture_output=True, text=True, env=env, timeout=timeout)


def evaluate(families: list, work: str, out: str, *, binary: Optional[str] = None,
             timeout: float = 120.0, waive: Optional[dict] = None) -> tuple[dict[str, Any], str]:
    """Writes each family's scenario under work/scenarios (its checks, and
    a not_tested check for each it could not run; each check `waive` names
    with its reason), runs the harness with its reports into `out`, and
    returns (report.json, terminal text)."""
    exe = find_binary(binary)
    root = os.path.join(work, "scenarios")
    for fam in families:
        scen.write(fam, root, waive)
    r = _run(exe, root, out, timeout)
    if r.returncode not in (0, 1):
        raise HarnessError(f"dlcheck run exited {r.returncode} on the audit's scenarios "
                           f"({root}):\n{(r.stderr or r.stdout).strip()}")
    path = os.path.join(out, "report.json")
    try:
        with open(path, encoding="utf-8") as f:
            report = json.load(f)
    except (OSError, ValueError) as e:
        raise HarnessError(f"dlcheck run wrote no readable {path}: {e}") from e
    if not isinstance(report.get("catalogue"), dict):
        raise HarnessError(f"{path} has no catalogue: the dlcheck binary {exe} is older than "
                           f"the audit (rebuild it)")
    return report, r.stdout
