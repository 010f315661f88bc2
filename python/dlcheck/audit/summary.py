"""What the audit tells the team: each finding with its catalogue ID, what
it means, the evidence and the fixing line; each check passed, failed or
not tested and why. Read from the harness's report.json."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .scenario import Family


@dataclass
class Outcome:
    """One check's result (verdict "not tested" for those that could not run)."""
    family: str
    name: str
    verdict: str          # pass, fail, expected_divergence, error, not tested
    catalogue: tuple
    evidence: str
    about: str = ""
    explained_by: tuple = ()


@dataclass
class AuditResult:
    adapter: str
    exit_code: int
    outcomes: list = field(default_factory=list)
    findings: dict = field(default_factory=dict)   # ID -> [Outcome]
    out_dir: str = ""
    seconds: float = 0.0
    text: str = ""
    message: str = ""                              # why an audit stopped (exit 2, 3)

    @property
    def ids(self) -> set:
        return set(self.findings)


def outcomes(families: list, report: dict[str, Any]) -> list:
    """Every check of every family with its verdict from report.json (the
    catalogue IDs from the report when the harness carries them)."""
    by_scenario = {s["name"]: {c["name"]: c for c in s.get("checks", [])}
                   for s in report.get("scenarios", [])}
    result = []
    for fam in families:
        verdicts = by_scenario.get(fam.scenario, {})
        for c in fam.checks:
            v = verdicts.get(c.name)
            if v is None:
                result.append(Outcome(fam.name, c.name, "error", c.catalogue,
                                      "the harness reported no verdict for this check", c.about))
                continue
            ids = tuple(v.get("catalogue") or c.catalogue)
            result.append(Outcome(fam.name, c.name, v.get("verdict", "error"), ids,
                                  _own_evidence(v.get("evidence", ""), ids), c.about,
                                  c.explained_by))
        for n in fam.not_tested:
            result.append(Outcome(fam.name, n.what, "not tested", n.catalogue, n.why))
    return result


def _own_evidence(text: str, ids: tuple) -> str:
    """The evidence without the catalogue sentences the harness appends to a
    FAIL ("G2: what it means. Fix: ..."): the summary shows those apart."""
    for i in ids:
        at = text.find(f" {i}: ")
        if at >= 0 and "Fix:" in text[at:]:
            text = text[:at]
    return text.rstrip()


def findings(results: list) -> dict:
    found: dict[str, list] = {}
    for o in results:
        if o.verdict == "fail":
            for i in o.catalogue:
                found.setdefault(i, []).append(o)
    return found


def _wrap(text: str, indent: str, width: int = 100) -> str:
    words, lines, line = text.split(), [], ""
    for w in words:
        if line and len(indent) + len(line) + 1 + len(w) > width:
            lines.append(line)
            line = w
        else:
            line = f"{line} {w}" if line else w
    lines.append(line)
    return ("\n" + indent).join(lines)


def render(result: AuditResult, catalogue: dict) -> str:
    """The team-facing text: findings first, then every check."""
    res = result.outcomes
    failed = [o for o in res if o.verdict in ("fail", "error")]
    passed = [o for o in res if o.verdict in ("pass", "expected_divergence")]
    untested = [o for o in res if o.verdict == "not tested"]
    head = (f"dlcheck audit of {result.adapter}: "
            f"{len(result.findings)} finding{'s' if len(result.findings) != 1 else ''}, "
            f"{len(passed)} checks passed, {len(failed)} failed, {len(untested)} not tested "
            f"({result.seconds:.1f} s)")
    out = [head, ""]
    for i in sorted(result.findings, key=_id_order):
        entry = catalogue.get(i, {})
        out.append(f"FINDING {i}: {entry.get('mistake', '(see dlcheck list)')}")
        for o in result.findings[i]:
            out.append(f"  check     {o.family}/{o.name}")
            out.append("  evidence  " + _wrap(o.evidence, "            "))
        for o in failed:
            if not o.catalogue and i in o.explained_by:
                out.append(f"  also      {o.family}/{o.name} failed: " +
                           _wrap(o.evidence, "            "))
        if entry.get("fix"):
            out.append(f"  fix       {entry['fix']}")
        out.append("")
    unexplained = [o for o in failed if not o.catalogue and
                   not set(o.explained_by) & set(result.findings)]
    for o in unexplained:
        out.append(f"FAILED {o.family}/{o.name} ({o.about}); no catalogue ID diagnosed")
        out.append("  evidence  " + _wrap(o.evidence, "            "))
        out.append("")
    out.append("checks:")
    width = max((len(f"{o.family}/{o.name}") for o in res), default=10)
    for o in res:
        ids = " ".join(o.catalogue)
        label = {"pass": "PASS", "fail": "FAIL", "error": "ERROR", "not tested": "NOT TESTED",
                 "expected_divergence": "EXPECTED"}.get(o.verdict, o.verdict.upper())
        line = f"  {label:<10} {f'{o.family}/{o.name}':<{width}}  {ids}"
        if o.verdict == "not tested":
            line += f"  -- {o.evidence}"
        elif o.verdict == "expected_divergence":
            line += f"  -- {o.about}"
        out.append(line.rstrip())
    if result.out_dir:
        out += ["", f"reports: {result.out_dir}/report.html, report.json, junit.xml "
                    f"(the harness's), summary.txt (this text)"]
    return "\n".join(out) + "\n"


def _id_order(i: str) -> tuple:
    order = "GADMCFNE"
    return (order.index(i[0]) if i[0] in order else len(order), int(i[1:] or 0))
