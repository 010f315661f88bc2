"""Recorder: writes a PyTorch training run as a dlcheck trace, under the
names the C engine's traces use (checks/run/runner_record.c), so that
`dlcheck compare` can put it beside an engine run, a golden, or another
PyTorch run.

    rec = dlcheck.Recorder(model, optimizer, scaler, run="reference", path="run.h5")
    for x, y in loader:
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        rec.step(loss, grad_norm=norm)
    rec.save()

What is recorded, per optimizer step (one rec.step() call):
    series   loss, grad_norm (before clipping), grad_norm_clipped (norm of
             .grad at step()), lr (param_groups[0]["lr"] at step()),
             loss_scale (the GradScaler's scale after update(), 1.0
             without one), skipped (1.0 when the scaler skipped the step)
    digests  "param/<key>" for every parameter (named_parameters order),
             then "buffer/<key>" for every persistent buffer: xxhash64 of
             the tensor's bytes after the step
    stats    at the chosen steps: per leaf module, the statistics of its
             output (layer = module name) during that step's forward
             passes and of the gradient reaching that output ("grad
             <name>", divided by the loss scale) during backward
and at save():
    finals   init/<key>, init_buffer/<key> (at construction), param/<key>,
             grad/<key> (parameters with a .grad), buffer/<key>
    metrics  requires_grad/<key>, in_optimizer/<key>, skipped_steps,
             rank_param_mismatch and rank_buffer_mismatch (when ranks were
             checked), then the caller's metrics
    notes    the caller's notes, and the recorder's own (finals_converted,
             rank_mismatch) where they apply
"""
from __future__ import annotations

import math
import numbers
import os
from typing import Any, Iterable, Optional, Union

import numpy as np
import torch

from . import envinfo
from ._h5 import MAX_RANK, check_parent_dir
from .digest import digest
from .tracefile import NAME_MAX, LayerStats, Trace, write_trace

#: Name prefixes a state-dict key is recorded under (the longest bounds it).
KEY_PREFIXES = ("param/", "grad/", "buffer/", "init/", "init_buffer/", "requires_grad/",
                "in_optimizer/")
SERIES = ("loss", "grad_norm", "grad_norm_clipped", "lr", "loss_scale", "skipped")
RESERVED_METRICS = ("skipped_steps", "rank_param_mismatch", "rank_buffer_mismatch")
RESERVED_NOTES = ("finals_converted", "rank_mismatch")
_STORABLE = (torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int64)


def tensor_stats(t: torch.Tensor) -> list[float]:
    """mean, std, min, max, frac_zero, nonfinite of t as runner_record.c's
    tensor_stats defines them: in double, over the finite values; frac_zero
    counts zeros over all elements; nonfinite counts inf and NaN. A tensor
    that is not floating point reads all zeros, as a non-float32 tensor
    does on the C side (every floating dtype is measured here).

    The sums are numpy's pairwise sums in double, not the C loop's
    sequential ones: they differ from the C values by a few double ulp
    (about 1e-15 relative), far below the float32 resolution the
    statistics describe, and are deterministic for a given tensor; a
    sequential sum (cumsum) cost several times the training step on a CNN's
    activations when statistics were taken at every step."""
    numel = t.numel()
    if not t.is_floating_point() or numel == 0:
        return [0.0] * 6
    src = t.detach().reshape(-1).cpu()
    if src.dtype in (torch.float16, torch.bfloat16):
        src = src.float()  # exact; torch has no half min/max on the CPU
    x = src.to(torch.float64).numpy()
    with np.errstate(invalid="ignore"):  # inf + -inf: NaN, handled below
        total = float(np.sum(x))
    bad = 0
    if not math.isfinite(total):  # an inf or NaN among them (a float32 sum cannot overflow)
        finite = np.isfinite(x)
        bad = int(numel - np.count_nonzero(finite))
        x = x[finite]
        src = torch.from_numpy(x)
        total = float(np.sum(x))
    n = x.size
    if n == 0:
        return [0.0, 0.0, 0.0, 0.0, 0.0, float(bad)]
    mean = total / n
    std = math.sqrt(max(float(np.dot(x, x)) / n - mean * mean, 0.0))
    lo, hi = torch.aminmax(src)  # on the source dtype: exact, and cheaper than in double
    zeros = n - int(torch.count_nonzero(src))
    return [mean, std, float(lo), float(hi), zeros / numel, float(bad)]


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The module inside DistributedDataParallel / DataParallel wrappers."""
    wrappers = (torch.nn.parallel.DistributedDataParallel, torch.nn.DataParallel)
    while isinstance(model, wrappers):
        model = model.module
    return model


def _dist_rank() -> tuple[int, int]:
    """(rank, world size) of the default process group, (0, 1) without one."""
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _as_float(what: str, value: Any) -> float:
    """A Python float from a number or a one-element tensor; TypeError
    for anything else (bool, complex, str, a tensor of several values)."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1 or value.is_complex() or value.dtype == torch.bool:
            raise TypeError(f"{what} must be a real scalar, got a {value.dtype} tensor of "
                            f"shape {list(value.shape)}")
        return float(value.detach().reshape(()).item())
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{what} must be a real number or a one-element tensor, got "
                        f"{type(value).__name__}")
    return float(value)


