"""dlcheck's pytest plugin: the audit as test items, and fixtures that
record a run, compare two runs and gate a run against a committed golden.

Installed with the package (entry point `pytest11`); from a source tree,
`pytest -p dlcheck.pytest_plugin`. python/README.md, "pytest".

    pytest --dlcheck-audit adapters/         # one item per adapter and check family
    pytest --dlcheck-record-goldens          # dlcheck_golden writes the goldens

Every item and fixture reports what it found as JUnit properties
(`dlcheck_catalogue`, `dlcheck_findings`, `dlcheck_waived`, `dlcheck_report`,
`dlcheck_trace`, `dlcheck_golden`)."""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Callable, Iterator, Optional, Union

import h5py
import pytest

from .audit import FAMILIES, AuditResult, run_audit
from .audit.harness import HarnessError, find_binary
from .audit.summary import NOT_TESTED
from .recorder import Recorder

AUDIT_MARKER = "dlcheck_audit"
#: adapter files a folder given to --dlcheck-audit does not hold
NOT_ADAPTERS = ("test_", "conftest", "_")
Trace = Union[str, os.PathLike, Recorder]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("dlcheck", "dlcheck: pitfall audit and training-run gates")
    group.addoption("--dlcheck-audit", action="append", default=[], metavar="PATH",
                    help="audit this adapter (a .py file, or a folder of them) for the "
                         "catalogue's pitfalls: one test item per adapter and check family "
                         "(repeatable; -m dlcheck_audit runs only these)")
    group.addoption("--dlcheck-audit-out", default="audit-report", metavar="DIR",
                    help="reports of --dlcheck-audit, DIR/<adapter>/<family>/report.html "
                         "(default audit-report)")
    group.addoption("--dlcheck-bin", default=None, metavar="PATH",
                    help="the dlcheck executable (default $DLCHECK_BIN, then the one "
                         "installed with the package, PATH, build/release/cli/dlcheck)")
    group.addoption("--dlcheck-record-goldens", action="store_true",
                    help="dlcheck_golden writes each run as its golden instead of comparing")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{AUDIT_MARKER}: an item of dlcheck's --dlcheck-audit")


def adapter_paths(config: pytest.Config) -> list[Path]:
    """The adapters --dlcheck-audit names: files as given, and each folder's
    .py files but tests, conftest and private modules, sorted."""
    found: list[Path] = []
    for given in config.getoption("dlcheck_audit"):
        path = Path(config.invocation_params.dir, given).resolve()
        if path.is_dir():
            found += sorted(p for p in path.glob("*.py") if not p.name.startswith(NOT_ADAPTERS))
        elif path.is_file():
            found.append(path)
        else:
            raise pytest.UsageError(f"--dlcheck-audit {given}: no such file or folder")
    return list(dict.fromkeys(found))


@pytest.hookimpl(tryfirst=True)  # before -k and -m deselect
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config,
                                  items: list[pytest.Item]) -> None:
    for path in adapter_paths(config):
        adapter = AuditAdapter.from_parent(session, path=path)
        found = list(adapter.collect())
        session.ihook.pytest_collectreport(
            report=pytest.CollectReport(adapter.nodeid, "passed", None, found))
        items.extend(found)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    """A skipped family is reported at its adapter, not at this plugin's line."""
    outcome = yield
    report = outcome.get_result()
    if isinstance(item, AuditFamily) and report.skipped and isinstance(report.longrepr, tuple):
        report.longrepr = (str(item.path), None, report.longrepr[2])


class AuditAdapter(pytest.File):
    """One adapter: an item per check family."""

    def collect(self) -> Iterator[pytest.Item]:
        for family in FAMILIES:
            yield AuditFamily.from_parent(self, name=family)


class AuditFailed(Exception):
    """A family's checks found a pitfall (or could not run): the text is the
    audit's summary, with each finding's catalogue ID, evidence and fix."""


class AuditFamily(pytest.Item):
    """One check family of the audit of one adapter."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.add_marker(AUDIT_MARKER)

    def runtest(self) -> None:
        out = Path(self.config.invocation_params.dir, self.config.getoption("dlcheck_audit_out"),
                   self.path.stem, self.name)
        result = run_audit(self.path, out, families=[self.name],
                           binary=self.config.getoption("dlcheck_bin"))
        self.user_properties.extend(audit_properties(result, self.name))
        judge(result, f"dlcheck audit of {self.path.name}, family {self.name}")

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException],
                     style: Optional[str] = None) -> str:
        if isinstance(excinfo.value, AuditFailed):
            return str(excinfo.value)
        return str(super().repr_failure(excinfo, style=style))

    def reportinfo(self) -> tuple[Path, Optional[int], str]:
        return self.path, None, f"dlcheck audit {self.path.name}::{self.name}"


def audit_properties(result: AuditResult, family: str) -> list[tuple[str, str]]:
    """JUnit properties of one family's audit: the catalogue IDs it covers,
    those it found, each waived check with its reason, the report."""
    props = [("dlcheck_catalogue", " ".join(FAMILIES[family].ids))]
    if result.findings:
        props.append(("dlcheck_findings", " ".join(sorted(result.findings))))
    props += [("dlcheck_waived", f"{o.family}/{o.name} {' '.join(o.catalogue)}: {o.waiver}")
              for o in result.waived]
    if result.out_dir:
        props.append(("dlcheck_report", os.path.join(result.out_dir, "report.html")))
    return props


def judge(result: AuditResult, what: str) -> None:
    """Raises AuditFailed for a finding, a failed check or an audit that
    could not run; skips when no check of the family could run (each
    reason given); returns when the checks passed, waived ones included."""
    if result.message:
        raise AuditFailed(f"{what} could not run (exit {result.exit_code}): {result.message}")
    if any(o.verdict in ("fail", "error") for o in result.outcomes):
        ids = " ".join(sorted(result.findings)) or "no catalogue ID"
        raise AuditFailed(f"{what}: {ids} (report {result.out_dir})\n\n{result.text}")
    if result.outcomes and all(o.verdict == NOT_TESTED for o in result.outcomes):
        reasons = dict.fromkeys(o.evidence for o in result.outcomes)
        pytest.skip(f"{what} not tested: {'; '.join(reasons)}")


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    """Waived checks pass; their reasons are listed here."""
    waived = [(report.nodeid, value) for report in terminalreporter.stats.get("passed", [])
              for name, value in report.user_properties if name == "dlcheck_waived"]
    if waived:
        terminalreporter.section("dlcheck: waived checks (passed)")
        for nodeid, text in waived:
            terminalreporter.line(f"{nodeid}: {text}")


# ---- fixtures ---------------------------------------------------------------------------


def binary_of(config: pytest.Config) -> str:
    try:
        return find_binary(config.getoption("dlcheck_bin"))
    except HarnessError as e:
        pytest.fail(str(e), pytrace=False)


def trace_path(trace: Trace) -> str:
    """A trace file's path; a Recorder is saved first (to its path)."""
    return trace.save() if isinstance(trace, Recorder) else os.fspath(trace)


