"""Scenario files whose runs are the audit's traces (`trace:` runs), with
the checks of scenarios/README.md: one scenario per check family. What a
family could not run becomes a `not_tested` check with its reason, which
every harness report shows as skipped (never as passed)."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from typing import Optional

from ..limits import MAX_CHECKS, MAX_IDS, MAX_REASON, MAX_RUNS


@dataclass
class Check:
    """One check of a family, as the C harness evaluates it.

    catalogue   the catalogue IDs a FAIL of this check is evidence of
    about       one sentence for the team: what the check asks of its code
    explained_by  for a check without IDs: the findings that account for its failure
    waived      why a failure of this check is accepted (the adapter's AUDIT["waive"]):
                the harness reports it as WAIVED, which fails neither run nor exit code
    noise       equivalence: a's float64 shadow (noise.py); with noise_b, b's, each
                quantity's band is their distances from a and b added, in place
                of tolerance
    """
    name: str
    kind: str
    a: Optional[str] = None
    b: Optional[str] = None
    quantities: tuple = ()
    tolerance: Optional[str] = None
    threshold: Optional[float] = None
    catalogue: tuple = ()
    about: str = ""
    expect_divergence: bool = False
    explained_by: tuple = ()   # IDs whose finding explains a FAIL of this (ID-less) check
    reason: str = ""           # kind not_tested: what could not be tested, and why
    waived: str = ""           # the reason its failure is accepted ("" none)
    noise: Optional[str] = None
    noise_b: Optional[str] = None

    def yaml(self) -> str:
        items = [f"name: {self.name}", f"kind: {self.kind}"]
        if self.a:
            items.append(f"a: {self.a}")
        if self.b:
            items.append(f"b: {self.b}")
        if self.quantities:
            items.append(f"quantities: [{', '.join(self.quantities)}]")
        if self.noise:
            items.append(f"noise: {self.noise}")
            if self.noise_b:
                items.append(f"noise_b: {self.noise_b}")
        elif self.tolerance:
            items.append(f"tolerance: {json.dumps(self.tolerance)}")
        if self.threshold is not None:
            items.append(f"threshold: {self.threshold!r}")
        if self.expect_divergence:
            items.append("expect_divergence: true")
        if self.reason:
            items.append(f"reason: {json.dumps(_shorten(self.reason, MAX_REASON))}")
        if self.waived:
            items.append(f"waived: {json.dumps(_shorten(self.waived, MAX_REASON))}")
        ids = list(dict.fromkeys(self.catalogue))[:MAX_IDS]
        if ids:
            items.append(f"catalogue: [{', '.join(ids)}]")
        return "  - {" + ", ".join(items) + "}"


def waived_by(name: str, catalogue: tuple, waive: dict) -> Optional[str]:
    """The entry of `waive` (AUDIT["waive"]) that waives the check `name`
    with these catalogue IDs: its name, else the first of its IDs waived."""
    if name in waive:
        return name
    return next((i for i in catalogue if i in waive), None)


def _shorten(text: str, limit: int) -> str:
    """text in at most `limit` bytes of UTF-8 ("..." at the end when cut)."""
    if len(text.encode("utf-8")) <= limit:
        return text
    while len(text.encode("utf-8")) > limit - 3:
        text = text[:-1]
    return text + "..."


def zero_count(name: str, run: str, metric: str, pitfall: str, about: str,
               note: Optional[str] = None) -> Check:
    """A metric_max check that run's metric (a count or size) is 0, evidence
    of `pitfall` when it is not; `note` names the note shown with it (the
    metric's own name by default)."""
    return Check(name, "metric_max", run, quantities=(metric, note or metric), threshold=0,
                 catalogue=(pitfall,), about=about)


@dataclass
class NotTested:
    """A check a family could not run, and why (never counted as passed):
    written as a check of kind not_tested named `name`."""
    name: str
    catalogue: tuple
    why: str

    def check(self) -> Check:
        return Check(self.name, "not_tested", catalogue=self.catalogue, reason=self.why)


@dataclass
class Family:
    """What one family of checks produced: traces by run name and checks."""
    name: str
    description: str
    runs: dict = field(default_factory=dict)
    checks: list = field(default_factory=list)
    not_tested: list = field(default_factory=list)
    seconds: float = 0.0

    @property
    def scenario(self) -> str:
        return f"audit_{self.name}"

    def all_checks(self) -> list:
        """The checks the harness evaluates: those run, then those not tested."""
        return self.checks + [n.check() for n in self.not_tested]


def write(family: Family, root: str, waive: Optional[dict] = None) -> str:
    """Writes root/<scenario>/scenario.yaml and returns the folder; a check
    that `waive` names (by its name or one of its IDs) gets its reason."""
    waive = waive or {}
    checks = [replace(c, waived=waive[w]) if (w := waived_by(c.name, c.catalogue, waive)) else c
              for c in family.all_checks()]
    if not checks:
        raise ValueError(f"family {family.name}: a scenario needs checks")
    if len(family.runs) > MAX_RUNS or len(checks) > MAX_CHECKS:
        raise ValueError(f"family {family.name}: at most {MAX_RUNS} runs and {MAX_CHECKS} checks")
    folder = os.path.join(root, family.scenario)
    os.makedirs(folder, exist_ok=True)
    # A family that ran nothing has no runs: its checks are all not_tested.
    lines = [f"name: {family.scenario}",
             f"description: {json.dumps(family.description or f'The {family.name} family.')}",
             "runs:" if family.runs else "runs: {}"]
    lines += [f"  {run}: {{trace: {json.dumps(os.path.abspath(path))}}}"
              for run, path in family.runs.items()]
    lines.append("checks:")
    lines += [c.yaml() for c in checks]
    with open(os.path.join(folder, "scenario.yaml"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return folder
