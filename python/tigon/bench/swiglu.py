"""SwiGLU and GeGLU (tanh) benchmark: tigon against Hugging Face's ``act_fn(gate) * up`` (eager and torch.compile) and
Liger-Kernel's LigerSiLUMulFunction / LigerGELUMulFunction, same inputs, same process.

Memory-bound: the figure of merit is bandwidth against a plain copy. Byte models (tensor bytes T = M * N * 2 for
bf16): forward reads a, b and writes c (3 T); backward reads a, b, dc and writes da, db (5 T); full 7 T. tigon runs
with in_place=True, as inside an MLP block: the gradients are written over a and b, as Liger's backward always does;
the timed inputs therefore drift from run to run, which does not change the time of an elementwise kernel (the error
check uses fresh copies).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tigon.bench.harness import bench_shapes, compiled, liger, make_impls, run_checks, time_checked, time_fwd_bwd
from tigon.bench.timing import input_copy


GPU_SHAPES = [(8192, 14336)]  # Llama-3-8B's intermediate size, 8192 tokens
CPU_SHAPES = [(256, 1024)]
VARIANTS = ["swiglu", "geglu"]  # geglu = the tanh GELU (Gemma)


def hf_glu(variant: str):
    """The Hugging Face MLP's activation line, ``act_fn(gate_proj(x)) * up_proj(x)``, as a function of gate and up."""
    if variant == "swiglu":
        return lambda a, b: F.silu(a) * b
    return lambda a, b: F.gelu(a, approximate="tanh") * b


# ---- implementations: each factory returns fn(a, b) -> c or raises Skip(reason) ------------------------------------


def _overwriting(fn):
    """Marks fn as writing its gradients over its inputs: the steady-state timing gives each call fresh inputs."""
    fn.overwrites_inputs = True
    return fn


def _tigon(variant, ctx, args):
    from tigon.ops.swiglu import geglu, swiglu

    if variant == "swiglu":
        return _overwriting(lambda a, b: swiglu(a, b, in_place=True))
    return _overwriting(lambda a, b: geglu(a, b, approximate="tanh", in_place=True))


def _torch_eager(variant, ctx, args):
    return hf_glu(variant)


def _torch_compile(variant, ctx, args):
    return compiled(hf_glu(variant), ctx, args)


def _liger(variant, ctx, args):  # its backward writes da, db over a, b too
    if variant == "swiglu":
        f = liger("liger_kernel.ops.swiglu", "LigerSiLUMulFunction", ctx).apply
    else:
        f = liger("liger_kernel.ops.geglu", "LigerGELUMulFunction", ctx).apply
    return _overwriting(lambda a, b: f(a, b))


IMPLS = {"tigon": _tigon, "torch_eager": _torch_eager, "torch_compile": _torch_compile, "liger": _liger}


# ---- measurement ------------------------------------------------------------------------------------------------------


def _forward_backward(fn, a, b, dc):
    ag, bg = input_copy(a, True), input_copy(b, True)
    c = fn(ag, bg)
    da, db = torch.autograd.grad(c, (ag, bg), dc)
    return c, da, db


def _max_errors(fn, a, b, dc, ref) -> dict:
    """Max abs difference of c, da, db against torch_eager in float32 (err_dx / err_dw hold da / db for the table)."""
    got = _forward_backward(fn, a, b, dc)
    return {f"err_{k}": (g.float() - r).abs().max().item() for k, g, r in zip(("y", "dx", "dw"), got, ref)}


def _time_impl(fn, a, b, dc, ctx, op) -> dict:
    return time_fwd_bwd(op, fn, (a, b), (0, 1), dc, ctx)


def _run_variant(variant, args, ctx) -> list[dict]:
    fns = make_impls(variant, IMPLS, args, ctx, variant)

    results = []
    for shape in bench_shapes(variant, args, ctx, GPU_SHAPES, CPU_SHAPES, "tokens x intermediate"):
        M, N = shape
        gen = torch.Generator(device=ctx.device).manual_seed(0)
        rand = lambda: torch.randn(M, N, generator=gen, device=ctx.device).to(ctx.dtype)  # noqa: E731
        a, b, dc = rand(), rand(), rand()
        elt = a.element_size()
        nbytes = {"fwd": 3 * M * N * elt, "bwd": 5 * M * N * elt, "full": 7 * M * N * elt}
        if "torch_compile" in fns:
            torch._dynamo.reset()
        ref = _forward_backward(hf_glu(variant), a.float(), b.float(), dc.float())
        checks = run_checks(fns, lambda fn: _max_errors(fn, a, b, dc, ref))
        del ref
        results += time_checked(
            variant,
            f"{variant} {M}x{N}",
            shape,
            fns,
            checks,
            lambda fn: _time_impl(fn, a, b, dc, ctx, variant),
            nbytes,
            ctx,
        )
        del a, b, dc
    return results


def run(args, ctx) -> list[dict]:
    results = []
    for variant in VARIANTS:
        results += _run_variant(variant, args, ctx)
    return results
