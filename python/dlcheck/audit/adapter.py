"""The adapter: the team's own pieces of training code, found by name in a
module, checked, and called so that every failure names the function.

A module (a file path or an importable name) exposes

    make_model() -> torch.nn.Module                                  required
    make_optimizer(model) -> torch.optim.Optimizer                   required
    batches(seed, batch_size[, rank, world_size, workers]) -> iterable   required
    train_step(model, optimizer, micro_batches[, scaler]) -> loss    required
    make_scheduler(optimizer) -> an LR scheduler (step(), state_dict(),
                                 load_state_dict())                  optional
    evaluate(model) -> number | one-element tensor | {name: number}  optional
    save_checkpoint(path, model, optimizer[, scaler][, scheduler])   optional
    load_checkpoint(path, model, optimizer[, scaler][, scheduler])   optional
    wrap_ddp(model) -> torch.nn.Module                               optional
    make_scaler() -> a GradScaler (CpuGradScaler on the CPU)         optional
    split_batch(batch, k) -> list of k batches                       optional
    export(model, example_batch, path) -> the path it wrote          optional
    serve(path) -> a callable: raw model input -> outputs, as the
                   serving code loads and preprocesses it            optional
    preprocess(raw) -> the model input, as training prepares it      optional
    preprocess_for_inference(raw) -> the model input, as the inference
                   or serving code prepares it (no export needed)    optional
    AUDIT = {"batch_size": .., "accumulation": .., "steps": .., "seed": ..,
             "frozen": [name prefixes meant to stay frozen],
             "waive": {check name or catalogue ID: reason},
             "half_tolerance": relative output drift a half export may have}  optional

docs/audit.md is the full contract.
"""
from __future__ import annotations

import importlib
import importlib.util
import inspect
import numbers
import os
import re
import sys
import traceback
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Callable, Iterable, Optional, Union

import torch

REQUIRED = ("make_model", "make_optimizer", "batches", "train_step")
OPTIONAL = ("evaluate", "save_checkpoint", "load_checkpoint", "wrap_ddp", "make_scaler",
            "make_scheduler", "split_batch", "export", "serve", "preprocess",
            "preprocess_for_inference")
SETTINGS = {"batch_size": 32, "accumulation": 4, "steps": 6, "seed": 0, "frozen": (),
            "waive": {}, "half_tolerance": 0.05}
#: what a waiver names: a catalogue ID ("G4") or a check ("accumulation_matches_big_batch");
#: whether a check of that name ran is known only after the families ran (summary.py)
WAIVE_ID, WAIVE_CHECK = re.compile(r"[A-Z][0-9]+"), re.compile(r"[a-z][a-z0-9_]*")
#: a waiver's reason, in bytes of UTF-8 (the harness's limit on a check's waived:)
MAX_WAIVER = 511


class AdapterError(Exception):
    """The adapter is malformed or one of its functions failed: `function`
    names it (exit code 2)."""

    def __init__(self, function: str, message: str):
        super().__init__(f"adapter function {function}(): {message}")
        self.function = function


@dataclass
class Settings:
    """The sizes the audit trains with (AUDIT in the adapter overrides them)."""
    batch_size: int = 32
    accumulation: int = 4
    steps: int = 6
    seed: int = 0
    frozen: tuple = ()
    #: check name or catalogue ID -> why its failure is accepted (reviewed, known)
    waive: dict = field(default_factory=dict)
    #: the relative distance ||exported - eager|| / ||eager|| a reduced-precision
    #: (float16/bfloat16) export may reach before it is X5 (the team's stated budget)
    half_tolerance: float = 0.05


