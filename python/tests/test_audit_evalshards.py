"""D9's counting (audit/families/evalshards.py): the validation samples evaluate()
feeds the model, seen by a forward pre-hook, and the ranks' counts added
against one process's. Exact counts of digests: no tolerance. The pair
d9_eval_sampler_pads_validation(.py, _fixed.py) shows it end to end."""
from __future__ import annotations

from collections import Counter

import torch
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from dlcheck.audit.families.evalshards import EvalSamples, miscounted

X = torch.arange(7 * 3, dtype=torch.float32).reshape(7, 3)
VAL = TensorDataset(X)


def seen(model: torch.nn.Module, batches) -> Counter:
    with EvalSamples(model) as s:
        for (x,) in batches:
            model(x)
    return s.counts


def ranks(sampler_of) -> Counter:
    model = torch.nn.Linear(3, 1)
    total: Counter = Counter()
    for rank in range(2):
        total += seen(model, DataLoader(VAL, batch_size=2, sampler=sampler_of(rank)))
    return total


def test_rows_are_counted_inside_the_block_only() -> None:
    model = torch.nn.Linear(3, 1)
    counts = seen(model, [(X,), (X[:2],)])
    assert sum(counts.values()) == 9 and len(counts) == 7
    model(X)  # the hook is gone
    assert not model._forward_pre_hooks


def test_a_shard_of_every_world_th_sample_counts_each_once() -> None:
    one = seen(torch.nn.Linear(3, 1), [(X,)])
    shards = ranks(lambda r: range(r, 7, 2))
    assert miscounted(one, shards, 2)[0] == 0


def test_a_distributed_sampler_pads_the_odd_set_and_drop_last_drops() -> None:
    one = seen(torch.nn.Linear(3, 1), [(X,)])
    padded = ranks(lambda r: DistributedSampler(VAL, num_replicas=2, rank=r, shuffle=False))
    n, note = miscounted(one, padded, 2)
    assert n == 1 and "8" in note and "pads" in note, note
    dropped = ranks(lambda r: DistributedSampler(VAL, num_replicas=2, rank=r, shuffle=False,
                                                 drop_last=True))
    n, note = miscounted(one, dropped, 2)
    assert n == 1 and "drop_last" in note, note


def test_every_rank_evaluating_everything_weighs_the_samples_alike() -> None:
    one = seen(torch.nn.Linear(3, 1), [(X,)])
    assert miscounted(one, one + one, 2)[0] == 0


def test_what_cannot_be_matched_is_not_tested() -> None:
    one = seen(torch.nn.Linear(3, 1), [(X,)])
    assert miscounted(Counter(), one, 2)[0] is None
    other = seen(torch.nn.Linear(3, 1), [(X + 0.5,)])
    n, why = miscounted(one, other, 2)
    assert n is None and "never did" in why
