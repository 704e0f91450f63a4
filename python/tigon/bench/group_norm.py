"""GroupNorm benchmark: forward and backward (dx, dweight, dbias) of [N, C, S] inputs in 32 groups against torch
(eager and torch.compile) and Liger-Kernel's LigerGroupNormFunction.

Memory-bound: the forward reads x and writes y; the backward reads x and dy and writes dx (the statistics, the
parameters and the fp32 partial sums are negligible). Figure of merit: bandwidth against the copy in the same run.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tigon.bench.harness import (
    bench_shapes,
    check_and_time_all_grads,
    compiled,
    liger,
    make_impls,
)

OP = "group_norm"
GROUPS = 32
GPU_SHAPES = [(32, 256, 4096), (64, 1024, 256)]
CPU_SHAPES = [(4, 64, 64)]


def torch_group_norm(x, weight, bias):
    return F.group_norm(x, GROUPS, weight, bias, 1e-5)


def _tigon(ctx, args):
    import tigon

    return lambda x, w, b: tigon.ops.group_norm(x, GROUPS, w, b, 1e-5)


def _liger(ctx, args):
    fn = liger("liger_kernel.ops.group_norm", "LigerGroupNormFunction", ctx)
    return lambda x, w, b: fn.apply(x, w, b, x.shape[1], GROUPS, 1e-5)


IMPLS = {
    "tigon": _tigon,
    "torch_eager": lambda ctx, args: torch_group_norm,
    "torch_compile": lambda ctx, args: compiled(torch_group_norm, ctx, args),
    "liger": _liger,
}


def run(args, ctx) -> list[dict]:
    fns = make_impls(OP, IMPLS, args, ctx)
    results = []
    for shape in bench_shapes(OP, args, ctx, GPU_SHAPES, CPU_SHAPES, "samples x channels x positions"):
        N, C, S = shape
        gen = torch.Generator(device=ctx.device).manual_seed(0)
        rand = lambda *size: torch.randn(*size, generator=gen, device=ctx.device)  # noqa: E731
        x, dy = (rand(N, C, S).to(ctx.dtype) for _ in range(2))
        weight, bias = (1 + 0.1 * rand(C)).to(ctx.dtype), (0.1 * rand(C)).to(ctx.dtype)
        inputs = (x, weight, bias)
        elt, n = x.element_size(), N * C * S
        nbytes = {"fwd": 2 * n * elt, "bwd": 3 * n * elt, "full": 5 * n * elt}
        results += check_and_time_all_grads(
            OP, f"{OP} {N}x{C}x{S}", shape, fns, torch_group_norm, inputs, dy, nbytes, ctx
        )
        del x, dy, inputs
    return results
