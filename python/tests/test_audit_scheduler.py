"""The adapter's LR scheduler (make_scheduler): checked as the adapter's
other factories are, stepped once after every train_step in every run of
the audit without a warning of torch's about the audit's own order, and
its state after the checkpoint family's load compared with the saved one
(C7), silent when the team saves and loads it, whatever the schedule."""
from __future__ import annotations

import textwrap
import warnings
from pathlib import Path

import pytest

from dlcheck.audit import AdapterError, CpuGradScaler, load_adapter, run_audit
from dlcheck.audit.loop import Run

from test_audit_adapter import GOOD, adapter, audit_fails

#: GOOD with a checkpoint of the model and the optimizer; SAVED adds the scheduler's state
CHECKPOINT = """
def save_checkpoint(path, model, optimizer{params}):
    torch.save({{"model": model.state_dict(), "optimizer": optimizer.state_dict(){save}}}, path)


def load_checkpoint(path, model, optimizer{params}):
    ckpt = torch.load(path)
    model.load_state_dict(ckpt["model"])
    optimizer.load_state_dict(ckpt["optimizer"])
{load}"""
SAVED = CHECKPOINT.format(params=", scheduler", save=', "scheduler": scheduler.state_dict()',
                          load='    scheduler.load_state_dict(ckpt["scheduler"])\n')
NOT_SAVED = CHECKPOINT.format(params="", save="", load="")

#: make_scheduler bodies: the schedules teams use, warm-ups among them (not CyclicLR: torch
#: 1.13 cannot pickle its state_dict, which holds a WeakMethod)
SCHEDULES = {
    "step": "torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)",
    "onecycle": "torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.3, total_steps=40)",
    "lambda_function": "torch.optim.lr_scheduler.LambdaLR(optimizer, warmup)",
    "lambda_object": "torch.optim.lr_scheduler.LambdaLR(optimizer, Warmup(4))",
    "cosine": "torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=5)",
    "warm_restarts": "torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(optimizer, T_0=2)",
    "chained": ("torch.optim.lr_scheduler.ChainedScheduler([\n"
                "        torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=0.9),\n"
                "        torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=[2, 4])])"),
    # torch 1.13's SequentialLR.step calls step(0) at its milestone, which warns (its own
    # warning, in the team's loop too: filtered where it is used)
    "sequential_warmup": (
        "torch.optim.lr_scheduler.SequentialLR(optimizer, [\n"
        "        torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=0.1, total_iters=2),\n"
        "        torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=10)],\n"
        "        milestones=[2])"),
}
HELPERS = """
def warmup(step):
    return min(1.0, (step + 1) / 4)


class Warmup:
    # a callable object: LambdaLR's state_dict holds its attributes
    def __init__(self, steps):
        self.steps = steps

    def __call__(self, step):
        return min(1.0, (step + 1) / self.steps)
"""


def with_scheduler(body: str, checkpoint: str = "") -> str:
    return GOOD + HELPERS + f"\n\ndef make_scheduler(optimizer):\n    return {body}\n" + checkpoint


def by_name(result) -> dict:
    return {f"{o.family}/{o.name}": o for o in result.outcomes}


# ---- the factory's checks --------------------------------------------------------------------

def test_make_scheduler_returning_no_scheduler_names_it(tmp_path: Path) -> None:
    msg = audit_fails(tmp_path, with_scheduler("None"), "make_scheduler")
    assert "step, state_dict, load_state_dict" in msg and "NoneType" in msg


@pytest.mark.parametrize("body,words", [
    ("object()", "without step, state_dict, load_state_dict"),
    ("torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer)", "without arguments"),
    ("torch.optim.lr_scheduler.StepLR(torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], "
     "lr=1.0), 2)", "another optimizer"),
])
def test_make_scheduler_return_checked(tmp_path: Path, body: str, words: str) -> None:
    ad = load_adapter(adapter(tmp_path, with_scheduler(body)))
    model = ad.model(0)
    with pytest.raises(AdapterError, match="make_scheduler") as e:
        ad.scheduler(ad.optimizer(model))
    assert words in str(e.value)


def test_a_scheduler_step_that_raises_names_make_scheduler(tmp_path: Path) -> None:
    # OneCycleLR raises once stepped past its total_steps
    text = with_scheduler("torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.3, "
                          "total_steps=3)")
    msg = audit_fails(tmp_path, text, "make_scheduler")
    assert "ValueError" in msg and "total steps" in msg


# ---- stepping --------------------------------------------------------------------------------

