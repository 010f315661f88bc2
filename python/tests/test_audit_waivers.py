"""Waivers: AUDIT["waive"] = {check name or catalogue ID: reason} accepts a
known, reviewed difference. A waived failure is WAIVED with its reason and
evidence in the summary and in every harness report, and does not fail the
audit; a waiver that accepted nothing is reported as unused; a malformed
waiver is refused (exit 2). The G2 example pair is the team's code here:
an adapter under tmp_path re-exports it and adds the waivers."""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from dlcheck.audit import load_adapter, run_audit
from dlcheck.audit.cli import main
from dlcheck.audit.scenario import Check, Family, NotTested, write
from dlcheck.audit.summary import AuditResult, Outcome, render

from test_audit_adapter import GOOD, adapter, audit_fails

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "audit"
REASON = "we sum the micro-batch losses on purpose (reviewed in #412)"
MISMATCH = "accumulation_matches_big_batch"


def waiving(tmp_path: Path, example: str, waive: dict) -> Path:
    """An adapter that is the example `example` with AUDIT["waive"] = waive."""
    return adapter(tmp_path, f"""
        import sys
        sys.path.insert(0, {str(EXAMPLES)!r})
        try:
            from {example} import *  # noqa: F401,F403 (the team's adapter, as it is)
        finally:
            sys.path.remove({str(EXAMPLES)!r})
        AUDIT = dict(globals().get("AUDIT", {{}}), waive={waive!r})
        """, name=f"waived_{example}.py")


def report_checks(out: Path) -> dict:
    report = json.loads((out / "report.json").read_text())
    return {f"{s['name']}/{c['name']}": c for s in report["scenarios"] for c in s["checks"]}


