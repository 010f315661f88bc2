"""Deployment parity: the exported model (TorchScript or ONNX) against the
eager model it came from (X1-X6).

After a few training steps, the trained model is exported, by the team's
export(model, example_batch, path) when the adapter has it (given a copy
of the model as training leaves it, in training mode), else by the audit
itself (torch.jit.trace, torch.jit.script, and torch.onnx.export run with
onnxruntime). Each export is loaded (the team's serve(path) when it takes
model inputs, else torch.jit.load or an onnxruntime session) and run on
held-out batches (batches() with another seed) at two batch sizes, and at
two sequence lengths when the input is a [batch, length] tensor of token
ids; eager model.eval() under torch.no_grad() is the reference.

Tolerance (docs/audit.md, "no false alarm from rounding"): each batch's
band is 4 x 2 x D, D the eager float32 output's largest distance from a
float64 copy of the model on the same batch (at least one float32 ulp of
its largest value): the model's own float32 rounding, and the export's
taken to be of the same size (the same ops in float32). A reduced-precision
export is held to the team's stated budget instead, AUDIT["half_tolerance"]
(relative L2 distance, 0.05 unless stated).

Which mistake a mismatch is (one ID each): X3 when it appears only at the
sizes other than the example's (with the ONNX graph's fixed dimensions);
X1 when the same export function given the model in eval mode matches;
X5 when the export holds float16/bfloat16; X2 when torch.jit.trace warned
during the export or the audit's own trace of the model differs on the
same batches; X6 otherwise. X4 compares serve(path)(raw) with eager
model(preprocess(raw)) and names the statistic of the served input that
differs; without serve(), an adapter's preprocess_for_inference(raw) (the
inference side's own transform) is fed to the eager model instead, against
the same reference, so no export is needed for it."""
from __future__ import annotations

import contextlib
import copy
import itertools
import math
import os
import warnings
import zipfile
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterator, Optional

import torch

from ..adapter import AdapterError
from ..context import Context
from ..declaration import FamilyDeclaration
from ..scenario import Family, NotTested, zero_count

DESCRIPTION = ("Deployment parity: the exported model (the team's export, else TorchScript and "
               "ONNX made by the audit) against eager model.eval() on held-out batches at two "
               "batch sizes, within the model's own float32 rounding.")
#: the band is this many times the two sides' rounding (the audit's usual margin)
WIDEN = 4.0
#: held-out batches come from batches() at the audit's seed plus this
HELD_OUT_SEED = 1000
REDUCED = (torch.float16, torch.bfloat16)
#: ORT element types as torch dtypes (what the audit's own loader feeds an ONNX graph)
ORT_TYPES = {"tensor(float)": torch.float32, "tensor(float16)": torch.float16,
             "tensor(double)": torch.float64, "tensor(int64)": torch.int64,
             "tensor(int32)": torch.int32, "tensor(bool)": torch.bool}
CHECKS = {  # check name -> (ID, what it asks of the team's code)
    "export_in_eval_mode": ("X1", "the model is exported in eval mode"),
    "export_keeps_control_flow": ("X2", "the export keeps the model's data-dependent branches"),
    "export_dynamic_axes": ("X3", "the export runs at every batch size (and length)"),
    "serving_preprocess_matches": ("X4", "serving prepares inputs as training does"),
    "half_export_within_tolerance": ("X5", "a reduced-precision export stays within the "
                                           "stated half_tolerance"),
    "export_matches_eager": ("X6", "the exported outputs equal eager's within float rounding"),
}


class Unavailable(Exception):
    """What the family needs cannot be imported or run here (a not_tested reason)."""


def onnxruntime() -> Any:
    """The onnxruntime module; Unavailable when it cannot be imported."""
    try:
        import onnxruntime as ort  # noqa: PLC0415 (optional dependency)
    except Exception as e:  # an ImportError, or a broken install
        raise Unavailable(f"onnxruntime cannot be imported ({type(e).__name__}: {e}); "
                          f"install it (ci/deps.sh) to check ONNX exports") from e
    return ort


# ---- inputs and outputs -----------------------------------------------------------------

