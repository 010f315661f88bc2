"""D10, nn.DataParallel where DistributedDataParallel is meant: the
modules of make_model()'s model and of what wrap_ddp makes of it that are
nn.DataParallel. In the team's job that is one process driving every
device; in the audit's 2-rank run each rank would train alone (it averages
nothing across processes), so the rest of the ddp family is not tested
then."""
from __future__ import annotations

from typing import Any

import torch

from ..adapter import AdapterError

KIND = torch.nn.DataParallel


def data_parallel_modules(ad: Any, seed: int) -> tuple[list[str], list[str]]:
    """(the DataParallel modules of make_model()'s model, those of
    wrap_ddp's module) by name ("<model>" for the module itself; none of
    wrap_ddp's when it raises here); call it within a process group, where
    a DistributedDataParallel can be built."""
    model = ad.model(seed)
    built = [n or "<model>" for n, m in model.named_modules() if isinstance(m, KIND)]
    try:
        wrapper = ad.wrap(model)
    except AdapterError:  # raised again in the rank processes, which say which rank
        return built, []
    return built, [n or "<model>" for n, m in wrapper.named_modules() if isinstance(m, KIND)]


def describe(built: list[str], wrapped: list[str]) -> str:
    """The note of the check: where DataParallel sits, and what it does."""
    if not built and not wrapped:
        return ("Neither make_model() nor wrap_ddp returns an nn.DataParallel: the ranks are "
                "processes.")
    where = (f"wrap_ddp returns nn.DataParallel ({', '.join(wrapped[:3])})" if wrapped and
             not built else f"make_model() builds nn.DataParallel ({', '.join(built[:3])})")
    return (f"{where}: one process replicates the model onto every device at each forward and "
            f"gathers the outputs through one Python interpreter; launched once per device it "
            f"averages nothing across the processes, each trains alone.")
