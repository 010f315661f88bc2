"""Data parallel: the team's code in 2 gloo processes on the CPU against
one process with the same global batch (D1-D7, D9); first, whether
make_model() or wrap_ddp gives an nn.DataParallel (D10, dataparallel.py:
then only one process runs).

  the data     each rank's batch stream from batches(seed, batch/2, rank=r,
               world_size=2), read without training: samples both ranks
               see in an epoch (D1), an epoch order that repeats (D2),
               samples the first epoch gives twice, a sampler's padding (D6);
               rank 0's and rank 1's first batch with both samplers giving
               rank 0's indices, and rank 0's with them one row up: the same
               noise on both ranks that stays with the row (D7)
  two_ranks    2 processes (torch.multiprocessing spawn, gloo on 127.0.0.1),
               the model through wrap_ddp, half the batch each; rank 0
               records; the ranks' parameters are compared after training,
               their buffers at the start of every training forward of the
               wrapped module, i.e. right after DDP's buffer broadcast (D4)
  one_process  one process (a 1-rank gloo group) with the whole batch
Gradients the optimizer gets at step 0 on rank 0 against one process's:
W times them is a sum instead of a mean (D3). evaluate() on the initial
model: rank 0's result against one process's (D5). With BatchNorm each rank
normalises its own half batch, so the weights differ from one process's by
design: ranks_match_one_process is then an expected divergence (its size
reported), and D3 is read from the scale of rank 0's gradient along one
process's rather than from a near-exact match. Every training run has
dropout made the identity (randomness.py: each rank would draw masks for
its own half batch), and the ranks' weights are compared with one
process's within both runs' own rounding, tensor by tensor (their float64
shadows, one_process_float64 and two_ranks_float64, the latter trained in
the same rank processes: noise.py)."""
from __future__ import annotations

import contextlib
import datetime
import gc
import os
import socket
import time
import traceback
from collections import Counter
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Iterator, Optional

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.utils.data import DistributedSampler

from ...digest import digest
from ...recorder import Recorder
from ..adapter import AdapterError, load_adapter, sample_keys
from ..context import BATCHNORM, Context, has_module
from ..declaration import FamilyDeclaration
from ..loop import Run, grad_distance, grad_scale, threads
from ..noise import Shadow, band_rule, band_source, float64_shadow, record_shadow
from ..randomness import DropoutOff
from ..scenario import Check, Family, NotTested, zero_count
from .dataparallel import data_parallel_modules, describe
from .evalshards import EvalSamples, miscounted

DESCRIPTION = ("The team's data parallelism: 2 gloo ranks against one process with the same "
               "global batch; each rank its own shard, reshuffled every epoch, gradients "
               "averaged, metrics over all ranks.")
WORLD = 2
TIMEOUT = 120.0
CLOSE = 0.05
#: batches read per rank looking for a second epoch
MAX_BATCHES = 400
#: the ranks' first batches compared for shared samples
OVERLAP_BATCHES = 8
#: the share of rank 0's first samples also on rank 1 above which every rank sees the same data
D1_OVERLAP = 0.01


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def process_group(rank: int, world: int, port: int) -> Iterator[None]:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=TIMEOUT))
    try:
        yield
    finally:
        dist.destroy_process_group()


def _adapter_source(ctx: Context) -> str:
    module = ctx.adapter.module
    return getattr(module, "__file__", None) or module.__name__