def _check_name(what: str, name: Any) -> str:
    if not isinstance(name, str):
        raise TypeError(f"{what} must be a str, got {type(name).__name__}")
    raw = name.encode("utf-8")
    if not raw or b"\0" in raw or len(raw) > NAME_MAX:
        raise ValueError(f"{what} '{name[:40]}' must be 1..{NAME_MAX} bytes of UTF-8 without NUL")
    return name


def _storable(name: str, t: torch.Tensor, converted: list[str]) -> torch.Tensor:
    """t as a final the C reader accepts: float32, float16, bfloat16, int32
    or int64 of rank <= 4. Other dtypes become float32 (float64, noted as
    a loss of precision) or int32/int64 (bool, small integers: exact);
    rank > 4 merges the trailing dimensions. Each change is noted."""
    t = t.detach().cpu()
    if t.dtype not in _STORABLE:
        if t.is_complex():
            raise TypeError(f"{name}: complex tensors cannot be stored in a trace")
        target = torch.float32 if t.is_floating_point() else (
            torch.int64 if t.dtype == torch.uint8 or t.element_size() > 4 else torch.int32)
        converted.append(f"{name} {str(t.dtype)[6:]} -> {str(target)[6:]}")
        t = t.to(target)
    if t.dim() > MAX_RANK:
        converted.append(f"{name} shape {list(t.shape)} -> rank {MAX_RANK}")
        t = t.reshape(*t.shape[:MAX_RANK - 1], -1)
    return t.contiguous().clone()


