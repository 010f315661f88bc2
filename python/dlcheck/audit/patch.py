"""Replacing torch functions for the duration of a variant, wherever the
team's code can reach them: torch's own module attribute (what nn modules
and torch itself look up at every call) and every module-level name bound
to them in any loaded module, so that `from torch.nn.utils import
clip_grad_norm_` or `from torch import autocast` in a team module escapes
no more than the attribute does. A reference held elsewhere (a class
attribute, a functools.partial made at import) is not reached."""
from __future__ import annotations

import contextlib
import sys
from types import ModuleType
from typing import Any, Iterable, Iterator, Optional


def holders(originals: Iterable[Any], extra: Optional[ModuleType] = None
            ) -> list[tuple[ModuleType, str, Any]]:
    """(module, attribute, value) for every module-level name bound to one
    of `originals`: torch's modules, `extra` (the adapter, which is not in
    sys.modules) and every loaded module that imported one by name."""
    wanted = {id(f) for f in originals}
    found, seen = [], set()
    for module in [extra, *list(sys.modules.values())]:
        if not isinstance(module, ModuleType) or id(module) in seen:
            continue
        seen.add(id(module))
        found += [(module, attr, value) for attr, value in list(vars(module).items())
                  if id(value) in wanted]
    return found


@contextlib.contextmanager
def swapped(bound: list[tuple[ModuleType, str, Any]], replacement: dict[int, Any]
            ) -> Iterator[None]:
    """Each (module, attribute, value) of `bound` set to replacement[id(value)]
    for the block, and put back after it."""
    try:
        for module, attr, value in bound:
            setattr(module, attr, replacement[id(value)])
        yield
    finally:
        for module, attr, value in reversed(bound):
            setattr(module, attr, value)
