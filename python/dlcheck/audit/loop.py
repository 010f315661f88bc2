"""One training run of the team's code, driven by the audit: the model,
optimizer, LR scheduler, scaler and batches from the adapter's factories,
its train_step once per optimizer step (the scheduler stepped once after
each), recorded with dlcheck's Recorder, and the evidence the checks need
kept on the side (the gradients the optimizer was given, the learning
rates each step used, the step whose loss was first inf/NaN)."""
from __future__ import annotations

import contextlib
import inspect
import math
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional

import torch

from ..recorder import Recorder, unwrap
from . import patch
from .adapter import Adapter
from .randomness import DropoutOff


@dataclass
class NonFinite:
    """Where an inf/NaN first appeared (the nonfinite family's harness check
    locates the layer from the recorded layer statistics)."""
    step: int
    where: str   # "the loss"

    def describe(self) -> str:
        return f"first inf/NaN at step {self.step} in {self.where}"


@contextlib.contextmanager
def threads(n: Optional[int]) -> Iterator[None]:
    """torch's intra-op thread count set to n for the block (None: as is)."""
    old = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


class Run:
    """The team's pipeline built from its factories, stepped by the audit.

    seed        seeds the global RNG before make_model and is batches()'s seed
    batch_size  samples per optimizer step (on this rank)
    accumulation  micro-batches each step's batch is split into
    fp32        the mixed-precision step with autocast forced off and the
                scaler disabled (the fp32 reference)
    float64     the float64 shadow: the same initial weights and batches in
                double (autocast leaves float64 alone), the scaler disabled
                and float64 the default dtype inside the step; its distance
                from the float32 run is that run's own rounding error
    dropout_off a DropoutOff entered around each step (randomness.py)
    """

    def __init__(self, adapter: Adapter, *, seed: int, batch_size: int, accumulation: int = 1,
                 workers: int = 0, rank: int = 0, world_size: int = 1, wrap: bool = False,
                 fp32: bool = False, float64: bool = False,
                 dropout_off: Optional[DropoutOff] = None):
        self.adapter, self.seed, self.accumulation = adapter, seed, accumulation
        self.float64, self.dropout_off = float64, dropout_off
        self.autocast_off = AutocastOff(adapter) if fp32 else None
        self.model = adapter.model(seed)
        if float64:
            self.model = self.model.double()
        if wrap:
            self.model = adapter.wrap(self.model)
        self.optimizer = adapter.optimizer(self.model)
        # built before the audit wraps optimizer.step: the scheduler's own step counter
        # wraps the optimizer's bound step, which the audit's wrapper then calls
        self.scheduler = adapter.scheduler(self.optimizer)
        self.scaler = adapter.scaler()
        if (fp32 or float64) and self.scaler is not None:
            self.scaler._enabled = False  # GradScaler's own switch (CpuGradScaler's too)
        self.data = adapter.batch_iter(seed, batch_size, rank=rank, world_size=world_size,
                                       workers=workers)
        self.batch_size = batch_size
        self.inner = unwrap(self.model)
        self.named = list(self.inner.named_parameters())
        self.rec: Optional[Recorder] = None
        self.path: Optional[str] = None
        self.steps_done = 0
        self.losses: list[float] = []
        self.grads: list[Optional[dict[str, torch.Tensor]]] = []  # given to optimizer.step
        self.lrs: list[list[float]] = []  # each step's learning rate, per param group
        self.batches: list[Any] = []                                # kept when keep_batches
        self.keep_batches = False
        self.nonfinite: Optional[NonFinite] = None
        self.autocast = False  # a forward pass ran under CPU or CUDA autocast
        self._hooks: list[Any] = [self.model.register_forward_pre_hook(self._autocast_hook)]
        self._wrap_optimizer_step()

    # ---- evidence -----------------------------------------------------------------------

    def _wrap_optimizer_step(self) -> None:
        original = self.optimizer.step
        run = self

        def given() -> dict[str, torch.Tensor]:
            return {n: p.grad.detach().clone() for n, p in run.named if p.grad is not None}

        def step(closure: Optional[Callable[[], Any]] = None, *args: Any, **kwargs: Any) -> Any:
            if closure is None:
                run._given = given()
                return original(*args, **kwargs)

            # optimizer.step(closure): the gradients exist only once the closure ran
            def closure_then_look() -> Any:
                loss = closure()
                run._given = given()
                return loss
            return original(closure_then_look, *args, **kwargs)

        # An LR scheduler built on the optimizer marks its step wrapper so; without the
        # mark it warns that optimizer.step() "has been overridden after learning rate
        # scheduler initialization", about the audit's own wrapper.
        if hasattr(original, "_with_counter"):
            step._with_counter = True  # type: ignore[attr-defined]

        self._given: Optional[dict[str, torch.Tensor]] = None
        self.optimizer.step = step  # type: ignore[method-assign]

    def _autocast_hook(self, module: torch.nn.Module, inputs: Any) -> None:
        self.autocast = self.autocast or torch.is_autocast_cpu_enabled() or \
            torch.is_autocast_enabled()

    # ---- recording --------------------------------------------------------------------------

    def record(self, path: str, run: str, scenario: str, *, stats_every: int = 0,
               check_ranks: bool = False) -> None:
        self.path = path
        self.rec = Recorder(self.model, self.optimizer, self.scaler, run=run, scenario=scenario,
                            seed=self.seed, stats_every=stats_every, path=path,
                            check_ranks=check_ranks)

    def save(self) -> str:
        """Writes the trace of the recorded steps and returns its path."""
        if self.rec is None:
            raise RuntimeError("save() of a run that was not recorded")
        self.rec.close()
        return self.rec.save()

    @contextlib.contextmanager
    def hooks_detached(self) -> Iterator[None]:
        """The audit's module hooks taken off for the duration, the team's
        left in place: a checkpoint that pickles the model whole (C8) must
        not carry the audit's recorder along (it cannot be pickled), nor
        fail because of it. Each hook dict gets its order back afterwards."""
        handles = self._hooks + (self.rec._hooks if self.rec is not None else [])
        dicts = {id(d): d for d in (h.hooks_dict_ref() for h in handles) if d is not None}
        before = {key: dict(d) for key, d in dicts.items()}
        for h in handles:
            d = h.hooks_dict_ref()
            if d is not None:
                d.pop(h.id, None)
        try:
            yield
        finally:
            for key, d in dicts.items():
                added = {k: v for k, v in d.items() if k not in before[key]}
                d.clear()
                d.update(before[key])
                d.update(added)

    # ---- stepping ---------------------------------------------------------------------------

    def next_micro_batches(self) -> list:
        batch = self.adapter.next_batch(self.data, self.steps_done)
        if self.float64:
            batch = cast_floats(batch, torch.float64)
        if self.keep_batches:
            self.batches.append(batch)
        return self.adapter.split(batch, self.accumulation) if self.accumulation > 1 else [batch]

    def step(self, *, audit_zero_grad: bool = True, micro: Optional[list] = None) -> Optional[float]:
        """One optimizer step of the team's train_step, recorded when the
        run records; its loss, or None when the loss came out non-finite.

        audit_zero_grad  zero every existing .grad first (the reference side:
                         neutral when the step zeroes gradients itself)"""
        if micro is None:
            micro = self.next_micro_batches()
        if audit_zero_grad:
            for _, p in self.named:
                if p.grad is not None:
                    p.grad.detach_()
                    p.grad.zero_()
        self._given = None
        self.lrs.append([float(g.get("lr", 0.0)) for g in self.optimizer.param_groups])
        with contextlib.ExitStack() as stack:
            if self.autocast_off is not None:
                stack.enter_context(self.autocast_off.on())
            if self.float64:
                stack.enter_context(_default_dtype(torch.float64))
            if self.dropout_off is not None:
                stack.enter_context(self.dropout_off.around(self.model))
            loss = self.adapter.step(self.model, self.optimizer, micro, self.scaler)
        self.grads.append(self._given)
        if self.rec is not None:
            self._record(loss)  # an inf/NaN loss too: the nonfinite check locates it (N1)
        if self.scheduler is not None:
            self._step_scheduler()
        self.steps_done += 1
        if not math.isfinite(loss):
            if self.nonfinite is None:
                self.nonfinite = NonFinite(self.steps_done - 1, "the loss")
            return None
        self.losses.append(loss)
        return loss

    def _step_scheduler(self) -> None:
        """The scheduler's step after the team's train_step, once per step
        as PyTorch's loop does, whether or not a GradScaler skipped the
        optimizer's step (every variant then follows the same schedule).
        A skipped first step would have torch warn that the scheduler
        stepped before the optimizer: the order is the audit's, so that
        warning is not passed on."""
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r"Detected call of `lr_scheduler\.step\(\)` "
                                    r"before `optimizer\.step\(\)`")
            self.adapter.scheduler_step(self.scheduler)

    def _record(self, loss: float) -> None:
        """rec.step, with the gradients the optimizer saw put back in place
        for a step that zeroed them after optimizer.step()."""
        restored = []
        for n, p in self.named:
            if p.grad is None and self._given and n in self._given:
                p.grad = self._given[n].clone()
                restored.append(p)
        try:
            self.rec.step(loss)
        finally:
            for p in restored:
                p.grad = None

    def train(self, steps: int, *, eval_every: int = 0, audit_zero_grad: bool = True) -> bool:
        """`steps` optimizer steps (calling evaluate every eval_every steps,
        the model put in eval mode first so that a missing model.eval(), M1,
        does not count again here); False when the loss went non-finite
        (training stops there)."""
        for _ in range(steps):
            if self.step(audit_zero_grad=audit_zero_grad) is None:
                return False
            if eval_every and self.steps_done % eval_every == 0:
                self.model.eval()
                self.adapter.evaluate(self.model)
                self.model.train()
        return True

    def close(self) -> None:
        """Removes the audit's hooks and ends the batch stream (a DataLoader
        with workers stops them now, not whenever it is collected)."""
        close = getattr(self.data, "close", None)
        if callable(close):
            close()
        for h in self._hooks:
            h.remove()
        self._hooks = []
        if self.rec is not None:
            self.rec.close()


