"""Determinism: the team's run bitwise the same twice, with 1 and 2 threads,
with 0 and 2 loader workers (N2, N3), and with evaluation interleaved (D8).

PyTorch's CPU kernels (BatchNorm statistics, reductions) may sum in an
order that depends on the thread count, so 1 and 2 threads are compared
within their own rounding: each run's distance from its float64 shadow at
the same thread count (noise.py), as accumulation's runs are. A random
stream keyed by thread (N3) moves the float32 run and its shadow alike and
stays far outside that band."""
from __future__ import annotations

from ..context import BF16_TOLERANCE, Context
from ..declaration import FamilyDeclaration
from ..loop import threads
from ..noise import Shadow, band_rule, band_source, float64_shadow
from ..scenario import Check, Family, NotTested

#: where a step cannot run in float64: rounding-level differences of the
#: loss are not N3, a random stream keyed by thread is far larger
THREADS_TOLERANCE = "close(1e-4, 1e-6)"
DESCRIPTION = ("The team's training is bitwise reproducible: run twice, with another thread "
               "count, with loader workers, with evaluation in between.")


def run(ctx: Context) -> Family:
    fam = Family("determinism", DESCRIPTION)
    s, ad = ctx.settings, ctx.adapter

    def record(name: str, n_threads: int = 1, eval_every: int = 0, shadow: bool = False,
               **kw) -> Shadow:
        """Records run `name`, and its float64 shadow at the same thread
        count when asked (Shadow(None, ...) otherwise)."""
        with threads(n_threads):
            r = ctx.recorded(fam.scenario, name, **kw)
            r.train(s.steps, eval_every=eval_every)
            fam.runs[name] = r.save()
            r.close()
            sh = float64_shadow(ctx, fam.scenario, r, s.steps) if shadow else Shadow(None, None)
        if sh.run:
            fam.runs[sh.run] = sh.path
        return sh

    first = record("first", shadow=True)
    record("again")
    bitwise = {"quantities": ("loss", "params"), "tolerance": "bitwise"}
    fam.checks.append(Check("same_run_twice", "equivalence", "first", "again", catalogue=("N2",),
                            about="the same run twice is bitwise identical", **bitwise))
    if ad.accepts("batches", "workers"):
        record("two_workers", workers=2)
        fam.checks.append(Check("worker_count_free", "equivalence", "first", "two_workers",
                                catalogue=("N3",), about="0 and 2 loader workers give the same "
                                "bits", **bitwise))
    else:
        fam.not_tested.append(NotTested("worker_count_free", ("N3",),
                                        "batches() takes no workers argument"))
    # last: a fork (loader workers) after a second OpenMP thread has started can hang
    two = record("two_threads", n_threads=2, shadow=True)
    fallback = BF16_TOLERANCE if any(r.autocast for r in ctx.runs) else THREADS_TOLERANCE
    fam.checks.insert(1, Check(
        "thread_count_free", "equivalence", "first", "two_threads", catalogue=("N3",),
        quantities=("loss",), **band_rule(first, two, fallback),
        about=f"1 and 2 intra-op threads give the same losses, "
              f"{band_source(first, two, fallback)}: PyTorch's CPU reductions split work by "
              f"thread"))
    if ad.has("evaluate"):
        record("with_eval", eval_every=2)
        fam.checks.append(Check("eval_leaves_training_alone", "equivalence", "first",
                                "with_eval", catalogue=("D8",), about="evaluating every 2 steps "
                                "changes no bit of training", **bitwise))
    else:
        fam.not_tested.append(NotTested("eval_leaves_training_alone", ("D8",),
                                        "the adapter has no evaluate"))
    return fam


FAMILY = FamilyDeclaration("determinism", run, ("N2", "N3", "D8"), description=DESCRIPTION)
