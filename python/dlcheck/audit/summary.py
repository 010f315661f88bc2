"""What the audit tells the team: each finding with its catalogue ID, what
it means, the evidence and the fixing line; each check passed, failed,
waived (a failure the adapter's AUDIT["waive"] accepts, with its reason) or
not tested and why; and each waiver that went unused. Read from the
harness's report.json."""
from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any

from .scenario import waived_by


@dataclass
class Outcome:
    """One check's result as report.json gives it."""
    family: str
    name: str
    verdict: str          # pass, fail, expected_divergence, error, not_tested, waived
    catalogue: tuple
    evidence: str         # for not_tested: the reason
    about: str = ""
    explained_by: tuple = ()
    waiver: str = ""      # the reason its failure is accepted, used (waived) or not


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
    waive: dict = field(default_factory=dict)      # AUDIT["waive"]: name or ID -> reason

    @property
    def ids(self) -> set:
        return set(self.findings)

    @property
    def waived(self) -> list:
        """The failures a waiver accepts (verdict "waived")."""
        return [o for o in self.outcomes if o.verdict == WAIVED]

    @property
    def unused_waivers(self) -> dict:
        """{name: why} for each waiver that accepted no failure."""
        return unused_waivers(self.outcomes, self.waive)


NOT_TESTED, WAIVED = "not_tested", "waived"
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
            evidence, waiver = v.get("evidence") or "", v.get("waiver") or ""
            if verdict == NOT_TESTED and evidence.startswith(_NOT_TESTED_PREFIX):
                evidence = evidence[len(_NOT_TESTED_PREFIX):]
            evidence = _without_waiver(evidence, waiver)
            result.append(Outcome(fam.name, c.name, verdict, ids,
                                  _own_evidence(evidence, ids, entries), c.about,
                                  c.explained_by, waiver))
    return result


def _without_waiver(text: str, waiver: str) -> str:
    """The evidence without what the harness adds for a waiver (" waived:
    REASON." after a failure's evidence, or the sentence that it is unused):
    the summary shows waivers apart."""
    if not waiver:
        return text
    for tail in (f" waived: {waiver}.", f"; waived: {waiver}."):
        if text.endswith(tail):
            text = text[:-len(tail)]
            unused = text.rfind(" The waiver is unused: ")
            return text[:unused] if tail[0] == ";" and unused >= 0 else text
    return text


def unused_waivers(results: list, waive: dict) -> dict:
    """{name: why} for each entry of AUDIT["waive"] that accepted no failure:
    its checks did not fail (they passed, or were not tested), or no check
    of this audit has that name or catalogue ID."""
    unused = {}
    names = sorted({o.name for o in results} | {i for o in results for i in o.catalogue})
    for name in waive:
        mine = [o for o in results if waived_by(o.name, o.catalogue, waive) == name]
        if any(o.verdict == WAIVED for o in mine):
            continue
        if mine:
            unused[name] = "; ".join(f"{o.family}/{o.name} "
                                     f"{_VERDICT_WORDS.get(o.verdict, o.verdict)}" for o in mine)
        elif any(o.name == name or name in o.catalogue for o in results):
            unused[name] = "its checks are waived by their own names"
        else:
            close = difflib.get_close_matches(name, names, n=1)
            unused[name] = ("no check of this audit has this name or catalogue ID" +
                            (f" (did you mean {close[0]}?)" if close else ""))
    return unused


