"""Module state kept outside the state dict (F4): tensors a module holds as
plain attributes (in its __dict__, or in a list, tuple or dict held there)
rather than as parameters or registered buffers. state_dict() does not
hold them, .to() does not move them and DDP does not broadcast them.

Most such tensors are constants the constructor rebuilds (a causal mask,
a scale from the config): those are listed, never failed. A finding is a
plain tensor that training changes AND whose loss at a checkpoint shows:
two models rebuilt by make_model() and loaded from the trained model's
state dict, one of them given the changed tensors as well, answer a batch
differently (eval and train mode, bit for bit). So a cache of the last
activations (changed by every forward, never read back) is not a finding,
nor is anything but those tensors that the state dict misses (a Python
counter): they differ in nothing else."""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional

import torch

from .export import outputs

#: what nn.Module itself keeps in __dict__ (hooks, flags, the registries)
_INTERNAL = frozenset(vars(torch.nn.Module()))
#: how deep lists, tuples and dicts held as attributes are searched
MAX_DEPTH = 3


def _storage(t: torch.Tensor) -> Optional[int]:
    try:
        s = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()
        return s.data_ptr()
    except (RuntimeError, NotImplementedError):  # sparse, meta or other storage-less tensors
        return None


def _walk(value: Any, name: str, depth: int) -> Iterator[tuple[str, torch.Tensor]]:
    if isinstance(value, torch.nn.Parameter) or isinstance(value, torch.nn.Module):
        return  # an unregistered parameter or module is another mistake, not state
    if isinstance(value, torch.Tensor):
        yield name, value
    elif depth < MAX_DEPTH and isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from _walk(v, f"{name}[{i}]", depth + 1)
    elif depth < MAX_DEPTH and isinstance(value, dict):
        for k, v in value.items():
            yield from _walk(v, f"{name}[{k!r}]", depth + 1)


def plain_tensors(model: torch.nn.Module) -> dict[str, tuple[str, str, torch.Tensor]]:
    """Every plain tensor reachable from model's modules, by qualified name
    ("encoder.norm.running_max", "cache['k'][0]"): (module name, attribute,
    tensor). Views of a parameter or buffer are left out (the state dict
    holds their storage), as are tensors autograd computed from parameters
    (a weight_norm weight, an activation kept with its graph: recomputed,
    not state); a tensor reached twice is named once."""
    registered = {_storage(t) for t in list(model.parameters()) + list(model.buffers())}
    seen: set[int] = set()
    found = {}
    for mod_name, module in model.named_modules():
        for attr, value in vars(module).items():
            if attr in _INTERNAL:
                continue
            qualified = f"{mod_name}.{attr}" if mod_name else attr
            for name, t in _walk(value, qualified, 0):
                if id(t) in seen or t.grad_fn is not None or _storage(t) in registered:
                    continue
                seen.add(id(t))
                found[name] = (mod_name, attr, t)
    return found


@dataclass
class Snapshot:
    """The plain tensors of a model at one moment: identity and a copy."""
    tensors: dict[str, tuple[int, torch.Tensor]]

    @classmethod
    def of(cls, model: torch.nn.Module) -> "Snapshot":
        return cls({n: (id(t), t.detach().clone()) for n, (_, _, t) in
                    plain_tensors(model).items()})


@dataclass
class Change:
    """A plain tensor training changed."""
    name: str
    module: str
    attr: str
    now: torch.Tensor
    how: str

    def describe(self) -> str:
        return f"{self.name} {list(self.now.shape)} {str(self.now.dtype).replace('torch.', '')}" \
               f" ({self.how})"


def _how(before: Optional[tuple[int, torch.Tensor]], now: torch.Tensor) -> Optional[str]:
    """How `now` differs from its snapshot, or None when its value is the
    same (a fresh object holding the same bytes loses nothing)."""
    if before is None:
        return "set during training"
    ident, old = before
    where = "in place" if ident == id(now) else "replaced"
    if old.shape != now.shape or old.dtype != now.dtype:
        return f"{where}: was {list(old.shape)} {str(old.dtype).replace('torch.', '')}"
    if old.device == now.device and torch.equal(old, now.detach()):
        return None
    if old.numel() == 0:
        return where
    differ = int((old.to(now.device) != now.detach()).sum())
    return f"{where}, {differ} of {now.numel()} elements changed"


