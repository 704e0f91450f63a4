"""Int8 inference benchmarks, same inputs, same run.

int8_gemm (W8A8 prefill): tigon.ops.int8_linear (cuBLASLt's int8 GEMM into int32, then the dequantize epilogue:
bf16 out) against torch._int_mm (the bare int8 GEMM, int32 out, no scales) and the bf16 matmul ``x @ w.T``
(cuBLAS); "tigon_w8a8" adds the per-row quantization of the bf16 activations (tigon.ops.quantize_rows), i.e. the
whole Int8Linear forward. GEMM-bound: the records carry tera-operations per second (tops, 2·M·K·N over the
steadiest time). Shapes are rows (tokens) x K (in_features) x N (out_features); the headline is 8192³.

gemv_int8 (weight-only decoding): tigon.ops.gemv_int8 (int8 weight, per-channel scales) against F.linear on the bf16
weight (cuBLAS) and tigon.ops.gemv (the same kernel on the bf16 weight). Bound by reading the weight: the records
carry each implementation's own weight bytes per second (weight_tbps) and its time against F.linear's; the table's
GB/s column counts the int8 weight for every row (the bytes the quantized model must read). No backward: forward
times only.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tigon.bench.harness import linear_cases, make_impls, run_checks, time_checked, time_fwd
from tigon.bench.report import Skip, progress

GEMM_OP, GEMV_OP = "int8_gemm", "gemv_int8"
GEMM_GPU_SHAPES = [(8192, 8192, 8192), (4096, 4096, 14336)]
GEMM_CPU_SHAPES = [(32, 64, 128)]
GEMV_GPU_SHAPES = [(1, 4096, 14336), (8, 4096, 14336), (1, 4096, 4096)]  # first = the headline
GEMV_CPU_SHAPES = [(1, 256, 512), (4, 256, 1024)]


def _ms(res: dict) -> float:
    return res.get("fwd_dev_ms") or res.get("fwd_graph_ms") or res["fwd_ms"]


# ---- int8_gemm: fn(x, w, q_x, s_x, q_w, s_w) ----------------------------------------------------------------------


def _gemm_tigon(ctx, args):
    from tigon.ops.int8 import int8_linear

    return lambda x, w, q_x, s_x, q_w, s_w: int8_linear(q_x, s_x, q_w, s_w, out_dtype=x.dtype)


def _gemm_tigon_w8a8(ctx, args):
    from tigon.ops.int8 import int8_linear, quantize_rows

    def fn(x, w, q_x, s_x, q_w, s_w):
        q, s = quantize_rows(x)
        return int8_linear(q, s, q_w, s_w, out_dtype=x.dtype)

    return fn


def _gemm_int_mm(ctx, args):
    if not hasattr(torch, "_int_mm"):
        raise Skip("this torch has no torch._int_mm")
    return lambda x, w, q_x, s_x, q_w, s_w: torch._int_mm(q_x, q_w.t())


def _gemm_matmul(ctx, args):
    return lambda x, w, q_x, s_x, q_w, s_w: x @ w.T


GEMM_IMPLS = {
    "tigon": _gemm_tigon,
    "tigon_w8a8": _gemm_tigon_w8a8,
    "torch_int_mm": _gemm_int_mm,
    "matmul_bf16": _gemm_matmul,
}


def _gemm_case(x, w, ctx):
    """int8_gemm's inputs, a check against the float product of the quantized operands (int_mm's int32 is scaled
    here, outside its timing), the byte model and tops."""
    from tigon.ops.int8 import quantize_rows

    (m, k), n = x.shape, w.shape[0]
    q_x, s_x = quantize_rows(x)
    q_w, s_w = quantize_rows(w)
    scales = s_x.double()[:, None] * s_w.double()
    ref = (q_x.double() @ q_w.double().T) * scales

    def check(out):
        out = out.double() * scales if out.dtype == torch.int32 else out.double()
        return {"err_y": ((out - ref).abs().max() / ref.abs().max()).item()}

    def metric(impl, ms):
        return {"tops": 2 * m * k * n / (ms * 1e-3) / 1e12}

    moved = m * k + n * k + m * n * x.element_size()  # int8 operands, 16-bit output
    return (x, w, q_x, s_x, q_w, s_w), check, moved, metric


def run_gemm(args, ctx) -> list[dict]:
    return _run(GEMM_OP, GEMM_IMPLS, GEMM_GPU_SHAPES, GEMM_CPU_SHAPES, "matmul_bf16", _gemm_case, args, ctx)


# ---- gemv_int8: fn(x, w, q_w, s_w) --------------------------------------------------------------------------------


def _gemv_tigon(ctx, args):
    from tigon.ops.int8 import gemv_int8

    return lambda x, w, q_w, s_w: gemv_int8(x, q_w, s_w)


def _gemv_tigon_bf16(ctx, args):
    from tigon.ops.gemv import gemv

    return lambda x, w, q_w, s_w: gemv(x, w)


def _gemv_torch(ctx, args):
    return lambda x, w, q_w, s_w: F.linear(x, w)


GEMV_IMPLS = {"tigon": _gemv_tigon, "tigon_gemv_bf16": _gemv_tigon_bf16, "torch_eager": _gemv_torch}
_WEIGHT_BYTES_PER_ELEMENT = {"tigon": 1}  # the others read the float weight


def _gemv_case(x, w, ctx):
    from tigon.ops.int8 import quantize_rows

    n, k = w.shape
    q_w, s_w = quantize_rows(w)
    ref = F.linear(x.double(), w.double())

    def check(out):
        return {"err_y": (out.double() - ref).abs().max().item()}

    def metric(impl, ms):
        return {"weight_tbps": n * k * _WEIGHT_BYTES_PER_ELEMENT.get(impl, w.element_size()) / (ms * 1e-3) / 1e12}

    return (x, w, q_w, s_w), check, n * k, metric


def run_gemv(args, ctx) -> list[dict]:
    return _run(GEMV_OP, GEMV_IMPLS, GEMV_GPU_SHAPES, GEMV_CPU_SHAPES, "torch_eager", _gemv_case, args, ctx)


# ---- the shared loop ------------------------------------------------------------------------------------------------


def _run(op, impls, gpu_shapes, cpu_shapes, base_impl, case, args, ctx) -> list[dict]:
    """Per shape: x [tokens, K] and w [N, K] in the run's dtype, case(x, w, ctx) -> (inputs, check(out), bytes,
    metric(impl, ms)); every implementation checked, then timed (forward only), then its metric and its time against
    base_impl's added to its record."""
    fns = make_impls(op, impls, args, ctx)
    results = []
    for shape, x, w in linear_cases(op, args, ctx, gpu_shapes, cpu_shapes, quick=1):
        with torch.no_grad():
            inputs, check, nbytes, metric = case(x, w, ctx)
            checks = run_checks(fns, lambda fn: check(fn(*inputs)))
        del check
        label = f"{op} {'x'.join(map(str, shape))}"
        rows = time_checked(
            op, label, shape, fns, checks, lambda fn: time_fwd(label, fn, inputs, ctx), {"fwd": nbytes}, ctx
        )
        base = next((r for r in rows if r["impl"] == base_impl and not r.get("error")), None)
        for res in rows:
            if res.get("error"):
                continue
            ms = _ms(res)
            res.update(metric(res["impl"], ms))
            if base is not None:
                res[f"vs_{base_impl}"] = _ms(base) / ms
            shown = ", ".join(f"{k} {v:.3g}" for k, v in metric(res["impl"], ms).items())
            progress(f"{label} {res['impl']}: {ms * 1e3:.1f} us, {shown}")
        results += rows
        del x, w, inputs
    return results