@dataclass
class Adapter:
    """The team's functions, with what each optional one makes possible."""
    name: str
    module: ModuleType
    functions: dict[str, Callable] = field(default_factory=dict)
    settings: Settings = field(default_factory=Settings)

    def has(self, name: str) -> bool:
        return name in self.functions

    def accepts(self, name: str, param: str) -> bool:
        """Whether function `name` takes a parameter (or **kwargs) `param`."""
        fn = self.functions.get(name)
        if fn is None:
            return False
        try:
            params = inspect.signature(fn).parameters
        except (TypeError, ValueError):
            return False
        return param in params or any(p.kind == p.VAR_KEYWORD for p in params.values())

    def call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """Calls adapter function `name`; any exception it raises becomes an
        AdapterError naming it, with the line of the adapter that raised."""
        fn = self.functions[name]
        try:
            return fn(*args, **kwargs)
        except AdapterError:
            raise
        except Exception as e:  # the team's code may raise anything
            raise AdapterError(name, f"raised {type(e).__name__}: {e}{_where(e)}") from e

    # ---- calls with their return types checked --------------------------------------

    def model(self, seed: int) -> torch.nn.Module:
        """A fresh model: the global RNG seeded with `seed` first, so that
        every variant starts from the same weights."""
        torch.manual_seed(seed)
        m = self.call("make_model")
        if not isinstance(m, torch.nn.Module):
            raise AdapterError("make_model", f"must return a torch.nn.Module, got "
                               f"{type(m).__name__}")
        if not any(True for _ in m.parameters()):
            raise AdapterError("make_model", "returned a model without parameters")
        return m

    def optimizer(self, model: torch.nn.Module) -> torch.optim.Optimizer:
        opt = self.call("make_optimizer", model)
        if not isinstance(opt, torch.optim.Optimizer):
            raise AdapterError("make_optimizer", f"must return a torch.optim.Optimizer, got "
                               f"{type(opt).__name__}")
        mine = {id(p) for p in model.parameters()}
        if not any(id(p) in mine for g in opt.param_groups for p in g["params"]):
            raise AdapterError("make_optimizer", "returned an optimizer that holds none of the "
                               "model's parameters")
        return opt

    def scaler(self) -> Optional[Any]:
        if not self.has("make_scaler"):
            return None
        s = self.call("make_scaler")
        missing = [a for a in ("scale", "step", "update", "unscale_", "get_scale", "is_enabled")
                   if not callable(getattr(s, a, None))]
        if missing:
            raise AdapterError("make_scaler", f"must return a GradScaler (scale, unscale_, step, "
                               f"update, get_scale, is_enabled), got {type(s).__name__} "
                               f"without {', '.join(missing)}")
        return s

    def scheduler(self, optimizer: torch.optim.Optimizer) -> Optional[Any]:
        """The adapter's LR scheduler built on `optimizer` (None without
        make_scheduler): anything with step(), state_dict() and
        load_state_dict(), stepped by the audit without arguments."""
        if not self.has("make_scheduler"):
            return None
        s = self.call("make_scheduler", optimizer)
        missing = [a for a in ("step", "state_dict", "load_state_dict")
                   if not callable(getattr(s, a, None))]
        if missing:
            raise AdapterError("make_scheduler", f"must return an LR scheduler (step, state_dict, "
                               f"load_state_dict), got {type(s).__name__} without "
                               f"{', '.join(missing)}")
        try:
            inspect.signature(s.step).bind()
        except TypeError:
            # ReduceLROnPlateau steps on a metric the audit does not have
            raise AdapterError("make_scheduler", f"its scheduler's step() must run without "
                               f"arguments, as once per optimizer step; "
                               f"{type(s).__name__}.step{inspect.signature(s.step)} does not"
                               ) from None
        except ValueError:  # no signature to read (a builtin): its step() is tried as it is
            pass
        own = getattr(s, "optimizer", optimizer)
        if isinstance(own, torch.optim.Optimizer) and own is not optimizer:
            raise AdapterError("make_scheduler", "returned a scheduler built on another "
                               "optimizer than the one it was given")
        return s

    def scheduler_step(self, scheduler: Any) -> None:
        """scheduler.step(), any exception it raises an AdapterError naming
        make_scheduler (OneCycleLR raises past its total_steps)."""
        try:
            scheduler.step()
        except Exception as e:  # the team's scheduler may raise anything
            raise AdapterError("make_scheduler", f"its scheduler's step() raised "
                               f"{type(e).__name__}: {e}{_where(e)}") from e

    def batch_iter(self, seed: int, batch_size: int, *, rank: int = 0, world_size: int = 1,
                   workers: int = 0) -> Iterable:
        kwargs: dict[str, Any] = {}
        if world_size > 1 or rank:
            kwargs.update(rank=rank, world_size=world_size)
        if workers:
            kwargs["workers"] = workers
        it = self.call("batches", seed, batch_size, **kwargs)
        try:
            return iter(it)
        except TypeError:
            raise AdapterError("batches", f"must return an iterable of batches, got "
                               f"{type(it).__name__}") from None

    def next_batch(self, it: Iterable, step: int) -> Any:
        try:
            return next(it)
        except StopIteration:
            raise AdapterError("batches", f"ran out of batches at step {step}: yield at least "
                               f"{self.settings.steps + 2} batches (or cycle over epochs)") from None
        except Exception as e:
            raise AdapterError("batches", f"raised {type(e).__name__} while producing batch "
                               f"{step}: {e}{_where(e)}") from e

    def split(self, batch: Any, k: int) -> list:
        """batch as k micro-batches (along dimension 0 unless the adapter
        has split_batch)."""
        if self.has("split_batch"):
            parts = self.call("split_batch", batch, k)
            if not isinstance(parts, (list, tuple)) or len(parts) != k:
                raise AdapterError("split_batch", f"must return a list of {k} batches, got "
                                   f"{type(parts).__name__}")
            return list(parts)
        try:
            return split_batch(batch, k)
        except (TypeError, ValueError) as e:
            raise AdapterError("batches", f"{e}; add split_batch(batch, k) to the adapter") from e

    def step(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, micro: list,
             scaler: Optional[Any] = None) -> float:
        """One optimizer step of the team's train_step; its loss as a float."""
        if self.accepts("train_step", "scaler"):
            loss = self.call("train_step", model, optimizer, micro, scaler=scaler)
        else:
            loss = self.call("train_step", model, optimizer, micro)
        if isinstance(loss, torch.Tensor) and loss.numel() == 1 and loss.is_floating_point():
            return float(loss.detach().reshape(()).item())
        if isinstance(loss, numbers.Real) and not isinstance(loss, bool):
            return float(loss)
        shape = f" of shape {list(loss.shape)}" if isinstance(loss, torch.Tensor) else ""
        raise AdapterError("train_step", f"must return the loss (a number or a one-element "
                           f"floating tensor), got {type(loss).__name__}{shape}")

    def evaluate(self, model: torch.nn.Module) -> dict[str, float]:
        """The team's evaluation as {name: value}."""
        out = self.call("evaluate", model)
        values = out if isinstance(out, dict) else {"eval": out}
        result = {}
        for k, v in values.items():
            if isinstance(v, torch.Tensor) and v.numel() == 1:
                v = float(v.detach().reshape(()).item())
            if not isinstance(k, str) or isinstance(v, bool) or not isinstance(v, numbers.Real):
                raise AdapterError("evaluate", f"must return a number, a one-element tensor or "
                                   f"a dict of them by name, got {type(out).__name__}")
            result[k] = float(v)
        return result

    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        m = self.call("wrap_ddp", model)
        if not isinstance(m, torch.nn.Module):
            raise AdapterError("wrap_ddp", f"must return a torch.nn.Module, got "
                               f"{type(m).__name__}")
        return m

    def checkpoint_call(self, name: str, path: str, model: torch.nn.Module,
                        optimizer: torch.optim.Optimizer, scaler: Optional[Any],
                        scheduler: Optional[Any] = None) -> None:
        """save_checkpoint or load_checkpoint (`name`), given the scaler
        and the scheduler each as a keyword only if the function takes it."""
        extra = {k: v for k, v in (("scaler", scaler), ("scheduler", scheduler))
                 if self.accepts(name, k)}
        self.call(name, path, model, optimizer, **extra)


