"""Memory retention: what the team's training step, and its evaluate(),
leave alive from one call to the next: a graph kept across training steps
(R1), tensors kept across evaluations (R2), an evaluation that keeps its
autograd graph (M2).

The team's step runs TRAIN_STEPS times, then evaluate() EVAL_CALLS times;
before the first call and after each, a census counts what is alive in
the process: the autograd nodes reachable from every live tensor's
grad_fn (a graph kept alive) and the storage bytes of the live tensors
without a grad_fn (tensors kept, detached or made under no_grad). Correct
code leaves the same things alive after every step once its first steps
have made the gradients, the optimizer state and its caches. The series
are the checks' notes in the trace; when the graphs grow, the note names
what took them (holdings: the team's module-level names and the model's
attributes, "LOSSES in train.py (10 new, 44 held)"). The bytes kept
across training steps are noted and not checked (CHECKS says why).

How it counts, chosen by measurement (bench/memory_census.py: torch 1.13,
CPU, an MLP 64-64-10 with Adam on batches of 32; per-call differences over
10 calls, this 2-core machine; a step takes 1.2-3 ms):

  method, after each call     measure  loss    loss      forward   eval keeps
                              ms       kept    .detach() keeps h   outputs
  gc tensors' storage bytes   31-87    +4 B    +4 B      +8192 B   +75776 B
  autograd nodes from gc's    31-67    +7      0         +3        +5
    tensors' grad_fn
  saved tensors alive (saved_ 20-37    0       0         +16384 B  +199168 B
    tensors_hooks, weakref)
  CPU memory profiler, bytes  step 8x  +4 B,   +4 B      +8192 to  +75776 B
    not freed (self_cpu_...)  slower   -16380            +9472 B

Only the node count tells a loss kept with its graph from a detached one
(backward frees the saved tensors; the nodes stay); the saved-tensor hooks
see nothing once backward ran, and the profiler slows the step 8 times and
moves by its own allocations (a correct step: 0, 4, 1280 B). So the census
takes gc's live tensors (wherever the team keeps them: globals, module
attributes, closures), counts the nodes their grad_fn reach, and the bytes
of those without one; its cost, gc.collect() and gc.get_objects(), is paid
once per call, not per operation. Tensors only C++ holds (saved for a
backward) are not counted as bytes: the nodes that hold them are.

The rule (steady_growth): a series grows when every difference between
consecutive censuses after the first WARMUP calls exceeds the floor; the
growth is the smallest of them. The optimizer state made at step 1, a
cache that fills once, a count that moves by noise, each leave a
difference at or below the floor and pass. The floor for nodes is 0 (a
correct step's graph is freed whole, every step); for bytes it is one
sample of the run's own batches (the bytes of the batches measured over
their rows): a scalar kept per call for a log (loss.detach()) is
bookkeeping below it, not a leak. The audit's own evidence (Run's copy of
each step's gradients) is dropped before each census."""
from __future__ import annotations

import collections
import contextlib
import gc
import itertools
import os
import sys
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Callable, Iterator, Optional, Sequence

import torch

from ..adapter import AdapterError, batch_rows
from ..context import Context
from ..declaration import FamilyDeclaration
from ..scenario import Family, NotTested, zero_count

DESCRIPTION = ("What the team's training step and evaluate() leave alive from one call to the "
               "next: autograd graphs and tensors kept must not grow with the run's length.")
#: training steps and evaluate() calls measured; the first WARMUP of each may allocate
TRAIN_STEPS = 10
EVAL_CALLS = 5
WARMUP = 2


@dataclass(frozen=True)
class Census:
    """What is alive in the process at one moment."""
    graph_nodes: int   # autograd nodes reachable from live tensors' grad_fn
    graph_bytes: int   # storage bytes of live tensors that have a grad_fn
    plain_bytes: int   # storage bytes of live tensors without a grad_fn


def _grad_fn(t: torch.Tensor) -> Any:
    """t.grad_fn; None for an undefined tensor (torch's own placeholders),
    which has none to read."""
    try:
        return t.grad_fn
    except RuntimeError:
        return None


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
        # type(), not isinstance(): isinstance reads obj.__class__, and some objects warn on
        # any attribute read (torch.distributed.reduce_op)
        if not issubclass(type(obj), torch.Tensor):
            continue
        grad_fn = _grad_fn(obj)
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


def _has_graph(value: Any) -> bool:
    return issubclass(type(value), torch.Tensor) and _grad_fn(value) is not None


