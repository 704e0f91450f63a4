"""Linear + activation benchmark: tigon.ops.linear_act (bias and activation in cuBLASLt's epilogue where it has one)
against torch's ``act(F.linear(x, w, b))`` eager and under torch.compile, and the bare matmul ``x @ w.T`` (no bias,
no activation), whose time is the floor: the epilogue's cost is tigon's time over the matmul's.

Shapes are tokens x in_features x out_features; one op per activation (linear_act_none, _relu, _gelu_tanh, _silu).
GEMM-bound: forward 2·M·K·N FLOP, forward + backward three GEMMs, 6·M·K·N; the records carry TFLOP/s (tflops_fwd,
tflops_full and their CUDA-graph and steady-state forms), the progress lines the ratio to the bare matmul. The bar
(H200, bf16): linear + bias + GELU-tanh forward <= 1.03x the matmul's time. The table's GB/s count only x, W and the
output (and the gradients) and say little here.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tigon.bench.harness import bench_shapes, compiled, make_impls, run_checks, time_checked, time_fwd_bwd
from tigon.bench.report import progress

OP = "linear_act"
GPU_SHAPES = [(8192, 4096, 14336), (4096, 4096, 4096)]  # Llama-3-8B's up projection over 8192 tokens; a square GEMM
QUICK_SHAPES = GPU_SHAPES[:1]  # --quick (scripts/gpu-check's time limit): four torch.compile builds instead of eight
CPU_SHAPES = [(64, 128, 256)]
ACTIVATIONS = ["none", "relu", "gelu_tanh", "silu"]
BAR = 1.03  # linear + bias + GELU over the bare matmul, forward

_TORCH_ACT = {
    "none": lambda y: y,
    "relu": F.relu,
    "gelu_tanh": lambda y: F.gelu(y, approximate="tanh"),
    "silu": F.silu,
}


def torch_linear_act(act: str):
    f = _TORCH_ACT[act]
    return lambda x, w, b: f(F.linear(x, w, b))


# ---- implementations: fn(x, w, b) -> y, or Skip -----------------------------------------------------------------


def _tigon(act, ctx, args):
    from tigon.ops.linear_act import linear_act

    return lambda x, w, b: linear_act(x, w, b, act)


def _torch_eager(act, ctx, args):
    return torch_linear_act(act)


def _torch_compile(act, ctx, args):
    return compiled(torch_linear_act(act), ctx, args)


def _matmul(act, ctx, args):
    def fn(x, w, b):
        return x @ w.T

    fn.grad_of = (0, 1)  # no bias: its gradient is not taken
    return fn


IMPLS = {"tigon": _tigon, "torch_eager": _torch_eager, "torch_compile": _torch_compile, "matmul": _matmul}


# ---- measurement ----------------------------------------------------------------------------------------------------


def _grads(fn, x, w, b):
    grad_of = getattr(fn, "grad_of", (0, 1, 2))
    leaves = [t.detach().requires_grad_(i in grad_of) for i, t in enumerate((x, w, b))]
    y = fn(*leaves)
    dy = torch.ones_like(y) / y.shape[-1] ** 0.5
    return (y.detach(),) + torch.autograd.grad(y, [leaves[i] for i in grad_of], dy)[:2]


def _errors(got, ref) -> dict:
    """Max abs difference of y, dX and dW against the reference in float32."""
    return {f"err_{k}": (g.float() - r.float()).abs().max().item() for k, g, r in zip(("y", "dx", "dw"), got, ref)}


def _device_ms(res: dict, key: str):
    """The steadiest measurement of res's `key` phase: device time, then CUDA-graph replay, then the eager call."""
    for k in (f"{key}_dev_ms", f"{key}_graph_ms", f"{key}_ms"):
        if res.get(k):
            return res[k]
    return None


def _run_activation(act, args, ctx) -> list[dict]:
    op = f"{OP}_{act}"
    fns = make_impls(op, IMPLS, args, ctx, act)
    results = []
    gpu_shapes = QUICK_SHAPES if args.quick else GPU_SHAPES
    for shape in bench_shapes(op, args, ctx, gpu_shapes, CPU_SHAPES, "tokens x in_features x out_features"):
        M, K, N = shape
        gen = torch.Generator(device=ctx.device).manual_seed(0)
        x = torch.randn(M, K, generator=gen, device=ctx.device).to(ctx.dtype)
        w = (torch.randn(N, K, generator=gen, device=ctx.device) * K**-0.5).to(ctx.dtype)
        b = (torch.randn(N, generator=gen, device=ctx.device) * 0.1).to(ctx.dtype)
        dy = (torch.randn(M, N, generator=gen, device=ctx.device) * N**-0.5).to(ctx.dtype)
        elt = x.element_size()
        moved = (M * K + N * K + M * N) * elt
        nbytes = {"fwd": moved, "bwd": 2 * moved, "full": 3 * moved}
        flop = {"fwd": 2 * M * K * N, "full": 6 * M * K * N}
        if "torch_compile" in fns:
            torch._dynamo.reset()
        # each against torch in float32: the matmul against the bare matmul
        refs = {
            fn: _grads(fn if name == "matmul" else torch_linear_act(act), x.float(), w.float(), b.float())
            for name, fn in fns.items()
        }
        checks = run_checks(fns, lambda fn: _errors(_grads(fn, x, w, b), refs[fn]))
        del refs

        def time_one(fn):
            times = time_fwd_bwd(f"{op} {M}x{K}x{N}", fn, (x, w, b), getattr(fn, "grad_of", (0, 1, 2)), dy, ctx)
            for key in ("fwd", "full"):
                for kind in ("", "_graph", "_dev"):
                    ms = times.get(f"{key}{kind}_ms")
                    times[f"tflops_{key}{kind}"] = flop[key] / (ms * 1e-3) / 1e12 if ms else None
            return times

        rows = time_checked(op, f"{op} {M}x{K}x{N}", shape, fns, checks, time_one, nbytes, ctx)
        by_impl = {r["impl"]: r for r in rows if not r.get("error")}
        base = by_impl.get("matmul")
        for r in by_impl.values():
            for key in ("fwd", "full"):
                mine, floor = _device_ms(r, key), base and _device_ms(base, key)
                r[f"vs_matmul_{key}"] = mine / floor if mine and floor else None
            if r.get("vs_matmul_fwd"):
                tf = r.get("tflops_fwd_dev") or r.get("tflops_fwd_graph") or r.get("tflops_fwd")
                bar = f" (bar <= {BAR:.2f}x)" if act == "gelu_tanh" and r["impl"] == "tigon" else ""
                progress(
                    f"{op} {M}x{K}x{N} {r['impl']}: forward {_device_ms(r, 'fwd'):.4f} ms, {tf:.3g} TFLOP/s, "
                    f"{r['vs_matmul_fwd']:.3f}x the bare matmul{bar}; forward + backward "
                    f"{r['vs_matmul_full']:.3f}x"
                )
        results += rows
        del x, w, b, dy
    return results


def run(args, ctx) -> list[dict]:
    results = []
    for act in ACTIVATIONS:
        results += _run_activation(act, args, ctx)
    return results