def model_input(batch: Any) -> torch.Tensor:
    """The model's input in a batch: the tensor itself, or a tuple/list
    batch's first element (x of (x, y)). TypeError for anything else."""
    if isinstance(batch, torch.Tensor):
        return batch
    if isinstance(batch, (tuple, list)) and batch and isinstance(batch[0], torch.Tensor):
        return batch[0]
    raise TypeError(f"the model input of a {type(batch).__name__} batch is not known (the "
                    f"family takes a tensor batch or the first tensor of a tuple/list batch)")


def outputs(out: Any) -> list[torch.Tensor]:
    """A forward's outputs as a flat list of tensors (numpy arrays from
    onnxruntime included), in order."""
    if isinstance(out, torch.Tensor):
        return [out.detach()]
    if hasattr(out, "__array__") and not isinstance(out, (list, tuple, dict)):
        return [torch.as_tensor(out)]
    if isinstance(out, dict):
        return [t for v in out.values() for t in outputs(v)]
    if isinstance(out, (list, tuple)):
        return [t for v in out for t in outputs(v)]
    return []


def float_ulp(y: torch.Tensor) -> float:
    """One float32 ulp of the largest magnitude in y (the smallest band)."""
    top = float(y.detach().abs().max()) if y.numel() else 0.0
    return math.ulp(top) * 2.0 ** (52 - 23) if top > 0 else 2.0 ** -126


@dataclass
class Case:
    """One held-out batch: its label, the raw model input (before the
    adapter's preprocess) and the model input; eager's outputs and band."""
    label: str
    size: int
    raw: torch.Tensor
    x: torch.Tensor
    at_example_shape: bool = True   # x has the example batch's input shape
    eager: list = field(default_factory=list)
    band: float = 0.0
    band_from: str = ""


@dataclass
class Outcome:
    """An exported model against eager on one Case."""
    case: Case
    ratio: float = 0.0           # largest distance / band
    relative: float = 0.0        # ||exported - eager|| / ||eager||
    distance: float = 0.0
    error: str = ""              # the exported model raised (its message)

    @property
    def ok(self) -> bool:
        return not self.error and self.ratio <= 1.0

    def describe(self) -> str:
        if self.error:
            return f"{self.case.label}: fails ({self.error})"
        return (f"{self.case.label}: max |diff| {self.distance:.3g}, band {self.case.band:.3g} "
                f"({self.case.band_from}), relative {self.relative:.3g}")


def compare(fn: Callable[[torch.Tensor], Any], case: Case, use_raw: bool = False) -> Outcome:
    """fn(case.x) (fn(case.raw) with use_raw) against the case's eager outputs."""
    try:
        with torch.no_grad():
            got = outputs(fn(case.raw if use_raw else case.x))
    except Exception as e:  # the exported runtime may raise anything
        return Outcome(case, error=f"{type(e).__name__}: {_first_line(e)}")
    if len(got) != len(case.eager) or any(g.shape != e.shape for g, e in zip(got, case.eager)):
        shapes = [list(g.shape) for g in got]
        return Outcome(case, error=f"outputs of shapes {shapes}, eager gives "
                                   f"{[list(e.shape) for e in case.eager]}")
    dist = num = den = 0.0
    for g, e in zip(got, case.eager):
        d = g.double() - e.double()
        if d.numel():
            dist = max(dist, float(d.abs().max()))
        num += float((d * d).sum())
        den += float((e.double() ** 2).sum())
    rel = math.sqrt(num / den) if den > 0 else (0.0 if num == 0 else math.inf)
    if not math.isfinite(dist):
        dist = math.inf
    return Outcome(case, ratio=dist / case.band if case.band > 0 else math.inf, relative=rel,
                   distance=dist)


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return (text[0] if text else "")[:200]


