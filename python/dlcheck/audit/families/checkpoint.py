"""Checkpoint: a straight run against one saved at step k with the team's
save_checkpoint, rebuilt from the factories, loaded with its
load_checkpoint and continued, compared bitwise (C1, C2, C3), and the
saved model state's keys held against a fresh model's (C4, C5, C6): the
whole model's state dict, or its parts stored as sub-state-dicts.

With the adapter's wrap_ddp both runs wrap the model as the team's
training does (in a 1-rank process group). The resumed run skips the
batches the straight run already used before it loads (the data position
is the audit's to restore; the random state is the checkpoint's). What the
load brought back is compared with the straight run's state at step k:
optimizer state (C1), GradScaler state (C2), the global RNG state (C3,
tested only when the training after step k draws from it), the LR
scheduler's whole state dict (C7, with the adapter's make_scheduler)."""
from __future__ import annotations

import copy
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Optional

import torch
import torch.distributed as dist

from ...recorder import Recorder
from ..adapter import MODULE_PREFIX, AdapterError
from ..context import Context
from ..declaration import FamilyDeclaration
from ..loop import Run
from ..scenario import Check, Family, NotTested, zero_count
from .ddp import free_port, process_group

DESCRIPTION = ("The team's checkpoint: saved at step k, rebuilt from the factories, loaded and "
               "continued, bitwise the same as the straight run; its keys match a fresh model.")


def _differences(a: Any, b: Any, path: str, out: list) -> None:
    """Paths where b (after the load) differs from a (at the save)."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        same = isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and \
            a.shape == b.shape and torch.equal(a.detach().cpu(), b.detach().cpu())
        if not same:
            out.append(path)
    elif isinstance(a, Mapping) and isinstance(b, Mapping):
        for k in a.keys() | b.keys():
            if k not in a or k not in b:
                out.append(f"{path}{k} ({'missing' if k not in b else 'unexpected'})")
            else:
                _differences(a[k], b[k], f"{path}{k}.", out)
    elif isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            _differences(x, y, f"{path}{i}.", out)
    elif a != b:
        out.append(path.rstrip("."))


def _plain(obj: Any, depth: int = 8) -> Any:
    """A scheduler's state dict as plain data to compare: tensors copied,
    containers rebuilt, and a function or method by its name (OneCycleLR
    keeps its annealing function, a method bound to the scheduler, in its
    state: after torch.save and torch.load it is bound to a copy, equal in
    all but identity); other objects by their type and attributes."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu().clone()
    if obj is None or isinstance(obj, (bool, int, float, complex, str, bytes)):
        return obj
    if depth == 0:
        return f"<{type(obj).__qualname__}>"
    if isinstance(obj, Mapping):
        return {k: _plain(v, depth - 1) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v, depth - 1) for v in obj]
    if callable(obj) and hasattr(obj, "__qualname__"):
        return f"<{getattr(obj, '__module__', '')}.{obj.__qualname__}>"
    if hasattr(obj, "__dict__"):
        return {"<type>": type(obj).__qualname__, **_plain(vars(obj), depth - 1)}
    return obj


def _lr_text(lrs: list) -> str:
    """The learning rates of the param groups: one number when they agree."""
    if lrs and all(v == lrs[0] for v in lrs):
        return f"{lrs[0]:.6g}"
    return "[" + ", ".join(f"{v:.6g}" for v in lrs) + "]"


def _at(obj: Any, path: str) -> Any:
    """The value at a dotted path of _differences in a state dict (None
    where there is none)."""
    for part in path.split("."):
        if isinstance(obj, Mapping) and part in obj:
            obj = obj[part]
        elif isinstance(obj, list) and part.isdigit() and int(part) < len(obj):
            obj = obj[int(part)]
        else:
            return None
    return obj