def test_a_waived_g2_exits_0_and_every_report_says_waived(tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    path = waiving(tmp_path, "g2_loss_not_divided", {"G2": REASON, MISMATCH: "the effect of G2"})
    assert main([str(path), "--out", str(out), "-v"]) == 0
    text = capsys.readouterr().out
    assert text == (out / "summary.txt").read_text()
    assert text.startswith("dlcheck audit of waived_g2_loss_not_divided: 0 findings, ")
    assert ", 0 failed, 2 waived, " in text.splitlines()[0]
    assert "WAIVED accumulation/loss_divided_by_accumulation_count (G2: the loss of each" in text
    assert f"  reason    {REASON}" in text and "unused waivers" not in text
    assert "WAIVED     accumulation/loss_divided_by_accumulation_count" in text
    # the evidence of the failure, without the waiver's sentence (the reason stands apart)
    g2 = next(o for o in text.split("\n\n") if o.startswith("WAIVED accumulation/loss_divided"))
    assert "\n  evidence  " in g2 and "waived:" not in g2 and "Fix:" not in g2

    checks = report_checks(out)
    for name, reason in (("loss_divided_by_accumulation_count", REASON),
                         (MISMATCH, "the effect of G2")):
        c = checks[f"audit_accumulation/{name}"]
        assert c["verdict"] == "waived" and c["waiver"] == reason, c
        assert c["evidence"].endswith(f" waived: {reason}."), c["evidence"]
    assert "Fix: (loss / accumulation_steps)" in \
        checks["audit_accumulation/loss_divided_by_accumulation_count"]["evidence"]
    assert checks["audit_accumulation/every_micro_batch_contributes"]["waiver"] is None
    report = json.loads((out / "report.json").read_text())
    assert report["summary"]["waived"] == 2 and report["summary"]["ok"] is True

    root = ET.parse(out / "junit.xml").getroot()
    assert root.get("failures") == "0" and root.get("errors") == "0"
    case = next(c for c in root.iter("testcase")
                if c.get("name") == "loss_divided_by_accumulation_count")
    assert case.get("status") == "waived" and case.find("failure") is None
    assert f"waived: {REASON}." in case.find("system-out").text
    html = (out / "report.html").read_text()
    assert 'class="waived">WAIVED' in html


def test_waiving_g2_alone_leaves_the_mismatch_failed_and_says_so(tmp_path: Path) -> None:
    result = run_audit(waiving(tmp_path, "g2_loss_not_divided", {"G2": REASON}),
                       tmp_path / "out", families=["accumulation"])
    assert result.exit_code == 1 and not result.findings, result.text
    assert [o.name for o in result.waived] == ["loss_divided_by_accumulation_count"]
    [o] = result.waived
    assert o.verdict == "waived" and o.waiver == REASON and o.catalogue == ("G2",)
    head = result.text.splitlines()[0]
    assert "1 failed check without a catalogue ID" in head and "0 findings" not in head, head
    text = " ".join(result.text.split())  # unwrapped
    assert f"FAILED accumulation/{MISMATCH}" in text
    assert "explained by the waived G2, but not waived itself" in text
    assert f'add AUDIT["waive"]["{MISMATCH}"] if this difference is accepted too' in text


def test_the_same_waivers_on_the_fixed_twin_are_reported_unused(tmp_path: Path) -> None:
    waive = {"G2": REASON, MISMATCH: "the effect of G2",
             "accumulation_match_big_batch": "a typo", "Z9": "no such ID"}
    out = tmp_path / "out"
    result = run_audit(waiving(tmp_path, "g2_loss_not_divided_fixed", waive), out,
                       families=["accumulation"])
    assert result.exit_code == 0 and not result.waived, result.text
    unused = result.unused_waivers
    assert unused["G2"] == "accumulation/loss_divided_by_accumulation_count passed"
    assert unused[MISMATCH] == f"accumulation/{MISMATCH} passed"
    assert "did you mean accumulation_matches_big_batch?" in \
        unused["accumulation_match_big_batch"]
    assert unused["Z9"].startswith("no check of this audit has this name or catalogue ID")
    assert 'unused waivers (AUDIT["waive"] accepted no failure with these):' in result.text
    assert "  G2: accumulation/loss_divided_by_accumulation_count passed" in result.text
    c = report_checks(out)["audit_accumulation/loss_divided_by_accumulation_count"]
    assert c["verdict"] == "pass" and c["waiver"] == REASON and "waiver is unused" in \
        c["evidence"]


@pytest.mark.parametrize("waive, words", [
    ("['G2']", "waive must be a dict"),
    ("{'G2': ''}", "waive['G2']: the reason must be a non-empty string"),
    ("{'G2': '  \\n '}", "the reason must be a non-empty string"),
    ("{'G2': None}", "the reason must be a non-empty string"),
    ("{'g2': 'r'}", "'g2' is neither a check name"),
    ("{'loss not divided': 'r'}", "'loss not divided' is neither a check name"),
    ("{2: 'r'}", "2 is neither a check name"),
    ("{'G2': 'x' * 600}", "at most 511 bytes"),
    ("{'G2': 'a\\x01b'}", "without control characters"),
])
def test_bad_waivers_are_refused_with_exit_2(tmp_path: Path, waive: str, words: str) -> None:
    message = audit_fails(tmp_path, GOOD + f"\nAUDIT = {{'waive': {waive}}}\n", "AUDIT")
    assert words in message, message
    if waive == "{'g2': 'r'}":
        assert "catalogue IDs are written in capitals: G2" in message


def test_bad_waiver_on_the_command_line_is_exit_2(tmp_path: Path, capsys) -> None:
    path = adapter(tmp_path, GOOD + "\nAUDIT = {'waive': {'G2': ''}}\n")
    assert main([str(path), "--out", str(tmp_path / "out")]) == 2
    assert "adapter function AUDIT(): waive['G2']" in capsys.readouterr().err


def test_a_reason_is_one_line_of_text(tmp_path: Path) -> None:
    ad = load_adapter(adapter(tmp_path, GOOD + "\nAUDIT = {'waive': {'G4': 'tokens\\n  weigh'}}\n"))
    assert ad.settings.waive == {"G4": "tokens weigh"}
    assert load_adapter(adapter(tmp_path, GOOD)).settings.waive == {}


def test_the_scenario_gives_each_waived_check_its_reason(tmp_path: Path) -> None:
    fam = Family("accumulation", "")
    fam.checks += [Check("loss_divided", "metric_min", "acc", catalogue=("G3", "G2")),
                   Check("by_name", "metric_min", "acc", catalogue=("G2",)),
                   Check("other", "metric_min", "acc", catalogue=("G1",))]
    fam.not_tested.append(NotTested("token_mean", ("G4",), "no masks"))
    waive = {"G2": 'summed "on purpose"', "by_name": "named", "G4": "x" * 600}
    text = (Path(write(fam, str(tmp_path), waive)) / "scenario.yaml").read_text()
    lines = {ln.split("name: ")[1].split(",")[0]: ln for ln in text.splitlines() if "name: " in ln}
    assert 'waived: "summed \\"on purpose\\""' in lines["loss_divided"]  # its second ID
    assert 'waived: "named"' in lines["by_name"]  # its name wins over its ID
    assert "waived" not in lines["other"]
    reason = json.loads(lines["token_mean"].split("waived: ", 1)[1].split(", catalogue")[0])
    assert len(reason.encode()) <= 511 and reason.endswith("...")
    assert all(not c.waived for c in fam.all_checks())  # the family's own checks untouched


def test_failed_checks_without_an_id_are_counted_not_called_0_findings() -> None:
    res = [Outcome("ddp", "ranks_match_one_process", "fail", (), "differs", "ranks agree"),
           Outcome("ddp", "each_rank_its_own_shard", "error", ("D1",), "no trace", "shards"),
           Outcome("ddp", "epochs_reshuffled", "pass", ("D2",), "")]
    text = render(AuditResult("a", 1, outcomes=res))
    head = text.splitlines()[0]
    assert head.startswith("dlcheck audit of a: 1 failed check without a catalogue ID, "
                           "1 check that could not run, 1 checks passed, 2 failed, "), head
    assert "0 findings" not in head
    assert "FAILED ddp/ranks_match_one_process (ranks agree); no catalogue ID diagnosed" in text
    assert "FAILED ddp/each_rank_its_own_shard (shards); could not run" in text
    text = render(AuditResult("a", 0, outcomes=res[2:]))
    assert text.startswith("dlcheck audit of a: 0 findings, 1 checks passed, 0 failed, ")