def held_out(ctx: Context, model: torch.nn.Module, size: int) -> tuple[Any, list[Case]]:
    """An example batch (the training stream's first, at `size`) and the held-out
    cases: batches() at another seed at `size` and at a smaller size, and
    for a [batch, length] integer input a half-length copy."""
    ad = ctx.adapter
    example = ad.next_batch(ad.batch_iter(ctx.settings.seed, size), 0)
    shape = model_input(example).shape
    other = size // 4 + 1 if size >= 4 else size + 1
    cases = []
    for n in (size, other):
        stream = ad.batch_iter(ctx.settings.seed + HELD_OUT_SEED, n)
        # two batches at the example's size: branches taken by chance get two draws
        for k in range(2 if n == size else 1):
            raw = model_input(ad.next_batch(stream, k))
            cases.append(Case(f"held-out batch {k} of {n}", n, raw, prepared(ctx, raw),
                              raw.shape == shape))
    raw = cases[0].raw
    if not raw.is_floating_point() and raw.dim() == 2 and raw.shape[1] >= 2:
        short = raw[:, : raw.shape[1] // 2]
        cases.append(Case(f"held-out batch of {size} at length {short.shape[1]}", size, short,
                          prepared(ctx, short), False))
    return example, cases


def prepared(ctx: Context, raw: torch.Tensor) -> torch.Tensor:
    """The model input of a raw one: the adapter's preprocess(raw), or raw."""
    if not ctx.adapter.has("preprocess"):
        return raw
    x = ctx.adapter.call("preprocess", raw)
    if not isinstance(x, torch.Tensor):
        raise AdapterError("preprocess", f"must return a tensor, got {type(x).__name__}")
    return x


def reference(model: torch.nn.Module, cases: list[Case]) -> list[Case]:
    """Eager outputs (eval, no_grad) and each case's band, from a float64
    copy of the model; the cases eager itself cannot run are dropped."""
    model.eval()
    try:
        shadow: Optional[torch.nn.Module] = copy.deepcopy(model).double()
    except Exception:  # a module that cannot be copied or cast
        shadow = None
    kept = []
    for c in cases:
        try:
            with torch.no_grad():
                c.eager = outputs(model(c.x))
        except Exception:  # e.g. a model that only takes its training length
            continue
        if not c.eager:
            continue
        ulp = max(float_ulp(e) for e in c.eager)
        d = _shadow_distance(shadow, c) if shadow is not None else None
        if d is None:
            # no float64 run: a fixed relative rule, float32 summation order's
            c.band = max(1e-4 * max(float(e.abs().max()) for e in c.eager if e.numel()), ulp)
            c.band_from = "1e-4 of the largest output: no float64 copy of the model ran"
        else:
            c.band = WIDEN * 2 * max(d, ulp)
            c.band_from = f"4 x 2 x {max(d, ulp):.3g}, eager float32 against float64"
        kept.append(c)
    return kept


def _shadow_distance(shadow: torch.nn.Module, c: Case) -> Optional[float]:
    x = c.x.double() if c.x.is_floating_point() else c.x
    try:
        with torch.no_grad():
            got = outputs(shadow(x))
    except Exception:  # float32 constants built in forward, say
        return None
    if len(got) != len(c.eager):
        return None
    return max((float((g.double() - e.double()).abs().max()) for g, e in zip(got, c.eager)
                if e.numel()), default=0.0)


# ---- exports and loaders ----------------------------------------------------------------

@dataclass
class Loaded:
    """An exported model loaded for inference."""
    fn: Callable[[torch.Tensor], Any]
    kind: str                                    # "TorchScript" / "ONNX" / "serve()"
    dtype: Optional[torch.dtype] = None          # its floating-point precision
    fixed: dict = field(default_factory=dict)    # ONNX: input axis -> fixed size


def load(path: str) -> Loaded:
    """The file at path as the audit serves it: a TorchScript archive (a zip)
    by torch.jit.load, anything else as ONNX in onnxruntime. Inputs are
    cast to the model's floating type (as a correct server does)."""
    if zipfile.is_zipfile(path):
        m = torch.jit.load(path, map_location="cpu")
        m.eval()
        dtype = next((p.dtype for p in m.parameters() if p.is_floating_point()), torch.float32)

        def run_ts(x: torch.Tensor) -> Any:
            return m(x.to(dtype) if x.is_floating_point() else x)
        return Loaded(run_ts, "TorchScript", dtype)
    ort = onnxruntime()
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    inp = sess.get_inputs()[0]
    want = ORT_TYPES.get(inp.type, torch.float32)
    fixed = {i: d for i, d in enumerate(inp.shape) if isinstance(d, int)}
    reduced = any(ORT_TYPES.get(o.type) in REDUCED for o in sess.get_outputs()) or \
        want in REDUCED

    def run_onnx(x: torch.Tensor) -> Any:
        return sess.run(None, {inp.name: x.detach().cpu().to(want).numpy()})
    return Loaded(run_onnx, "ONNX", torch.float16 if reduced else torch.float32, fixed)


@contextlib.contextmanager
def tracer_warnings() -> Iterator[list]:
    """Collects torch.jit.TracerWarning messages raised in the block."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always", torch.jit.TracerWarning)
        found: list = []
        yield found
    found.extend(str(w.message).split(". ")[0][:200] + "." for w in seen
                 if issubclass(w.category, torch.jit.TracerWarning))
    for w in seen:  # everything else as it would have been shown
        if not issubclass(w.category, torch.jit.TracerWarning):
            warnings.showwarning(w.message, w.category, w.filename, w.lineno)


def team_export(ctx: Context, model: torch.nn.Module, example: Any, folder: str, name: str,
                eval_first: bool) -> tuple[str, list]:
    """The adapter's export() of a copy of the model (in training mode as
    training leaves it, or put in eval mode first); the path it wrote and
    the TracerWarnings it raised."""
    m = copy.deepcopy(model)
    m.train(not eval_first)
    path = os.path.join(folder, name)
    with tracer_warnings() as warned:
        out = ctx.adapter.call("export", m, example, path)
    out = os.fspath(out) if out is not None else path
    if not os.path.exists(out):
        raise AdapterError("export", f"must return the path it wrote; {out} does not exist")
    return out, warned


def own_trace(model: torch.nn.Module, x: torch.Tensor) -> tuple[Any, list]:
    """torch.jit.trace of an eval copy at x, and its TracerWarnings."""
    m = copy.deepcopy(model).eval()
    with tracer_warnings() as warned:
        traced = torch.jit.trace(m, x, check_trace=False)
    return traced, warned


def own_onnx(model: torch.nn.Module, x: torch.Tensor, path: str) -> Loaded:
    """torch.onnx.export of an eval copy with a dynamic batch axis (and length
    axis for a [batch, length] integer input), loaded in onnxruntime."""
    onnxruntime()  # Unavailable first: no export without a runtime to check it
    m = copy.deepcopy(model).eval()
    axes = {0: "batch"}
    if not x.is_floating_point() and x.dim() == 2:
        axes[1] = "length"
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the exporter's shape-inference chatter
        torch.onnx.export(m, (x,), path, input_names=["x"], dynamic_axes={"x": axes},
                          opset_version=14)
    return load(path)


# ---- the family -------------------------------------------------------------------------

@dataclass
class Findings:
    """Per ID: the mismatching cases and the note explaining them."""
    counts: dict = field(default_factory=lambda: {i: 0 for i, _ in CHECKS.values()})
    notes: dict = field(default_factory=dict)
    not_tested: dict = field(default_factory=dict)   # ID -> reason

    def add(self, pitfall: str, count: int, note: str) -> None:
        self.counts[pitfall] += count
        self.notes[pitfall] = (self.notes.get(pitfall, "") + " " + note).strip()


def run(ctx: Context) -> Family:
    fam = Family("export", DESCRIPTION)
    s = ctx.settings
    r = ctx.recorded(fam.scenario, "trained")
    finished = r.train(s.steps)
    r.close()  # the audit's hooks off the model before it is copied or scripted
    found = Findings()
    if finished:
        folder = os.path.join(ctx.work, "export")
        os.makedirs(folder, exist_ok=True)
        try:
            example, cases = held_out(ctx, r.inner, s.batch_size)
        except TypeError as e:
            example, cases = None, []
            for i, _ in CHECKS.values():
                found.not_tested[i] = str(e)
        cases = reference(r.inner, cases)
        if example is not None and not cases:
            for i, _ in CHECKS.values():
                found.not_tested[i] = "eager model(x) raised on every held-out batch"
        elif cases:
            if ctx.adapter.has("export"):
                _team(ctx, r.inner, example, cases, folder, found)
            else:
                _own(ctx, r.inner, cases, folder, found)
            if "X4" in found.not_tested and ctx.adapter.has("preprocess_for_inference"):
                del found.not_tested["X4"]
                _inference_preprocessing(ctx, r.inner, cases, found)
    for i, text in found.notes.items():
        r.rec.note(f"export_{i.lower()}", text)
    for i, n in found.counts.items():
        r.rec.metric(f"export_{i.lower()}_mismatches", n)
    fam.runs["trained"] = r.save()
    reasons = set(found.not_tested.values())
    if len(found.not_tested) == len(CHECKS) and len(reasons) == 1:
        # nothing ran, for one reason: one check says so (as a family without its piece)
        fam.not_tested.append(NotTested("all_checks", tuple(found.counts), reasons.pop()))
        return fam
    # after a non-finite loss audit.py turns these into not_tested (see N1)
    for name, (pitfall, about) in CHECKS.items():
        if pitfall in found.not_tested:
            fam.not_tested.append(NotTested(name, (pitfall,), found.not_tested[pitfall]))
        else:
            fam.checks.append(zero_count(name, "trained", f"export_{pitfall.lower()}_mismatches",
                                         pitfall, about, note=f"export_{pitfall.lower()}"))
    return fam


FAMILY = FamilyDeclaration("export", run, ("X1", "X2", "X3", "X4", "X5", "X6"),
                           description=DESCRIPTION)


def _summary(outcomes: list[Outcome]) -> str:
    bad = [o for o in outcomes if not o.ok]
    return "; ".join(o.describe() for o in (bad or outcomes)[:3])


def _team(ctx: Context, model: torch.nn.Module, example: Any, cases: list[Case], folder: str,
          found: Findings) -> None:
    """The team's export (and serve/preprocess) against eager."""
    ad = ctx.adapter
    path, warned = team_export(ctx, model, example, folder, "as_trained", eval_first=False)
    serve_takes_raw = ad.has("serve") and ad.has("preprocess")
    try:
        loaded = load(path)
    except Unavailable as e:
        loaded = None
        reason = str(e)
    except Exception as e:  # a format the audit cannot load
        loaded = None
        reason = f"the audit cannot load {os.path.basename(path)} ({type(e).__name__}: " \
                 f"{_first_line(e)})"
    if ad.has("serve") and not serve_takes_raw:
        fn = _serve(ctx, path)
        loaded = Loaded(fn, "serve()", loaded.dtype if loaded else None,
                        loaded.fixed if loaded else {})
    if loaded is None:
        for i in ("X1", "X2", "X3", "X5", "X6"):
            found.not_tested[i] = reason
    else:
        _diagnose(ctx, model, example, cases, folder, found, loaded, warned)
    if serve_takes_raw:
        _preprocessing(ctx, path, cases, found, loaded)
    else:
        found.not_tested["X4"] = ("the adapter has no serve() and preprocess(), nor "
                                  "preprocess_for_inference() (X4 compares the serving code's "
                                  "preprocessing with training's)")