def split_batch(batch: Any, k: int) -> list:
    """Splits a tensor, or a tuple/list/dict of tensors, into k equal parts
    along dimension 0 (the batch); TypeError/ValueError otherwise."""
    if isinstance(batch, torch.Tensor):
        if batch.dim() == 0 or batch.shape[0] % k:
            raise ValueError(f"a batch of {batch.shape[0] if batch.dim() else 0} rows does not "
                             f"split into {k} equal micro-batches")
        return list(batch.chunk(k, dim=0))
    if isinstance(batch, dict):
        parts = {key: split_batch(v, k) for key, v in batch.items()}
        return [{key: parts[key][i] for key in batch} for i in range(k)]
    if isinstance(batch, (tuple, list)):
        parts = [split_batch(v, k) for v in batch]
        return [type(batch)(p[i] for p in parts) if isinstance(batch, tuple) else
                [p[i] for p in parts] for i in range(k)]
    raise TypeError(f"cannot split a batch of type {type(batch).__name__} into micro-batches")


def batch_rows(batch: Any) -> int:
    """The number of samples in a batch (dimension 0 of its first tensor)."""
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() else 1
    values = batch.values() if isinstance(batch, dict) else batch
    for v in values if isinstance(values, Iterable) else ():
        n = batch_rows(v)
        if n:
            return n
    return 0