def _disabled(base: type) -> type:
    """A subclass of the autocast context `base` that takes base's own
    arguments (torch.autocast(device_type, ...), torch.cpu.amp.autocast(
    enabled, dtype, ...)) and runs with enabled=False."""
    sig = inspect.signature(base.__init__)

    class Off(base):  # type: ignore[misc,valid-type]
        def __init__(self, *args: Any, **kwargs: Any):
            bound = sig.bind(self, *args, **kwargs)
            bound.arguments["enabled"] = False
            super().__init__(*bound.args[1:], **bound.kwargs)

    return Off


AUTOCASTS = (torch.autocast, torch.cpu.amp.autocast, torch.cuda.amp.autocast)
_OFF = {id(a): _disabled(a) for a in AUTOCASTS}


class AutocastOff:
    """A context in which torch.autocast, torch.cpu.amp.autocast and
    torch.cuda.amp.autocast, wherever the team's code holds them (patch.py),
    run with autocast off and their own signatures: the team's step in
    float32. The holders are found once, when it is made."""

    def __init__(self, adapter: Adapter):
        self._bound = patch.holders(AUTOCASTS, adapter.module)

    @contextlib.contextmanager
    def on(self) -> Iterator[None]:
        with patch.swapped(self._bound, _OFF):
            yield