def _serve(ctx: Context, path: str) -> Callable[[torch.Tensor], Any]:
    fn = ctx.adapter.call("serve", path)
    if not callable(fn):
        raise AdapterError("serve", f"must return a callable, got {type(fn).__name__}")

    def served(x: torch.Tensor) -> Any:
        try:
            return fn(x)
        except Exception as e:
            raise RuntimeError(f"serve({os.path.basename(path)}) callable raised "
                               f"{type(e).__name__}: {_first_line(e)}") from e
    return served


def _diagnose(ctx: Context, model: torch.nn.Module, example: Any, cases: list[Case],
              folder: str, found: Findings, loaded: Loaded, warned: list) -> None:
    """One ID for the team's export's mismatches (module docstring)."""
    got = [compare(loaded.fn, c) for c in cases]
    reduced = loaded.dtype in REDUCED
    half = ctx.settings.half_tolerance
    if reduced:
        over = [o for o in got if o.error or o.relative > half]
        found.add("X5", len(over), (
            f"The {loaded.kind} export holds {str(loaded.dtype).replace('torch.', '')}: relative "
            f"distance from eager float32 up to {max(o.relative for o in got):.3g} against the "
            f"stated half_tolerance {half:g} (AUDIT['half_tolerance']). " + _summary(got)))
        if not over:
            return
        got_bad = over
    else:
        found.add("X5", 0, f"The {loaded.kind} export holds float32: no reduced precision.")
        got_bad = [o for o in got if not o.ok]
    if not got_bad:
        found.add("X6", 0, f"The team's {loaded.kind} export matches eager: {_summary(got)}.")
        return
    same = [o for o in got if o.case.at_example_shape]
    mine = _own_trace_mismatch(model, cases, got_bad)
    if all(o.ok for o in same) and not reduced and not mine:
        # the axes the failing inputs vary (batch, length), not the image's own
        varied = {a for o in got_bad for a in range(o.case.x.dim())
                  if a < cases[0].x.dim() and o.case.x.shape[a] != cases[0].x.shape[a]}
        fixed = ", ".join(f"axis {a} = {d}" for a, d in sorted(loaded.fixed.items())
                          if a in varied)
        found.add("X3", len(got_bad), (
            f"The {loaded.kind} export works at the example's shape but not at others"
            f"{' (its input has fixed dimensions ' + fixed + ')' if fixed else ''}: "
            f"{_summary(got)}."))
        return
    if ctx.adapter.has("export") and not reduced:
        path, _ = team_export(ctx, model, example, folder, "eval_first", eval_first=True)
        again = load(path) if loaded.kind != "serve()" else Loaded(_serve(ctx, path), "serve()")
        redo = [compare(again.fn, c) for c in cases]
        if all(o.ok for o in redo):
            found.add("X1", len(got_bad), (
                f"Dropout/BatchNorm were exported in training mode: export() of the model as "
                f"training leaves it differs from eager model.eval() ({_summary(got)}); the "
                f"same export() given the model after model.eval() matches ({_summary(redo)})."))
            return
    if reduced:
        return  # X5 holds the drift
    if mine:
        hint = f" torch.jit.trace warned during export(): {warned[0]}." if warned else ""
        found.add("X2", len(got_bad), (
            f"Tracing froze a branch of the model's control flow: the {loaded.kind} export "
            f"differs from eager on held-out batches ({_summary(got)}), and so does the audit's "
            f"own torch.jit.trace of the model ({mine}).{hint}"))
        return
    found.add("X6", len(got_bad), (
        f"The {loaded.kind} export differs from eager beyond float32 rounding: {_summary(got)}."))


