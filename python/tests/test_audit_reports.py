"""What the audit hands the harness and reads back: a check it could not run
is a not_tested check that every harness report shows as skipped; the
team-facing text takes each finding's meaning and fix from report.json's
catalogue; an inf/NaN loss reaches the trace and N1 names its step and
layer."""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from dlcheck.audit import run_audit
from dlcheck.audit.scenario import Check, Family, NotTested, write
from dlcheck.audit.summary import AuditResult, outcomes, render

from test_audit_adapter import GOOD, adapter

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "audit"


def report_checks(out: Path) -> dict:
    """{scenario/check: check object} of out/report.json."""
    report = json.loads((out / "report.json").read_text())
    return {f"{s['name']}/{c['name']}": c for s in report["scenarios"] for c in s["checks"]}


def junit_cases(out: Path) -> dict:
    """{suite/case: the <skipped> message or None} of out/junit.xml."""
    cases = {}
    for suite in ET.parse(out / "junit.xml").getroot().iter("testsuite"):
        for case in suite.iter("testcase"):
            skipped = case.find("skipped")
            cases[f"{suite.get('name')}/{case.get('name')}"] = \
                None if skipped is None else skipped.get("message")
    return cases


def test_missing_adapter_pieces_are_not_tested_in_report_json_and_junit(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = run_audit(adapter(tmp_path, GOOD), out,
                       families=["inference", "checkpoint", "ddp", "parameters"])
    assert result.exit_code == 0, result.text + result.message
    checks, cases = report_checks(out), junit_cases(out)
    for family, piece, ids in (("inference", "evaluate", ["M1", "M2", "M3", "M4"]),
                               ("checkpoint", "save_checkpoint", ["C1", "C2", "C3", "C4", "C5",
                                                                  "C6", "C7", "C8"]),
                               ("ddp", "wrap_ddp", ["D1", "D2", "D3", "D4", "D5", "D6", "D7",
                                                         "D9", "D10"])):
        c = checks[f"audit_{family}/all_checks"]
        assert c["verdict"] == "not_tested" and piece in c["evidence"], c
        assert c["catalogue"] == ids
        assert piece in cases[f"audit_{family}/all_checks"]
        assert cases[f"audit_{family}/all_checks"].startswith("not tested: ")
    # what ran is not skipped; what is not tested is never counted as passed
    assert cases["audit_parameters/no_parameter_frozen_by_mistake"] is None
    report = json.loads((out / "report.json").read_text())
    assert report["summary"]["passed"] == sum(o.verdict == "pass" for o in result.outcomes)
    assert {o.name for o in result.outcomes if o.verdict == "not_tested"} == {"all_checks"}
    assert "NOT TESTED inference/all_checks" in result.text


def test_an_autocast_step_without_a_scaler_is_audited(tmp_path: Path) -> None:
    text = GOOD.replace("        loss = F.cross_entropy(model(x), y) / len(micro_batches)",
                        "        with torch.autocast('cpu', dtype=torch.bfloat16):\n"
                        "            loss = F.cross_entropy(model(x), y) / len(micro_batches)")
    for only in (["amp"], ["parameters", "amp"]):
        result = run_audit(adapter(tmp_path, text), tmp_path / "out", families=only)
        amp = {o.name: o.verdict for o in result.outcomes if o.family == "amp"}
        assert amp["clip_after_unscale"] == "pass" and amp["no_gradient_underflow"] == "pass", \
            result.text
    result = run_audit(adapter(tmp_path, GOOD), tmp_path / "out", families=["parameters", "amp"])
    assert [(o.name, o.verdict) for o in result.outcomes if o.family == "amp"] == \
        [("all_checks", "not_tested")]


def test_summary_takes_meaning_and_fix_from_the_reports_catalogue() -> None:
    fam = Family("accumulation", "")
    fam.checks.append(Check("loss_divided", "metric_min", "acc", catalogue=("G2",)))
    fam.not_tested.append(NotTested("token_mean", ("G4",), "no token masks"))
    entry = {"mistake": "M-from-report", "effect": "E-from-report", "fix": "F-from-report"}
    report = {"catalogue": {"G2": entry},
              "scenarios": [{"name": "audit_accumulation", "checks": [
                  {"name": "loss_divided", "verdict": "fail", "catalogue": ["G2"],
                   "evidence": "ratio 4. G2: M-from-report. Fix: F-from-report."},
                  {"name": "token_mean", "verdict": "not_tested", "catalogue": ["G4"],
                   "evidence": "not tested: no token masks"}]}]}
    res = outcomes([fam], report)
    assert [(o.name, o.verdict, o.evidence) for o in res] == [
        ("loss_divided", "fail", "ratio 4."), ("token_mean", "not_tested", "no token masks")]
    result = AuditResult("a", 1, outcomes=res, findings={"G2": [res[0]]},
                         catalogue=report["catalogue"])
    text = render(result)
    assert "FINDING G2: M-from-report" in text and "effect    E-from-report" in text
    assert "fix       F-from-report" in text and "NOT TESTED" in text and "no token masks" in text


def test_a_check_the_report_lacks_is_an_error() -> None:
    fam = Family("parameters", "")
    fam.checks.append(Check("lost", "metric_max", "trained", catalogue=("F1",)))
    [o] = outcomes([fam], {"catalogue": {}, "scenarios": []})
    assert o.verdict == "error" and "no verdict" in o.evidence


def test_not_tested_checks_in_the_scenario_file(tmp_path: Path) -> None:
    fam = Family("ddp", "")
    fam.not_tested += [NotTested("all_checks", ("D1", "D1", "D2"), 'no "wrap_ddp": ' + "x" * 600),
                       NotTested("other", (), "why")]
    text = (Path(write(fam, str(tmp_path))) / "scenario.yaml").read_text()
    assert "runs: {}" in text and "trace:" not in text  # ran nothing: no run at all
    line = next(ln for ln in text.splitlines() if "all_checks" in ln)
    assert "kind: not_tested" in line and "catalogue: [D1, D2]" in line and " a: " not in line
    reason = json.loads(line.split("reason: ", 1)[1].split(", catalogue")[0])
    assert reason.startswith('no "wrap_ddp"') and len(reason.encode()) <= 511
    assert "catalogue" not in next(ln for ln in text.splitlines() if "name: other" in ln)
    with pytest.raises(ValueError, match="needs checks"):
        write(Family("empty", ""), str(tmp_path))


def test_an_inf_loss_is_recorded_and_n1_names_its_step_and_layer(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = run_audit(EXAMPLES / "n1_exploding_gradients.py", out,
                       families=["nonfinite", "parameters"])
    assert result.ids == {"N1"}, result.text
    [n1] = result.findings["N1"]
    assert "step 3" in n1.evidence and "First non-finite value at step 3 in " in n1.evidence
    check = report_checks(out)["audit_nonfinite/training_stays_finite"]
    assert check["step"] == 3 and check["layer"], check
    assert "clip_grad_norm_" in result.text
    params = {o.name: o for o in result.outcomes if o.family == "parameters"}
    assert all(o.verdict == "not_tested" and "non-finite" in o.evidence for o in params.values())
    assert report_checks(out)["audit_parameters/every_parameter_trains"]["verdict"] == \
        "not_tested"


def test_c6_names_the_layer_whose_shape_the_load_changed(tmp_path: Path) -> None:
    result = run_audit(EXAMPLES / "c6_head_rebuilt_from_current_config.py", tmp_path / "out",
                       families=["checkpoint"])
    assert result.ids == {"C6"}, result.text
    evidence = result.findings["C6"][0].evidence
    assert "head.0.weight saved [10, 32], model [12, 32]" in evidence
    assert "head.0.bias saved [10], model [12]" in evidence
    assert "raised nothing" in evidence
