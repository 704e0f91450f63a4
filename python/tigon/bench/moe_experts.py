"""Mixture-of-experts experts block: tigon.ops.moe_experts against transformers' own Qwen3MoeExperts forward with its
grouped_mm implementation (torch_eager: what a transformers 5 model runs by default), the same module's per-expert
loop (hf_loop: its plain forward, experts_implementation="eager") and Liger-Kernel's LigerFusedMoEFunction (what
apply_liger_kernel_to_qwen3_moe installs), same inputs, same process. No torch.compile row: the loop's expert set is
data-dependent (a graph break per expert), and the grouped_mm path is already one grouped GEMM per projection.

Shapes are tokens x hidden x intermediate x experts x top_k; the GPU default is Qwen3-30B-A3B's experts layer over
8192 tokens. Routing as Qwen3-MoE's router makes it: softmax (fp32) over random router logits, top-k, the k weights
renormalised (norm_topk_prob), then cast to the run's dtype; random logits load the experts about evenly.

GEMM-bound: forward 2·T·k·(2I·H + H·I) FLOP (the gate/up and down projections of every routed token), forward +
backward three times that; the records carry TFLOP/s (tflops_fwd, tflops_full and their CUDA-graph and steady-state
forms). Errors are relative to an fp32 reference computed here (err_dw: the largest of the routing weights' and the
two expert weights' gradients, each also recorded). The table's GB/s count the expert weights and the activations
once and say little here. hf_loop and Liger synchronise with the host (their expert counts), so they cannot be
captured in a CUDA graph and keep their eager numbers.
"""

from __future__ import annotations

import importlib

import torch
import torch.nn.functional as F

from tigon.bench.harness import bench_shapes, make_impls, run_checks, time_checked, time_fwd_bwd
from tigon.bench.report import Skip, progress

OP = "moe_experts"
DIMS = "tokens x hidden x intermediate x experts x top_k"
GPU_SHAPES = [(8192, 2048, 768, 128, 8)]  # Qwen3-30B-A3B
CPU_SHAPES = [(64, 64, 32, 8, 2)]
GRAD_OF = (0, 2, 3, 4)  # x, weights, gate_up_weight, down_weight; ids (1) has none


# ---- implementations: fn(x, ids, weights, gate_up_weight, down_weight) -> out, or Skip ------------------------------


def _tigon(shape, ctx, args):
    from tigon.ops.moe import moe_experts

    return moe_experts


def _hf_experts(shape, implementation: str):
    """transformers' Qwen3MoeExperts for this shape running `implementation`, as fn(x, ids, weights, gate_up, down):
    the module's own forward with the given tensors in place of its parameters (built on the meta device, then
    dropped), so the gradients reach the benchmark's inputs."""
    try:
        from transformers import Qwen3MoeConfig
        from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeExperts
    except Exception as e:
        raise Skip(f"transformers has no Qwen3MoeExperts ({type(e).__name__}: {e})")
    if Qwen3MoeExperts.__module__ != "transformers.models.qwen3_moe.modeling_qwen3_moe":  # an earlier op's class patch
        raise Skip(f"Qwen3MoeExperts is patched in this process ({Qwen3MoeExperts.__module__})")
    T, H, I, E, k = shape
    config = Qwen3MoeConfig(hidden_size=H, moe_intermediate_size=I, num_experts=E, num_experts_per_tok=k)
    config._experts_implementation = implementation
    with torch.device("meta"):
        module = Qwen3MoeExperts(config)
    del module._parameters["gate_up_proj"], module._parameters["down_proj"]

    def fn(x, ids, weights, gate_up, down):
        module.gate_up_proj, module.down_proj = gate_up, down
        return module(x, ids, weights)

    return fn


def _torch_eager(shape, ctx, args):
    try:
        from transformers.integrations.moe import ALL_EXPERTS_FUNCTIONS
    except Exception as e:
        raise Skip(f"this transformers has no experts implementations ({type(e).__name__}: {e})")
    if "grouped_mm" not in ALL_EXPERTS_FUNCTIONS:
        raise Skip("this transformers has no grouped_mm experts implementation")
    if not (hasattr(F, "grouped_mm") or hasattr(torch, "_grouped_mm")):
        ctx.note(f"{OP}: torch_eager: this torch has no grouped_mm: transformers runs its per-expert fallback")
    return _hf_experts(shape, "grouped_mm")


def _hf_loop(shape, ctx, args):
    return _hf_experts(shape, "eager")


def _liger(shape, ctx, args):
    try:
        importlib.import_module("liger_kernel")
    except Exception as e:
        raise Skip(f"liger_kernel not importable ({type(e).__name__}: {e})")
    try:
        fused = importlib.import_module("liger_kernel.ops.fused_moe").LigerFusedMoEFunction
    except Exception as e:
        raise Skip(f"this liger_kernel has no fused MoE (liger_kernel.ops.fused_moe: {type(e).__name__}: {e})")
    if ctx.device.type != "cuda":
        raise Skip("Liger is Triton: CUDA only")
    # int32 ids, cast per call as Liger's own experts module does
    return lambda x, ids, weights, gate_up, down: fused.apply(x, gate_up, down, ids.to(torch.int32), weights)