def _own_trace_mismatch(model: torch.nn.Module, cases: list[Case], bad: list[Outcome]) -> str:
    """Whether the audit's own trace (eval mode, at the first case) differs
    on the mismatching cases: the description of the first such, or ""."""
    try:
        traced, _ = own_trace(model, cases[0].x)
    except Exception:  # untraceable: no evidence either way
        return ""
    for o in bad:
        t = compare(traced, o.case)
        if not t.ok:
            return t.describe()
    return ""


def _own(ctx: Context, model: torch.nn.Module, cases: list[Case], folder: str,
         found: Findings) -> None:
    """No export() in the adapter: the audit's own TorchScript and ONNX exports."""
    why = "the adapter has no export(): the audit's own exports are made in eval mode"
    found.not_tested["X1"] = why
    found.not_tested["X3"] = why + " with dynamic axes"
    found.not_tested["X5"] = why + " in float32"
    found.not_tested["X4"] = ("the adapter has no export(), serve() and preprocess(), nor "
                              "preprocess_for_inference()")
    notes = []
    try:
        traced, warned = own_trace(model, cases[0].x)
        trace = [compare(traced, c) for c in cases]
    except Exception as e:  # an op or input the tracer refuses
        trace, warned = [], []
        notes.append(f"torch.jit.trace failed ({type(e).__name__}: {_first_line(e)})")
    try:
        with warnings.catch_warnings():  # torch's remarks on the audit's own scripting
            warnings.simplefilter("ignore")
            scripted = torch.jit.script(copy.deepcopy(model).eval())
        script = [compare(scripted, c) for c in cases]
    except Exception as e:  # script cannot compile much Python
        script = []
        notes.append(f"torch.jit.script failed ({type(e).__name__}: {_first_line(e)})")
    if not trace and not script:
        found.not_tested["X2"] = "; ".join(notes)
    else:
        bad_trace = [o for o in trace if not o.ok]
        script_ok = bool(script) and all(o.ok for o in script)
        n = len(bad_trace) if not script_ok else 0
        text = (f"torch.jit.trace against eager: {_summary(trace)}" if trace else notes[0]) + \
            (f"; TracerWarning: {warned[0]}" if warned else "")
        if bad_trace and script_ok:
            text += ("; torch.jit.script matches eager: export with torch.jit.script, not "
                     "trace (X2)")
        found.add("X2", n, text + ".")
        if script and not all(o.ok for o in script):
            found.add("X6", len([o for o in script if not o.ok]),
                      f"torch.jit.script against eager: {_summary(script)}.")
    try:
        onnx_model = own_onnx(model, cases[0].x, os.path.join(folder, "audit.onnx"))
    except Unavailable as e:
        found.not_tested["X6"] = str(e)
        return
    except Exception as e:  # an op the exporter refuses
        found.not_tested["X6"] = (f"torch.onnx.export refused the model ({type(e).__name__}: "
                                  f"{_first_line(e)})")
        return
    got = [compare(onnx_model.fn, c) for c in cases]
    # a mismatch the trace shares is control flow (the ONNX exporter traces), counted above
    traced_bad = {id(o.case) for o in trace if not o.ok}
    bad = [o for o in got if not o.ok and id(o.case) not in traced_bad]
    found.add("X6", len(bad), f"ONNX (torch.onnx.export, onnxruntime) against eager: "
                              f"{_summary(got)}.")


