"""Multi-token attention benchmark: the score convolution out = mask_0(conv2d(softmax(mask_-inf(scores)))), forward and
backward (dscores, dweight, dbias), against torch (eager: masked_fill, softmax, conv2d, tril; torch.compile of it) and
Liger-Kernel's LigerMultiTokenAttentionFunction.

Memory-bound around cuDNN's convolution: the floor is reading the scores' kept half and writing the output forward,
reading the output's gradient and writing the scores' backward (the convolution's own passes over the probabilities
come on top, the same for everyone). Figure of merit: time against the baselines; bandwidth over that floor.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from tigon.bench.harness import (
    bench_shapes,
    check_and_time_all_grads,
    compiled,
    liger,
    make_impls,
)

OP = "multi_token_attention"
KERNEL, PADDING = 3, 1  # the "same" 3 x 3 convolution (Liger's default kernel size)
# (batch, heads, L, groups): every head its own 3 x 3 kernel (depthwise), and all heads mixed
GPU_SHAPES = [(2, 16, 2048, 16), (4, 8, 1024, 1)]
CPU_SHAPES = [(1, 4, 64, 1)]


def torch_mta(scores, weight, bias, groups=1):
    L = scores.shape[-1]
    future = torch.ones(L, L, dtype=torch.bool, device=scores.device).triu(1)
    probs = torch.softmax(scores.masked_fill(future, float("-inf")), -1)
    return F.conv2d(probs, weight, bias, 1, PADDING, 1, groups).masked_fill(future, 0.0)


def _tigon(ctx, args):
    import tigon

    return lambda s, w, b, groups=1: tigon.ops.multi_token_attention(s, w, b, 1, PADDING, 1, groups)


def _liger(ctx, args):
    fn = liger("liger_kernel.ops.multi_token_attention", "LigerMultiTokenAttentionFunction", ctx)
    return lambda s, w, b, groups=1: fn.apply(s, w, b, 1, PADDING, 1, groups, False)


IMPLS = {
    "tigon": _tigon,
    "torch_eager": lambda ctx, args: torch_mta,
    "torch_compile": lambda ctx, args: compiled(torch_mta, ctx, args),
    "liger": _liger,
}


def run(args, ctx) -> list[dict]:
    fns = make_impls(OP, IMPLS, args, ctx)
    results = []
    for shape in bench_shapes(OP, args, ctx, GPU_SHAPES, CPU_SHAPES, "batch x heads x L x groups"):
        B, H, L, groups = shape
        gen = torch.Generator(device=ctx.device).manual_seed(0)
        rand = lambda *size: torch.randn(*size, generator=gen, device=ctx.device)  # noqa: E731
        scores, dy = (2 * rand(B, H, L, L)).to(ctx.dtype), rand(B, H, L, L).to(ctx.dtype)
        weight = (rand(H, H // groups, KERNEL, KERNEL) / (KERNEL * (H // groups) ** 0.5)).to(ctx.dtype)
        bias = (0.1 * rand(H)).to(ctx.dtype)
        inputs = (scores, weight, bias)
        shaped = {name: functools.partial(fn, groups=groups) for name, fn in fns.items()}
        torch_ref = functools.partial(torch_mta, groups=groups)
        n = B * H * L * L * scores.element_size()
        nbytes = {"fwd": 1.5 * n, "bwd": 2 * n, "full": 3.5 * n}
        results += check_and_time_all_grads(
            OP, f"{OP} {B}x{H}x{L}x{L} groups={groups}", shape, shaped, torch_ref, inputs, dy, nbytes, ctx
        )
        del scores, dy, inputs
    return results
