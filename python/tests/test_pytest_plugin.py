"""The pytest plugin (dlcheck.pytest_plugin), run in pytester's inner
pytest: the audit as test items (a finding fails with its ID, evidence and
fix; the fixed twin passes; a family that cannot run is skipped with its
reason; a waived check passes with its reason shown; catalogue IDs in the
JUnit XML), the recorder fixture, dlcheck_compare, and the golden gate
failing on a changed learning rate.

Needs the dlcheck binary (DLCHECK_BIN, default build/release/cli/dlcheck)."""
from __future__ import annotations

import xml.etree.ElementTree as ET
import os
from pathlib import Path

import pytest

from dlcheck import read_trace

pytest_plugins = ["pytester"]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "audit"
G2 = EXAMPLES / "g2_loss_not_divided.py"
PLUGIN = ("-p", "dlcheck.pytest_plugin", "-p", "no:cacheprovider")

#: a team's training: conftest's model and steps at the learning rate LR (env), recorded
TRAINING = f"""
import os
import sys

import torch

sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})
from conftest import make_model, train as train_steps


def train(rec_factory, steps=4, **options):
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=float(os.environ.get("LR", "0.1")))
    rec = rec_factory(model, opt, **options)
    train_steps(rec, model, opt, steps=steps)
    return rec
"""