def _preprocessing(ctx: Context, path: str, cases: list[Case], found: Findings,
                   loaded: Optional[Loaded]) -> None:
    """X4: serve(path)(raw) against eager model(preprocess(raw)), the served
    model's own input (captured) against preprocess(raw)."""
    fn = _serve(ctx, path)
    got, seen = [], []
    for c in cases:
        with capture_inputs() as captured:
            got.append(compare(fn, c, use_raw=True))
        seen.append(captured[0] if captured else None)
    bad = [o for o in got if not o.ok]
    if not bad:
        found.add("X4", 0, f"serve(path)(raw) matches eager model(preprocess(raw)): "
                           f"{_summary(got)}.")
        return
    # the export itself, fed training's preprocessing, must match for the serving side to blame
    if loaded is not None and loaded.kind != "serve()":
        direct = [compare(loaded.fn, o.case) for o in bad]
        if not all(o.ok for o in direct):
            found.add("X4", 0, "serve(path)(raw) differs from eager, but so does the export fed "
                               "preprocess(raw): the export's own finding explains it.")
            return
    diff = next((input_difference(s, c.x) for s, c in zip(seen, cases) if s is not None), "")
    found.add("X4", len(bad), (
        (f"The served model's input against training's preprocess(raw): {diff}. " if diff else
         "The served model's input was not seen (neither torch.jit nor onnxruntime ran it). ") +
        f"serve(path)(raw) against eager model(preprocess(raw)): {_summary(got)}."))