def _scheduler_note(k: int, lost: list, saved: Mapping, loaded: Mapping, lr_saved: list,
                    lr_loaded: list, straight_lrs: list, resumed_lrs: list) -> str:
    """What the load left of the scheduler's state, and the learning rates
    the resumed run stepped with against the straight run's."""
    if not lost:
        return (f"After load_checkpoint the LR scheduler's state equals the saved run's at "
                f"step {k}.")
    shown = []
    for p in lost:
        a, b = _at(saved, p), _at(loaded, p)
        numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (a, b))
        shown.append(f"{p} (saved {a:.6g}, after the load {b:.6g})" if numbers else p)
    text = (f"After load_checkpoint the LR scheduler's state differs from the saved run's at "
            f"step {k} in {len(lost)} entries: {_some(shown)}. The resumed optimizer's lr after "
            f"the load is {_lr_text(lr_loaded)} (the straight run's at step {k}: "
            f"{_lr_text(lr_saved)})")
    later = [(i, r, s) for i, (r, s) in enumerate(zip(resumed_lrs, straight_lrs[k:])) if r != s]
    if later:
        n, r, s = later[0]
        text += (f"; at step {n} of the traces (counted from the save) the resumed run stepped "
                 f"with lr {_lr_text(r)}, the straight run with {_lr_text(s)}: the schedule "
                 f"did not continue")
    elif resumed_lrs:
        text += (f"; the {len(resumed_lrs)} steps after the load happened to use the straight "
                 f"run's learning rates, but the schedule's position is lost for later steps")
    return text + "."


def _state_dicts(obj: Any, path: tuple = (), depth: int = 3) -> list[tuple[tuple, Mapping]]:
    """(path of keys, mapping) for every mapping of str to tensors in a loaded
    checkpoint, nested up to `depth` levels (a model's state dict, or the
    sub-state-dicts a checkpoint stores its parts as)."""
    found: list[tuple[tuple, Mapping]] = []
    if isinstance(obj, Mapping):
        if obj and all(isinstance(k, str) for k in obj) and \
                all(isinstance(v, torch.Tensor) for v in obj.values()):
            found.append((path, obj))
        elif depth > 0:
            for k, v in obj.items():
                found += _state_dicts(v, path + (str(k),), depth - 1)
    return found


def _strip(key: str) -> str:
    return key[len("module."):] if key.startswith("module.") else key


def _suffix_index(fresh: Mapping) -> dict[str, list[str]]:
    """Every dotted tail of the model's names -> the names ending in it
    ("weight", "1.weight", "backbone.1.weight" -> "backbone.1.weight")."""
    index: dict[str, list[str]] = {}
    for name in fresh:
        parts = name.split(".")
        for i in range(len(parts)):
            index.setdefault(".".join(parts[i:]), []).append(name)
    return index


def _placements(path: tuple, part: Mapping, fresh: Mapping, index: dict) -> list[tuple[str, int]]:
    """Where one saved state dict may sit in the model: (prefix of the
    model's names, how many of its keys that places among the model's),
    best first: "" for the whole model's state dict, "backbone." for
    model.backbone.state_dict(). Its keys vote for the prefixes that
    complete them into a model key; among equal votes a prefix named like
    the checkpoint entry ("backbone") comes first, then matching shapes."""
    votes: dict[str, list] = {}
    for key, value in part.items():
        key = _strip(key)
        for name in index.get(key, ()):
            tally = votes.setdefault(name[:len(name) - len(key)], [0, 0])
            tally[0] += 1
            tally[1] += fresh[name].shape == value.shape
    hints = {".".join(path[i:]) + "." for i in range(len(path))}
    ranked = sorted(votes, key=lambda p: (-votes[p][0], not (p in hints or not p),
                                          -votes[p][1], len(p)))
    return [(p, votes[p][0]) for p in ranked]


def saved_model_keys(saved: Any, fresh: Mapping) -> Optional[dict[str, tuple[str, Any]]]:
    """The model state a loaded checkpoint holds, keyed as the model names
    it: {model key: (key as saved, tensor)}. A checkpoint may store the
    whole state dict or its parts as sub-state-dicts ({"backbone":
    model.backbone.state_dict(), "fc": model.fc.state_dict()}); each part
    is placed under the prefix its keys fit (two parts of the same shape
    at two places), the parts covering most of the model first, and a part
    is taken only where it adds keys no earlier one holds (a second full
    copy, an EMA's, is not merged in). None when the checkpoint holds no
    state dict; a checkpoint none of whose keys fit the model gives its
    first state dict as saved (every model key missing)."""
    candidates = _state_dicts(saved)
    if not candidates:
        return None
    index = _suffix_index(fresh)
    placed = [(_placements(path, part, fresh, index), part) for path, part in candidates]
    placed.sort(key=lambda c: -c[0][0][1] if c[0] else 0)  # stable: file order among equals
    keys: dict[str, tuple[str, Any]] = {}
    for ranking, part in placed:
        top = ranking[0][1] if ranking else 0
        if keys and not top:
            continue  # fits nowhere in the model: not the model's state
        for prefix, _ in [r for r in ranking if r[1] == top] or [("", 0)]:
            mine = {prefix + _strip(k): (k, v) for k, v in part.items()}
            if not mine.keys() & keys.keys():
                keys.update(mine)
                break
    return keys


