"""Randomness across variants: dropout made the identity while the
variants of an equivalence family train.

K micro-batches draw other dropout masks than one batch of the same
samples, and two ranks other masks than one process: the runs could not be
compared however correct the code. So the families that compare a batch
split (accumulation, ddp) run every dropout with p = 0 in training mode
(BatchNorm and everything else as written), and their report says so and
how many dropout calls it neutralised; the other families keep dropout.

The functions are replaced wherever the team's code can reach them:
torch's own module attribute (nn.Dropout, nn.MultiheadAttention and
F.multi_head_attention_forward look it up there at every call) and every
name bound to them in the team's own modules, so that
`from torch.nn.functional import dropout` escapes no more than
`F.dropout` does."""
from __future__ import annotations

import inspect
import os
import site
import sys
import sysconfig
from types import ModuleType, TracebackType
from typing import Any, Callable, Optional

import torch.nn.functional as F

#: torch.nn.functional's dropouts: (name, its keyword for the probability)
FUNCTIONAL = ("dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout",
              "feature_alpha_dropout")


def _installed_roots() -> tuple[str, ...]:
    """Folders of the standard library and installed packages."""
    roots = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    roots.update(site.getsitepackages() if hasattr(site, "getsitepackages") else [])
    roots.add(site.getusersitepackages() if hasattr(site, "getusersitepackages") else "")
    return tuple(os.path.realpath(r) + os.sep for r in roots if r)


def team_modules(extra: Optional[ModuleType] = None) -> list[ModuleType]:
    """Loaded modules that are neither the standard library nor installed
    packages (the team's code), and `extra` (the adapter)."""
    roots = _installed_roots()
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
    found = [extra] if extra is not None else []
    for m in list(sys.modules.values()):
        path = getattr(m, "__file__", None)
        if not path or m is extra:
            continue
        real = os.path.realpath(path)
        if not real.startswith(roots) and not real.startswith(here):
            found.append(m)
    return found


def _neutral(original: Callable, counter: list) -> Callable:
    """original with p = 0 where it would drop in training mode (a copy of
    the input, as a real dropout returns a new tensor); counter[0] counts
    those calls."""
    sig = inspect.signature(original)

    def dropout_off(*args: Any, **kwargs: Any) -> Any:
        bound = sig.bind(*args, **kwargs)
        bound.apply_defaults()
        a = bound.arguments
        if not (a["training"] and a["p"] > 0):
            return original(*args, **kwargs)
        counter[0] += 1
        return a["input"] if a.get("inplace") else a["input"].clone()

    dropout_off.__wrapped__ = original  # type: ignore[attr-defined]
    return dropout_off


def _attention_neutral(original: Callable, counter: list) -> Callable:
    """scaled_dot_product_attention (torch 2) with dropout_p = 0."""

    def attention_off(query: Any, key: Any, value: Any, *args: Any, **kwargs: Any) -> Any:
        args = list(args)
        if "dropout_p" in kwargs:
            counter[0] += kwargs["dropout_p"] > 0
            kwargs["dropout_p"] = 0.0
        elif len(args) > 1:  # attn_mask, dropout_p, ...
            counter[0] += args[1] > 0
            args[1] = 0.0
        return original(query, key, value, *args, **kwargs)

    attention_off.__wrapped__ = original  # type: ignore[attr-defined]
    return attention_off


class DropoutOff:
    """A context (entered around each step of a family's runs) in which
    every dropout runs with p = 0; `calls` counts the dropouts it
    neutralised over all the steps."""

    def __init__(self, adapter_module: Optional[ModuleType] = None):
        self._counter = [0]
        self._replacements: dict[int, tuple[Callable, Callable]] = {}
        for name in FUNCTIONAL:
            fn = getattr(F, name, None)
            if fn is not None:
                self._replacements[id(fn)] = (fn, _neutral(fn, self._counter))
        sdpa = getattr(F, "scaled_dot_product_attention", None)
        if sdpa is not None:
            self._replacements[id(sdpa)] = (sdpa, _attention_neutral(sdpa, self._counter))
        self._holders = [F] + team_modules(adapter_module)
        self._saved: list[tuple[ModuleType, str, Any]] = []

    @property
    def calls(self) -> int:
        return self._counter[0]

    def __enter__(self) -> "DropoutOff":
        for holder in self._holders:
            for name, value in list(vars(holder).items()):
                hit = self._replacements.get(id(value))
                if hit is not None and hit[0] is value:
                    self._saved.append((holder, name, value))
                    setattr(holder, name, hit[1])
        return self

    def __exit__(self, kind: Optional[type], err: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        for holder, name, value in reversed(self._saved):
            setattr(holder, name, value)
        self._saved = []

    def describe(self) -> str:
        """How randomness was handled, for the family's report."""
        if not self.calls:
            return "No dropout ran in these runs."
        return (f"Dropout made the identity in these runs ({self.calls} dropout calls ran with "
                f"p = 0, training mode otherwise as written): a batch split draws other masks "
                f"than one batch, so runs with dropout could not be compared.")