class BufferWatch:
    """The wrapped module's buffers at the start of each training forward
    (a forward pre-hook on the module DDP wraps runs after DDP's buffer
    broadcast): (step, digests) per forward, in this rank's order."""

    def __init__(self, run: Run):
        self.run = run
        self.names = [n for n, _ in run.inner.named_buffers()]
        self.seen: list[tuple[int, list[int]]] = []
        self._hook = run.inner.register_forward_pre_hook(self._pre_forward)

    def _pre_forward(self, module: torch.nn.Module, inputs: Any) -> None:
        if module.training and torch.is_grad_enabled():
            self.seen.append((self.run.steps_done,
                              [digest(b) for _, b in module.named_buffers()]))

    def remove(self) -> None:
        self._hook.remove()

    def compare(self) -> tuple[int, str]:
        """All-gathers every rank's record (a collective: every rank calls
        it) and returns how many buffers differ between ranks at the start of
        some forward, and a note saying where they first did."""
        rows: list = [None] * dist.get_world_size()
        dist.all_gather_object(rows, self.seen)
        differ: list[str] = []
        first = None
        for forwards in zip(*rows):
            step = forwards[0][0]
            for j, name in enumerate(self.names):
                if len({f[1][j] for f in forwards}) > 1 and name not in differ:
                    differ.append(name)
                    first = step if first is None else first
        n = len(rows[0])
        if not differ:
            return 0, (f"At the start of each of rank 0's {n} training forwards (after DDP's "
                       f"buffer broadcast) every rank held the same {len(self.names)} buffers.")
        return len(differ), (
            f"At the start of a training forward of step {first} (after DDP's buffer broadcast, "
            f"if any) the ranks hold different values of {len(differ)} of the model's "
            f"{len(self.names)} buffers: {', '.join(differ[:4])}"
            f"{' ...' if len(differ) > 4 else ''}. Each rank's BatchNorm statistics follow its "
            f"own shard; rank 0 saves and evaluates a model the other ranks do not hold.")


def _rank_main(rank: int, source: str, work: str, port: int, scenario: str, seed: int,
               batch: int, steps: int) -> None:
    """One rank of the 2-process run (spawned): errors go to a file the
    parent turns into an AdapterError."""
    torch.set_num_threads(1)
    try:
        ad = load_adapter(source)
        with process_group(rank, WORLD, port):
            r = Run(ad, seed=seed, batch_size=batch // WORLD, rank=rank, world_size=WORLD,
                    wrap=True, dropout_off=DropoutOff(ad.module))
            ev, seen = _evaluate(ad, r)
            r.model.train()
            r.record(os.path.join(work, "two_ranks.h5"), "two_ranks", scenario,
                     check_ranks=True)
            watch = BufferWatch(r)
            r.train(steps)
            watch.remove()
            if watch.names:
                count, note = watch.compare()
                r.rec.metric("ddp_buffers_differ_after_broadcast", count)
                r.rec.note("ddp_buffers_differ_after_broadcast", note)
            r.save()
            r.close()
            result = {"grads0": r.grads[0] if r.grads else None, "eval": ev,
                      "eval_samples": _gathered(seen),
                      "buffers": bool(watch.names),
                      "nonfinite": r.nonfinite.describe() if r.nonfinite else None,
                      "shadow": _rank_shadow(ad, seed, batch, steps, rank, work, scenario)}
            del r  # DDP's reducer goes before its process group
            gc.collect()
        if rank == 0:
            torch.save(result, os.path.join(work, "rank0.pt"))
    except AdapterError as e:
        _fail(work, rank, e.function, str(e).split("(): ", 1)[-1])
    except Exception as e:  # the team's code in a process group may fail anywhere
        _fail(work, rank, "wrap_ddp", f"the 2-rank run raised {type(e).__name__}: {e}\n"
              f"{traceback.format_exc(limit=3)}")


def _evaluate(ad: Any, run: Run) -> tuple[Optional[dict], Counter]:
    """evaluate() on the run's model, and the validation samples it fed the
    model, counted (evalshards.py; empty without evaluate)."""
    if not ad.has("evaluate"):
        return None, Counter()
    with EvalSamples(run.inner) as seen:
        ev = ad.evaluate(run.model)
    return ev, seen.counts


def _gathered(counts: Counter) -> Counter:
    """Every rank's counts added (a collective: every rank calls it)."""
    rows: list = [None] * dist.get_world_size()
    dist.all_gather_object(rows, counts)
    return sum(rows, Counter())


