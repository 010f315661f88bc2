"""What the audit tells the team: each finding with its catalogue ID, what
it means, the evidence and the fixing line; each check passed, failed or
not tested and why. Read from the harness's report.json."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Outcome:
    """One check's result as report.json gives it."""
    family: str
    name: str
    verdict: str          # pass, fail, expected_divergence, error, not_tested
    catalogue: tuple
    evidence: str         # for not_tested: the reason
    about: str = ""
    explained_by: tuple = ()


@dataclass
class AuditResult:
    adapter: str
    exit_code: int
    outcomes: list = field(default_factory=list)
    findings: dict = field(default_factory=dict)   # ID -> [Outcome]
    catalogue: dict = field(default_factory=dict)  # ID -> {"mistake", "effect", "fix"}
    out_dir: str = ""
    seconds: float = 0.0
    text: str = ""
    message: str = ""                              # why an audit stopped (exit 2, 3)

    @property
    def ids(self) -> set:
        return set(self.findings)


NOT_TESTED = "not_tested"
_NOT_TESTED_PREFIX = "not tested: "


def outcomes(families: list, report: dict[str, Any]) -> list:
    """Every check of every family (not_tested ones included) with its
    verdict, evidence and catalogue IDs from report.json."""
    by_scenario = {s["name"]: {c["name"]: c for c in s.get("checks", [])}
                   for s in report.get("scenarios", [])}
    entries = report.get("catalogue") or {}
    result = []
    for fam in families:
        verdicts = by_scenario.get(fam.scenario, {})
        for c in fam.all_checks():
            v = verdicts.get(c.name)
            if v is None:
                result.append(Outcome(fam.name, c.name, "error", c.catalogue,
                                      "the harness reported no verdict for this check", c.about))
                continue
            ids = tuple(v.get("catalogue") or c.catalogue)
            verdict = v.get("verdict") or "error"
            evidence = v.get("evidence") or ""
            if verdict == NOT_TESTED and evidence.startswith(_NOT_TESTED_PREFIX):
                evidence = evidence[len(_NOT_TESTED_PREFIX):]
            result.append(Outcome(fam.name, c.name, verdict, ids,
                                  _own_evidence(evidence, ids, entries), c.about,
                                  c.explained_by))
    return result


def _own_evidence(text: str, ids: tuple, entries: dict) -> str:
    """The evidence without the catalogue sentences the harness appends to a
    FAIL (" G2: MISTAKE. Fix: FIX."): the summary shows those apart."""
    for i in ids:
        entry = entries.get(i)
        if not entry:
            continue
        tail = f" {i}: {entry.get('mistake', '')}. Fix: {entry.get('fix', '')}"
        at = text.find(tail)
        if at >= 0:
            text = text[:at] + text[at + len(tail):].lstrip(".")
    return text.rstrip()


def findings(results: list) -> dict:
    found: dict[str, list] = {}
    for o in results:
        if o.verdict == "fail":
            for i in o.catalogue:
                found.setdefault(i, []).append(o)
    return found


def _wrap(prefix: str, text: str, indent: str = " " * 12, width: int = 100) -> str:
    """prefix + text, wrapped at `width` columns, later lines indented."""
    lines, line, used = [], "", len(prefix)
    for w in text.split():
        if line and used + 1 + len(w) > width:
            lines.append(line)
            line, used = w, len(indent) + len(w)
        elif line:
            line, used = f"{line} {w}", used + 1 + len(w)
        else:
            line, used = w, used + len(w)
    lines.append(line)
    return prefix + ("\n" + indent).join(lines)


def render(result: AuditResult) -> str:
    """The team-facing text: findings first (what the catalogue entry in
    report.json says the mistake is, and its fix), then every check."""
    res, catalogue = result.outcomes, result.catalogue
    failed = [o for o in res if o.verdict in ("fail", "error")]
    passed = [o for o in res if o.verdict in ("pass", "expected_divergence")]
    untested = [o for o in res if o.verdict == NOT_TESTED]
    head = (f"dlcheck audit of {result.adapter}: "
            f"{len(result.findings)} finding{'s' if len(result.findings) != 1 else ''}, "
            f"{len(passed)} checks passed, {len(failed)} failed, {len(untested)} not tested "
            f"({result.seconds:.1f} s)")
    out = [head, ""]
    for i in sorted(result.findings, key=_id_order):
        entry = catalogue.get(i, {})
        out.append(f"FINDING {i}: {entry.get('mistake', '(see dlcheck list)')}")
        if entry.get("effect"):
            out.append(f"  effect    {entry['effect']}")
        for o in result.findings[i]:
            out.append(f"  check     {o.family}/{o.name}")
            out.append(_wrap("  evidence  ", o.evidence))
        for o in failed:
            if not o.catalogue and i in o.explained_by:
                out.append(_wrap(f"  also      {o.family}/{o.name} failed: ", o.evidence))
        if entry.get("fix"):
            out.append(f"  fix       {entry['fix']}")
        out.append("")
    unexplained = [o for o in failed if not o.catalogue and
                   not set(o.explained_by) & set(result.findings)]
    for o in unexplained:
        out.append(f"FAILED {o.family}/{o.name} ({o.about}); no catalogue ID diagnosed")
        out.append(_wrap("  evidence  ", o.evidence))
        out.append("")
    out.append("checks:")
    width = max((len(f"{o.family}/{o.name}") for o in res), default=10)
    for o in res:
        ids = " ".join(o.catalogue)
        label = {"pass": "PASS", "fail": "FAIL", "error": "ERROR", NOT_TESTED: "NOT TESTED",
                 "expected_divergence": "EXPECTED"}.get(o.verdict, o.verdict.upper())
        line = f"  {label:<10} {f'{o.family}/{o.name}':<{width}}  {ids}"
        if o.verdict == NOT_TESTED:
            line += f"  -- {o.evidence}"
        elif o.verdict == "expected_divergence":
            line += f"  -- {o.about}"
        out.append(line.rstrip())
        if o.verdict == "expected_divergence" and o.evidence:
            out.append(_wrap(" " * 13 + "size  ", _divergence_size(o.evidence), " " * 19))
    if result.out_dir:
        out += ["", f"reports: {result.out_dir}/report.html, report.json, junit.xml "
                    f"(the harness's), summary.txt (this text)"]
    return "\n".join(out) + "\n"


def _divergence_size(evidence: str) -> str:
    """The harness's equivalence evidence cut to its size: the first
    tensor's difference and how many tensors differ."""
    parts = [p.strip() for p in evidence.split(". ") if p.strip()]
    keep = [p for p in parts[:2] if "differ" in p] or parts[:1]
    return ". ".join(keep).rstrip(".") + "."


def _id_order(i: str) -> tuple:
    order = "GADMCFNE"
    return (order.index(i[0]) if i[0] in order else len(order), int(i[1:] or 0))
