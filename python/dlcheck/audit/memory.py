"""Memory retention: what the team's training step, and its evaluate(),
leave alive from one call to the next (R1, R2; M2 for an evaluation
that keeps its autograd graph).

The team's step runs TRAIN_STEPS times, evaluate() EVAL_CALLS times
after it; after each call a census counts what is alive in the process:
the autograd nodes reachable from every live tensor's grad_fn (a graph
kept alive) and the bytes of the live tensors outside any graph (tensors
kept, detached). Correct code leaves the same things alive after every
step once its first steps have allocated gradients, optimizer state and
caches: a count that grows at every step after the warm-up is retention
that grows with the run's length. The series are in the trace's notes.

How it counts, chosen by measurement (python/tests/test_audit_memory.py
keeps the cases; torch 1.13, CPU, an MLP 64-64-10 on batches of 32, 10
steps, this 2-core machine):

  method (per step)                      overhead  loss kept  loss .detach()  forward keeps h
  gc tensors' storage bytes              30-60 ms  +4 B       +4 B            +8192 B
  autograd nodes from live tensors       40-60 ms  +7 nodes   0               +3 nodes
  saved tensors alive (saved_tensors_    25-35 ms  0          0               +16384 B
    hooks pack + weakref)
  CPU memory profiler (self bytes)       +13 ms    noise of ~1e5 B a step (its own buffers)

Only the node count tells a loss kept with its graph (backward has freed
the saved tensors; the nodes stay) from a detached one; the profiler's
own allocations drown a step's retention. So: nodes from gc's live
tensors for graphs, gc's storage bytes of tensors without a grad_fn for
the rest; the cost is gc.collect() and gc.get_objects(), one census per
call, wherever the team's code keeps its tensors (globals, module
attributes, closures). Tensors only C++ holds (saved for a backward) are
not counted as bytes; the nodes that hold them are.

The rule (steady_growth): a series grows when every difference between
consecutive calls after the WARMUP first calls exceeds the floor; the
growth is the smallest of those differences. A cache that fills once, the
optimizer state made at step 1, a counter that rises by noise, all have a
difference at or below the floor somewhere and pass. The floor for nodes
is 0 (a correct step's graph is freed whole); for bytes it is one sample
of the run's own batches (the batch's bytes over its rows): a scalar kept
per step for a log, detached (loss.detach()), is bookkeeping below it,
not a leak. The audit's own evidence (the gradients Run keeps per step)
is dropped before each census."""
from __future__ import annotations

import gc
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from .adapter import batch_rows
from .context import Context
from .scenario import Family, NotTested, zero_count

DESCRIPTION = ("What the team's training step and evaluate() leave alive from one call to the "
               "next: autograd graphs and tensors kept must not grow with the run's length.")
#: training steps and evaluate() calls measured; the first WARMUP of each may allocate
TRAIN_STEPS = 10
EVAL_CALLS = 6
WARMUP = 2


@dataclass(frozen=True)
class Census:
    """What is alive in the process at one moment."""
    graph_nodes: int   # autograd nodes reachable from live tensors' grad_fn
    graph_bytes: int   # storage bytes of live tensors that have a grad_fn
    plain_bytes: int   # storage bytes of live tensors without a grad_fn


def _storage(t: torch.Tensor) -> tuple:
    """(address, bytes) of t's storage; (id, 0) for a tensor without one
    (sparse, meta): such tensors' bytes are not counted."""
    try:
        s = t.storage()
        return s.data_ptr(), s.nbytes()
    except (RuntimeError, NotImplementedError, TypeError):
        return id(t), 0


def census() -> Census:
    """Counts the live tensors (after a collection, so that only what is
    reachable counts) and the autograd graphs they hold."""
    gc.collect()
    graph: dict = {}
    plain: dict = {}
    roots = []
    for obj in gc.get_objects():
        if not isinstance(obj, torch.Tensor):
            continue
        try:
            grad_fn = obj.grad_fn
        except RuntimeError:  # an undefined tensor (torch's own placeholders): nothing held
            continue
        key, size = _storage(obj)
        if grad_fn is not None:
            roots.append(grad_fn)
            graph[key] = size
        else:
            plain[key] = size
    return Census(_reachable(roots), sum(graph.values()),
                  sum(v for k, v in plain.items() if k not in graph))


def _reachable(roots: list) -> int:
    """How many autograd nodes the roots reach through next_functions. The
    nodes are kept while walking: a node's Python object lives only while
    referenced, and its id must not be reused by another."""
    seen: dict = {}
    stack = list(roots)
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen[id(node)] = node
        stack.extend(n for n, _ in node.next_functions)
    return len(seen)


def steady_growth(series: Sequence[float], warmup: int, floor: float) -> float:
    """The growth per call of a series measured after each call (series[0]
    before the first): the smallest difference between consecutive values
    after the first `warmup` calls when every one of them exceeds `floor`
    (and there are at least two), else 0."""
    diffs = [b - a for a, b in zip(series[warmup:], series[warmup + 1:])]
    if len(diffs) < 2 or any(d <= floor for d in diffs):
        return 0.0
    return float(min(diffs))


