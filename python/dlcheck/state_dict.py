"""PyTorch weights as the C engine's init_weights reads them
(engine/io/state_dict.c): an HDF5 file with group /model holding one dataset
per state-dict key, named as state_dict() names it ("0.weight",
"1.running_mean"), in state-dict order; floating tensors as float32,
integer ones (num_batches_tracked) as int64, scalars as rank-0 datasets.
A DistributedDataParallel "module." prefix is stripped. Written atomically.
"""
from __future__ import annotations

import os
from typing import Mapping, Union

import numpy as np
import torch
from h5py import h5f, h5p

from . import _h5

GROUP = "model"


def _engine_array(key: str, value: torch.Tensor) -> np.ndarray:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"state dict entry {key}: expected a tensor, got {type(value).__name__}")
    if value.is_complex():
        raise TypeError(f"state dict entry {key}: complex tensors have no engine dtype")
    t = value.detach().cpu()
    t = t.to(torch.float32) if t.is_floating_point() else t.to(torch.int64)
    if t.dim() > _h5.MAX_RANK:
        raise ValueError(f"state dict entry {key}: rank {t.dim()}; the engine's tensors have "
                         f"rank 0..{_h5.MAX_RANK}")
    return t.contiguous().numpy()


def save_state_dict(model_or_state_dict: Union[torch.nn.Module, Mapping[str, torch.Tensor]],
                    path: Union[str, os.PathLike]) -> str:
    """Writes a model's (or a state dict's) tensors as the engine's
    init_weights file and returns the path. ValueError / TypeError before
    anything is written for an empty state dict, a key the engine cannot
    name (empty, ".", containing "/"), a repeated key after stripping
    "module.", or a tensor it cannot hold."""
    path = os.fspath(path)
    sd = model_or_state_dict.state_dict() if isinstance(model_or_state_dict, torch.nn.Module) \
        else model_or_state_dict
    if not isinstance(sd, Mapping):
        raise TypeError(f"{path}: expected an nn.Module or a state dict, got {type(sd).__name__}")
    items: dict[str, np.ndarray] = {}
    for key, value in sd.items():
        name = key[len("module."):] if key.startswith("module.") else key
        if not name or name == "." or "/" in name:
            raise ValueError(f"{path}: state dict key '{key}' cannot be an HDF5 dataset name "
                             "(empty, '.', or has '/')")
        if name in items:
            raise ValueError(f"{path}: two entries are named '{name}'")
        items[name] = _engine_array(key, value)
    if not items:
        raise ValueError(f"{path}: the state dict is empty")
    with _h5.atomic_file(path) as tmp:
        fcpl = h5p.create(h5p.FILE_CREATE)
        fcpl.set_link_creation_order(h5p.CRT_ORDER_TRACKED | h5p.CRT_ORDER_INDEXED)
        fcpl.set_obj_track_times(False)
        fapl = h5p.create(h5p.FILE_ACCESS)
        fapl.set_fclose_degree(h5f.CLOSE_STRONG)
        fid = h5f.create(tmp.encode(), h5f.ACC_TRUNC, fcpl=fcpl, fapl=fapl)
        try:
            g = _h5.create_group(fid, GROUP, intermediate=True)
            for name, arr in items.items():
                _h5.write_tensor(g, name, arr)
        finally:
            fid.close()
    return path