def _graphs_in(value: Any) -> set:
    """The ids of the tensors with a graph that value is or directly holds
    (a list, tuple, set, deque or dict of them)."""
    if _has_graph(value):
        return {id(value)}
    if issubclass(type(value), dict):  # type(), not isinstance(): as in census()
        value = value.values()
    elif not issubclass(type(value), (list, tuple, set, collections.deque)):
        return set()
    return {id(v) for v in itertools.islice(value, 100_000) if _has_graph(v)}


def _library(path: str) -> bool:
    """Whether a module's file is Python's, an installed package's or dlcheck's."""
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))}
    path = os.path.abspath(path)
    return any(path.startswith(os.path.join(r, "")) for r in roots)


def holdings(model: torch.nn.Module) -> dict:
    """{"LOSSES in train.py": ids of the tensors with a graph it holds} for
    the module-level names of the team's modules (those outside Python, its
    installed packages and dlcheck) and the attributes of the model's
    modules ("model.encoder.cache") that hold any."""
    found: dict = collections.defaultdict(set)  # one file imported twice: both modules' ids
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if not issubclass(type(module), ModuleType) or not isinstance(path, str) or \
                _library(path):
            continue
        for name, value in list(vars(module).items()):
            if not name.startswith("__"):
                found[f"{name} in {os.path.basename(path)}"] |= _graphs_in(value)
    for prefix, m in model.named_modules():
        for name, value in vars(m).items():
            if not name.startswith("_"):
                found[f"model{'.' + prefix if prefix else ''}.{name}"] |= _graphs_in(value)
    return {where: ids for where, ids in found.items() if ids}


def kept_in(before: dict, after: dict) -> list:
    """The holders of after that took tensors with a graph since before, the
    most first (at most 3): "LOSSES in train.py (10 new, 44 held)"."""
    new = sorted(((len(ids - before.get(where, set())), len(ids), where)
                  for where, ids in after.items()), reverse=True)
    return [f"{where} ({n} new, {held} held)" for n, held, where in new[:3] if n]


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


def measure(call: Callable[[], bool], times: int) -> list:
    """census() before the first call and after each one, for `times` calls
    or until one returns False."""
    seen = [census()]
    for _ in range(times):
        if not call():
            break
        seen.append(census())
    return seen


@dataclass
class Series:
    """One loop's censuses and what steady_growth finds in them."""
    what: str           # "training step", "evaluate() call"
    censuses: list
    sample_bytes: float
    stopped: str = ""   # why the loop ended before its count of calls
    held_by: list = field(default_factory=list)  # kept_in(), when the graphs grew

    def untested(self) -> str:
        """Why the series is too short to judge ("" when it is not)."""
        if len(self.censuses) >= WARMUP + 3:
            return ""
        return (f"only {len(self.censuses) - 1} {self.what}s measured, fewer than the "
                f"{WARMUP} warm-up calls and 2 more the growth rule needs"
                f"{': ' + self.stopped if self.stopped else ''}")

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
        held = (f" Tensors with a graph taken during the {self.what}s by: "
                f"{'; '.join(self.held_by)}." if grow and self.held_by else "")
        return (f"Autograd nodes alive before the first {self.what} and after each: "
                f"{_listing(self.nodes)} (tensors carrying them: {_listing(graphs)} bytes); "
                f"{verdict}.{held}{self._ended()}")

    def bytes_note(self) -> str:
        grow = self.byte_growth()
        verdict = (f"they grow by at least {grow:.0f} bytes every {self.what} after the first "
                   f"{WARMUP}, more than one sample's {self.sample_bytes:.0f} bytes: tensors "
                   f"are accumulated across calls" if grow else
                   f"no steady growth beyond one sample's {self.sample_bytes:.0f} bytes after "
                   f"the first {WARMUP}")
        return (f"Bytes of live tensors outside autograd graphs before the first {self.what} "
                f"and after each: {_listing(self.plain)}; {verdict}.{self._ended()}")

    def _ended(self) -> str:
        return f" The loop ended early: {self.stopped}." if self.stopped else ""


def _listing(values: list) -> str:
    return ", ".join(str(v) for v in values)


def _train(ctx: Context, r) -> Series:
    """TRAIN_STEPS steps of the team's train_step, a census after each. The
    steps beyond AUDIT["steps"] are more than the adapter was promised: a
    scheduler sized to that many steps (OneCycleLR raises past its
    total_steps) or batches that run out end the series there."""
    rows = bytes_ = 0
    stopped = ""

    def step() -> bool:
        nonlocal rows, bytes_, stopped
        try:
            micro = r.next_micro_batches()
            rows += sum(batch_rows(m) for m in micro)
            bytes_ += sum(tensor_bytes(m) for m in micro)
            r.step(micro=micro)
        except AdapterError as e:
            if r.steps_done < ctx.settings.steps or e.function not in ("batches",
                                                                       "make_scheduler"):
                raise
            stopped = (f"the run stopped after {r.steps_done} steps (AUDIT['steps'] is "
                       f"{ctx.settings.steps}): {e}")
            return False
        r.grads.clear()  # the audit's copy of each step's gradients, not the team's memory
        return r.nonfinite is None

    before = holdings(r.inner)
    return _located(Series("training step", measure(step, TRAIN_STEPS),
                           bytes_ / rows if rows else 0.0, stopped), r.inner, before)