def compare(binary: str, a: Trace, b: Trace, rule: Optional[str] = None,
            envelope: bool = False) -> str:
    """`dlcheck compare [--tolerance RULE | --envelope] A B` (B the
    reference): its text when they agree; pytest.fail with the comparison's
    text when they do not, with its message when it could not compare."""
    a_path, b_path = trace_path(a), trace_path(b)
    how = ["--envelope"] if envelope else ["--tolerance", rule] if rule else []
    cmd = [binary, "compare", *how, a_path, b_path]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, DLCHECK_NO_CUDA_PROBE="1"))
    if r.returncode == 1:
        pytest.fail(f"dlcheck compare {a_path} {b_path}: the runs differ\n{r.stdout}",
                    pytrace=False)
    if r.returncode != 0:
        pytest.fail(f"dlcheck compare {a_path} {b_path} could not compare (exit "
                    f"{r.returncode}): {(r.stderr or r.stdout).strip()}", pytrace=False)
    return r.stdout


@pytest.fixture
def dlcheck_recorder(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable]:
    """make(model, optimizer, scaler=None, *, name="trace", **Recorder options)
    -> a Recorder saving into tmp_path/NAME.h5, the path a JUnit property
    (dlcheck_trace). At the test's end its hooks are removed and, if it
    recorded a step and nothing was saved there, the trace is saved."""
    made: list[Recorder] = []

    def make(model, optimizer, scaler=None, *, name: str = "trace", **options) -> Recorder:
        path = tmp_path / f"{name}.h5"
        if any(rec.path == str(path) for rec in made):
            raise ValueError(f"dlcheck_recorder: a recorder named {name!r} exists in this test")
        rec = Recorder(model, optimizer, scaler, path=path, **options)
        made.append(rec)
        request.node.user_properties.append(("dlcheck_trace", str(path)))
        return rec

    yield make
    for rec in made:
        rec.close()
        if rec.steps and not os.path.exists(rec.path):
            rec.save()


@pytest.fixture
def dlcheck_compare(request: pytest.FixtureRequest) -> Callable[..., str]:
    """compare(a, b, rule=None) -> the comparison's text: `dlcheck compare`
    of two traces (paths or Recorders; b is the reference) under RULE
    (bitwise, ulp(N), close(RTOL, ATOL); default bitwise). Fails the test
    with the comparison's text when they differ."""
    binary = binary_of(request.config)

    def run(a: Trace, b: Trace, rule: Optional[str] = None) -> str:
        return compare(binary, a, b, rule)

    return run


@pytest.fixture
def dlcheck_golden(request: pytest.FixtureRequest) -> Callable[..., str]:
    """gate(run, golden, rule=None) -> the comparison's text: the run (a
    trace path or a Recorder) against the committed golden trace (relative
    to pytest's rootdir) with `dlcheck compare`: under RULE (default
    bitwise), or, for a calibrated golden (`dlcheck record --repeat-from`
    of repeated runs) and no RULE, within the golden's envelope
    (`--envelope`). Fails the test with the comparison's text when they
    differ, or when there is no golden. Under --dlcheck-record-goldens it
    writes the run as the (single) golden instead."""
    config = request.config

    def gate(run: Trace, golden: Union[str, os.PathLike], rule: Optional[str] = None) -> str:
        target = Path(config.rootpath, golden)
        request.node.user_properties.append(("dlcheck_golden", str(target)))
        if config.getoption("dlcheck_record_goldens"):
            write_golden(trace_path(run), target)
            return f"golden written: {target}"
        if not target.is_file():
            pytest.fail(f"no golden at {target}: record it with pytest --dlcheck-record-goldens",
                        pytrace=False)
        return compare(binary_of(config), run, target, rule,
                       envelope=rule is None and is_calibrated(target))

    return gate


def is_calibrated(golden: Path) -> bool:
    """Whether the file holds a calibrated golden's /envelope (a file h5py
    cannot open is left to `dlcheck compare`, whose message says why)."""
    try:
        with h5py.File(golden, "r") as f:
            return "envelope" in f
    except OSError:
        return False


def write_golden(trace: str, golden: Path) -> None:
    """Copies the trace to the golden's path atomically (a temporary beside
    it, then rename)."""
    golden.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{golden.name}.", suffix=".tmp", dir=golden.parent)
    os.close(fd)
    try:
        shutil.copyfile(trace, tmp)
        os.replace(tmp, golden)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
