"""Sparsemax benchmark: sparsemax over the last dimension, forward and backward, against torch (eager: the sort-based
formula; torch.compile of it) and Liger-Kernel's LigerSparsemaxFunction.

Memory-bound where the threshold search stays in shared memory: the forward reads x and writes y; the backward reads
y and dy and writes dx. Figure of merit: bandwidth against the copy measured in the same run.
"""

from __future__ import annotations

import torch

from tigon.bench.harness import compiled, liger, run_rowwise

OP = "sparsemax"
GPU_SHAPES = [(16384, 4096), (4096, 16384)]
CPU_SHAPES = [(256, 1024)]


def torch_sparsemax(x):
    """Sparsemax by sorting (the textbook formula), in fp32 (a 16-bit running sum loses the threshold), rounded to
    x's dtype."""
    z = x.float()
    srt, _ = torch.sort(z, dim=-1, descending=True)
    k = torch.arange(1, z.shape[-1] + 1, device=z.device, dtype=z.dtype)
    cums = srt.cumsum(-1)
    support = (1 + k * srt > cums).sum(-1, keepdim=True)
    tau = (cums.gather(-1, support - 1) - 1) / support.to(z.dtype)
    return torch.clamp(z - tau, min=0).to(x.dtype)


def _tigon(ctx, args):
    import tigon

    return tigon.ops.sparsemax


def _liger(ctx, args):
    fn = liger("liger_kernel.ops.sparsemax", "LigerSparsemaxFunction", ctx)
    return lambda x: fn.apply(x, -1)


IMPLS = {
    "tigon": _tigon,
    "torch_eager": lambda ctx, args: torch_sparsemax,
    "torch_compile": lambda ctx, args: compiled(torch_sparsemax, ctx, args),
    "liger": _liger,
}


def run(args, ctx) -> list[dict]:
    return run_rowwise(OP, IMPLS, torch_sparsemax, GPU_SHAPES, CPU_SHAPES, args, ctx)