def _rank_shadow(ad: Any, seed: int, batch: int, steps: int, rank: int, work: str,
                 scenario: str) -> str:
    """The 2-rank run's float64 shadow, recorded by rank 0 as
    two_ranks_float64 (noise.py); "" when it ran, else why it could not."""
    shadow = record_shadow(ad, os.path.join(work, "two_ranks_float64.h5"), "two_ranks_float64",
                           scenario, steps, seed=seed, batch_size=batch // WORLD, rank=rank,
                           world_size=WORLD, wrap=True, dropout_off=DropoutOff(ad.module))
    gc.collect()  # DDP's reducer goes before its process group
    return shadow.why


def _fail(work: str, rank: int, function: str, message: str) -> None:
    with open(os.path.join(work, f"error_rank{rank}.txt"), "w", encoding="utf-8") as f:
        f.write(f"{function}\n{message}")
    raise SystemExit(1)


def _two_ranks(ctx: Context, work: str, scenario: str) -> dict[str, Any]:
    s = ctx.settings
    args = (_adapter_source(ctx), work, free_port(), scenario, s.seed, s.batch_size, s.steps)
    procs = mp.start_processes(_rank_main, args=args, nprocs=WORLD, join=False,
                               start_method="spawn")
    deadline = time.monotonic() + TIMEOUT
    try:
        while not procs.join(timeout=1.0):
            if time.monotonic() > deadline:
                raise AdapterError("train_step", f"the 2-rank run did not finish in "
                                   f"{TIMEOUT:.0f} s (a collective that only one rank calls?)")
    except mp.ProcessExitedException:
        pass
    except mp.ProcessRaisedException:
        pass
    finally:
        for p in procs.processes:
            if p.is_alive():
                p.kill()
    for rank in range(WORLD):
        path = os.path.join(work, f"error_rank{rank}.txt")
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                function, message = f.read().split("\n", 1)
            raise AdapterError(function, f"(rank {rank} of {WORLD}) {message}")
    result = os.path.join(work, "rank0.pt")
    if not os.path.exists(result):
        raise AdapterError("train_step", "the 2-rank run ended without a result")
    return torch.load(result)


