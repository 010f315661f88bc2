"""Digests: the same bits give the C side's digest."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import xxhash

from dlcheck import digest, read_trace
from dlcheck.digest import tensor_bytes


def test_python_digest_equals_c_digest_of_the_same_bits(c_golden):
    # The golden's last digest row hashes the parameters after the last step,
    # which are also its finals param/<key>: the same bits on both sides.
    t = read_trace(c_golden)
    assert t.digest_names == ["param/1.weight", "param/1.bias", "param/3.weight", "param/3.bias"]
    for j, name in enumerate(t.digest_names):
        final = t.final_tensor(name)
        assert digest(final) == int(t.digests[-1, j]), name
        assert digest(t.finals[name]) == int(t.digests[-1, j])
        assert digest(final.t().contiguous().t()) == int(t.digests[-1, j])  # layout-blind


@pytest.mark.parametrize("t, raw", [
    (torch.tensor([1.0, -2.0], dtype=torch.bfloat16), b"\x80\x3f\x00\xc0"),
    (torch.tensor([1.0], dtype=torch.float16), b"\x00\x3c"),
    (torch.tensor([True, False]), b"\x01\x00"),
    (torch.tensor(3, dtype=torch.int64), (3).to_bytes(8, "little")),
    (torch.arange(4, dtype=torch.int32).reshape(2, 2).t(),
     b"".join(i.to_bytes(4, "little") for i in (0, 2, 1, 3))),
])
def test_element_bytes_are_little_endian_row_major(t, raw):
    assert bytes(tensor_bytes(t)) == raw
    assert digest(t) == xxhash.xxh64_intdigest(raw, seed=0)


def test_digest_of_views_and_autograd_tensors():
    w = torch.randn(3, 4, requires_grad=True)
    assert digest(w) == digest(w.detach().clone())
    assert digest(torch.zeros(0)) == xxhash.xxh64_intdigest(b"")
    assert digest(np.float32([1.5])) == digest(torch.tensor([1.5]))


def test_unsupported_inputs_raise():
    with pytest.raises(TypeError):
        digest([1, 2])
    with pytest.raises(TypeError):
        digest(torch.zeros(2, 2).to_sparse())
