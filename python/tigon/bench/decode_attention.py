"""Decode attention benchmark: tigon.ops.decode_attention against PyTorch's SDPA (its default choice: torch_eager;
and pinned to the flash and cuDNN backends, as the attention benchmark runs them), same inputs, same run.

One new token per sequence attends to a full KV cache: the step reads every cached key and value once, so the figure
of merit is the cache's bytes per second (TB/s of K and V) and its share of the copy bandwidth, besides the
microseconds. Shapes are (batch, context, query heads, key/value heads, head dim); every sequence's cache is full
(SDPA has no per-sequence lengths without a mask). There is no backward: rows carry forward times only.
"""

from __future__ import annotations

import torch

from tigon.bench.attention import _sdpa
from tigon.bench.harness import bench_shapes, make_impls, run_checks, time_checked, time_fwd
from tigon.bench.report import progress

OP = "decode_attention"
GPU_SHAPES = [  # first = the headline: batch 8 at 8k context, an 8B-class model's layer
    (8, 8192, 32, 8, 128),
    (1, 8192, 32, 8, 128),
    (64, 8192, 32, 8, 128),
    (1, 4096, 32, 8, 128),
    (8, 4096, 32, 8, 128),
    (64, 4096, 32, 8, 128),
]
CPU_SHAPES = [(2, 256, 4, 2, 64), (1, 512, 4, 1, 64)]
DIMS = "batch x context x heads_q x heads_kv x head_dim"


def _tigon(ctx, args):
    import tigon

    return lambda q, k, v, lens: tigon.ops.decode_attention(q, k, v, lens)


def _sdpa_decode(backend):
    make = _sdpa(backend)

    def factory(ctx, args):
        dense = make(ctx, args).dense  # fn(q, k, v, causal) on (B, S, H, D) tensors
        return lambda q, k, v, lens: dense(q, k, v, False)  # one token against a full cache: nothing masked

    return factory


IMPLS = {
    "tigon": _tigon,
    "torch_eager": _sdpa_decode(None),
    "sdpa_flash": _sdpa_decode("FLASH_ATTENTION"),
    "sdpa_cudnn": _sdpa_decode("CUDNN_ATTENTION"),
}


def run(args, ctx) -> list[dict]:
    fns = make_impls(OP, IMPLS, args, ctx)
    shapes = bench_shapes(OP, args, ctx, GPU_SHAPES, CPU_SHAPES, DIMS)
    if args.quick and not args.shapes:
        shapes = shapes[:2]
    results = []
    for shape in shapes:
        b, s, hq, hkv, d = shape
        gen = torch.Generator(device=ctx.device).manual_seed(0)
        q = torch.randn(b, 1, hq, d, generator=gen, device=ctx.device).to(ctx.dtype)
        k, v = (torch.randn(b, s, hkv, d, generator=gen, device=ctx.device).to(ctx.dtype) for _ in range(2))
        lens = torch.full((b,), s, dtype=torch.int32, device=ctx.device)
        with torch.no_grad():
            ref = IMPLS["torch_eager"](ctx, args)(q.float(), k.float(), v.float(), lens)
            checks = run_checks(fns, lambda fn: {"err_y": (fn(q, k, v, lens).float() - ref).abs().max().item()})
        del ref
        kv_bytes = 2 * k.numel() * k.element_size()
        label = f"{OP} {'x'.join(map(str, shape))}"
        inputs = (q, k, v, lens)
        rows = time_checked(
            OP, label, shape, fns, checks, lambda fn: time_fwd(label, fn, inputs, ctx), {"fwd": kv_bytes}, ctx
        )
        for res in rows:
            if res.get("error"):
                continue
            ms = res.get("fwd_dev_ms") or res["fwd_ms"]
            res["kv_tbps"] = kv_bytes / (ms * 1e-3) / 1e12
            res["us"] = ms * 1e3
            progress(
                f"{label} {res['impl']}: {res['us']:.1f} us, K/V {res['kv_tbps']:.3g} TB/s "
                f"({100 * kv_bytes / (ms * 1e-3) / 1e9 / ctx.copy_gbps:.0f}% of copy)"
            )
        results += rows
        del q, k, v, inputs
    return results
