"""Tensor digests as the C side computes them (checks/trace/trace.c dlc_digest):
xxhash64, seed 0, of the raw little-endian bytes of the tensor's elements in
row-major (contiguous) order. Equal bits give equal digests on both sides.
"""
from __future__ import annotations

import sys
from typing import Union

import numpy as np
import torch
import xxhash


def tensor_bytes(t: Union[torch.Tensor, np.ndarray]) -> memoryview:
    """The element bytes dlc_digest hashes: contiguous, little-endian, on the
    CPU (a CUDA tensor is copied). bfloat16, float16, bool and every integer
    and floating dtype are handled; sparse and quantized tensors are not."""
    if isinstance(t, np.ndarray):
        arr = np.ascontiguousarray(t)
    elif isinstance(t, torch.Tensor):
        if t.layout != torch.strided or t.is_quantized:
            raise TypeError(f"digest: a {t.layout} / quantized tensor has no plain element bytes")
        c = t.detach().cpu().resolve_conj().resolve_neg().contiguous()
        if c.dtype == torch.bfloat16:
            c = c.view(torch.int16)
        arr = c.numpy()
    else:
        raise TypeError(f"digest: expected a torch.Tensor or numpy array, got {type(t).__name__}")
    if arr.dtype.byteorder == ">" or (arr.dtype.byteorder == "=" and sys.byteorder == "big"):
        arr = arr.astype(arr.dtype.newbyteorder("<"))  # pragma: no cover - big-endian hosts
    return memoryview(arr.reshape(-1).view(np.uint8))


def digest(t: Union[torch.Tensor, np.ndarray]) -> int:
    """xxhash64 (seed 0) of the tensor's element bytes, an int in 0..2^64-1:
    the value a trace's /digests/values holds for the same bits."""
    return xxhash.xxh64_intdigest(tensor_bytes(t), seed=0)