def changes(before: Snapshot, model: torch.nn.Module) -> tuple[list[Change], list[str]]:
    """The plain tensors of model whose value differs from `before`, and the
    names of those that did not change (constants)."""
    changed, constant = [], []
    for name, (mod, attr, t) in plain_tensors(model).items():
        how = _how(before.tensors.get(name), t)
        if how is None:
            constant.append(name)
        else:
            changed.append(Change(name, mod, attr, t, how))
    return changed, constant


def _answers(model: torch.nn.Module, x: torch.Tensor, seed: int) -> list[torch.Tensor]:
    """model's outputs for x in eval and then in train mode (the global RNG
    seeded alike for dropout); the model is the audit's own copy."""
    out = []
    for training in (False, True):
        model.train(training)
        torch.manual_seed(seed)
        with torch.no_grad():
            out += outputs(model(x))
    return out


def _same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(x.shape == y.shape and torch.equal(x, y) for x, y in zip(a, b))


@dataclass
class Lost:
    """What a reload from the state dict does to the changed plain tensors."""
    changed: list[Change]
    constant: list[str]
    lost: list[Change]     # proven: the reload's outputs differ, restored by these alone
    why_untested: str = ""  # why the reload could not be compared ("" it was)

    def note(self) -> str:
        """The evidence: the tensors lost, those changed but recomputed, the constants."""
        if self.lost:
            text = (f"{describe(self.lost)}: plain tensor attributes changed by training, not "
                    f"in the state dict: a model rebuilt and loaded from it answers differently "
                    f"from one given them as well")
        else:
            text = "no tensor that training changes is missing from the state dict"
            if self.changed:
                text += (f"; changed, but a model reloaded from the state dict answers the "
                         f"same (recomputed, or not read back): {describe(self.changed)}")
        if self.constant:
            more = len(self.constant) - 6
            text += (f"; plain tensors training left alone (constants the constructor "
                     f"rebuilds): {', '.join(self.constant[:6])}"
                     + (f" and {more} more" if more > 0 else ""))
        return text


def lost_at_reload(model: torch.nn.Module, fresh: Callable[[], torch.nn.Module],
                   before: Snapshot, x: Optional[torch.Tensor], *, seed: int = 0) -> Lost:
    """Which plain tensors of the trained `model`, changed since `before`,
    a checkpoint of its state dict loses: two models built by `fresh()` (as
    make_model() does) and loaded with model.state_dict(), one of them
    given the changed attributes as well, answer the model input x
    differently. The trained model itself is not run (its hooks are the
    audit's)."""
    changed, constant = changes(before, model)
    result = Lost(changed, constant, [])
    if not changed:
        return result
    rng = torch.get_rng_state()
    try:
        reloaded, restored = fresh(), fresh()
        reloaded.load_state_dict(model.state_dict())
        restored.load_state_dict(model.state_dict())
        for c in changed:
            src = model.get_submodule(c.module) if c.module else model
            dst = restored.get_submodule(c.module) if c.module else restored
            dst.__dict__[c.attr] = copy.deepcopy(src.__dict__[c.attr])
        if not _same(_answers(reloaded, x, seed), _answers(restored, x, seed)):
            result.lost = changed
    except Exception as e:  # the team's model may refuse a load, a copy or the input
        result.why_untested = (f"comparing a model reloaded from the state dict failed: "
                               f"{type(e).__name__}: {e}")
    finally:
        torch.set_rng_state(rng)
    return result


def describe(changed: list[Change], limit: int = 6) -> str:
    shown = "; ".join(c.describe() for c in changed[:limit])
    return shown + (f"; and {len(changed) - limit} more" if len(changed) > limit else "")
