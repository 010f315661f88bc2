"""What a family of checks declares to the audit, next to its run(): its
name, the catalogue IDs it covers and the adapter functions it needs. The
declared IDs are the one list of them: what a family that cannot run
reports as not tested, what the pytest plugin reports a family covers, and
what python/tests/test_audit_families.py holds every ID the family's
module names, and the C catalogue, to."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .context import Context
from .scenario import Family


@dataclass(frozen=True)
class FamilyDeclaration:
    """One family: `run` measures the team's code and returns its checks.

    name         what --only, the reports and the summary call it
    ids          the catalogue IDs its checks are evidence of
    needs        the adapter functions it cannot run without (when one is
                 missing every ID is reported not tested)
    description  one sentence for the team: what the family looks at
    """
    name: str
    run: Callable[[Context], Family]
    ids: tuple[str, ...]
    needs: tuple[str, ...] = ()
    description: str = ""