def key_diagnosis(path: str, fresh: Mapping) -> Optional[dict[str, Any]]:
    """The saved model state dict's keys against the model's (`fresh`: the
    state dict of the model load_checkpoint left, whose architecture may
    have been rebuilt there): module. prefixes (C4), missing keys (C5),
    shape mismatches (C6); None when the file holds no state dict
    torch.load can read."""
    readable, saved = _load(path)
    if not readable:
        return None
    keys = saved_model_keys(_modules_as_state_dicts(saved), fresh)
    if keys is None:
        return None
    prefixed = [as_saved for k, (as_saved, _) in keys.items()
                if as_saved.startswith("module.") and k in fresh]
    missing = [k for k in fresh if k not in keys]
    unexpected = [k for k in keys if k not in fresh]
    shapes = [f"{k} saved {list(keys[k][1].shape)}, model {list(fresh[k].shape)}"
              for k in fresh if k in keys and keys[k][1].shape != fresh[k].shape]
    return {"prefixed": prefixed, "missing": missing, "unexpected": unexpected, "shapes": shapes}


def pickled_modules(saved: Any, path: str = "", depth: int = 6) -> list[str]:
    """Where a loaded checkpoint holds whole nn.Module objects (pickled by
    class, C8), each as "entry (module.Class)": the checkpoint itself
    ("<file>"), or an entry of its dicts, lists and tuples. A ScriptModule
    is not one: torch.jit.save writes its code, not a reference to a class."""
    if isinstance(saved, torch.nn.Module):
        if isinstance(saved, torch.jit.ScriptModule):
            return []
        cls = type(saved)
        module = cls.__module__
        if module.startswith(MODULE_PREFIX):  # the adapter file, as the team names it
            module = module[len(MODULE_PREFIX):]
        return [f"{path or '<file>'} ({module}.{cls.__qualname__})"]
    if depth == 0:
        return []
    if isinstance(saved, Mapping):
        items = saved.items()
    elif isinstance(saved, (list, tuple)):
        items = enumerate(saved)
    else:
        return []
    found: list[str] = []
    for k, v in items:
        found += pickled_modules(v, f"{path}.{k}" if path else str(k), depth - 1)
    return found


def _modules_as_state_dicts(saved: Any, depth: int = 6) -> Any:
    """The loaded checkpoint with every whole nn.Module in it (C8) replaced by
    its state dict: the model's state it holds, for the key diagnosis (left
    as objects, a whole model's tensors would be invisible to it and an
    optimizer's per-parameter state taken for the model's)."""
    if isinstance(saved, torch.nn.Module) and not isinstance(saved, torch.jit.ScriptModule):
        return saved.state_dict()
    if depth == 0:
        return saved
    if isinstance(saved, Mapping):
        return {k: _modules_as_state_dicts(v, depth - 1) for k, v in saved.items()}
    if isinstance(saved, (list, tuple)):
        return [_modules_as_state_dicts(v, depth - 1) for v in saved]
    return saved


def _load(path: str) -> tuple[bool, Any]:
    """(True, the checkpoint torch.load reads back) or (False, None) for the
    team's own format."""
    try:
        return True, torch.load(path, map_location="cpu")
    except Exception:  # the team's own format: not diagnosed
        return False, None


def _some(names: list, n: int = 4) -> str:
    return ", ".join(names[:n]) + (f" and {len(names) - n} more" if len(names) > n else "")


@dataclass
class Saved:
    """The straight run at save_checkpoint (step k): what a load must bring back."""
    state: dict[str, Any]   # optimizer, rng, scaler, scheduler, lr (per group), model
    draws: bool             # the training after step k draws from torch's global RNG
    lrs: list               # the straight run's learning rates, step by step


