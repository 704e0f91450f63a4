"""Convolution + bias + ReLU benchmark (inference): tigon.ops.conv2d (CUTLASS implicit GEMM with the bias and ReLU
in its epilogue) against torch's ``relu(conv2d(x, w, b))`` (cuDNN) eager and under torch.compile, and cuDNN's bare
convolution (no bias, no ReLU), whose time is the floor: the epilogue's cost is tigon's time over the bare one's.

Shapes are N x C x H x W x K x R: the 3x3 convolutions of ResNet-50's four stages at batch 64 (stride 1, padding
R // 2, C = K), channels-last bf16. Compute-bound: 2·N·P·Q·K·C·R·R FLOP; rows carry TFLOP/s and the ratio to the bare
convolution. The bar (H200): <= 1.02x the bare convolution, >= 1.1x torch's conv + ReLU.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tigon.bench.harness import bench_shapes, compiled, make_impls, run_checks, time_checked, time_fwd
from tigon.bench.report import progress

OP = "conv2d_relu"
GPU_SHAPES = [(64, 64, 56, 56, 64, 3), (64, 128, 28, 28, 128, 3), (64, 256, 14, 14, 256, 3), (64, 512, 7, 7, 512, 3)]
CPU_SHAPES = [(2, 8, 10, 10, 16, 3)]


def torch_conv_relu(x, w, b):
    return F.relu(F.conv2d(x, w, b, padding=w.shape[2] // 2))


def _tigon(ctx, args):
    from tigon.ops.conv2d import conv2d

    return lambda x, w, b: conv2d(x, w, b, padding=w.shape[2] // 2, activation="relu")


def _bare(ctx, args):
    return lambda x, w, b: F.conv2d(x, w, None, padding=w.shape[2] // 2)


IMPLS = {
    "tigon": _tigon,
    "torch_eager": lambda ctx, args: torch_conv_relu,
    "torch_compile": lambda ctx, args: compiled(torch_conv_relu, ctx, args),
    "cudnn_conv": _bare,
}


def run(args, ctx) -> list[dict]:
    fns = make_impls(OP, IMPLS, args, ctx)
    results = []
    gpu_shapes = GPU_SHAPES[:1] if args.quick else GPU_SHAPES  # --quick: the first stage's layer
    for shape in bench_shapes(OP, args, ctx, gpu_shapes, CPU_SHAPES, "N x C x H x W x K x R"):
        n, c, h, w_, k, r = shape
        gen = torch.Generator(device=ctx.device).manual_seed(0)
        cl = torch.channels_last
        x = torch.randn(n, c, h, w_, generator=gen, device=ctx.device).to(ctx.dtype).to(memory_format=cl)
        w = (torch.randn(k, c, r, r, generator=gen, device=ctx.device) * (c * r * r) ** -0.5).to(ctx.dtype)
        w = w.to(memory_format=cl)
        b = (torch.randn(k, generator=gen, device=ctx.device) * 0.1).to(ctx.dtype)
        if "torch_compile" in fns:
            torch._dynamo.reset()
        with torch.no_grad():
            ref = torch_conv_relu(x.float(), w.float(), b.float())
            bare = F.conv2d(x.float(), w.float(), None, padding=r // 2)
            checks = run_checks(
                fns,
                lambda fn: {
                    "err_y": (fn(x, w, b).float() - (bare if fn is fns.get("cudnn_conv") else ref)).abs().max().item()
                },
            )
        del ref, bare
        elt = x.element_size()
        flop = 2 * n * h * w_ * k * c * r * r
        label = f"{OP} {'x'.join(map(str, shape))}"
        nbytes = {"fwd": (x.numel() + w.numel() + n * h * w_ * k) * elt}
        rows = time_checked(OP, label, shape, fns, checks, lambda fn: time_fwd(label, fn, (x, w, b), ctx), nbytes, ctx)
        base = next((r for r in rows if r["impl"] == "cudnn_conv" and not r.get("error")), None)
        for res in rows:
            if res.get("error"):
                continue
            ms = res.get("fwd_dev_ms") or res.get("fwd_graph_ms") or res["fwd_ms"]
            res["tflops_fwd"] = flop / (ms * 1e-3) / 1e12
            if base is not None:
                res["vs_bare_conv"] = ms / (base.get("fwd_dev_ms") or base.get("fwd_graph_ms") or base["fwd_ms"])
                progress(
                    f"{label} {res['impl']}: {ms:.4f} ms, {res['tflops_fwd']:.3g} TFLOP/s, "
                    f"{res['vs_bare_conv']:.3f}x the bare cuDNN convolution"
                )
        results += rows
        del x, w, b
    return results
