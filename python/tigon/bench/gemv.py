"""GEMV benchmark (decoding's projections): tigon.ops.gemv against torch's F.linear (cuBLAS), same inputs, same run.

With a few rows of x the product is bound by reading the weight once, so the figure of merit is the weight's bytes
per second (TB/s) and its share of the copy bandwidth measured in the same run. Shapes are (rows of x, K, N): a
decoding step of an 8B-class model's MLP up projection (4096 -> 14336) and attention projection (4096 -> 4096) at
batch 1 and 8, and its lm_head (4096 -> 128256). There is no backward: rows carry forward times only.
"""

from __future__ import annotations

import torch

from tigon.bench.harness import linear_cases, make_impls, run_checks, time_checked, time_fwd
from tigon.bench.report import progress

OP = "gemv"
GPU_SHAPES = [(1, 4096, 14336), (1, 4096, 4096), (8, 4096, 14336), (1, 4096, 128256)]  # first = the headline
CPU_SHAPES = [(1, 256, 512), (4, 256, 1024)]


def _tigon(ctx, args):
    import tigon

    return tigon.ops.gemv


def _torch_eager(ctx, args):
    return torch.nn.functional.linear


IMPLS = {"tigon": _tigon, "torch_eager": _torch_eager}


def run(args, ctx) -> list[dict]:
    fns = make_impls(OP, IMPLS, args, ctx)
    results = []
    for shape, x, w in linear_cases(OP, args, ctx, GPU_SHAPES, CPU_SHAPES, quick=2):
        ref = torch.nn.functional.linear(x.float(), w.float())
        checks = run_checks(fns, lambda fn: {"err_y": (fn(x, w).float() - ref).abs().max().item()})
        del ref
        w_bytes = w.numel() * w.element_size()
        label = f"{OP} {'x'.join(map(str, shape))}"
        rows = time_checked(
            OP, label, shape, fns, checks, lambda fn: time_fwd(label, fn, (x, w), ctx), {"fwd": w_bytes}, ctx
        )
        base = next((r for r in rows if r["impl"] == "torch_eager" and not r.get("error")), None)
        for res in rows:
            if res.get("error"):
                continue
            ms = res.get("fwd_dev_ms") or res["fwd_ms"]
            res["weight_tbps"] = w_bytes / (ms * 1e-3) / 1e12
            res["pct_copy_weight"] = 100.0 * w_bytes / (ms * 1e-3) / 1e9 / ctx.copy_gbps
            if base is not None:
                res["vs_torch_eager"] = (base.get("fwd_dev_ms") or base["fwd_ms"]) / ms
            progress(
                f"{label} {res['impl']}: {ms * 1e3:.1f} us, weight {res['weight_tbps']:.3g} TB/s "
                f"({res['pct_copy_weight']:.0f}% of copy)"
            )
        results += rows
        del x, w
    return results
