"""run_audit: the families of checks on the team's code, the scenario of
their traces, the C harness's verdicts and reports, the team's summary.

Exit codes: 0 every check that could run passed; 1 a check failed (a
finding); 2 the adapter is malformed or one of its functions failed
(the message names it; no report is written); 3 the C harness is missing."""
from __future__ import annotations

import inspect
import os
import shutil
import tempfile
import time
from types import ModuleType
from typing import Callable, Optional, Sequence, Union

import torch

from . import (accumulation, amp, checkpoint, ddp, determinism, export, harness, inference,
               memory, nonfinite, parameters, summary)
from .adapter import AdapterError, load_adapter
from .context import Context
from .scenario import Family, NotTested
from .summary import AuditResult

#: family name -> (runs it, the adapter pieces it needs, the IDs it covers)
FAMILIES: dict[str, tuple[Callable[[Context], Family], tuple, tuple]] = {
    "parameters": (parameters.run, (), ("F1", "F2", "F3", "F4")),
    "accumulation": (accumulation.run, (), ("G1", "G2", "G3", "G4", "G5")),
    "inference": (inference.run, ("evaluate",), ("M1", "M2", "M3", "M4")),
    "nonfinite": (nonfinite.run, (), ("N1",)),
    "determinism": (determinism.run, (), ("N2", "N3", "D8")),
    "checkpoint": (checkpoint.run, ("save_checkpoint", "load_checkpoint"),
                   ("C1", "C2", "C3", "C4", "C5", "C6", "C7", "C8")),
    "ddp": (ddp.run, ("wrap_ddp",), ("D1", "D2", "D3", "D4", "D5", "D6", "D7", "D9", "D10")),
    "amp": (amp.run, (), ("A1", "A2", "A3", "A6")),
    "export": (export.run, (), ("X1", "X2", "X3", "X4", "X5", "X6")),
    "memory": (memory.run, (), ("R1", "R2", "M2")),
}
#: a file in an output folder that marks it as an audit's, safe to replace
MARK = "summary.txt"


def _needs(adapter, pieces: tuple) -> Optional[str]:
    missing = [p for p in pieces if not adapter.has(p)]
    return f"the adapter has no {' / '.join(missing)}" if missing else None


def _prepare_out(out_dir: str) -> str:
    out_dir = os.path.abspath(out_dir)
    if os.path.exists(out_dir) and (not os.path.isdir(out_dir) or (
            os.listdir(out_dir) and not os.path.exists(os.path.join(out_dir, MARK)))):
        raise FileExistsError(f"{out_dir} exists and is not an earlier audit's report folder: "
                              f"choose another --out")
    parent = os.path.dirname(out_dir)
    os.makedirs(parent, exist_ok=True)
    return out_dir


def _publish(report_dir: str, out_dir: str) -> None:
    """Moves the finished reports into place (replacing an earlier audit's)."""
    if os.path.exists(out_dir):
        old = out_dir + f".old-{os.getpid()}"
        os.rename(out_dir, old)
        os.rename(report_dir, out_dir)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(report_dir, out_dir)


def run_audit(adapter: Union[str, os.PathLike, ModuleType], out_dir: Union[str, os.PathLike], *,
              families: Optional[Sequence[str]] = None, binary: Optional[str] = None,
              ) -> AuditResult:
    """Audits the team's training code in `adapter` (a .py path, a module
    name or a module) and writes the harness's reports and summary.txt into
    out_dir. Returns the result; its exit_code is 0 (no finding), 1
    (findings), 2 (malformed adapter: result.message names the function,
    nothing is written) or 3 (no dlcheck binary)."""
    start = time.monotonic()
    name = os.path.basename(os.fspath(adapter)) if not isinstance(adapter, ModuleType) \
        else adapter.__name__
    chosen = list(families) if families is not None else list(FAMILIES)
    unknown = [f for f in chosen if f not in FAMILIES]
    if unknown:
        raise ValueError(f"unknown check families {', '.join(unknown)}; the families are "
                         f"{', '.join(FAMILIES)}")
    try:
        exe = harness.find_binary(binary)
        out = _prepare_out(os.fspath(out_dir))
        ad = load_adapter(adapter)
    except harness.HarnessError as e:
        return AuditResult(name, e.exit_code, message=str(e))
    except (AdapterError, FileExistsError) as e:
        return AuditResult(name, 2, message=str(e))
    work = tempfile.mkdtemp(prefix=f".{os.path.basename(out)}.audit-", dir=os.path.dirname(out))
    rng = torch.get_rng_state()
    try:
        return _audit(ad, out, work, chosen, exe, start)
    except AdapterError as e:
        return AuditResult(ad.name, 2, message=str(e), seconds=time.monotonic() - start)
    except harness.HarnessError as e:
        return AuditResult(ad.name, e.exit_code, message=str(e))
    finally:
        torch.set_rng_state(rng)
        shutil.rmtree(work, ignore_errors=True)


def _audit(ad, out: str, work: str, chosen: list, exe: str, start: float) -> AuditResult:
    """The families, the harness and the summary (run_audit's body)."""
    families: list[Family] = []
    ctx = Context(ad, work)
    for fam_name in chosen:
        fn, pieces, ids = FAMILIES[fam_name]
        why = _needs(ad, pieces)
        t0 = time.monotonic()
        ctx.runs = []
        if why:
            fam = Family(fam_name, getattr(inspect.getmodule(fn), "DESCRIPTION", ""))
            fam.not_tested.append(NotTested("all_checks", ids, why))
        else:
            try:
                fam = fn(ctx)
            except AdapterError as e:
                if not amp.autocast_unsupported(e, ctx):
                    raise
                fam = amp.without_autocast(fn, ctx, fam_name, ids, e)
        fam.seconds = time.monotonic() - t0
        ctx.family_done()
        bad = ctx.nonfinite()
        if bad and fam_name != "nonfinite":
            reason = f"training went non-finite ({bad}): see N1"
            fam.not_tested = ([NotTested(c.name, c.catalogue, reason) for c in fam.checks] or
                              [NotTested("all_checks", ids, reason)]) + fam.not_tested
            fam.checks = []
        families.append(fam)
    report_dir = os.path.join(work, "report")
    report, _ = harness.evaluate(families, work, report_dir, binary=exe, waive=ad.settings.waive)
    result = AuditResult(ad.name, 0, out_dir=out, catalogue=report["catalogue"],
                         waive=dict(ad.settings.waive))
    result.outcomes = summary.outcomes(families, report)
    result.findings = summary.findings(result.outcomes)
    failed = any(o.verdict in ("fail", "error") for o in result.outcomes)
    result.exit_code = 1 if failed else 0
    result.seconds = time.monotonic() - start
    result.text = summary.render(result)
    with open(os.path.join(report_dir, MARK), "w", encoding="utf-8") as f:
        f.write(result.text)
    _publish(report_dir, out)
    return result
