"""Where the first inf/NaN came from (N1): the training replayed from the
same seed with every torch call's result looked at (a TorchFunctionMode)
and every backward node's gradients (hooks on the graph's nodes). The
origin is the first call or node that made an inf/NaN out of finite
inputs: its name, the team's line that called it, the module running, the
step, and whether it is a function taken outside its domain (log, sqrt, a
division by zero: an input reached 0 or below) or an overflow (values grew
beyond float range: exploding activations or gradients). The two need
different fixes, which the harness's nonfinite check gives from this."""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional

import torch
from torch.overrides import TorchFunctionMode

#: functions with a bounded domain: an inf/NaN from finite inputs means an input
#: outside it (log of 0, sqrt of a negative, a division by 0), not an overflow
DOMAIN = frozenset({
    "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "reciprocal", "div", "divide",
    "true_divide", "floor_divide", "truediv", "rtruediv", "itruediv", "rdiv", "idiv", "pow",
    "rpow", "ipow", "float_power", "acos", "asin", "atanh", "acosh", "lgamma", "digamma",
    "polygamma", "mvlgamma", "xlogy", "erfinv", "logit", "arccos", "arcsin", "arctanh",
    "arccosh"})
#: dlcheck's own folder (this file is dlcheck/audit/families/origin.py)
_PACKAGE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_TORCH = os.path.dirname(os.path.abspath(torch.__file__))


def base_name(name: str) -> str:
    """'__rtruediv__' -> 'rtruediv', 'log_' -> 'log', 'SqrtBackward0' -> 'sqrt'."""
    if name.endswith(("Backward0", "Backward1")):
        name = name[:-len("Backward0")]
    return name.strip("_").lower()


def _tensors(obj: Any) -> Iterator[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for o in obj:
            yield from _tensors(o)
    elif isinstance(obj, dict):
        for o in obj.values():
            yield from _tensors(o)


def _nonfinite(obj: Any) -> int:
    """How many inf/NaN the floating tensors in obj hold."""
    return sum(int((~torch.isfinite(t)).sum()) for t in _tensors(obj)
               if t.is_floating_point() and t.numel())


def team_line() -> str:
    """file:line of the innermost frame that is neither torch's nor dlcheck's."""
    frame = sys._getframe(1)
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        if not path.startswith((_TORCH, _PACKAGE)) and not path.startswith("<"):
            return f"{os.path.basename(path)}:{frame.f_lineno} ({frame.f_code.co_name})"
        frame = frame.f_back
    return "an unknown line"


@dataclass
class Origin:
    step: int
    phase: str     # "forward", "backward" or "the optimizer step / outside the model"
    op: str        # the torch function or backward node
    where: str     # the team's line
    module: str    # the module running, "" outside any
    domain: bool   # a function outside its domain rather than an overflow
    detail: str    # what the inputs held

    def describe(self) -> str:
        inside = f" inside module {self.module}" if self.module else ""
        kind = ("a function taken outside its domain" if self.domain else
                "an overflow: finite values beyond float range")
        return (f"The first inf/NaN was made at step {self.step} in the {self.phase} by "
                f"{self.op}, called at {self.where}{inside}, from finite inputs ({self.detail}): "
                f"{kind}.")


def _detail(op: str, args: Any) -> str:
    """What the finite inputs held: for a function with a domain, what it could
    not take; else their largest magnitude."""
    tensors = [t for t in _tensors(args) if t.is_floating_point() and t.numel()]
    if not tensors:
        return "scalar inputs"
    if op not in DOMAIN:
        return f"largest magnitude {max(float(t.abs().max()) for t in tensors):.4g}"
    if op in ("div", "divide", "true_divide", "floor_divide", "truediv", "itruediv", "reciprocal",
              "rtruediv", "rdiv", "idiv"):
        den = tensors[-1] if op not in ("rtruediv", "rdiv", "reciprocal") else tensors[0]
        return f"the divisor holds {int((den == 0).sum())} zeros"
    x = tensors[0]
    return (f"its input holds {int((x <= 0).sum())} values <= 0 of {x.numel()}, "
            f"smallest {float(x.min()):.4g}")


class Tracer(TorchFunctionMode):
    """Looks at every torch call while active; `step()` says which step runs."""

    def __init__(self, model: torch.nn.Module, step: Callable[[], int]):
        super().__init__()
        self.step = step
        self.origin: Optional[Origin] = None
        self.backward = False
        self._modules: list[str] = []
        self._handles = []
        for name, m in model.named_modules():
            name = name or f"{type(model).__name__} (the model)"
            self._handles.append(m.register_forward_pre_hook(self._enter(name)))
            self._handles.append(m.register_forward_hook(self._leave))

    def _enter(self, name: str) -> Callable:
        def hook(module: torch.nn.Module, inputs: Any) -> None:
            self._modules.append(name)
        return hook

    def _leave(self, module: torch.nn.Module, inputs: Any, output: Any) -> None:
        if self._modules:
            self._modules.pop()

    def close(self) -> None:
        for h in self._handles:
            h.remove()

    def _found(self, phase: str, op: str, where: str, module: str, args: Any) -> None:
        name = base_name(op)
        self.origin = Origin(self.step(), phase, f"torch {op}", where, module, name in DOMAIN,
                             _detail(name, args))

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if self.origin is not None:
            return out
        name = getattr(func, "__name__", str(func))
        module = self._modules[-1] if self._modules else ""
        if _nonfinite(out) and not _nonfinite((args, kwargs)):
            phase = "forward" if self._modules else \
                "code outside the model (the loss, the optimizer step, the team's own)"
            self._found(phase, name, team_line(), module, (args, kwargs))
        elif isinstance(out, torch.Tensor) and out.grad_fn is not None:
            out.grad_fn.register_hook(self._backward_hook(type(out.grad_fn).__name__,
                                                          team_line(), module))
        return out

    def _backward_hook(self, node: str, where: str, module: str) -> Callable:
        """The first backward node to make an inf/NaN gradient from finite
        incoming ones; `where` is the forward call that built it."""
        def hook(grad_inputs: Any, grad_outputs: Any) -> None:
            if self.origin is None and _nonfinite(grad_inputs) and not _nonfinite(grad_outputs):
                self.origin = Origin(self.step(), "backward", node, where, module,
                                     base_name(node) in DOMAIN, "finite incoming gradients")
        return hook


def trace_origin(run: Any, steps: int) -> Optional[Origin]:
    """Replays `run` (a fresh loop.Run of the same seed) for up to `steps`
    steps under the tracer; the first origin of an inf/NaN, or None."""
    tracer = Tracer(run.model, lambda: run.steps_done)
    try:
        with tracer:
            for _ in range(steps):
                if run.step() is None or tracer.origin is not None:
                    break
    finally:
        tracer.close()
    return tracer.origin