def _streams(ctx: Context) -> tuple[list, list]:
    """Each rank's sample keys, read until rank 0's first sample comes back
    and a little beyond (or MAX_BATCHES batches)."""
    s, ad = ctx.settings, ctx.adapter
    streams = []
    for rank in range(WORLD):
        it = ad.batch_iter(s.seed, s.batch_size // WORLD, rank=rank, world_size=WORLD)
        keys: list = []
        for i in range(MAX_BATCHES):
            keys += sample_keys(ad.next_batch(it, i))
            if keys[0] in keys[1:] and len(keys) - keys.index(keys[0], 1) >= 2 * s.batch_size:
                break
        close = getattr(it, "close", None)
        if callable(close):
            close()
        streams.append(keys)
    return streams[0], streams[1]


def _epoch(keys: list) -> list:
    return keys[:keys.index(keys[0], 1)] if keys[0] in keys[1:] else keys


def _first_repeat(keys: list) -> Optional[int]:
    """The first position whose sample this stream has already given (None
    when none does)."""
    seen: set = set()
    for i, k in enumerate(keys):
        if k in seen:
            return i
        seen.add(k)
    return None


def padding_duplicates(streams: list, batch: int) -> Optional[tuple[int, int]]:
    """(samples given twice in the first epoch across the ranks, the
    epoch's length per rank), or None when no rank's stream reaches a second
    epoch. A sampler's padding puts a duplicate on another rank than the
    original (pad < world size), never on the same one, so each rank's
    first repeat of its own samples lies in the second epoch: at its start,
    or a few samples in when the reshuffled epoch begins with samples the
    other rank had. Epochs hold whole batches, so the epoch ends at the last
    batch boundary at or before the earliest such repeat."""
    repeats = [r for r in (_first_repeat(k) for k in streams) if r is not None]
    if not repeats:
        return None
    length = min(repeats) // batch * batch
    if length == 0 or any(len(k) < length for k in streams):
        return None
    epoch = [k for keys in streams for k in keys[:length]]
    return len(epoch) - len(set(epoch)), length


@contextlib.contextmanager
def sampler_as_rank0(rotate: int = 0) -> Iterator[list]:
    """DistributedSampler.__iter__ patched for the block: every rank's
    sampler gives rank 0's indices, rotated left by `rotate` (the same
    samples on every rank, or one row further up); the list yields the rank
    of each sampler iterated."""
    original = DistributedSampler.__iter__
    used: list = []

    def patched(self: DistributedSampler) -> Iterator[int]:
        rank, self.rank = self.rank, 0
        try:
            order = list(original(self))
        finally:
            self.rank = rank
        used.append(rank)
        return iter(order[rotate:] + order[:rotate])

    DistributedSampler.__iter__ = patched  # type: ignore[method-assign]
    try:
        yield used
    finally:
        DistributedSampler.__iter__ = original  # type: ignore[method-assign]


def _tensors(batch: Any) -> list[torch.Tensor]:
    if isinstance(batch, torch.Tensor):
        return [batch.detach().cpu()]
    values = batch.values() if isinstance(batch, dict) else \
        batch if isinstance(batch, (tuple, list)) else ()
    return [t for v in values for t in _tensors(v)]


def _first_batch(ctx: Context, rank: int, rotate: int) -> tuple[list[torch.Tensor], list]:
    """The first batch batches() gives `rank` with its sampler patched
    (sampler_as_rank0), drawn after torch.manual_seed(seed) as in a rank
    process; and the ranks of the samplers it iterated."""
    s, ad = ctx.settings, ctx.adapter
    with sampler_as_rank0(rotate) as used, torch.random.fork_rng(devices=[]):
        torch.manual_seed(s.seed)
        it = ad.batch_iter(s.seed, s.batch_size // WORLD, rank=rank, world_size=WORLD)
        batch = ad.next_batch(it, 0)
        close = getattr(it, "close", None)
        if callable(close):
            close()
    return _tensors(batch), used


def noise_probe(ctx: Context) -> Optional[tuple[bool, bool, str]]:
    """Whether the ranks' batches share their random noise (D7): rank 0's
    and rank 1's first batch on the same samples (both samplers give rank
    0's indices) are bitwise equal, and the noise stays with the row, not
    the sample (rank 0's batch with its samples one row up differs from its
    own on those samples). Returns (same on both ranks, follows the row,
    a note), or None when batches() iterates no DistributedSampler of each
    rank (the audit gives the ranks the same samples through it)."""
    a, used_a = _first_batch(ctx, 0, 0)
    b, used_b = _first_batch(ctx, 1, 0)
    c, used_c = _first_batch(ctx, 0, 1)
    if 0 not in used_a or 1 not in used_b or 0 not in used_c:
        return None
    same = len(a) == len(b) and all(x.shape == y.shape and torch.equal(x, y)
                                    for x, y in zip(a, b))
    rows = [(x, y) for x, y in zip(c, a) if x.dim() and x.shape == y.shape]
    moved = bool(rows) and all(torch.equal(x[:-1], y[1:]) for x, y in rows)
    da, db = (f"{digest(t[0]):016x}" if t else "-" for t in (a, b))
    note = (f"Given the same samples (each rank's DistributedSampler giving rank 0's indices), "
            f"rank 0's first batch (digest {da}) and rank 1's ({db}) are " +
            ("bitwise equal" if same else "different") + "; with the samples one row up, "
            "each sample's values " + ("stay" if moved else "change") + ". ")
    if same and not moved:
        note += ("The random noise the batches receive follows the row and is the same on "
                 "every rank: the ranks add the same noise to different samples.")
    elif same:
        note += "The noise (if any) follows the sample, as one process would draw it."
    else:
        note += "Each rank draws its own noise."
    return same, not moved, note


def _counted(fam: Family, name: str, metric: str, pitfall: str, about: str,
             why_not: Optional[str]) -> None:
    """A check that one_process's metric (a count) is 0, naming `pitfall`;
    not tested, with why_not as the reason, when that is given."""
    if why_not is not None:
        fam.not_tested.append(NotTested(name, (pitfall,), why_not))
    else:
        fam.checks.append(zero_count(name, "one_process", metric, pitfall, about))


def _processes_check() -> Check:
    return zero_count("ranks_are_processes", "one_process", "ddp_data_parallel_modules", "D10",
                      "the model is wrapped in DistributedDataParallel, one process per "
                      "device, not in nn.DataParallel")


def _data_parallel_only(ctx: Context, fam: Family, built: list, wrapped: list) -> Family:
    """D10 failed: one process trains through the team's DataParallel (on
    the CPU it runs the module as it is) and records where it sits; the
    checks between ranks are not tested, as the ranks would not be
    replicas of one model."""
    with threads(1), process_group(0, 1, free_port()):
        one = ctx.recorded(fam.scenario, "one_process", wrap=True)
        one.train(ctx.settings.steps)
        one.rec.metric("ddp_data_parallel_modules", len(set(built) | set(wrapped)))
        one.rec.note("ddp_data_parallel_modules", describe(built, wrapped))
        fam.runs["one_process"] = one.save()
        one.close()
        ctx.runs[ctx.runs.index(one)] = SimpleNamespace(nonfinite=one.nonfinite,
                                                        autocast=one.autocast)
        del one
        gc.collect()
    fam.checks.append(_processes_check())
    fam.not_tested.append(NotTested(
        "all_checks", ("D1", "D2", "D3", "D4", "D5", "D6", "D7", "D9"),
        "the model is an nn.DataParallel (see D10): launched once per device it averages "
        "nothing across processes, so 2 ranks of it are not replicas to compare"))
    return fam


@dataclass
class Shards:
    """What the ranks' batch streams show, read before any training: the
    share of rank 0's first samples also on rank 1 (D1), where rank 0's
    second epoch starts and whether it repeats the first's order (D2), a
    sampler's padding duplicates (D6) and the ranks' shared noise (D7)."""
    first0: int                # rank 0's first samples compared with rank 1's
    first1: int
    overlap: float
    again: Optional[int]       # the index of rank 0's second epoch, None: none found
    repeats: bool
    padded: Optional[tuple[int, int]]
    noise: Optional[tuple[bool, bool, str]]


def _measure_shards(ctx: Context) -> Shards:
    s = ctx.settings
    r0, r1 = _streams(ctx)
    first = OVERLAP_BATCHES * (s.batch_size // WORLD)  # well inside the first epoch
    e0, e1 = _epoch(r0)[:first], _epoch(r1)[:first]
    again = r0.index(r0[0], 1) if r0[0] in r0[1:] else None
    window = s.batch_size
    return Shards(len(e0), len(e1), len(set(e0) & set(e1)) / max(len(e0), 1), again,
                  again is not None and r0[again:again + window] == r0[:window],
                  padding_duplicates([r0, r1], s.batch_size // WORLD), noise_probe(ctx))


def _note_shards(rec: Recorder, sh: Shards) -> None:
    rec.metric("ddp_rank_overlap", sh.overlap)
    rec.note("ddp_rank_overlap", (
        f"Of rank 0's first {sh.first0} samples {sh.overlap:.1%} are also among rank 1's first "
        f"{sh.first1}" + (": every rank trains on the same data." if sh.overlap > 0.5 else
                          ".")))
    if sh.padded is not None and sh.overlap <= D1_OVERLAP:
        rec.metric("ddp_padding_duplicates", sh.padded[0])
        rec.note("ddp_padding_duplicates", (
            f"In the first epoch ({sh.padded[1]} samples per rank, {WORLD * sh.padded[1]} in "
            f"all) " + (f"{sh.padded[0]} sample(s) reach the ranks twice: the sampler pads the "
                        f"dataset to a multiple of the world size with duplicates, so the "
                        f"gradient (and any metric over the epoch) counts them twice."
                        if sh.padded[0] else "no sample reaches the ranks twice.")))
    if sh.noise is not None:
        rec.metric("ddp_ranks_share_noise", int(sh.noise[0] and sh.noise[1]))
        rec.note("ddp_ranks_share_noise", sh.noise[2])
    if sh.again is not None:
        rec.metric("ddp_epoch_order_repeats", int(sh.repeats))
        rec.note("ddp_epoch_order_repeats", (
            f"Rank 0's second epoch (from sample {sh.again}) " +
            ("visits its samples in the first epoch's order." if sh.repeats else
             "is shuffled anew.")))


def _note_step0_gradients(rec: Recorder, g_rank: dict, g_one: dict, batchnorm: bool) -> None:
    d_w = grad_distance(g_rank, g_one, WORLD)
    d_1 = grad_distance(g_rank, g_one)
    scale = grad_scale(g_rank, g_one)
    # 0: rank 0's gradient is W times one process's (summed), 1: the same (averaged)
    summed = abs(scale - WORLD) / (WORLD - 1)
    rec.metric("ddp_step0_distance_from_w_times", d_w)
    rec.metric("ddp_step0_scale_distance_from_w", summed)
    rec.note("ddp_step0_grads", (
        f"At step 0 rank 0's gradient (after the ranks' reduction) is at relative "
        f"distance {d_1:.3g} from one process's on the same global batch, and "
        f"{d_w:.3g} from {WORLD} times it; along one process's gradient it measures "
        f"{scale:.4g} times it" +
        (f" (the model has BatchNorm, so the ranks' half-batch statistics move it off "
         f"that direction: {WORLD} times would be a sum)." if batchnorm else ".")))


def _note_evaluation(rec: Recorder, ev: Optional[dict], seen: Counter,
                     rank0: dict[str, Any]) -> tuple[Optional[int], str]:
    """The validation samples the ranks counted (D9) and rank 0's metric
    against one process's (D5); returns the samples miscounted (None: not
    counted) and the note saying why or how."""
    eval_odd, eval_note = miscounted(seen, rank0["eval_samples"], WORLD) \
        if ev is not None else (None, "the adapter has no evaluate")
    if eval_odd is not None:
        rec.metric("ddp_eval_samples_miscounted", eval_odd)
        rec.note("ddp_eval_samples_miscounted", eval_note)
    if ev is not None and rank0["eval"] is not None:
        diffs = {k: abs(rank0["eval"][k] - v) / max(abs(v), 1e-12)
                 for k, v in ev.items() if k in rank0["eval"]}
        worst = max(diffs, key=diffs.get) if diffs else None
        if worst is not None:
            rec.metric("ddp_rank0_metric_rel_diff", diffs[worst])
            rec.note("ddp_rank0_metric", (
                f"evaluate() on the initial model: '{worst}' is {rank0['eval'][worst]:.6g} "
                f"on rank 0 of {WORLD} and {ev[worst]:.6g} in one process."))
    return eval_odd, eval_note


@dataclass
class OneProcess:
    """What the one-process run measured that the checks ask about."""
    batchnorm: bool
    gradients: bool                # both runs gave the optimizer gradients at step 0
    evaluated: Optional[dict]      # evaluate() on the initial model, None: no evaluate
    eval_odd: Optional[int]        # validation samples miscounted, None: not counted
    eval_note: str
    shadow: Shadow


def _train_one_process(ctx: Context, fam: Family, dropout: DropoutOff, sh: Shards,
                       rank0: dict[str, Any], data_parallel: str) -> OneProcess:
    """The whole batch in a 1-rank process group, recorded with the notes
    of every measurement (the ranks' too), and its float64 shadow."""
    s = ctx.settings
    with threads(1), process_group(0, 1, free_port()):
        one = ctx.recorded(fam.scenario, "one_process", wrap=True, dropout_off=dropout)
        batchnorm = has_module(one.inner, BATCHNORM)
        ev, seen = _evaluate(ctx.adapter, one)
        one.model.train()
        one.train(s.steps)
        rec = one.rec
        _note_shards(rec, sh)
        g_one, g_rank = one.grads[0] if one.grads else None, rank0["grads0"]
        if g_one and g_rank:
            _note_step0_gradients(rec, g_rank, g_one, batchnorm)
        eval_odd, eval_note = _note_evaluation(rec, ev, seen, rank0)
        rec.metric("ddp_data_parallel_modules", 0)
        rec.note("ddp_data_parallel_modules", data_parallel)
        fam.runs["one_process"] = one.save()
        one.close()
        shadow = float64_shadow(ctx, fam.scenario, one, s.steps, dropout)
        ctx.runs[ctx.runs.index(one)] = SimpleNamespace(nonfinite=one.nonfinite,
                                                        autocast=one.autocast)
        del one  # DDP's reducer goes before its process group
        gc.collect()
    return OneProcess(batchnorm, bool(g_one and g_rank), ev, eval_odd, eval_note, shadow)


def _check_replicas(fam: Family, one: OneProcess, ranks_shadow: Shadow, buffers: bool) -> None:
    """The ranks against one process (D1, D3, D7 explain a difference) and
    against each other: parameters, buffers (D4)."""
    fallback = "close(1e-4, 1e-6)"  # float32 summation order, where float64 cannot run
    fam.checks += [
        _processes_check(),
        Check("ranks_match_one_process", "equivalence", "one_process", "two_ranks",
              quantities=("params",), **band_rule(one.shadow, ranks_shadow, fallback),
              explained_by=("D1", "D3", "D7"), expect_divergence=one.batchnorm,
              about=f"{WORLD} ranks with half the batch each train the weights one process "
                    f"trains with the whole batch, "
                    f"{band_source(one.shadow, ranks_shadow, fallback)}" +
                    (" (the model has BatchNorm: each rank normalises its own half batch, "
                     "reported as expected)" if one.batchnorm else "")),
        Check("each_rank_its_own_shard", "metric_max", "one_process",
              quantities=("ddp_rank_overlap", "ddp_rank_overlap"), threshold=D1_OVERLAP,
              catalogue=("D1",), about="the ranks' samples in an epoch do not overlap"),
        Check("replicas_hold_the_same_parameters", "metric_max", "two_ranks",
              quantities=("rank_param_mismatch", "rank_mismatch"), threshold=0,
              about="after training every rank holds the same parameters"),
    ]
    if buffers:
        fam.checks.append(zero_count(
            "replicas_hold_the_same_buffers", "two_ranks", "ddp_buffers_differ_after_broadcast",
            "D4", "every rank holds the same buffers at the start of each forward (after DDP's "
            "buffer broadcast)"))
    else:
        fam.not_tested.append(NotTested("replicas_hold_the_same_buffers", ("D4",),
                                        "the model has no buffers"))


def _check_epoch_order(fam: Family, sh: Shards) -> None:
    _counted(fam, "epochs_reshuffled", "ddp_epoch_order_repeats", "D2",
             "each epoch visits the rank's samples in a new order",
             None if sh.again is not None else f"no second epoch within {MAX_BATCHES} batches")


def _check_gradient_average(fam: Family, one: OneProcess) -> None:
    if one.gradients:
        fam.checks.append(Check(
            "gradients_averaged_over_ranks", "metric_min", "one_process",
            quantities=("ddp_step0_scale_distance_from_w" if one.batchnorm else
                        "ddp_step0_distance_from_w_times", "ddp_step0_grads"),
            threshold=0.5 if one.batchnorm else CLOSE, catalogue=("D3",),
            about=f"the reduced gradient is not {WORLD} times one process's"))
    else:
        fam.not_tested.append(NotTested("gradients_averaged_over_ranks", ("D3",),
                                        "the first step gave the optimizer no gradients"))


def _check_evaluation(fam: Family, one: OneProcess, rank0_eval: Optional[dict]) -> None:
    """Every validation sample counted once over the ranks (D9), rank 0's
    metric over every rank (D5)."""
    _counted(fam, "validation_samples_counted_once", "ddp_eval_samples_miscounted", "D9",
             "the ranks' evaluations together count every validation sample as often as "
             "one process does", one.eval_note if one.eval_odd is None else None)
    if one.eval_odd:
        fam.not_tested.append(NotTested(
            "metric_over_all_ranks", ("D5",), f"the ranks' evaluation counts {one.eval_odd} "
            f"validation sample(s) otherwise than one process does (see D9), so rank 0's metric "
            f"differs from one process's whether or not it covers every rank"))
    elif one.evaluated is not None and rank0_eval is not None:
        fam.checks.append(Check(
            "metric_over_all_ranks", "metric_max", "one_process",
            quantities=("ddp_rank0_metric_rel_diff", "ddp_rank0_metric"), threshold=1e-4,
            catalogue=("D5",), about="rank 0's evaluation covers every rank's shard"))
    else:
        fam.not_tested.append(NotTested("metric_over_all_ranks", ("D5",),
                                        "the adapter has no evaluate"))


def _check_noise_and_padding(fam: Family, sh: Shards) -> None:
    """Each rank its own noise (D7); no sample twice in an epoch (D6)."""
    _counted(fam, "ranks_draw_their_own_noise", "ddp_ranks_share_noise", "D7",
             "the ranks' batches do not add the same random noise to different samples",
             None if sh.noise is not None else "batches() iterates no DistributedSampler with "
             "the rank (the audit gives both ranks the same samples through it)")
    _counted(fam, "no_padding_duplicates", "ddp_padding_duplicates", "D6",
             "no sample reaches the ranks twice in an epoch (a sampler's padding)",
             "the ranks share their samples (see D1)" if sh.overlap > D1_OVERLAP else
             None if sh.padded is not None else
             f"no sample recurs within {MAX_BATCHES} batches of a rank (no second epoch, or "
             f"the samples' first tensor is augmented afresh)")


def run(ctx: Context) -> Family:
    fam = Family("ddp", DESCRIPTION)
    s, ad = ctx.settings, ctx.adapter
    if s.batch_size % WORLD:
        fam.not_tested.append(NotTested("all_checks", ("D1", "D2", "D3", "D4", "D5", "D6",
                                                        "D7"),
                                        f"batch_size {s.batch_size} is odd"))
        return fam
    if not (ad.accepts("batches", "rank") and ad.accepts("batches", "world_size")):
        raise AdapterError("batches", "must take rank and world_size keywords when the adapter "
                           "defines wrap_ddp: batches(seed, batch_size, rank=0, world_size=1) "
                           "yields this rank's shard")
    with process_group(0, 1, free_port()):
        built, wrapped = data_parallel_modules(ad, s.seed)
        gc.collect()  # a DDP's reducer goes before its process group
    if built or wrapped:
        return _data_parallel_only(ctx, fam, built, wrapped)
    work = os.path.join(ctx.work, "ddp")
    os.makedirs(work, exist_ok=True)

    shards = _measure_shards(ctx)
    rank0 = _two_ranks(ctx, work, fam.scenario)
    fam.runs["two_ranks"] = os.path.join(work, "two_ranks.h5")
    dropout = DropoutOff(ad.module)
    one = _train_one_process(ctx, fam, dropout, shards, rank0, describe(built, wrapped))
    ranks_shadow = (Shadow(None, None, rank0["shadow"]) if rank0["shadow"] else
                    Shadow("two_ranks_float64", os.path.join(work, "two_ranks_float64.h5")))
    for shadow in (one.shadow, ranks_shadow):
        if shadow.run:
            fam.runs[shadow.run] = shadow.path

    fam.description += " " + dropout.describe()
    _check_replicas(fam, one, ranks_shadow, bool(rank0["buffers"]))
    _check_epoch_order(fam, shards)
    _check_gradient_average(fam, one)
    _check_evaluation(fam, one, rank0["eval"])
    _check_noise_and_padding(fam, shards)
    return fam


FAMILY = FamilyDeclaration("ddp", run, ("D1", "D2", "D3", "D4", "D5", "D6", "D7", "D9", "D10"),
                           needs=("wrap_ddp",), description=DESCRIPTION)