IMPLS = {"tigon": _tigon, "torch_eager": _torch_eager, "hf_loop": _hf_loop, "liger": _liger}


# ---- reference and measurement -------------------------------------------------------------------------------------


def reference(x, ids, weights, gate_up, down):
    """The experts block expert by expert, in x's dtype (fp32 for the check): every routed (token, choice) of an
    expert through its SwiGLU MLP, scaled by its routing weight and summed into the token's row."""
    out = torch.zeros_like(x)
    for e in ids.unique().tolist():
        token, choice = (ids == e).nonzero(as_tuple=True)
        gate, up = (x[token] @ gate_up[e].T).chunk(2, dim=-1)
        y = (F.silu(gate) * up) @ down[e].T
        out = out.index_add(0, token, y * weights[token, choice, None])
    return out


def _output_and_grads(fn, inputs, dy):
    leaves = [t.detach().clone().requires_grad_(i in GRAD_OF) for i, t in enumerate(inputs)]
    y = fn(*leaves)
    return (y, *torch.autograd.grad(y, [leaves[i] for i in GRAD_OF], dy))


_NAMES = ("y", "dx", "dweights", "dgate_up", "ddown")


def _errors(fn, inputs, dy, ref) -> dict:
    """Max abs difference of the output and every gradient from the fp32 reference's, relative to the reference's
    size (weight gradients sum over many tokens); err_dw is the largest over the three non-x gradients."""
    got = _output_and_grads(fn, inputs, dy)
    err = {
        f"err_{n}": (g.float() - r).abs().max().item() / max(1.0, r.abs().max().item())
        for n, g, r in zip(_NAMES, got, ref)
    }
    err["err_dw"] = max(err["err_dweights"], err["err_dgate_up"], err["err_ddown"])
    return err


def _inputs(shape, ctx):
    """x, ids, weights, gate_up_weight, down_weight and the output gradient, the same seeded values in every run;
    weights scaled so every activation is about unit-sized."""
    T, H, I, E, k = shape
    gen = torch.Generator(device=ctx.device).manual_seed(0)
    randn = lambda *s: torch.randn(*s, generator=gen, device=ctx.device)  # noqa: E731
    x = randn(T, H).to(ctx.dtype)
    probs = randn(T, E).to(ctx.dtype).softmax(dim=-1, dtype=torch.float32)  # Qwen3-MoE's router
    weights, ids = probs.topk(k, dim=-1)
    weights = (weights / weights.sum(dim=-1, keepdim=True)).to(ctx.dtype)
    gate_up = (randn(E, 2 * I, H) * H**-0.5).to(ctx.dtype)
    down = (randn(E, H, I) * I**-0.5).to(ctx.dtype)
    dy = randn(T, H).to(ctx.dtype)
    return (x, ids, weights, gate_up, down), dy


def _tflops(times: dict, flop: dict) -> None:
    for key in ("fwd", "full"):
        for kind in ("", "_graph", "_dev"):
            ms = times.get(f"{key}{kind}_ms")
            times[f"tflops_{key}{kind}"] = flop[key] / (ms * 1e-3) / 1e12 if ms else None


def _steadiest(row: dict, key: str) -> float:
    """TFLOP/s from the steady-state device time where measured, else the CUDA-graph replay's, else the eager call's."""
    return row.get(f"tflops_{key}_dev") or row.get(f"tflops_{key}_graph") or row[f"tflops_{key}"]


def run(args, ctx) -> list[dict]:
    results = []
    for shape in bench_shapes(OP, args, ctx, GPU_SHAPES, CPU_SHAPES, DIMS):
        T, H, I, E, k = shape
        label = f"{OP} {'x'.join(map(str, shape))}"
        fns = make_impls(OP, IMPLS, args, ctx, shape)
        inputs, dy = _inputs(shape, ctx)
        elt = inputs[0].element_size()
        experts, acts = 3 * E * H * I * elt, T * H * elt
        nbytes = {"fwd": experts + 2 * acts, "bwd": 2 * experts + 3 * acts, "full": 3 * experts + 5 * acts}
        flop = {"fwd": 6 * T * k * H * I, "full": 18 * T * k * H * I}
        ref = _output_and_grads(reference, [t if i == 1 else t.float() for i, t in enumerate(inputs)], dy.float())
        checks = run_checks(fns, lambda fn: _errors(fn, inputs, dy, ref))
        del ref

        def time_one(fn):
            times = time_fwd_bwd(label, fn, inputs, GRAD_OF, dy, ctx)
            _tflops(times, flop)
            return times

        rows = time_checked(OP, label, shape, fns, checks, time_one, nbytes, ctx)
        for r in rows:
            if not r.get("error"):
                progress(
                    f"{label} {r['impl']}: {_steadiest(r, 'fwd'):.3g} TFLOP/s forward, {_steadiest(r, 'full'):.3g} "
                    "forward + backward"
                )
        results += rows
        del inputs, dy
    return results
