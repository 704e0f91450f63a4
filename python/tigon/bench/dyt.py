"""DyT benchmark: ``gamma * tanh(alpha * x) + beta`` forward and backward (dx and the three parameter gradients)
against torch (eager and torch.compile) and Liger-Kernel's LigerDyTFunction.

Memory-bound: the forward reads x and writes y; the backward reads x and dy and writes dx (the parameters and the
fp32 partial sums are negligible). Figure of merit: bandwidth against the copy measured in the same run.
"""

from __future__ import annotations

import torch

from tigon.bench.harness import (
    bench_shapes,
    check_and_time_all_grads,
    make_impls,
    standard_impls,
)

OP = "dyt"
GPU_SHAPES = [(16384, 4096), (4096, 8192)]
CPU_SHAPES = [(256, 1024)]


def torch_dyt(x, alpha, gamma, beta):
    return gamma * torch.tanh(alpha * x) + beta


IMPLS = standard_impls("dyt", torch_dyt, "liger_kernel.ops.dyt", "LigerDyTFunction")


def run(args, ctx) -> list[dict]:
    fns = make_impls(OP, IMPLS, args, ctx)
    results = []
    for shape in bench_shapes(OP, args, ctx, GPU_SHAPES, CPU_SHAPES, "rows x hidden"):
        M, N = shape
        gen = torch.Generator(device=ctx.device).manual_seed(0)
        rand = lambda *size: torch.randn(*size, generator=gen, device=ctx.device)  # noqa: E731
        x, dy = (rand(M, N).to(ctx.dtype) for _ in range(2))
        alpha = torch.full((1,), 0.5, device=ctx.device)
        gamma, beta = 1 + 0.1 * rand(N), 0.1 * rand(N)  # fp32 parameters, as a mixed-precision model keeps them
        inputs = (x, alpha, gamma, beta)
        elt = x.element_size()
        nbytes = {"fwd": 2 * M * N * elt, "bwd": 3 * M * N * elt, "full": 5 * M * N * elt}
        results += check_and_time_all_grads(OP, f"{OP} {M}x{N}", shape, fns, torch_dyt, inputs, dy, nbytes, ctx)
        del x, dy, inputs
    return results
