"""PolyNorm benchmark: ``w0 * norm(x**3) + w1 * norm(x**2) + w2 * norm(x) + b`` forward and backward (dx, the weights
and the bias) against torch (eager and torch.compile) and Liger-Kernel's LigerPolyNormFunction.

Memory-bound: the forward reads x and writes y; the backward reads x and dy and writes dx. Figure of merit: bandwidth
against the copy measured in the same run.
"""

from __future__ import annotations

import torch

from tigon.bench.harness import (
    bench_shapes,
    check_and_time_all_grads,
    make_impls,
    standard_impls,
)

OP = "poly_norm"
GPU_SHAPES = [(16384, 4096), (4096, 8192)]
CPU_SHAPES = [(256, 1024)]
EPS = 1e-6


def torch_poly_norm(x, weight, bias):
    def norm(u):
        return u * torch.rsqrt(u.float().pow(2).mean(-1, keepdim=True) + EPS).to(u.dtype)

    return weight[0] * norm(x**3) + weight[1] * norm(x**2) + weight[2] * norm(x) + bias


IMPLS = standard_impls("poly_norm", torch_poly_norm, "liger_kernel.ops.poly_norm", "LigerPolyNormFunction")


def run(args, ctx) -> list[dict]:
    fns = make_impls(OP, IMPLS, args, ctx)
    if "liger" in fns:  # Liger's Function takes (x, weight, bias, eps, in_place)
        liger_apply = fns["liger"]
        fns["liger"] = lambda x, w, b: liger_apply(x, w, b, EPS, False)
    if "tigon" in fns:
        tigon_fn = fns["tigon"]
        fns["tigon"] = lambda x, w, b: tigon_fn(x, w, b, EPS)
    results = []
    for shape in bench_shapes(OP, args, ctx, GPU_SHAPES, CPU_SHAPES, "rows x hidden"):
        M, N = shape
        gen = torch.Generator(device=ctx.device).manual_seed(0)
        x, dy = (torch.randn(M, N, generator=gen, device=ctx.device).to(ctx.dtype) for _ in range(2))
        weight = torch.tensor([0.3, 0.3, 0.4], device=ctx.device)
        bias = torch.tensor(0.5, device=ctx.device)
        inputs = (x, weight, bias)
        elt = x.element_size()
        nbytes = {"fwd": 2 * M * N * elt, "bwd": 3 * M * N * elt, "full": 5 * M * N * elt}
        results += check_and_time_all_grads(OP, f"{OP} {M}x{N}", shape, fns, torch_poly_norm, inputs, dy, nbytes, ctx)
        del x, dy, inputs
    return results