def tensor_bytes(batch: Any) -> int:
    """The bytes of the tensors in a batch (inside tuples, lists and dicts)."""
    if isinstance(batch, torch.Tensor):
        return batch.numel() * batch.element_size()
    if isinstance(batch, dict):
        return sum(tensor_bytes(v) for v in batch.values())
    if isinstance(batch, (tuple, list)):
        return sum(tensor_bytes(v) for v in batch)
    return 0


def measure(call: Callable[[], Any], times: int) -> list:
    """census() before the first of `times` calls and after each one."""
    seen = [census()]
    for _ in range(times):
        call()
        seen.append(census())
    return seen


@dataclass
class Series:
    """One loop's censuses and what steady_growth finds in them."""
    what: str           # "training step", "evaluate() call"
    censuses: list
    sample_bytes: float

    @property
    def nodes(self) -> list:
        return [c.graph_nodes for c in self.censuses]

    @property
    def plain(self) -> list:
        return [c.plain_bytes for c in self.censuses]

    def node_growth(self) -> float:
        return steady_growth(self.nodes, WARMUP, 0)

    def byte_growth(self) -> float:
        return steady_growth(self.plain, WARMUP, self.sample_bytes)

    def graph_note(self) -> str:
        graphs = [c.graph_bytes for c in self.censuses]
        grow = self.node_growth()
        verdict = (f"they grow by at least {grow:.0f} nodes every {self.what} after the first "
                   f"{WARMUP}: a graph is kept alive from each one (a loss or output kept "
                   f"without .item()/.detach())" if grow else
                   f"no steady growth after the first {WARMUP}")
        return (f"Autograd nodes alive before the first {self.what} and after each: "
                f"{_listing(self.nodes)} (tensors carrying them: {_listing(graphs)} bytes); "
                f"{verdict}.")

    def bytes_note(self) -> str:
        grow = self.byte_growth()
        verdict = (f"they grow by at least {grow:.0f} bytes every {self.what} after the first "
                   f"{WARMUP}, more than one sample's {self.sample_bytes:.0f} bytes: tensors "
                   f"are accumulated across calls" if grow else
                   f"no steady growth beyond one sample's {self.sample_bytes:.0f} bytes after "
                   f"the first {WARMUP}")
        return (f"Bytes of live tensors outside autograd graphs before the first {self.what} "
                f"and after each: {_listing(self.plain)}; {verdict}.")


def _listing(values: list) -> str:
    return ", ".join(str(v) for v in values)


def _train(ctx: Context, r) -> Series:
    """TRAIN_STEPS steps of the team's train_step, a census after each."""
    rows = bytes_ = 0

    def step() -> None:
        nonlocal rows, bytes_
        micro = r.next_micro_batches()
        rows += sum(batch_rows(m) for m in micro)
        bytes_ += sum(tensor_bytes(m) for m in micro)
        r.step(micro=micro)
        r.grads.clear()  # the audit's copy of each step's gradients, not the team's memory

    seen = measure(step, TRAIN_STEPS)
    return Series("training step", seen, bytes_ / rows if rows else 0.0)


def _evaluate(ctx: Context, r, sample_bytes: float) -> Series:
    """EVAL_CALLS calls of the team's evaluate(), in eval mode as a training
    loop calls it (model.train() after each), a census after each."""
    def evaluate() -> None:
        r.model.eval()
        ctx.adapter.evaluate(r.model)
        r.model.train()

    return Series("evaluate() call", measure(evaluate, EVAL_CALLS), sample_bytes)


def run(ctx: Context) -> Family:
    fam = Family("memory", DESCRIPTION)
    r = ctx.recorded(fam.scenario, "trained")
    training = _train(ctx, r)
    series = [("train", training)]
    if r.nonfinite is None and ctx.adapter.has("evaluate"):
        series.append(("eval", _evaluate(ctx, r, training.sample_bytes)))
    rec = r.rec
    for key, s in series:
        rec.metric(f"memory_{key}_graph_growth", s.node_growth())
        rec.note(f"memory_{key}_graph_growth", s.graph_note())
        rec.metric(f"memory_{key}_tensor_growth", s.byte_growth())
        rec.note(f"memory_{key}_tensor_growth", s.bytes_note())
    fam.runs["trained"] = r.save()
    r.close()
    fam.checks += [
        zero_count("training_keeps_no_graph", "trained", "memory_train_graph_growth", "R1",
                   "the training step leaves no autograd graph alive that grows step by step"),
        zero_count("training_keeps_no_tensors", "trained", "memory_train_tensor_growth", "R2",
                   "the training step accumulates no tensors from step to step"),
    ]
    if len(series) == 1:
        why = ("the adapter has no evaluate" if not ctx.adapter.has("evaluate") else
               "training went non-finite")
        fam.not_tested.append(NotTested("evaluation_keeps_nothing", ("M2", "R2"), why))
    else:
        fam.checks += [
            zero_count("evaluation_keeps_no_graph", "trained", "memory_eval_graph_growth", "M2",
                       "evaluate() leaves no autograd graph alive that grows call by call"),
            zero_count("evaluation_keeps_no_tensors", "trained", "memory_eval_tensor_growth",
                       "R2", "evaluate() accumulates no tensors from call to call"),
        ]
    return fam