def _state_at_save(run: Run) -> dict[str, Any]:
    return {"optimizer": copy.deepcopy(run.optimizer.state_dict()),
            "rng": torch.get_rng_state(),
            "scaler": copy.deepcopy(run.scaler.state_dict()) if run.scaler else None,
            "scheduler": _plain(run.scheduler.state_dict()) if run.scheduler else None,
            "lr": [float(g.get("lr", 0.0)) for g in run.optimizer.param_groups],
            "model": {n: t.detach().clone() for n, t in run.inner.state_dict().items()}}


def _train_straight(ctx: Context, fam: Family, wrap: bool, k: int, path: str) -> Optional[Saved]:
    """Trains k steps, saves the checkpoint at `path` and trains on to the
    end (None: the first k steps did not train)."""
    s, ad = ctx.settings, ctx.adapter
    straight = ctx.run(wrap=wrap)
    if not straight.train(k):
        return None
    at_save = _state_at_save(straight)
    with straight.hooks_detached():
        ad.checkpoint_call("save_checkpoint", path, straight.model, straight.optimizer,
                           straight.scaler, straight.scheduler)
    if not os.path.exists(path):
        raise AdapterError("save_checkpoint", f"wrote nothing at the path it was given ({path})")
    straight.record(ctx.trace_path(fam.scenario, "straight"), "straight", fam.scenario)
    rng_before = torch.get_rng_state()
    straight.train(s.steps - k)
    # C3 matters only when what follows the save draws from the global RNG (dropout,
    # random augmentation, a loader's shuffling): otherwise a lost RNG state changes nothing
    draws = not torch.equal(rng_before, torch.get_rng_state())
    fam.runs["straight"] = straight.save()
    straight.close()
    return Saved(at_save, draws, straight.lrs)


def _note_restored_state(rec: Recorder, k: int, lost_opt: list, rng_lost: bool,
                         model_lost: list) -> None:
    rec.metric("optimizer_state_lost", len(lost_opt))
    rec.note("optimizer_state_lost", (
        f"After load_checkpoint the optimizer state differs from the saved run's at step {k} "
        f"in {len(lost_opt)} entries: {_some(lost_opt)}." if lost_opt else
        f"After load_checkpoint the optimizer state equals the saved run's at step {k}."))
    rec.metric("rng_state_lost", int(rng_lost))
    rec.note("rng_state_lost", (
        f"After load_checkpoint torch's global RNG state is not the saved run's at step {k}: "
        f"dropout and other random draws continue differently." if rng_lost else
        "After load_checkpoint torch's global RNG state is the saved run's."))
    rec.note("model_state_after_load", (
        f"Not restored by the load: {_some(model_lost)}." if model_lost else
        "Every parameter and buffer was restored by the load."))


def _note_scaler_state(rec: Recorder, saved: Any, loaded: Mapping) -> None:
    lost_scaler: list = []
    _differences(saved, loaded, "", lost_scaler)
    rec.metric("scaler_state_lost", len(lost_scaler))
    rec.note("scaler_state_lost", (
        f"After load_checkpoint the GradScaler state differs: {_some(lost_scaler)}."
        if lost_scaler else "After load_checkpoint the GradScaler state is the saved one."))


def _note_saved_keys(rec: Recorder, diag: dict[str, Any]) -> None:
    rec.metric("checkpoint_module_prefix", len(diag["prefixed"]))
    rec.note("checkpoint_module_prefix", (
        f"{len(diag['prefixed'])} saved keys carry DDP's 'module.' prefix "
        f"({_some(diag['prefixed'], 2)}): a plain model.load_state_dict fails with "
        f"unexpected keys." if diag["prefixed"] else "No saved key carries 'module.'."))
    rec.metric("checkpoint_missing_keys", len(diag["missing"]))
    rec.note("checkpoint_missing_keys", (
        f"The saved state dict lacks {len(diag['missing'])} of the model's keys "
        f"({_some(diag['missing'])}), yet load_checkpoint raised nothing: those tensors "
        f"silently keep their fresh values." if diag["missing"] else
        "The saved state dict has every key of the model."))
    rec.metric("checkpoint_shape_mismatches", len(diag["shapes"]))
    rec.note("checkpoint_shape_mismatches", (
        f"The model after load_checkpoint has another architecture than the checkpoint's: "
        f"{len(diag['shapes'])} shape mismatches ({_some(diag['shapes'], 3)}), yet the load "
        f"raised nothing: those tensors were not restored." if diag["shapes"] else
        "Every saved shape matches the model's."))


