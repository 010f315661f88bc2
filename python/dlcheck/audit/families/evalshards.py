"""Which validation samples evaluate() feeds the model, counted (D9).

A forward hook on the team's module (inside any wrapper) digests each row
of the first tensor a forward is given while evaluate() runs. Two ranks'
counts added together must hold every sample one process's evaluation
holds, each as often (a shard of every world-th sample); a
DistributedSampler on the validation set pads its shards to equal length
with copies, so some samples come twice (drop_last=True drops some
instead). A rank that evaluates the whole set, every sample W times, is
not flagged: every sample then weighs the same, and so does the metric."""
from __future__ import annotations

from collections import Counter
from typing import Any, Optional

import torch
import xxhash

from ..adapter import sample_keys


class EvalSamples:
    """Counts the rows the module's forwards receive inside the block (by
    the digest of each row of the forward's first tensor argument)."""

    def __init__(self, module: torch.nn.Module):
        self.module = module
        self.counts: Counter = Counter()
        self._hook: Any = None

    def _pre_forward(self, module: torch.nn.Module, inputs: Any) -> None:
        first = next((t for t in _flat(inputs) if isinstance(t, torch.Tensor)), None)
        if first is not None and first.dim():
            self.counts.update(xxhash.xxh64_intdigest(row) for row in sample_keys(first))

    def __enter__(self) -> "EvalSamples":
        self._hook = self.module.register_forward_pre_hook(self._pre_forward)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._hook.remove()


def _flat(obj: Any) -> list:
    if isinstance(obj, (tuple, list)):
        return [t for v in obj for t in _flat(v)]
    if isinstance(obj, dict):
        return [t for v in obj.values() for t in _flat(v)]
    return [obj]


def miscounted(one: Counter, ranks: Counter, world: int) -> tuple[Optional[int], str]:
    """(how many of one process's validation samples the ranks together
    evaluate more or fewer times than the rest, a note), or (None, why not
    tested). The usual count is the one most samples have (1 for a shard
    of every world-th sample, world when every rank evaluates them all)."""
    if not one:
        return None, ("evaluate() fed the model no tensor input the audit could see (a forward "
                      "of the module adapter.make_model() built)")
    if set(ranks) - set(one):
        return None, (f"the ranks' evaluation fed the model {len(set(ranks) - set(one))} inputs "
                      f"one process's evaluation never did (augmented afresh, or another "
                      f"validation set per rank): its samples cannot be matched")
    ratios = Counter(ranks[k] / one[k] for k in one)
    usual = ratios.most_common(1)[0][0]
    odd = {k: ranks[k] / one[k] for k in one if ranks[k] / one[k] != usual}
    total = sum(one.values())
    if not odd:
        return 0, (f"The {world} ranks' evaluate() together fed the model each of the {total} "
                   f"validation samples one process evaluates "
                   + ("once." if usual == 1 else f"{usual:g} times (every sample alike)."))
    more = sum(1 for r in odd.values() if r > usual)
    fewer = len(odd) - more
    parts = [f"{more} more often than the rest (a DistributedSampler pads the last shard with "
             f"copies)"] if more else []
    parts += [f"{fewer} less often or never (a sampler with drop_last=True drops them)"] \
        if fewer else []
    return len(odd), (
        f"Of the {total} validation samples one process's evaluate() feeds the model, the "
        f"{world} ranks' together feed {sum(ranks.values())}: most "
        f"{'once' if usual == 1 else f'{usual:g} times'}, "
        + " and ".join(parts) + ". The metric all-reduced over the ranks weighs those samples "
        "otherwise than the validation set does.")
