"""What every check family is given: the adapter, its settings and where
its traces go."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Optional

import torch

from .adapter import Adapter
from .loop import Run


@dataclass
class Context:
    adapter: Adapter
    work: str  # the audit's private folder; traces under work/traces
    runs: list = field(default_factory=list)  # the current family's runs
    autocast_seen: bool = False               # an earlier family's step ran under autocast
    trained: bool = False                     # an earlier family ran the team's step

    def family_done(self) -> None:
        """Keeps what the current family's runs saw of the step (autocast)."""
        self.trained = self.trained or bool(self.runs)
        self.autocast_seen = self.autocast_seen or any(getattr(r, "autocast", False)
                                                       for r in self.runs)

    def nonfinite(self) -> Optional[str]:
        """How the current family's first run that went non-finite did."""
        bad = next((r for r in self.runs if r.nonfinite is not None), None)
        return None if bad is None else bad.nonfinite.describe()

    @property
    def settings(self):
        return self.adapter.settings

    def trace_path(self, scenario: str, run: str) -> str:
        folder = os.path.join(self.work, "traces", scenario)
        os.makedirs(folder, exist_ok=True)
        return os.path.join(folder, f"{run}.h5")

    def run(self, **kwargs) -> Run:
        """A Run of the adapter at the audit's seed and batch size (kwargs override)."""
        s = self.settings
        kwargs.setdefault("seed", s.seed)
        kwargs.setdefault("batch_size", s.batch_size)
        r = Run(self.adapter, **kwargs)
        self.runs.append(r)
        return r

    def recorded(self, scenario: str, name: str, *, stats_every: int = 0, **kwargs) -> Run:
        """A Run that records into the family's trace `name`."""
        r = self.run(**kwargs)
        r.record(self.trace_path(scenario, name), name, scenario, stats_every=stats_every)
        return r


def has_module(model: torch.nn.Module, kinds: tuple) -> bool:
    return any(isinstance(m, kinds) for m in model.modules())


BATCHNORM = (torch.nn.modules.batchnorm._BatchNorm,)
DROPOUT = (torch.nn.modules.dropout._DropoutNd,)
#: runs whose step autocasts compare with scenarios/amp_fp32's bfloat16 rule
#: for trained parameters (bfloat16 rounding differs with the batch split)
BF16_TOLERANCE = "close(5e-2, 1e-3)"