def _inference_preprocessing(ctx: Context, model: torch.nn.Module, cases: list[Case],
                             found: Findings) -> None:
    """X4 without an export: eager model(preprocess_for_inference(raw)) against
    eager model(preprocess(raw)), the two inputs' statistics compared."""
    def inference_input(raw: torch.Tensor) -> torch.Tensor:
        x = ctx.adapter.call("preprocess_for_inference", raw)
        if not isinstance(x, torch.Tensor):
            raise AdapterError("preprocess_for_inference",
                               f"must return a tensor, got {type(x).__name__}")
        return x

    model.eval()
    with torch.no_grad():
        served = [inference_input(c.raw) for c in cases]  # the team's transform raising: exit 2
    got = [compare(model, replace(c, x=x)) for c, x in zip(cases, served)]
    bad = [i for i, o in enumerate(got) if not o.ok]
    if not bad:
        found.add("X4", 0, f"model(preprocess_for_inference(raw)) matches "
                           f"model(preprocess(raw)): {_summary(got)}.")
        return
    diff = input_difference(served[bad[0]], cases[bad[0]].x)
    found.add("X4", len(bad), (
        f"preprocess_for_inference(raw) against training's preprocess(raw): {diff}. "
        f"model(preprocess_for_inference(raw)) against model(preprocess(raw)): "
        f"{_summary(got)}."))


