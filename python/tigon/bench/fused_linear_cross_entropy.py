"""Fused linear + cross entropy benchmark: tigon against Hugging Face's way (logits = x @ W.T in the model's dtype,
then F.cross_entropy on logits.float()) and Liger-Kernel's fused linear cross entropy, same inputs, same run.

Shapes are tokens x hidden x vocab. The op is GEMM-bound: forward + backward is three GEMMs of 2·N·H·V FLOP each, so
the records carry TFLOP/s (tflops_full, tflops_full_graph; also in the progress lines) besides the table's GB/s,
which here count only the bytes that must move (x and W read, dX and dW written) and say little. peak = memory
allocated during one forward + backward on top of the inputs, gradients included. The targets (H200, bf16):
4096x4096x128256 full <= 20 ms with peak <= 2.5 GiB, 16384x4096x128256 full <= 80 ms with peak <= 3.5 GiB.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tigon.bench.harness import bench_shapes, liger, make_impls, run_checks, time_checked, time_fwd_bwd
from tigon.bench.report import progress

OP = "fused_linear_cross_entropy"
GPU_SHAPES = [
    (4096, 4096, 128256),
    (16384, 4096, 128256),  # the two target shapes (Llama 3 vocabulary)
    (8192, 4096, 151936),
    (8192, 4096, 256000),
    (8192, 8192, 128256),
]  # Qwen, Gemma vocabularies; H 8192
QUICK_SHAPES = [(4096, 4096, 128256), (2048, 4096, 32000)]
CPU_SHAPES = [(64, 256, 1000)]


def hf_loss(x: torch.Tensor, w: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """The lm_head in the model's dtype, then what ForCausalLMLoss does: upcast, F.cross_entropy."""
    return F.cross_entropy((x @ w.T).float(), t, ignore_index=-100, reduction="mean")


# ---- implementations: fn(x, w, t) -> loss, or Skip ------------------------------------------------------------------


def _tigon(ctx, args):
    from tigon.ops.fused_linear_cross_entropy import fused_linear_cross_entropy

    return lambda x, w, t: fused_linear_cross_entropy(x, w, t)


def _torch_eager(ctx, args):
    return hf_loss


def _liger(ctx, args):
    LigerFusedLinearCrossEntropyLoss = liger("liger_kernel.transformers", "LigerFusedLinearCrossEntropyLoss", ctx)
    loss_fn = LigerFusedLinearCrossEntropyLoss()

    def fn(x, w, t):
        out = loss_fn(w, x, t)  # (lin_weight, _input, target); newer releases may return a tuple or an output object
        return out[0] if isinstance(out, tuple) else getattr(out, "loss", out)

    return fn


IMPLS = {"tigon": _tigon, "torch_eager": _torch_eager, "liger": _liger}


def _grads(fn, x, w, t):
    xg, wg = x.detach().requires_grad_(True), w.detach().requires_grad_(True)
    loss = fn(xg, wg, t)
    return (loss.detach(),) + torch.autograd.grad(loss, (xg, wg))


def _errors(got, ref) -> dict:
    """Max abs difference of the loss, dX and dW against torch_eager (in float32)."""
    return {f"err_{k}": (g.float() - r.float()).abs().max().item() for k, g, r in zip(("y", "dx", "dw"), got, ref)}


def run(args, ctx) -> list[dict]:
    fns = make_impls(OP, IMPLS, args, ctx)
    gpu = ctx.device.type == "cuda"
    results = []
    gpu_shapes = QUICK_SHAPES if args.quick else GPU_SHAPES
    for shape in bench_shapes(OP, args, ctx, gpu_shapes, CPU_SHAPES, "tokens x hidden x vocab"):
        N, H, V = shape
        gen = torch.Generator(device=ctx.device).manual_seed(0)
        x = torch.randn(N, H, generator=gen, device=ctx.device).to(ctx.dtype)
        w = (torch.randn(V, H, generator=gen, device=ctx.device) * H**-0.5).to(ctx.dtype)
        t = torch.randint(0, V, (N,), generator=gen, device=ctx.device)
        t[::17] = -100  # some padding, as in real batches
        elt = x.element_size()
        moved = (N * H + V * H) * elt
        nbytes = {"fwd": moved, "bwd": 2 * moved, "full": 2 * moved}
        flop = 6 * N * H * V

        ref = _grads(hf_loss, x, w, t)
        checks = run_checks(fns, lambda fn: _errors(_grads(fn, x, w, t), ref))
        del ref

        def time_one(fn):
            times = time_fwd_bwd(f"{OP} {N}x{H}x{V}", fn, (x, w, t), (0, 1), None, ctx)
            for key in ("full", "full_graph"):
                ms = times.get(f"{key}_ms")
                times[f"tflops_{key}"] = flop / (ms * 1e-3) / 1e12 if ms else None
            if gpu:
                progress(
                    f"{OP} {N}x{H}x{V}: {times['tflops_full']:.0f} TFLOP/s forward + backward, peak "
                    f"{times['peak_mib'] / 1024:.2f} GiB"
                )
            return times

        results += time_checked(OP, f"{OP} {N}x{H}x{V}", shape, fns, checks, time_one, nbytes, ctx)
        del x, w, t
    return results