def sample_keys(batch: Any) -> list[bytes]:
    """One key per sample: the bytes of its first tensor's row (identifies
    a sample without knowing the dataset's indices)."""
    t = batch
    while not isinstance(t, torch.Tensor):
        t = next(iter(t.values() if isinstance(t, dict) else t))
    t = t.detach().cpu().contiguous()
    return [row.numpy().tobytes() for row in t.reshape(t.shape[0], -1)]


def _where(e: BaseException) -> str:
    """' (at file:line)' of the innermost frame outside torch and this package."""
    here = os.path.dirname(os.path.abspath(__file__))
    frames = [f for f in traceback.extract_tb(e.__traceback__)
              if not f.filename.startswith(here) and "/torch/" not in f.filename]
    if not frames:
        return ""
    f = frames[-1]
    return f" (at {os.path.basename(f.filename)}:{f.lineno}: {(f.line or '').strip()})"


#: the adapter file's module is named this plus the file's name (not the file's name alone: an
#: adapter beside the team's modules may share a name with one of them)
MODULE_PREFIX = "dlcheck_adapter_"


def _import(source: Union[str, os.PathLike, ModuleType]) -> ModuleType:
    if isinstance(source, ModuleType):
        return source
    text = os.fspath(source)
    if text.endswith(".py") or os.sep in text:
        path = os.path.abspath(text)
        if not os.path.isfile(path):
            raise AdapterError("<module>", f"no adapter file {text}")
        name = MODULE_PREFIX + os.path.splitext(os.path.basename(path))[0]
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        folder = os.path.dirname(path)
        added = folder not in sys.path
        if added:  # the script's own imports (a shared common.py beside it)
            sys.path.insert(0, folder)
        # registered under its name, as Python registers a script as __main__: pickle finds
        # the adapter's own classes by module (a checkpoint of a whole model defined there)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as e:
            del sys.modules[name]
            raise AdapterError("<module>", f"importing {text} raised {type(e).__name__}: "
                               f"{e}{_where(e)}") from e
        finally:
            if added:
                sys.path.remove(folder)
        return module
    try:
        return importlib.import_module(text)
    except Exception as e:
        raise AdapterError("<module>", f"importing {text} raised {type(e).__name__}: {e}") from e


