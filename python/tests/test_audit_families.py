"""The families' declarations (audit/families/): each family module is
registered, its FAMILY declares every ID its checks name, and every
declared ID is in the C catalogue (`dlcheck list`).

The IDs a family's checks name are read from its module's source: every
string that is a catalogue ID ("G2"), outside the FAMILY declaration."""
from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

from test_audit_examples import catalogue_ids

from dlcheck.audit import adapter
from dlcheck.audit.families import FAMILIES, ORDER

FOLDER = Path(__file__).resolve().parents[1] / "dlcheck" / "audit" / "families"
ID = re.compile(r"[A-Z]\d+")


def _is_family_declaration(node: ast.stmt) -> bool:
    return isinstance(node, ast.Assign) and any(
        isinstance(t, ast.Name) and t.id == "FAMILY" for t in node.targets)


def named_ids(path: Path) -> set:
    """The catalogue IDs a module's code names, its FAMILY declaration aside."""
    tree = ast.parse(path.read_text())
    tree.body = [node for node in tree.body if not _is_family_declaration(node)]
    return {node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and ID.fullmatch(node.value)}


def modules() -> list[str]:
    return sorted(p.stem for p in FOLDER.glob("*.py") if p.stem != "__init__")


def test_every_module_declaring_a_family_is_registered_under_its_name() -> None:
    declaring = [m for m in modules()
                 if hasattr(importlib.import_module(f"dlcheck.audit.families.{m}"), "FAMILY")]
    assert sorted(ORDER) == declaring
    assert list(FAMILIES) == list(ORDER)
    for name, declared in FAMILIES.items():
        assert declared.run.__module__ == f"dlcheck.audit.families.{name}", name
        assert declared.description, f"{name} declares no description"


def test_a_family_declares_every_id_its_checks_name() -> None:
    """(Not the converse: G5, a BatchNorm divergence, is reported in the
    accumulation family's evidence, and no check fails on it.)"""
    for name, declared in FAMILIES.items():
        undeclared = sorted(named_ids(FOLDER / f"{name}.py") - set(declared.ids))
        assert not undeclared, f"{name}: its checks name IDs its FAMILY does not: {undeclared}"
        assert len(set(declared.ids)) == len(declared.ids), f"{name}: an ID declared twice"


def test_the_modules_beside_the_families_name_no_ids() -> None:
    for module in sorted(set(modules()) - set(ORDER)):
        assert named_ids(FOLDER / f"{module}.py") == set(), module


def test_a_family_needs_only_optional_adapter_functions() -> None:
    for name, declared in FAMILIES.items():
        unknown = set(declared.needs) - set(adapter.OPTIONAL)
        assert not unknown, f"{name} needs {sorted(unknown)}, not adapter functions"


def test_every_declared_id_is_in_the_catalogue(dlcheck_bin: str) -> None:
    catalogue = catalogue_ids(dlcheck_bin)
    for name, declared in FAMILIES.items():
        missing = sorted(set(declared.ids) - catalogue)
        assert not missing, f"{name} declares IDs `dlcheck list` does not print: {missing}"


def test_named_ids_sees_a_checks_ids_and_skips_the_declaration(tmp_path: Path) -> None:
    module = tmp_path / "family.py"
    module.write_text('CHECK = Check("x", catalogue=("G2",), about="not G3")\n'
                      'FAMILY = FamilyDeclaration("x", run, ("G2", "G4"))\n')
    assert named_ids(module) == {"G2"}
