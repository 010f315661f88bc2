"""The audit's families of checks, one module each, with the modules only
they use beside them (scaler, evalshards, dataparallel, modulestate,
origin). A family's module declares FAMILY, a FamilyDeclaration, after its
run(); its name in ORDER registers it (CONTRIBUTING.md, "Add an audit
family")."""
from __future__ import annotations

import importlib

from ..declaration import FamilyDeclaration

#: the family modules, in the order an audit runs them and reports them
ORDER = ("parameters", "accumulation", "inference", "nonfinite", "determinism", "checkpoint",
         "ddp", "amp", "export", "memory", "environment")


def _declared(module: str) -> FamilyDeclaration:
    return importlib.import_module(f"{__name__}.{module}").FAMILY


#: family name -> its declaration, in ORDER
FAMILIES: dict[str, FamilyDeclaration] = {d.name: d for d in map(_declared, ORDER)}