@contextlib.contextmanager
def _default_dtype(dtype: torch.dtype) -> Iterator[None]:
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def cast_floats(batch: Any, dtype: torch.dtype) -> Any:
    """batch with its floating-point tensors cast to dtype (tensors inside
    tuples, lists and dicts too; anything else as it is)."""
    if isinstance(batch, torch.Tensor):
        return batch.to(dtype) if batch.is_floating_point() else batch
    if isinstance(batch, dict):
        return {k: cast_floats(v, dtype) for k, v in batch.items()}
    if isinstance(batch, (tuple, list)):
        values = [cast_floats(v, dtype) for v in batch]
        return type(batch)(*values) if hasattr(batch, "_fields") else type(batch)(values)
    return batch


def grad_distance(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], scale: float = 1.0
                  ) -> float:
    """||a - scale*b|| / ||scale*b|| over the tensors both hold (inf when b is 0)."""
    num = den = 0.0
    for k in a.keys() & b.keys():
        d = a[k].double() - scale * b[k].double()
        num += float((d * d).sum())
        den += float((scale * b[k].double()).pow(2).sum())
    return math.sqrt(num / den) if den > 0 else math.inf


def grad_scale(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    """The least-squares s in a ~ s*b, <a, b> / <b, b> over the tensors both
    hold (0 when b is 0): how many times b a is along b's direction."""
    dot = den = 0.0
    for k in a.keys() & b.keys():
        dot += float((a[k].double() * b[k].double()).sum())
        den += float(b[k].double().pow(2).sum())
    return dot / den if den > 0 else 0.0


def grad_shares(target: dict[str, torch.Tensor], parts: list) -> list[float]:
    """The least-squares weights w in target ~ sum_i w_i * parts[i] (over the
    tensors all hold): how much each part counts in target. Solved from the
    K x K Gram matrix of dot products, so no gradient is copied whole."""
    keys = set(target).intersection(*(set(p) for p in parts))
    k = len(parts)
    gram = torch.zeros(k, k, dtype=torch.float64)
    rhs = torch.zeros(k, dtype=torch.float64)
    for key in keys:
        flat = [p[key].double().reshape(-1) for p in parts]
        t = target[key].double().reshape(-1)
        for i in range(k):
            rhs[i] += float(flat[i] @ t)
            for j in range(i, k):
                gram[i, j] += float(flat[i] @ flat[j])
                gram[j, i] = gram[i, j]
    return [float(w) for w in torch.linalg.lstsq(gram, rhs.unsqueeze(1)).solution.squeeze(1)]


def grad_norm(g: dict[str, torch.Tensor]) -> float:
    return math.sqrt(sum(float(t.double().pow(2).sum()) for t in g.values()))


def grad_mean(grads: list) -> dict[str, torch.Tensor]:
    """The element-wise mean of gradient dicts (over the tensors all hold)."""
    keys = set.intersection(*(set(g) for g in grads))
    return {k: sum(g[k].double() for g in grads) / len(grads) for k in keys}
