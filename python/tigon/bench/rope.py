"""RoPE benchmark: tigon against Hugging Face's apply_rotary_pos_emb (eager and torch.compile) and Liger-Kernel.

Shapes are B x Hq x Hk x T x D (q is (B, Hq, T, D), k is (B, Hk, T, D), layout bhtd as Llama passes them); cos/sin
are (1, T, D) in the activations' dtype, as HF's rotary embedding returns them. Memory-bound: q and k are read and
written once each per pass (the tables stay in L2), so the byte model is fwd 2 (q + k), bwd 2 (q + k), full 4 (q + k).
"""

from __future__ import annotations

import torch

from tigon.bench.harness import bench_shapes, compiled, liger, make_impls, run_checks, time_checked, time_fwd_bwd


OP = "rope"
GPU_SHAPES = [(4, 32, 8, 4096, 128), (1, 32, 8, 8192, 128), (8, 64, 8, 2048, 128)]  # first = the headline (Llama-3 8B)
CPU_SHAPES = [(1, 4, 2, 128, 64)]


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def hf_apply_rotary_pos_emb(q, k, cos, sin):
    """apply_rotary_pos_emb from transformers' modeling_llama, written out (unsqueeze_dim=1)."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)


# ---- implementations: each factory returns fn(q, k, cos, sin) -> (q_out, k_out) or raises Skip(reason) -------------


def _tigon(ctx, args):
    from tigon.ops.rope import rope

    return lambda q, k, cos, sin: rope(q, k, cos, sin)


def _torch_eager(ctx, args):
    return hf_apply_rotary_pos_emb


def _torch_compile(ctx, args):
    return compiled(hf_apply_rotary_pos_emb, ctx, args)


def _liger(ctx, args):
    LigerRopeFunction = liger("liger_kernel.ops.rope", "LigerRopeFunction", ctx)
    return lambda q, k, cos, sin: LigerRopeFunction.apply(q, k, cos, sin, None, 1)


IMPLS = {"tigon": _tigon, "torch_eager": _torch_eager, "torch_compile": _torch_compile, "liger": _liger}


# ---- measurement ------------------------------------------------------------------------------------------------------


def _forward_backward(fn, q, k, cos, sin, dq, dk):
    qg, kg = q.detach().clone().requires_grad_(), k.detach().clone().requires_grad_()
    q_out, k_out = fn(qg, kg, cos, sin)
    dq_in, dk_in = torch.autograd.grad((q_out, k_out), (qg, kg), (dq.clone(), dk.clone()))
    return q_out, k_out, dq_in, dk_in


def _max_errors(fn, inputs, ref) -> dict:
    """Max abs difference of q_out, k_out, dq, dk against torch_eager computed in float32."""
    got = _forward_backward(fn, *inputs)
    errs = {f"err_{n}": (g.float() - r).abs().max().item() for n, g, r in zip(("q", "k", "dq", "dk"), got, ref)}
    # The shared table prints err_y/err_dx: the worst output and the worst input gradient.
    return {**errs, "err_y": max(errs["err_q"], errs["err_k"]), "err_dx": max(errs["err_dq"], errs["err_dk"])}


def _time_impl(fn, q, k, cos, sin, dq, dk, ctx) -> dict:
    return time_fwd_bwd(OP, fn, (q, k, cos, sin), (0, 1), (dq, dk), ctx)


def _tables(seq, dim, device, dtype, base=500000.0):
    inv_freq = 1.0 / base ** (torch.arange(0, dim, 2, device=device, dtype=torch.float32) / dim)
    freqs = torch.arange(seq, device=device, dtype=torch.float32)[:, None] * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)[None]
    return emb.cos().to(dtype), emb.sin().to(dtype)


def run(args, ctx) -> list[dict]:
    fns = make_impls(OP, IMPLS, args, ctx)

    results = []
    for shape in bench_shapes(OP, args, ctx, GPU_SHAPES, CPU_SHAPES, "B x Hq x Hk x T x D"):
        B, Hq, Hk, T, D = shape
        gen = torch.Generator(device=ctx.device).manual_seed(0)
        rand = lambda *size: torch.randn(*size, generator=gen, device=ctx.device).to(ctx.dtype)  # noqa: E731
        q, k, dq, dk = rand(B, Hq, T, D), rand(B, Hk, T, D), rand(B, Hq, T, D), rand(B, Hk, T, D)
        cos, sin = _tables(T, D, ctx.device, ctx.dtype)
        qk_bytes = (q.numel() + k.numel()) * q.element_size()
        nbytes = {"fwd": 2 * qk_bytes, "bwd": 2 * qk_bytes, "full": 4 * qk_bytes}
        if "torch_compile" in fns:
            torch._dynamo.reset()  # fresh specialisation per shape, never the recompile limit

        ref = _forward_backward(
            hf_apply_rotary_pos_emb, q.float(), k.float(), cos.float(), sin.float(), dq.float(), dk.float()
        )
        checks = run_checks(fns, lambda fn: _max_errors(fn, (q, k, cos, sin, dq, dk), ref))
        del ref
        results += time_checked(
            OP,
            f"{OP} {'x'.join(map(str, shape))}",
            shape,
            fns,
            checks,
            lambda fn: _time_impl(fn, q, k, cos, sin, dq, dk, ctx),
            nbytes,
            ctx,
        )
        del q, k, dq, dk, cos, sin
    return results