def _whole_modules(path: str) -> Optional[list[str]]:
    """The nn.Modules pickled whole into the checkpoint (None: torch.load
    cannot read it)."""
    readable, saved = _load(path)
    return pickled_modules(saved) if readable else None


def _note_pickled_modules(rec: Recorder, whole: list[str]) -> None:
    rec.metric("checkpoint_pickled_modules", len(whole))
    rec.note("checkpoint_pickled_modules", (
        f"save_checkpoint pickled {len(whole)} whole nn.Module object(s) into the file: "
        f"{_some(whole, 3)}. torch.load rebuilds each from its class by module path, so "
        f"the checkpoint stops loading once that class is renamed, moved or changed."
        if whole else "The checkpoint holds no nn.Module object (state dicts only)."))


@dataclass
class Resumed:
    """What loading the checkpoint into a rebuilt run left, as the checks ask."""
    ok: bool                   # the resumed run trained to the end
    rng_lost: bool
    scaler: bool               # the run has a GradScaler / an LR scheduler
    scheduler: bool
    diag: Optional[dict]       # key_diagnosis of the saved keys, None: no state dict found
    whole: Optional[list]      # the modules pickled whole, None: torch.load cannot read it


def _resume(ctx: Context, fam: Family, wrap: bool, k: int, path: str, saved: Saved) -> Resumed:
    """A rebuilt run at the data position of step k, the checkpoint loaded
    into it and compared with the saved state, trained on to the end."""
    s, ad = ctx.settings, ctx.adapter
    resumed = ctx.run(wrap=wrap)
    for _ in range(k):  # the data position, before the load restores any random state
        resumed.next_micro_batches()
    ad.checkpoint_call("load_checkpoint", path, resumed.model, resumed.optimizer, resumed.scaler,
                       resumed.scheduler)
    lost_sched: list = []
    if resumed.scheduler is not None:
        loaded_sched = _plain(resumed.scheduler.state_dict())
        _differences(saved.state["scheduler"], loaded_sched, "", lost_sched)
        lr_loaded = [float(g.get("lr", 0.0)) for g in resumed.optimizer.param_groups]
    lost_opt: list = []
    _differences(saved.state["optimizer"], resumed.optimizer.state_dict(), "", lost_opt)
    rng_lost = not torch.equal(saved.state["rng"], torch.get_rng_state())
    model_lost: list = []
    _differences(saved.state["model"], resumed.inner.state_dict(), "", model_lost)
    resumed.record(ctx.trace_path(fam.scenario, "resumed"), "resumed", fam.scenario)
    rec = resumed.rec
    _note_restored_state(rec, k, lost_opt, rng_lost, model_lost)
    if resumed.scaler is not None:
        _note_scaler_state(rec, saved.state["scaler"], resumed.scaler.state_dict())
    if resumed.scheduler is not None:
        rec.metric("scheduler_state_lost", len(lost_sched))
    # the saved keys against the model the load left (unwrapped: a plain model's keys), so
    # that an architecture rebuilt at load time (a config read then, a resized head) shows
    diag = key_diagnosis(path, resumed.inner.state_dict())
    if diag is not None:
        _note_saved_keys(rec, diag)
    whole = _whole_modules(path)
    if whole is not None:
        _note_pickled_modules(rec, whole)
    ok = resumed.train(s.steps - k)
    if resumed.scheduler is not None:  # written once the resumed run's learning rates are known
        lost_sched.sort(key=lambda p: (p.count("."), p))  # top-level entries first
        rec.note("scheduler_state_lost", _scheduler_note(
            k, lost_sched, saved.state["scheduler"], loaded_sched, saved.state["lr"], lr_loaded,
            saved.lrs, resumed.lrs))
    fam.runs["resumed"] = resumed.save()
    resumed.close()
    return Resumed(ok, rng_lost, resumed.scaler is not None, resumed.scheduler is not None, diag,
                   whole)