def test_the_run_steps_the_scheduler_once_per_train_step(tmp_path: Path) -> None:
    ad = load_adapter(adapter(tmp_path, with_scheduler(SCHEDULES["step"])))
    r = Run(ad, seed=0, batch_size=8)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert r.train(5)
    r.close()
    assert not [str(w.message) for w in seen]
    assert r.scheduler.last_epoch == 5 and r.optimizer._step_count == 5
    # each step's learning rate, as the step used it: halved every 2 steps
    assert [lrs[0] for lrs in r.lrs] == pytest.approx([0.1, 0.1, 0.05, 0.05, 0.025])
    # the audit's wrapper keeps the scheduler's counter mark (no "overridden" warning)
    assert getattr(r.optimizer.step, "_with_counter", False)


def test_a_first_step_skipped_by_the_scaler_draws_no_warning(tmp_path: Path) -> None:
    # Gradients scaled past float32's range: the scaler skips the optimizer's first step, and
    # torch would warn that the scheduler stepped first; the order is the audit's, not the team's
    text = with_scheduler(SCHEDULES["step"]) + textwrap.dedent("""
        from dlcheck.audit import CpuGradScaler


        def make_scaler():
            return CpuGradScaler(init_scale=2.0 ** 127)


        def train_step(model, optimizer, micro_batches, scaler):
            optimizer.zero_grad()
            for x, y in micro_batches:
                loss = F.cross_entropy(model(x), y) / len(micro_batches)
                scaler.scale(loss * 1e10).backward()
            scaler.step(optimizer)
            scaler.update()
            return loss
        """)
    ad = load_adapter(adapter(tmp_path, text))
    r = Run(ad, seed=0, batch_size=8)
    assert isinstance(r.scaler, CpuGradScaler)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        r.train(3)
    r.close()
    assert r.optimizer._step_count < 3, "the scaler skipped no step: the test shows nothing"
    assert r.scheduler.last_epoch == 3
    assert not [str(w.message) for w in seen]


def test_every_variant_follows_the_same_schedule_without_a_warning(tmp_path: Path) -> None:
    # (not SequentialLR, whose own warning is torch's)
    text = with_scheduler(SCHEDULES["onecycle"], SAVED)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        result = run_audit(adapter(tmp_path, text), tmp_path / "out")
    assert result.exit_code == 0, result.text + result.message
    assert not [f"{w.category.__name__}: {w.message}" for w in seen]
    assert by_name(result)["checkpoint/scheduler_state_restored"].verdict == "pass"


# ---- C7: the scheduler's state through the team's checkpoint ------------------------------------

@pytest.mark.filterwarnings("ignore:The epoch parameter in:UserWarning")
@pytest.mark.parametrize("kind", sorted(SCHEDULES))
def test_a_scheduler_saved_and_loaded_is_silent(tmp_path: Path, kind: str) -> None:
    result = run_audit(adapter(tmp_path, with_scheduler(SCHEDULES[kind], SAVED)),
                       tmp_path / "out")
    assert result.exit_code == 0, result.text + result.message
    c7 = by_name(result)["checkpoint/scheduler_state_restored"]
    assert c7.verdict == "pass", c7


@pytest.mark.filterwarnings("ignore:The epoch parameter in:UserWarning")
@pytest.mark.parametrize("kind", ["lambda_function", "onecycle", "sequential_warmup", "step"])
def test_a_scheduler_left_out_of_the_checkpoint_is_c7(tmp_path: Path, kind: str) -> None:
    result = run_audit(adapter(tmp_path, with_scheduler(SCHEDULES[kind], NOT_SAVED)),
                       tmp_path / "out", families=["checkpoint"])
    assert result.ids == {"C7"}, result.text + result.message
    evidence = by_name(result)["checkpoint/scheduler_state_restored"].evidence
    assert "last_epoch (saved 3, after the load 0)" in evidence, evidence
    assert "lr after the load" in evidence and "straight run's at step 3" in evidence, evidence


def test_c7_names_the_learning_rate_the_resumed_run_stepped_with(tmp_path: Path) -> None:
    result = run_audit(adapter(tmp_path, with_scheduler(SCHEDULES["lambda_function"], NOT_SAVED)),
                       tmp_path / "out", families=["checkpoint"])
    evidence = by_name(result)["checkpoint/scheduler_state_restored"].evidence
    # warm-up over 4 steps at lr 0.1: the straight run's step 4 used 0.1, the resumed run's
    # restarted warm-up 0.05 (its second step, after the lr the optimizer's state restored)
    assert "resumed run stepped with lr 0.05, the straight run with 0.1" in evidence, evidence


def test_without_make_scheduler_c7_is_not_tested(tmp_path: Path) -> None:
    result = run_audit(adapter(tmp_path, GOOD + NOT_SAVED), tmp_path / "out",
                       families=["checkpoint"])
    assert result.exit_code == 0, result.text + result.message
    c7 = by_name(result)["checkpoint/scheduler_state_restored"]
    assert c7.verdict == "not_tested" and "make_scheduler" in c7.evidence, c7
