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

import contextlib
import inspect
from typing import Any, Callable, Iterator, Optional
from types import ModuleType

import torch
import torch.nn.functional as F

from . import patch

#: torch.nn.functional's dropouts
FUNCTIONAL = ("dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout",
              "feature_alpha_dropout")


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
    """Every dropout with p = 0 inside `around(model)`, entered around each
    step of a family's runs; `calls` counts the dropouts it neutralised
    over all the steps. The functions' holders are found once, when the
    family starts (the team's modules are imported by then)."""

    def __init__(self, adapter_module: Optional[ModuleType] = None):
        self._counter = [0]
        originals = [f for f in (getattr(F, n, None) for n in FUNCTIONAL) if f is not None]
        self._replacement = {id(f): _neutral(f, self._counter) for f in originals}
        sdpa = getattr(F, "scaled_dot_product_attention", None)
        if sdpa is not None:
            originals.append(sdpa)
            self._replacement[id(sdpa)] = _attention_neutral(sdpa, self._counter)
        self._bound = patch.holders(originals, adapter_module)

    @property
    def calls(self) -> int:
        return self._counter[0]

    @contextlib.contextmanager
    def around(self, model: torch.nn.Module) -> Iterator[None]:
        """The functional dropouts neutralised, and the dropout recurrent
        layers apply between their layers inside torch's kernels (nn.GRU,
        nn.LSTM with num_layers > 1) set to 0 on `model`, for the block."""
        rnns = [m for m in model.modules()
                if isinstance(m, torch.nn.RNNBase) and m.dropout > 0 and m.training]
        saved = [m.dropout for m in rnns]
        self._counter[0] += len(rnns)
        try:
            for m in rnns:
                m.dropout = 0.0
            with patch.swapped(self._bound, self._replacement):
                yield
        finally:
            for m, p in zip(rnns, saved):
                m.dropout = p

    def describe(self) -> str:
        """How randomness was handled, for the family's report."""
        if not self.calls:
            return "No dropout ran in these runs."
        return (f"Dropout made the identity in these runs ({self.calls} dropout calls ran with "
                f"p = 0, training mode otherwise as written): a batch split draws other masks "
                f"than one batch, so runs with dropout could not be compared.")