@contextlib.contextmanager
def capture_inputs() -> Iterator[list]:
    """The first tensor each exported model (a loaded TorchScript module,
    an onnxruntime session) is called with in the block: a class-level
    wrapper, removed afterwards, so the serving code's own objects are seen."""
    seen: list = []
    script_cls = torch.jit.RecursiveScriptModule
    old_call = script_cls.__call__

    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        if args and isinstance(args[0], torch.Tensor):
            seen.append(args[0].detach().clone())
        return old_call(self, *args, **kwargs)
    script_cls.__call__ = call
    session, old_run = None, None
    try:
        session = onnxruntime().InferenceSession
        old_run = session.run

        def run_session(self: Any, names: Any, feed: dict, *args: Any, **kwargs: Any) -> Any:
            first = next(iter(feed.values()), None)
            if first is not None:
                seen.append(torch.as_tensor(first).clone())
            return old_run(self, names, feed, *args, **kwargs)
        session.run = run_session
    except Unavailable:
        pass
    try:
        yield seen
    finally:
        script_cls.__call__ = old_call
        if session is not None:
            session.run = old_run


def input_difference(served: torch.Tensor, trained: torch.Tensor) -> str:
    """Which statistic of the served model's input differs from training's:
    dtype, layout, channel order, per-channel mean/std, value range."""
    parts = []
    if served.dtype != trained.dtype:
        parts.append(f"dtype {str(served.dtype).replace('torch.', '')} served, "
                     f"{str(trained.dtype).replace('torch.', '')} in training")
    s, t = served.double(), trained.double()
    if s.shape != t.shape:
        perm = _permutation(s.shape, t.shape)
        if perm is None:
            return "; ".join(parts + [f"shape {list(s.shape)} served, {list(t.shape)} in "
                                      f"training"])
        parts.append(f"layout: dimensions in another order (served {list(s.shape)}, training "
                     f"{list(t.shape)})")
        s = s.permute(*perm)
    if s.dim() >= 2 and s.shape[1] > 1 and torch.allclose(s.flip(1), t, rtol=1e-4, atol=1e-5) \
            and not torch.allclose(s, t, rtol=1e-4, atol=1e-5):
        parts.append(f"channel order reversed ({s.shape[1]} channels: RGB against BGR)")
        return "; ".join(parts)
    if s.dim() >= 2:
        dims = [d for d in range(s.dim()) if d != 1]
        sm, tm = s.mean(dims), t.mean(dims)
        ss, ts = s.std(dims), t.std(dims)
        k = int((sm - tm).abs().argmax())
        if not torch.allclose(sm, tm, rtol=1e-3, atol=1e-4) or \
                not torch.allclose(ss, ts, rtol=1e-3, atol=1e-4):
            parts.append(f"per-channel mean/std: channel {k} {float(sm[k]):.3g}/{float(ss[k]):.3g}"
                         f" served, {float(tm[k]):.3g}/{float(ts[k]):.3g} in training")
    lo, hi, tlo, thi = float(s.min()), float(s.max()), float(t.min()), float(t.max())
    if not math.isclose(lo, tlo, rel_tol=1e-3, abs_tol=1e-4) or \
            not math.isclose(hi, thi, rel_tol=1e-3, abs_tol=1e-4):
        parts.append(f"value range [{lo:.3g}, {hi:.3g}] served, [{tlo:.3g}, {thi:.3g}] in "
                     f"training")
    return "; ".join(parts) or "the same statistics (the served input equals training's)"


def _permutation(a: torch.Size, b: torch.Size) -> Optional[list]:
    """A permutation p with a[p] == b (the first found), or None."""
    if sorted(a) != sorted(b):
        return None
    for p in itertools.permutations(range(len(a))):
        if [a[i] for i in p] == list(b):
            return list(p)
    return None