class Recorder:
    """Records one training run into a dlcheck trace. Call step() once per
    optimizer step, after optimizer.step() (or scaler.step() and
    scaler.update()) and before optimizer.zero_grad(), then save().

    model      the model (a DistributedDataParallel / DataParallel wrapper
               is recorded under the inner module's keys, without "module.")
    optimizer  its optimizer (lr and in_optimizer/<key> come from it)
    scaler     the torch.cuda.amp.GradScaler, if any (loss scale, skipped
               steps, gradient statistics unscaled)
    run, scenario, seed    the trace's root attributes
    stats_every            layer statistics at every step s with
                           s % stats_every == 0 (0: off)
    stats_steps            and/or at these steps (0-based optimizer steps)
               With neither, statistics are recorded at step 0 only (the
               engine's default is the first and last step; a recorder
               does not know which step is last: pass stats_steps={0,
               steps - 1} for the same).
    path       where save() writes (its folder must exist now)
    check_ranks            all-gather parameter and buffer digests across
                           ranks at save() (every rank must call save())

    Hooks: forward hooks on every leaf module. A forward pass is measured
    when it runs with gradients enabled during a statistics step, so
    evaluation under torch.no_grad() is left out; each micro-batch of an
    accumulated step adds its own rows, as in the engine.
    """

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                 scaler: Optional[Any] = None, *, run: str = "reference", scenario: str = "",
                 seed: int = 0, stats_every: int = 0, stats_steps: Optional[Iterable[int]] = None,
                 path: Optional[Union[str, os.PathLike]] = None, check_ranks: bool = False):
        if not isinstance(model, torch.nn.Module):
            raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError(f"optimizer must be a torch.optim.Optimizer, got "
                            f"{type(optimizer).__name__}")
        if scaler is not None and not all(hasattr(scaler, a) for a in ("get_scale", "is_enabled")):
            raise TypeError(f"scaler must be a torch.cuda.amp.GradScaler, got "
                            f"{type(scaler).__name__}")
        _check_name("run", run)
        if scenario:
            _check_name("scenario", scenario)
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or \
                not 0 <= int(seed) < 2 ** 64:
            raise ValueError(f"seed must be an integer in 0..2^64-1, got {seed!r}")
        if isinstance(stats_every, bool) or not isinstance(stats_every, numbers.Integral) or \
                stats_every < 0:
            raise ValueError(f"stats_every must be an integer >= 0, got {stats_every!r}")
        steps = set()
        for s in stats_steps if stats_steps is not None else ():
            if isinstance(s, bool) or not isinstance(s, numbers.Integral) or s < 0:
                raise ValueError(f"stats_steps must hold integers >= 0, got {s!r}")
            steps.add(int(s))
        if path is not None:
            check_parent_dir(path)
        inner = unwrap(model)
        params = list(inner.named_parameters())
        if not params:
            raise ValueError("the model has no parameters: there is nothing to record")
        persistent = set(inner.state_dict().keys())
        buffers = [(k, b) for k, b in inner.named_buffers() if k in persistent]
        for key, _ in params + buffers:
            _check_name(f"state-dict key (as {KEY_PREFIXES[-2]}<key>)", "requires_grad/" + key)

        self.model, self.optimizer = inner, optimizer
        self.scaler = scaler if scaler is not None and scaler.is_enabled() else None
        self.run, self.scenario, self.seed = run, scenario, int(seed)
        self.path = os.fspath(path) if path is not None else None
        self.check_ranks_at_save = bool(check_ranks)
        self.stats_every, self.stats_steps = int(stats_every), steps
        if not self.stats_every and not steps:
            self.stats_steps = {0}
        self.params, self.buffers = params, buffers
        self.digest_names = [f"param/{k}" for k, _ in params] + [f"buffer/{k}" for k, _ in buffers]
        ids = {id(p) for g in optimizer.param_groups for p in g["params"]}
        self.in_optimizer = {k: id(p) in ids for k, p in params}
        converted: list[str] = []
        self.initial = {f"init/{k}": _storable(f"init/{k}", p, converted) for k, p in params}
        self.initial.update({f"init_buffer/{k}": _storable(f"init_buffer/{k}", b, converted)
                             for k, b in buffers})
        self._converted = converted
        self.series: dict[str, list[float]] = {s: [] for s in SERIES}
        self.digest_rows: list[list[int]] = []
        self.layer_stats: list[LayerStats] = []
        self.metrics: dict[str, float] = {}
        self.notes: dict[str, str] = {}
        self.rank_mismatch: Optional[tuple[int, int, str]] = None
        self._pending: list[tuple[str, list[float]]] = []
        self._observed: Optional[float] = None
        self._scale = float(self.scaler.get_scale()) if self.scaler else 1.0
        self.env = envinfo.fingerprint()
        self._hooks = [m.register_forward_hook(self._forward_hook(name or type(m).__name__))
                       for name, m in inner.named_modules() if not any(m.children())]

    # ---- hooks -----------------------------------------------------------------------

    @property
    def steps(self) -> int:
        """Optimizer steps recorded so far (the index of the current one)."""
        return len(self.digest_rows)

    def stats_now(self) -> bool:
        """Whether the current step records layer statistics."""
        s = self.steps
        return s in self.stats_steps or (self.stats_every > 0 and s % self.stats_every == 0)

    def _forward_hook(self, layer: str):
        def hook(module: torch.nn.Module, inputs: Any, output: Any) -> None:
            if not torch.is_grad_enabled() or not self.stats_now():
                return
            y = output
            if isinstance(y, (tuple, list)):
                y = next((o for o in y if isinstance(o, torch.Tensor)), None)
            if not isinstance(y, torch.Tensor):
                return
            self._pending.append((layer, tensor_stats(y)))
            if y.requires_grad:
                y.register_hook(self._backward_hook(layer))
        return hook

    def _backward_hook(self, layer: str):
        def hook(grad: torch.Tensor) -> None:
            stats = tensor_stats(grad)
            if self._scale != 1.0:  # the scale of this step's backward (set at the last step())
                for k in range(4):  # mean, std, min, max; as dlc_record_backward
                    stats[k] /= self._scale
            self._pending.append(("grad " + layer, stats))
        return hook

    def close(self) -> None:
        """Removes the recorder's hooks from the model (save() leaves them)."""
        for h in self._hooks:
            h.remove()
        self._hooks = []

    # ---- per step ----------------------------------------------------------------------

    def _digests(self) -> list[int]:
        """The digest of every parameter, then every buffer (digest_names' order)."""
        return [digest(p) for _, p in self.params] + [digest(b) for _, b in self.buffers]

    def _grads(self) -> list[torch.Tensor]:
        return [p.grad.detach() for _, p in self.params if p.grad is not None]

    @staticmethod
    def _norm(grads: list[torch.Tensor]) -> float:
        """The 2-norm of all gradients, computed as clip_grad_norm_ does."""
        device = grads[0].device
        norms = [torch.norm(g, 2.0).to(device) for g in grads]
        return float(torch.norm(torch.stack(norms), 2.0).item())

    def _still_scaled(self) -> bool:
        """Whether the scaler has not unscaled this optimizer's gradients yet
        (between scaler.scale(loss).backward() and unscale_/step)."""
        if self.scaler is None:
            return False
        state = getattr(self.scaler, "_per_optimizer_states", {}).get(id(self.optimizer), {})
        return getattr(state.get("stage"), "name", "READY") == "READY"

    def observe_grads(self) -> float:
        """Measures the gradient norm now (call it after backward and before
        clipping) and returns it; step() records it as grad_norm unless
        given one. Gradients the GradScaler has not unscaled yet are
        measured unscaled (divided by the scale)."""
        grads = self._grads()
        if not grads:
            raise RuntimeError("observe_grads() before any backward: no parameter has a .grad")
        norm = self._norm(grads)
        if self._still_scaled():
            norm /= float(self.scaler.get_scale())
        self._observed = norm
        return norm

    def step(self, loss: Any, grad_norm: Any = None, lr: Any = None) -> None:
        """Records one optimizer step; call it after optimizer.step() (with
        AMP: after scaler.step() and scaler.update()) and before zero_grad().

        loss       the step's loss (a number or one-element tensor)
        grad_norm  the norm before clipping (clip_grad_norm_'s return value);
                   None: the norm observe_grads() measured in this step,
                   else the norm of .grad now (the same as grad_norm_clipped:
                   right when you do not clip)
        lr         the learning rate the step used; None: param_groups[0]["lr"]
                   now (give it when a scheduler has stepped since, as
                   Lightning's does before its on_train_batch_end)
        An inf or NaN loss is recorded as it is: a diverging run is what the
        nonfinite check locates (pitfall N1), so it must reach the trace.
        TypeError for a loss that is not a real scalar, RuntimeError when no
        parameter has a .grad; nothing is recorded then."""
        value = _as_float("loss", loss)
        norm_given = None if grad_norm is None else _as_float("grad_norm", grad_norm)
        grads = self._grads()
        if not grads:
            raise RuntimeError(f"step {self.steps}: step() before any backward: no parameter "
                               "has a .grad (call it after optimizer.step(), before zero_grad())")
        clipped = self._norm(grads)
        if norm_given is None:
            norm_given = self._observed if self._observed is not None else clipped
        lr = _as_float("lr", lr) if lr is not None else \
            _as_float("param_groups[0]['lr']", self.optimizer.param_groups[0]["lr"])
        scale, skipped = 1.0, False
        if self.scaler is not None:
            scale = float(self.scaler.get_scale())
            finite = all(bool(torch.isfinite(g).all()) for g in grads)
            skipped = scale < self._scale or not finite
        row = self._digests()

        for name, v in zip(SERIES, (value, norm_given, clipped, lr, scale, float(skipped))):
            self.series[name].append(v)
        self.digest_rows.append(row)
        if self._pending:
            self.layer_stats.append(LayerStats(self.steps - 1, [n for n, _ in self._pending],
                                               np.array([s for _, s in self._pending])))
        self._pending, self._observed, self._scale = [], None, scale

    # ---- the caller's evidence -----------------------------------------------------------

    def metric(self, name: str, value: Any) -> None:
        """Sets metric `name` (replacing one of that name)."""
        _check_name("metric name", name)
        if name in RESERVED_METRICS or name.startswith(("requires_grad/", "in_optimizer/")):
            raise ValueError(f"metric name '{name}' is one the recorder writes itself")
        self.metrics[name] = _as_float(f"metric {name}", value)

    def note(self, name: str, text: str) -> None:
        """Sets note `name` to text (replacing one of that name)."""
        _check_name("note name", name)
        if name in RESERVED_NOTES:
            raise ValueError(f"note name '{name}' is one the recorder writes itself")
        if not isinstance(text, str) or "\0" in text:
            raise TypeError(f"note {name}: text must be a str without NUL characters")
        self.notes[name] = text

    # ---- data parallel ------------------------------------------------------------------------

    def check_ranks(self) -> int:
        """All-gathers every rank's parameter and buffer digests (a collective:
        every rank must call it) and records metrics rank_param_mismatch and
        rank_buffer_mismatch: how many tensors differ between ranks (the
        largest count of any call). Returns the parameter count; 0 without
        a process group."""
        rank, world = _dist_rank()
        mine = self._digests()
        if world == 1:
            rows = [mine]
        else:
            rows = [None] * world
            torch.distributed.all_gather_object(rows, mine)
        differ = [n for j, n in enumerate(self.digest_names) if len({r[j] for r in rows}) > 1]
        nparam = sum(n.startswith("param/") for n in differ)
        nbuffer = len(differ) - nparam
        text = (f"{', '.join(differ[:4])}{' ...' if len(differ) > 4 else ''} differ across "
                f"{world} ranks after step {self.steps}") if differ else ""
        if self.rank_mismatch is None or len(differ) >= sum(self.rank_mismatch[:2]):
            self.rank_mismatch = (nparam, nbuffer, text)
        return nparam

    # ---- saving -------------------------------------------------------------------------------

    def trace(self) -> Trace:
        """The trace as save() would write it now."""
        if not self.steps:
            raise RuntimeError("nothing to save: step() was never called")
        converted = list(self._converted)
        finals: dict[str, torch.Tensor] = dict(self.initial)
        for k, p in self.params:
            finals[f"param/{k}"] = _storable(f"param/{k}", p, converted)
            if p.grad is not None:
                finals[f"grad/{k}"] = _storable(f"grad/{k}", p.grad, converted)
        for k, b in self.buffers:
            finals[f"buffer/{k}"] = _storable(f"buffer/{k}", b, converted)
        metrics: dict[str, float] = {}
        for k, p in self.params:
            metrics[f"requires_grad/{k}"] = float(p.requires_grad)
            metrics[f"in_optimizer/{k}"] = float(self.in_optimizer[k])
        metrics["skipped_steps"] = float(sum(self.series["skipped"]))
        notes = dict(self.notes)
        if self.rank_mismatch is not None:
            metrics["rank_param_mismatch"] = float(self.rank_mismatch[0])
            metrics["rank_buffer_mismatch"] = float(self.rank_mismatch[1])
            if self.rank_mismatch[2]:
                notes["rank_mismatch"] = self.rank_mismatch[2]
        metrics.update(self.metrics)
        if converted:
            notes["finals_converted"] = "; ".join(converted)
        device = self.params[0][1].device.type
        t = Trace(run=self.run, scenario=self.scenario, backend=device, seed=self.seed,
                  series={k: np.array(v, dtype=np.float64) for k, v in self.series.items()},
                  digest_names=list(self.digest_names),
                  digests=np.array(self.digest_rows, dtype=np.uint64),
                  stats=list(self.layer_stats), metrics=metrics, notes=notes, env=self.env)
        for name, v in finals.items():
            if v.dtype == torch.bfloat16:
                t.bfloat16.add(name)
                v = v.view(torch.int16)
            t.finals[name] = v.numpy().view(np.uint16) if name in t.bfloat16 else v.numpy()
        return t

    def save(self, path: Optional[Union[str, os.PathLike]] = None) -> str:
        """Writes the trace atomically and returns its path. In a process
        group only rank 0 writes; the other ranks return the same path
        without writing (with check_ranks=True every rank must call save(),
        as the digests are gathered first). RuntimeError with no step
        recorded, ValueError without a path, FileNotFoundError for a
        missing folder: nothing is written then."""
        target = os.fspath(path) if path is not None else self.path
        if target is None:
            raise ValueError("save(): no path given here or to Recorder(path=...)")
        check_parent_dir(target)
        if not self.steps:
            raise RuntimeError("nothing to save: step() was never called")
        if self.check_ranks_at_save:
            self.check_ranks()
        if _dist_rank()[0] != 0:
            return target
        return write_trace(target, self.trace())
