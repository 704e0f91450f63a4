"""Softmax as a torch op (tigon::softmax_fwd / softmax_bwd): ``torch.softmax(x, dim)`` with a backward from the saved
output, a row held in registers where it fits (one read and one write each way)."""

from __future__ import annotations

import torch

from tigon.ops._rowwise import along_dim, rowwise_op

__all__ = ["softmax"]

_Softmax = rowwise_op("softmax")


def softmax(x: torch.Tensor, dim: int = -1, *, causal: bool = False) -> torch.Tensor:
    """``torch.softmax(x, dim)`` for fp32, fp16 and bf16 tensors on the CPU or CUDA, with its gradient. Any dim: the
    kernels work on the last one, so another dim is moved there (a copy) and back. ``causal=True``: x is [..., L, L]
    attention scores and query i sees keys 0..i, as masking the entries above the diagonal with -inf would give
    (zeros there in the output), without reading them."""
    return along_dim(_Softmax, "softmax", x, dim, causal)