def _evaluate(ctx: Context, r, sample_bytes: float) -> Series:
    """EVAL_CALLS calls of the team's evaluate(), in eval mode as a training
    loop calls it (model.train() after each), a census after each."""
    def evaluate() -> bool:
        r.model.eval()
        ctx.adapter.evaluate(r.model)
        r.model.train()
        return True

    before = holdings(r.inner)
    return _located(Series("evaluate() call", measure(evaluate, EVAL_CALLS), sample_bytes),
                    r.inner, before)


def _located(s: Series, model: torch.nn.Module, before: dict) -> Series:
    """s with the holders that took tensors with a graph during its calls,
    when its graphs grew."""
    if s.node_growth():
        s.held_by = kept_in(before, holdings(model))
    return s


#: each loop's checks, (name, catalogue ID, what it asks), for its graph and for its tensors.
#: Training's tensors are noted, not checked: detached outputs collected over an epoch for
#: its metric (cleared by the team's loop, which the adapter does not show), a dataset that
#: caches the samples it reads, a replay buffer filling up, all grow at every step of 10
#: and are correct code. Across evaluations nothing of the kind is meant to stay.
CHECKS = {
    "train": (("training_keeps_no_graph", "R1",
               "the training step leaves no autograd graph alive that grows step by step"),
              None),
    "eval": (("evaluation_keeps_no_graph", "M2",
              "evaluate() leaves no autograd graph alive that grows call by call"),
             ("evaluation_keeps_no_tensors", "R2",
              "evaluate() leaves no tensors behind that accumulate call by call")),
}


def _judge(fam: Family, rec, key: str, s: Optional[Series], why_not: str) -> None:
    """The loop's metrics, notes and checks; not_tested ones with the reason
    when it could not be measured (why_not, or too short a series)."""
    graph, tensors = CHECKS[key]
    why = why_not or s.untested()
    if why:
        ids = (graph[1],) + ((tensors[1],) if tensors else ())
        fam.not_tested.append(NotTested(graph[0].replace("no_graph", "nothing"), ids, why))
        return
    rec.metric(f"memory_{key}_graph_growth", s.node_growth())
    rec.note(f"memory_{key}_graph_growth", s.graph_note())
    fam.checks.append(zero_count(graph[0], "trained", f"memory_{key}_graph_growth", graph[1],
                                 graph[2]))
    if not s.sample_bytes:  # the rule's floor is unknown: any tensor kept would count
        if tensors:
            fam.not_tested.append(NotTested(tensors[0], (tensors[1],), (
                "the batches hold no tensor the audit finds (in a tuple, list or dict), so "
                "one sample's bytes, the least growth that counts, is not known")))
        return
    rec.metric(f"memory_{key}_tensor_growth", s.byte_growth())
    rec.note(f"memory_{key}_tensor_growth", s.bytes_note())
    if tensors:
        fam.checks.append(zero_count(tensors[0], "trained", f"memory_{key}_tensor_growth",
                                     tensors[1], tensors[2]))


@contextlib.contextmanager
def _census_of_new_objects() -> Iterator[None]:
    """gc.freeze() moves every object alive now out of the generations that
    gc.get_objects() and gc.collect() walk, so that a census costs what the
    family's runs make, not the size of the process: 0.7 s a census among 3.1
    million objects (a long pytest run's heap, or a team's), 0.000 s frozen.
    What a step keeps is made during the run, so it is still counted; what
    lived before (the team's module-level list, empty or not) only holds it."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def run(ctx: Context) -> Family:
    fam = Family("memory", DESCRIPTION)
    with _census_of_new_objects():
        r = ctx.recorded(fam.scenario, "trained")
        training = _train(ctx, r)
        evaluation, why_not = None, ""
        if not ctx.adapter.has("evaluate"):
            why_not = "the adapter has no evaluate"
        elif r.nonfinite is not None:
            why_not = "training went non-finite"
        else:
            evaluation = _evaluate(ctx, r, training.sample_bytes)
    _judge(fam, r.rec, "train", training, "")
    _judge(fam, r.rec, "eval", evaluation, why_not)
    fam.runs["trained"] = r.save()
    r.close()
    return fam


FAMILY = FamilyDeclaration("memory", run, ("R1", "R2", "M2"), description=DESCRIPTION)
