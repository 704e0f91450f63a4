"""Squared ReLU benchmark: ``relu(x) ** 2`` (Nemotron's MLP activation, transformers' "relu2"), forward and backward,
against torch (eager: relu then square, as transformers' ReLUSquaredActivation; torch.compile of it). Liger has none.

Memory-bound: the forward reads x and writes y; the backward reads y (Tigon's derivative is 2 sqrt(y)) and dy and
writes dx. Eager torch keeps relu's output as well as the square's, one more tensor of x's size until the backward.
Figure of merit: bandwidth against the copy measured in the same run, and the peak memory.
"""

from __future__ import annotations

import torch

from tigon.bench.harness import bench_shapes, check_and_time_all_grads, compiled, make_impls

OP = "relu_squared"
# tokens x intermediate size of Nemotron MLPs (16384: Nemotron-3 8B; 24576: Nemotron-4 15B)
GPU_SHAPES = [(8192, 16384), (4096, 24576)]
CPU_SHAPES = [(256, 1024)]


def torch_relu_squared(x):
    return torch.square(torch.relu(x))


def _tigon(ctx, args):
    import tigon

    return tigon.ops.relu_squared


IMPLS = {
    "tigon": _tigon,
    "torch_eager": lambda ctx, args: torch_relu_squared,
    "torch_compile": lambda ctx, args: compiled(torch_relu_squared, ctx, args),
}


def run(args, ctx) -> list[dict]:
    fns = make_impls(OP, IMPLS, args, ctx)
    results = []
    for shape in bench_shapes(OP, args, ctx, GPU_SHAPES, CPU_SHAPES, "rows x intermediate"):
        M, N = shape
        gen = torch.Generator(device=ctx.device).manual_seed(0)
        x, dy = (torch.randn(M, N, generator=gen, device=ctx.device).to(ctx.dtype) for _ in range(2))
        n = M * N * x.element_size()
        nbytes = {"fwd": 2 * n, "bwd": 3 * n, "full": 5 * n}
        results += check_and_time_all_grads(OP, f"{OP} {M}x{N}", shape, fns, torch_relu_squared, (x,), dy, nbytes, ctx)
        del x, dy
    return results
