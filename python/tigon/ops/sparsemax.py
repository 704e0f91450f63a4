"""Sparsemax as a torch op (tigon::sparsemax_fwd / sparsemax_bwd): each slice along dim projected onto the probability
simplex, max(x - tau, 0) summing to 1, with exact zeros where softmax gives small values; the backward reads the saved
output."""

from __future__ import annotations

import torch

from tigon.ops._rowwise import along_dim, rowwise_op

__all__ = ["sparsemax"]

_Sparsemax = rowwise_op("sparsemax")


def sparsemax(x: torch.Tensor, dim: int = -1, *, causal: bool = False) -> torch.Tensor:
    """Sparsemax along dim for fp32, fp16 and bf16 tensors on the CPU or CUDA, with its gradient. Any dim: the kernels
    work on the last one, so another dim is moved there (a copy) and back. ``causal=True``: x is [..., L, L]
    attention scores and query i sees keys 0..i, as masking the entries above the diagonal with -inf would give
    (zeros there in the output), without reading them."""
    return along_dim(_Sparsemax, "sparsemax", x, dim, causal)