def _settings(module: ModuleType) -> Settings:
    raw = getattr(module, "AUDIT", {})
    if not isinstance(raw, dict):
        raise AdapterError("AUDIT", f"must be a dict, got {type(raw).__name__}")
    unknown = sorted(set(raw) - set(SETTINGS))
    if unknown:
        raise AdapterError("AUDIT", f"unknown keys {', '.join(unknown)}; expected "
                           f"{', '.join(SETTINGS)}")
    values = dict(SETTINGS, **raw)
    for key in ("batch_size", "accumulation", "steps"):
        v = values[key]
        if isinstance(v, bool) or not isinstance(v, int) or v < (2 if key != "batch_size" else 1):
            raise AdapterError("AUDIT", f"{key} must be an integer >= "
                               f"{2 if key != 'batch_size' else 1}, got {v!r}")
    if values["batch_size"] % values["accumulation"]:
        raise AdapterError("AUDIT", f"batch_size {values['batch_size']} must be a multiple of "
                           f"accumulation {values['accumulation']}")
    if isinstance(values["seed"], bool) or not isinstance(values["seed"], int) or values["seed"] < 0:
        raise AdapterError("AUDIT", f"seed must be an integer >= 0, got {values['seed']!r}")
    frozen = values["frozen"]
    if isinstance(frozen, str) or not all(isinstance(p, str) for p in frozen):
        raise AdapterError("AUDIT", "frozen must be a list of parameter-name prefixes")
    half = values["half_tolerance"]
    if isinstance(half, bool) or not isinstance(half, numbers.Real) or not 0 < half < 1e6:
        raise AdapterError("AUDIT", f"half_tolerance must be a number > 0 (the relative output "
                           f"drift a half-precision export may have), got {half!r}")
    return Settings(values["batch_size"], values["accumulation"], values["steps"],
                    values["seed"], tuple(frozen), _waivers(values["waive"]), float(half))


def _waivers(raw: Any) -> dict:
    """AUDIT["waive"] checked: {check name or catalogue ID: reason}, each
    reason one line of text (whitespace runs become one space)."""
    if not isinstance(raw, dict):
        raise AdapterError("AUDIT", f"waive must be a dict {{check name or catalogue ID: "
                           f"reason}}, got {type(raw).__name__}")
    waive = {}
    for name, reason in raw.items():
        lower_id = isinstance(name, str) and not WAIVE_ID.fullmatch(name) and \
            WAIVE_ID.fullmatch(name.upper())
        if lower_id or not isinstance(name, str) or not (WAIVE_ID.fullmatch(name) or
                                                         WAIVE_CHECK.fullmatch(name)):
            hint = f" (catalogue IDs are written in capitals: {name.upper()})" if lower_id else ""
            raise AdapterError("AUDIT", f"waive: {name!r} is neither a check name "
                               f"(accumulation_matches_big_batch) nor a catalogue ID (G4){hint}")
        text = " ".join(reason.split()) if isinstance(reason, str) else ""
        if not text:
            raise AdapterError("AUDIT", f"waive[{name!r}]: the reason must be a non-empty "
                               f"string (why the difference is accepted, and who reviewed it), "
                               f"got {reason!r}")
        bad = [c for c in text if ord(c) < 0x20 or ord(c) == 0x7f]
        if bad or len(text.encode("utf-8")) > MAX_WAIVER:
            raise AdapterError("AUDIT", f"waive[{name!r}]: the reason must be text of at most "
                               f"{MAX_WAIVER} bytes without control characters, got "
                               f"{len(text.encode('utf-8'))} bytes"
                               f"{' with ' + repr(bad[0]) if bad else ''}")
        waive[name] = text
    return waive


def load_adapter(source: Union[str, os.PathLike, ModuleType]) -> Adapter:
    """The adapter in `source` (a .py path, a module name or a module),
    checked: every required function present and callable, every optional
    one callable if present, AUDIT well formed. AdapterError otherwise."""
    module = _import(source)
    functions: dict[str, Callable] = {}
    for name in REQUIRED + OPTIONAL:
        fn = getattr(module, name, None)
        if fn is None:
            if name in REQUIRED:
                raise AdapterError(name, f"missing from {getattr(module, '__file__', module)}: "
                                   f"an adapter must define {', '.join(REQUIRED)} "
                                   f"(docs/audit.md)")
            continue
        if not callable(fn):
            raise AdapterError(name, f"must be a function, got {type(fn).__name__}")
        functions[name] = fn
    if ("save_checkpoint" in functions) != ("load_checkpoint" in functions):
        have, lack = ("save_checkpoint", "load_checkpoint") if "save_checkpoint" in functions \
            else ("load_checkpoint", "save_checkpoint")
        raise AdapterError(lack, f"missing: {have} is defined, and a checkpoint is audited only "
                           f"with both")
    name = os.path.splitext(os.path.basename(getattr(module, "__file__", None) or
                                             module.__name__))[0]
    return Adapter(name=name, module=module, functions=functions, settings=_settings(module))
