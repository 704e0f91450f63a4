"""Softmax benchmark: ``torch.softmax(x, -1)`` forward and backward against torch (eager and torch.compile) and
Liger-Kernel's LigerSoftmaxFunction.

Memory-bound: the forward reads x and writes y; the backward reads y and dy and writes dx. Figure of merit: bandwidth
against the copy measured in the same run. Shapes: an attention-sized row count at 4096, a vocabulary-sized row.
"""

from __future__ import annotations

import torch

from tigon.bench.harness import bench_shapes, make_impls, run_checks, standard_impls, time_checked, time_fwd_bwd

OP = "softmax"
GPU_SHAPES = [(16384, 4096), (1024, 131072)]
CPU_SHAPES = [(256, 1024)]


def torch_softmax(x):
    return torch.softmax(x, -1)


IMPLS = standard_impls("softmax", torch_softmax, "liger_kernel.ops.softmax", "LigerSoftmaxFunction")


def _max_errors(fn, x, dy, ref) -> dict:
    leaf = x.detach().clone().requires_grad_()
    y = fn(leaf)
    (dx,) = torch.autograd.grad(y, leaf, dy)
    return {"err_y": (y.float() - ref[0]).abs().max().item(), "err_dx": (dx.float() - ref[1]).abs().max().item()}


def run(args, ctx) -> list[dict]:
    fns = make_impls(OP, IMPLS, args, ctx)
    results = []
    for shape in bench_shapes(OP, args, ctx, GPU_SHAPES, CPU_SHAPES, "rows x cols"):
        M, N = shape
        gen = torch.Generator(device=ctx.device).manual_seed(0)
        x, dy = ((torch.randn(M, N, generator=gen, device=ctx.device) * 2).to(ctx.dtype) for _ in range(2))
        elt = x.element_size()
        nbytes = {"fwd": 2 * M * N * elt, "bwd": 3 * M * N * elt, "full": 5 * M * N * elt}
        if "torch_compile" in fns:
            torch._dynamo.reset()
        xf = x.float().requires_grad_()
        yf = torch.softmax(xf, -1)
        ref = (yf.detach(), torch.autograd.grad(yf, xf, dy.float())[0])
        checks = run_checks(fns, lambda fn: _max_errors(fn, x, dy, ref))
        del ref, xf, yf
        results += time_checked(
            OP,
            f"{OP} {M}x{N}",
            shape,
            fns,
            checks,
            lambda fn: time_fwd_bwd(OP, fn, (x,), (0,), (dy,), ctx),
            nbytes,
            ctx,
        )
        del x, dy
    return results
