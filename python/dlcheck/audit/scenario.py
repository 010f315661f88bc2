"""Scenario files whose runs are the audit's traces (`trace:` runs), with
the checks of scenarios/README.md: one scenario per check family."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Optional

MAX_RUNS, MAX_CHECKS = 8, 16


@dataclass
class Check:
    """One check of a family, as the C harness evaluates it.

    catalogue   the catalogue IDs a FAIL of this check is evidence of
    about       one sentence for the team: what the check asks of its code
    explained_by  for a check without IDs: the findings that account for its failure
    """
    name: str
    kind: str
    a: str
    b: Optional[str] = None
    quantities: tuple = ()
    tolerance: Optional[str] = None
    threshold: Optional[float] = None
    catalogue: tuple = ()
    about: str = ""
    expect_divergence: bool = False
    explained_by: tuple = ()   # IDs whose finding explains a FAIL of this (ID-less) check

    def yaml(self, with_catalogue: bool) -> str:
        items = [f"name: {self.name}", f"kind: {self.kind}", f"a: {self.a}"]
        if self.b:
            items.append(f"b: {self.b}")
        if self.quantities:
            items.append(f"quantities: [{', '.join(self.quantities)}]")
        if self.tolerance:
            items.append(f"tolerance: {json.dumps(self.tolerance)}")
        if self.threshold is not None:
            items.append(f"threshold: {self.threshold!r}")
        if self.expect_divergence:
            items.append("expect_divergence: true")
        if with_catalogue and self.catalogue:
            items.append(f"catalogue: [{', '.join(self.catalogue)}]")
        return "  - {" + ", ".join(items) + "}"


@dataclass
class NotTested:
    """Checks a family could not run, and why (never counted as passed)."""
    what: str
    catalogue: tuple
    why: str


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


def write(family: Family, root: str, *, with_catalogue: bool) -> str:
    """Writes root/<scenario>/scenario.yaml and returns the folder."""
    if not family.runs or not family.checks:
        raise ValueError(f"family {family.name}: a scenario needs runs and checks")
    if len(family.runs) > MAX_RUNS or len(family.checks) > MAX_CHECKS:
        raise ValueError(f"family {family.name}: at most {MAX_RUNS} runs and {MAX_CHECKS} checks")
    folder = os.path.join(root, family.scenario)
    os.makedirs(folder, exist_ok=True)
    lines = [f"name: {family.scenario}",
             f"description: {json.dumps(family.description)}",
             "runs:"]
    lines += [f"  {run}: {{trace: {json.dumps(os.path.abspath(path))}}}"
              for run, path in family.runs.items()]
    lines.append("checks:")
    lines += [c.yaml(with_catalogue) for c in family.checks]
    with open(os.path.join(folder, "scenario.yaml"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return folder
