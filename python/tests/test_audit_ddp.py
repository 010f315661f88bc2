"""The data-parallel family on a model with BatchNorm: each rank normalises
its own half batch, so the weights differ from one process's by design
(an expected divergence, reported with its size, never a failure), while
the data-parallel pitfalls (D1, D2, D3, D5) are still found on such a model
and D4 is read from the buffers right after DDP's broadcast.

Needs the dlcheck binary (DLCHECK_BIN, default build/release/cli/dlcheck)."""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch

from dlcheck.audit import run_audit
from dlcheck.audit.families.ddp import padding_duplicates
from dlcheck.audit.loop import grad_scale

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "audit"

#: each example's pitfall on the digits MLP with BatchNorm (DDP broadcasts
#: the buffers, so only the example's own ID may be found)
BATCHNORM_VARIANTS = {
    "D1": "from d1_no_distributed_sampler import *",
    "D2": "from d2_no_set_epoch import *",
    "D3": """
        import torch.distributed as dist
        from common import *


        def summed(state, bucket):  # a custom comm hook that forgets to divide by the world size
            return dist.all_reduce(bucket.buffer(), async_op=True).get_future().then(
                lambda f: f.value()[0])


        def wrap_ddp(model):
            ddp = nn.parallel.DistributedDataParallel(model)
            ddp.register_comm_hook(None, summed)
            return ddp


        def make_optimizer(model):
            return torch.optim.SGD(model.parameters(), lr=0.05)
        """,
    "D5": "from d5_metric_on_rank0_only import *",
}


def variant(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "pipeline.py"
    path.write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(EXAMPLES)!r})
        """) + textwrap.dedent(body) + textwrap.dedent("""
        from common import mlp as _mlp


        def make_model():
            return _mlp(48, batchnorm=True)
        """))
    return path


def ddp_outcomes(result) -> dict:
    return {o.name: o for o in result.outcomes if o.family == "ddp"}


#: the examples' correct project code (DDP with broadcast_buffers=True) on that model
CORRECT = """
    import torch
    from common import *


    def make_optimizer(model):
        return torch.optim.Adam(model.parameters(), lr=3e-3)
    """


def test_correct_ddp_with_batchnorm_is_silent_and_the_divergence_reported(tmp_path: Path
                                                                          ) -> None:
    result = run_audit(variant(tmp_path, CORRECT), tmp_path / "out", families=["ddp"])
    assert result.exit_code == 0 and not result.ids, result.text
    checks = ddp_outcomes(result)
    match = checks["ranks_match_one_process"]
    assert match.verdict == "expected_divergence", match
    assert "max abs" in match.evidence and "differ" in match.evidence
    assert "BatchNorm" in match.about
    assert checks["replicas_hold_the_same_buffers"].verdict == "pass"
    assert "size  param/" in result.text  # the summary shows how far the weights moved


@pytest.mark.parametrize("pitfall", sorted(BATCHNORM_VARIANTS))
def test_ddp_pitfalls_are_found_on_a_batchnorm_model(pitfall: str, tmp_path: Path) -> None:
    result = run_audit(variant(tmp_path, BATCHNORM_VARIANTS[pitfall]), tmp_path / "out",
                       families=["ddp"])
    assert result.message == "", result.message
    assert result.ids == {pitfall}, result.text
    assert ddp_outcomes(result)["ranks_match_one_process"].verdict in ("expected_divergence",
                                                                      "fail")


def test_without_buffers_d4_is_not_tested(tmp_path: Path) -> None:
    result = run_audit(EXAMPLES / "d2_no_set_epoch_fixed.py", tmp_path / "out",
                       families=["ddp"])
    assert result.exit_code == 0, result.text
    d4 = ddp_outcomes(result)["replicas_hold_the_same_buffers"]
    assert d4.verdict == "not_tested" and "no buffers" in d4.evidence


def test_grad_scale_is_the_least_squares_factor() -> None:
    b = {"w": torch.tensor([1.0, 2.0]), "only_b": torch.ones(3)}
    assert grad_scale({"w": torch.tensor([2.0, 4.0])}, b) == pytest.approx(2.0)
    assert grad_scale({"w": torch.tensor([2.0, -1.0])}, b) == 0.0
    assert grad_scale(b, {"w": torch.zeros(2)}) == 0.0


def sampler_streams(n: int, batch: int, seed: int, drop_last: bool, epochs: int = 3) -> list:
    """Each of 2 ranks' sample indices over `epochs` reshuffled epochs, in
    whole batches (a DataLoader with drop_last=True over a DistributedSampler)."""
    from torch.utils.data import DistributedSampler

    streams = []
    for rank in range(2):
        sampler = DistributedSampler(range(n), num_replicas=2, rank=rank, seed=seed,
                                     drop_last=drop_last)
        keys: list = []
        for epoch in range(epochs):
            sampler.set_epoch(epoch)
            order = list(sampler)
            keys += order[:len(order) // batch * batch]
        streams.append(keys)
    return streams


@pytest.mark.parametrize("seed", range(40))
def test_padding_duplicates_counts_the_pad_and_nothing_of_the_next_epoch(seed: int) -> None:
    # 1407 samples: padded to 704 per rank (44 batches of 16), or 703 cut to 688 (43)
    assert padding_duplicates(sampler_streams(1407, 16, seed, False), 16) == (1, 704)
    assert padding_duplicates(sampler_streams(1407, 16, seed, True), 16) == (0, 688)
    assert padding_duplicates(sampler_streams(1408, 16, seed, False), 16) == (0, 704)


def test_padding_duplicates_needs_a_second_epoch() -> None:
    assert padding_duplicates([list(range(0, 64, 2)), list(range(1, 64, 2))], 8) is None
    assert padding_duplicates([[1, 2, 1, 2], [3]], 2) is None  # rank 1 ends early
    assert padding_duplicates([[1, 1, 2, 3], [4, 5]], 2) is None  # a repeat inside a batch


#: d7's noise seeded with the rank: the ranks draw their own noise (no D7), though
#: not the noise one process would draw for those samples
RANK_SEEDED_NOISE = """
    import torch
    from d7_rank_noise_from_shared_seed import *
    from d7_rank_noise_from_shared_seed import batches as noisy_batches


    def batches(seed, batch_size, rank=0, world_size=1):
        def dataset(seed):
            data = NoisyDigits(seed)
            data.generator = torch.Generator().manual_seed(seed * 1000 + rank)
            return data
        return noisy_batches(seed, batch_size, rank, world_size, dataset=dataset)
    """


def test_rank_seeded_noise_is_not_d7_but_differs_from_one_process(tmp_path: Path) -> None:
    path = tmp_path / "pipeline.py"
    path.write_text(f"import sys\nsys.path.insert(0, {str(EXAMPLES)!r})\n" +
                    textwrap.dedent(RANK_SEEDED_NOISE))
    result = run_audit(path, tmp_path / "out", families=["ddp"])
    assert result.message == "", result.message
    checks = ddp_outcomes(result)
    assert checks["ranks_draw_their_own_noise"].verdict == "pass", result.text
    assert not result.ids, result.text
    assert checks["ranks_match_one_process"].verdict == "fail"  # unexplained: no ID