_VERDICT_WORDS = {"pass": "passed", "fail": "failed", "error": "could not run",
                  "not_tested": "was not tested", "expected_divergence": "diverged as expected"}


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
    report.json says the mistake is, and its fix), failures without one,
    the waived failures with their reasons, unused waivers, then every check."""
    res, catalogue = result.outcomes, result.catalogue
    failed = [o for o in res if o.verdict in ("fail", "error")]
    passed = [o for o in res if o.verdict in ("pass", "expected_divergence")]
    untested = [o for o in res if o.verdict == NOT_TESTED]
    waived = result.waived
    waived_ids = {i for o in waived for i in o.catalogue}
    unexplained = [o for o in failed if not (o.verdict == "fail" and o.catalogue) and
                   not set(o.explained_by) & set(result.findings)]
    out = [_head(result, len(passed), len(failed), len(waived), len(untested), unexplained), ""]
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
    for o in unexplained:
        if o.verdict == "error":
            why = "could not run"
        elif set(o.explained_by) & waived_ids:
            ids = " ".join(sorted(set(o.explained_by) & waived_ids, key=_id_order))
            why = (f"explained by the waived {ids}, but not waived itself: add "
                   f"AUDIT[\"waive\"][\"{o.name}\"] if this difference is accepted too")
        else:
            why = "no catalogue ID diagnosed"
        out.append(_wrap(f"FAILED {o.family}/{o.name} ", f"({o.about}); {why}", "  "))
        out.append(_wrap("  evidence  ", o.evidence))
        out.append("")
    for o in waived:
        ids = "; ".join(f"{i}: {catalogue.get(i, {}).get('mistake', '(see dlcheck list)')}"
                        for i in o.catalogue)
        out.append(_wrap(f"WAIVED {o.family}/{o.name} ", f"({ids or o.about})", "  "))
        out.append(_wrap("  reason    ", o.waiver))
        out.append(_wrap("  evidence  ", o.evidence))
        out.append("")
    unused = result.unused_waivers
    if unused:
        out.append('unused waivers (AUDIT["waive"] accepted no failure with these):')
        for name, why in unused.items():
            out.append(_wrap(f"  {name}: ", why, "    "))
        out.append("")
    out.append("checks:")
    width = max((len(f"{o.family}/{o.name}") for o in res), default=10)
    for o in res:
        ids = " ".join(o.catalogue)
        label = {"pass": "PASS", "fail": "FAIL", "error": "ERROR", NOT_TESTED: "NOT TESTED",
                 "expected_divergence": "EXPECTED", WAIVED: "WAIVED"}.get(o.verdict,
                                                                          o.verdict.upper())
        line = f"  {label:<10} {f'{o.family}/{o.name}':<{width}}  {ids}"
        if o.verdict == NOT_TESTED:
            line += f"  -- {o.evidence}"
        elif o.verdict == "expected_divergence":
            line += f"  -- {o.about}"
        elif o.verdict == WAIVED:
            line += f"  -- waived: {o.waiver}"
        out.append(line.rstrip())
        if o.verdict == "expected_divergence" and o.evidence:
            out.append(_wrap(" " * 13 + "size  ", _divergence_size(o.evidence), " " * 19))
    if result.out_dir:
        out += ["", f"reports: {result.out_dir}/report.html, report.json, junit.xml "
                    f"(the harness's), summary.txt (this text)"]
    return "\n".join(out) + "\n"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _head(result: AuditResult, passed: int, failed: int, waived: int, untested: int,
          unexplained: list) -> str:
    """The first line: the findings, and the failed checks no finding
    accounts for (never "0 findings" alone when a check failed)."""
    parts = [_plural(len(result.findings), "finding")] if result.findings or not unexplained \
        else []
    no_id = sum(o.verdict == "fail" for o in unexplained)
    errors = len(unexplained) - no_id
    if no_id:
        parts.append(f"{_plural(no_id, 'failed check')} without a catalogue ID")
    if errors:
        parts.append(f"{_plural(errors, 'check')} that could not run")
    counts = f"{passed} checks passed, {failed} failed"
    if waived:
        counts += f", {waived} waived"
    return (f"dlcheck audit of {result.adapter}: {', '.join(parts)}, {counts}, "
            f"{untested} not tested ({result.seconds:.1f} s)")


def _divergence_size(evidence: str) -> str:
    """The harness's equivalence evidence cut to its size: the first
    tensor's difference and how many tensors differ."""
    parts = [p.strip() for p in evidence.split(". ") if p.strip()]
    keep = [p for p in parts[:2] if "differ" in p] or parts[:1]
    return ". ".join(keep).rstrip(".") + "."


def _id_order(i: str) -> tuple:
    order = "GADMCFNREX"  # docs/pitfalls.md's groups, in its order
    return (order.index(i[0]) if i[0] in order else len(order), int(i[1:] or 0))