def _check_resumed_state(fam: Family, k: int, draws: bool, resumed: Resumed) -> None:
    """The resumed run against the straight one, and each piece of state
    the load must bring back: optimizer (C1), RNG (C3), scaler (C2),
    scheduler (C7)."""
    fam.checks += [
        Check("resume_matches_straight_run", "equivalence", "straight", "resumed",
              quantities=("loss", "params", "buffers"), tolerance="bitwise",
              explained_by=("C1", "C2", "C3", "C4", "C5", "C6", "C7"),
              about=f"saved after step {k}, rebuilt, loaded and continued: bitwise the "
                    f"straight run"),
        zero_count("optimizer_state_restored", "resumed", "optimizer_state_lost", "C1",
                   "the checkpoint brings the optimizer state back"),
    ]
    if draws:
        fam.checks.append(zero_count("rng_state_restored", "resumed", "rng_state_lost", "C3",
                                     "the checkpoint brings the random state back"))
    else:
        fam.not_tested.append(NotTested(
            "rng_state_restored", ("C3",),
            f"the training after step {k} draws nothing from torch's global RNG (no dropout, "
            f"random augmentation or shuffling from it), so its state cannot change the resumed "
            f"run (the load {'did not restore' if resumed.rng_lost else 'restored'} it)"))
    for part, present, cid, what in (("scaler", resumed.scaler, "C2", "the GradScaler state"),
                                     ("scheduler", resumed.scheduler, "C7",
                                      "the LR scheduler's state")):
        if present:
            fam.checks.append(zero_count(f"{part}_state_restored", "resumed", f"{part}_state_lost",
                                         cid, f"the checkpoint brings {what} back"))
        else:
            fam.not_tested.append(NotTested(f"{part}_state_restored", (cid,),
                                            f"the adapter has no make_{part}"))


def _check_saved_keys(fam: Family, diag: Optional[dict]) -> None:
    """The saved keys load into a plain model (C4), all of them (C5), in
    the model's shapes (C6)."""
    if diag is not None:
        fam.checks += [
            zero_count("checkpoint_keys_unprefixed", "resumed", "checkpoint_module_prefix", "C4",
                       "saved keys load into a plain model (no module. prefix)"),
            zero_count("checkpoint_has_every_key", "resumed", "checkpoint_missing_keys", "C5",
                       "the saved state dict holds every key of the model"),
            zero_count("checkpoint_shapes_match", "resumed", "checkpoint_shape_mismatches", "C6",
                       "every saved shape is the model's"),
        ]
    else:
        fam.not_tested.append(NotTested(
            "checkpoint_key_diagnosis", ("C4", "C5", "C6"),
            "torch.load found no state dict (a mapping of names to tensors) in the checkpoint"))


def _check_no_whole_model(fam: Family, whole: Optional[list]) -> None:
    if whole is not None:
        fam.checks.append(zero_count(
            "checkpoint_holds_no_whole_model", "resumed", "checkpoint_pickled_modules", "C8",
            "the checkpoint holds state dicts, no nn.Module pickled by its class"))
    else:
        fam.not_tested.append(NotTested(
            "checkpoint_holds_no_whole_model", ("C8",),
            "torch.load cannot read the checkpoint (the team's own format)"))


def _run(ctx: Context, wrap: bool) -> Family:
    fam = Family("checkpoint", DESCRIPTION)
    k = max(1, ctx.settings.steps // 2)
    path = os.path.join(ctx.work, "checkpoint.pt")
    saved = _train_straight(ctx, fam, wrap, k, path)
    if saved is None:
        return fam
    resumed = _resume(ctx, fam, wrap, k, path, saved)
    if not resumed.ok:
        return fam
    _check_resumed_state(fam, k, saved.draws, resumed)
    _check_saved_keys(fam, resumed.diag)
    _check_no_whole_model(fam, resumed.whole)
    return fam


def run(ctx: Context) -> Family:
    """The family; with the adapter's wrap_ddp the model is wrapped as the
    team's training wraps it (in a 1-rank process group unless one is
    already up), so that a checkpoint saved from the wrapper is what is
    diagnosed."""
    if not ctx.adapter.has("wrap_ddp") or dist.is_initialized():
        return _run(ctx, wrap=ctx.adapter.has("wrap_ddp"))
    with process_group(0, 1, free_port()):
        return _run(ctx, wrap=True)


FAMILY = FamilyDeclaration("checkpoint", run, ("C1", "C2", "C3", "C4", "C5", "C6", "C7", "C8"),
                           needs=("save_checkpoint", "load_checkpoint"), description=DESCRIPTION)