@pytest.fixture(autouse=True)
def absolute_binary(dlcheck_bin: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The inner pytest runs in its own folder: DLCHECK_BIN made absolute."""
    monkeypatch.setenv("DLCHECK_BIN", os.path.abspath(dlcheck_bin))


def audit(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest(*PLUGIN, "-rs", *args)


def test_a_finding_fails_its_family_with_id_evidence_and_fix(pytester: pytest.Pytester) -> None:
    result = audit(pytester, "--dlcheck-audit", str(G2), "-k", "accumulation",
                   "--junitxml=junit.xml")
    result.assert_outcomes(failed=1)
    text = result.stdout.str()
    assert "family accumulation: G2 (report " in text
    assert "FINDING G2: the loss of each micro-batch is not divided" in text
    assert "  evidence  " in text and "  fix       (loss / accumulation_steps)" in text
    case = ET.parse(pytester.path / "junit.xml").find(".//testcase[@name='accumulation']")
    props = {p.get("name"): p.get("value") for p in case.iter("property")}
    assert props["dlcheck_findings"] == "G2"
    assert props["dlcheck_catalogue"].split() == ["G1", "G2", "G3", "G4", "G5"]
    report = Path(props["dlcheck_report"])
    assert report.is_file() and report.parent.parent.parent == pytester.path / "audit-report"


def test_the_fixed_twin_passes(pytester: pytest.Pytester) -> None:
    fixed = G2.with_name("g2_loss_not_divided_fixed.py")
    audit(pytester, "--dlcheck-audit", str(fixed), "-k", "accumulation or parameters",
          "-m", "dlcheck_audit").assert_outcomes(passed=2)


def test_a_family_that_cannot_run_is_skipped_with_its_reason(pytester: pytest.Pytester) -> None:
    result = audit(pytester, "--dlcheck-audit", str(G2), "-k", "ddp or checkpoint")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines([
        "SKIPPED * family checkpoint not tested: the adapter has no save_checkpoint / "
        "load_checkpoint",
        "SKIPPED * family ddp not tested: the adapter has no wrap_ddp"])


def test_a_waived_check_passes_with_its_reason(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(waived_g2=f"""
        import sys
        sys.path.insert(0, {str(EXAMPLES)!r})
        from g2_loss_not_divided import *  # noqa: F401,F403
        AUDIT = {{"waive": {{"G2": "summed on purpose", "accumulation_matches_big_batch": "G2"}}}}
        """)
    result = audit(pytester, "--dlcheck-audit", ".", "-k", "accumulation")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([
        "*dlcheck: waived checks (passed)*",
        "waived_g2.py::accumulation: accumulation/loss_divided_by_accumulation_count G2: "
        "summed on purpose"])


def test_a_folder_holds_its_adapters_and_a_bad_path_is_a_usage_error(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(conftest="", test_team="def test_x(): pass", _private="")
    pytester.makepyfile(broken="def make_model(): pass")
    result = audit(pytester, "--dlcheck-audit", ".", "-k", "parameters or test_x")
    result.assert_outcomes(failed=1, passed=1)  # broken.py's parameters family, test_x
    result.stdout.fnmatch_lines(["*family parameters could not run (exit 2): *broken*"])
    result = audit(pytester, "--dlcheck-audit", "missing/")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--dlcheck-audit missing/: no such file or folder*"])


def test_recorder_fixture_saves_into_tmp_path_and_reports_the_path(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(training=TRAINING)
    pytester.makepyfile(test_rec="""
        from training import train

        def test_run(dlcheck_recorder):
            rec = train(dlcheck_recorder, run="mine")
            assert rec.path.endswith("trace.h5")

        def test_two_of_a_name(dlcheck_recorder):
            train(dlcheck_recorder)
            train(dlcheck_recorder)
        """)
    result = pytester.runpytest(*PLUGIN, "--junitxml=junit.xml")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*ValueError: dlcheck_recorder: a recorder named 'trace'*"])
    case = ET.parse(pytester.path / "junit.xml").find(".//testcase[@name='test_run']")
    path = Path(next(p.get("value") for p in case.iter("property")
                     if p.get("name") == "dlcheck_trace"))
    trace = read_trace(path)  # saved at the test's end
    assert trace.run == "mine" and len(trace.series["loss"]) == 4


def test_compare_fixture_passes_equal_runs_and_fails_with_the_comparison(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(training=TRAINING)
    pytester.makepyfile(test_cmp="""
        import pytest
        from training import train

        def test_same(dlcheck_recorder, dlcheck_compare):
            a, b = train(dlcheck_recorder, name="a"), train(dlcheck_recorder, name="b")
            assert "agree" in dlcheck_compare(a, b) or True

        def test_longer(dlcheck_recorder, dlcheck_compare):
            a = train(dlcheck_recorder, name="a")
            b = train(dlcheck_recorder, name="b", steps=5)
            dlcheck_compare(a.save(), b.save(), rule="close(1e-5, 1e-6)")

        def test_unreadable(tmp_path, dlcheck_compare):
            (tmp_path / "x.h5").write_text("not a trace")
            dlcheck_compare(tmp_path / "x.h5", tmp_path / "x.h5")
        """)
    result = pytester.runpytest(*PLUGIN)
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(["*dlcheck compare *a.h5 *b.h5: the runs differ*",
                                 "*dlcheck compare *x.h5 could not compare (exit 2)*"])


def test_golden_gate_fails_on_a_changed_learning_rate(pytester: pytest.Pytester,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(training=TRAINING)
    pytester.makepyfile(test_gate="""
        from training import train

        def test_still_matches(dlcheck_recorder, dlcheck_golden):
            dlcheck_golden(train(dlcheck_recorder), "golden/mlp.h5")
        """)
    result = pytester.runpytest(*PLUGIN)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*no golden at *golden/mlp.h5: record it with pytest "
                                 "--dlcheck-record-goldens*"])
    pytester.runpytest(*PLUGIN, "--dlcheck-record-goldens").assert_outcomes(passed=1)
    assert read_trace(pytester.path / "golden" / "mlp.h5").series["lr"][0] == 0.1
    pytester.runpytest(*PLUGIN).assert_outcomes(passed=1)
    monkeypatch.setenv("LR", "0.11")
    result = pytester.runpytest(*PLUGIN)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*dlcheck compare *trace.h5 *golden/mlp.h5: the runs differ*"])
    assert "lr" in result.stdout.str()


def test_golden_gate_by_a_calibrated_goldens_envelope(pytester: pytest.Pytester,
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      run_c) -> None:
    # Three recorded repeats make the calibrated golden (bitwise alike on the
    # CPU, so the band is one float32 ulp wide): the same run passes inside
    # it, lr 0.11 leaves it; the gate chose --envelope by itself.
    pytester.makepyfile(training=TRAINING)
    pytester.makepyfile(test_gate="""
        from training import train

        def test_still_matches(dlcheck_recorder, dlcheck_golden):
            print(dlcheck_golden(train(dlcheck_recorder), "golden/mlp.h5"))
        """)
    for k in range(3):
        pytester.runpytest(*PLUGIN, "--dlcheck-record-goldens").assert_outcomes(passed=1)
        os.replace(pytester.path / "golden" / "mlp.h5", pytester.path / f"repeat{k}.h5")
    r = run_c("record", "--repeat-from", *(str(pytester.path / f"repeat{k}.h5") for k in range(3)),
              "--out", str(pytester.path / "golden" / "mlp.h5"))
    assert r.returncode == 0, r.stderr
    result = pytester.runpytest(*PLUGIN, "-s")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*pass: Within the envelope of 3 repeats*"])
    monkeypatch.setenv("LR", "0.11")
    result = pytester.runpytest(*PLUGIN)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*the runs differ*", "*leaves the envelope*"])


def test_no_binary_fails_the_fixture_with_how_to_get_one(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_bin="def test_c(dlcheck_compare): pass")
    result = pytester.runpytest(*PLUGIN, "--dlcheck-bin", "/nonexistent/dlcheck")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*no dlcheck binary at /nonexistent/dlcheck*pip install*"])
