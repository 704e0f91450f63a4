"""Attention benchmark: tigon.ops.flash_attention against PyTorch's SDPA (its default choice, which is what Hugging
Face's "sdpa" attention runs: torch_eager; and pinned to the flash and cuDNN backends) and the flash_attn (FA2) /
flash_attn_interface (FA3) packages where importable, same inputs, same run.

Attention is compute-bound, so the figure of merit is TFLOP/s: 4 * B * Hq * Sq * Sk * D multiply-adds counted as
FLOPs for the forward (q k^T and p v), halved when causal, and 2.5 times that for the backward (forward + backward =
3.5x). Shapes are (batch, query heads, key/value heads, sequence, head dim, causal 0/1). The variable-length case
packs 16 sequences of mixed lengths (32768 tokens); Tigon and the flash packages take it as it is (cu_seqlens), the
SDPA baselines get the padded dense batch (right padding: causal attention then never reads a pad key from a real
row), and every implementation is credited with the packed problem's FLOPs, so padding shows as lower TFLOP/s.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

import torch

from tigon.bench.harness import bench_shapes, make_impls, run_checks, time_checked, time_fwd_bwd
from tigon.bench.report import Skip, progress

OP = "attention"
GPU_SHAPES = [
    (8, 32, 8, 4096, 128, 1),  # first = the headline (an 8B-class model's layer at 4k)
    (2, 32, 8, 16384, 128, 1),
    (8, 32, 8, 4096, 128, 0),
    (8, 32, 32, 4096, 64, 1),
    (4, 8, 4, 4096, 256, 1),
]
CPU_SHAPES = [(1, 4, 2, 256, 64, 1), (1, 4, 4, 256, 64, 0)]
# 16 sequences, 256 .. 6144 tokens, 32768 in all; the CPU's: 4 sequences, 512 tokens
VARLEN_GPU = (32, 8, 128, (4096, 512, 2048, 6144, 1024, 3072, 256, 1536, 2560, 768, 3584, 1280, 2304, 1792, 640, 1152))
VARLEN_CPU = (4, 2, 64, (64, 192, 128, 128))
DIMS = "batch x heads_q x heads_kv x seqlen x head_dim x causal"


@dataclass
class Case:
    B: int
    Hq: int
    Hkv: int
    S: int
    D: int
    causal: bool
    lengths: tuple | None = None  # variable length: the sequences' lengths (B of them, S = their sum)

    @property
    def shape(self) -> tuple:
        return (self.B, self.Hq, self.Hkv, self.S, self.D, int(self.causal))

    @property
    def label(self) -> str:
        return ("varlen " if self.lengths else "") + "x".join(map(str, self.shape))

    def flops_fwd(self) -> float:
        pairs = sum(n * n for n in self.lengths) if self.lengths else self.B * self.S * self.S
        return 4.0 * self.Hq * pairs * self.D / (2 if self.causal else 1)


# ---- implementations: factory(ctx, args) -> Impl ------------------------------------------------------------------


@dataclass
class Impl:
    dense: object  # fn(q, k, v, causal) on (B, S, H, D) tensors -> (B, S, Hq, D)
    varlen: object = None  # fn(q, k, v, cu, max_len, causal) on (T, H, D) tensors, or None: padded dense instead


def _tigon(deterministic: bool):
    """Tigon's flash attention; deterministic=False: the backward adds dq in any order (the faster mode)."""

    def make(ctx, args):
        import tigon

        flash = getattr(tigon.ops, "flash_attention", None)
        if flash is None:
            raise Skip("this build of tigon has no flash_attention op")
        return Impl(
            dense=lambda q, k, v, causal: flash(q, k, v, causal=causal, deterministic=deterministic),
            varlen=lambda q, k, v, cu, n, causal: flash(
                q,
                k,
                v,
                causal=causal,
                cu_seqlens_q=cu,
                cu_seqlens_k=cu,
                max_seqlen_q=n,
                max_seqlen_k=n,
                deterministic=deterministic,
            ),
        )

    return make


def _sdpa(backend: str | None):
    def make(ctx, args):
        if backend is not None and ctx.device.type != "cuda":
            raise Skip(f"SDPA's {backend.lower()} backend is CUDA only")
        return Impl(dense=_sdpa_call(backend))

    return make


def _sdpa_call(backend: str | None):
    """SDPA on (B, S, H, D) tensors (transposed views, as transformers passes them), grouped-query through enable_gqa;
    where the backend refuses that, with k and v repeated per query head (decided on the first call)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    repeat = [False]

    def attend(q, k, v, causal):
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if repeat[0]:
            n = q.shape[1] // k.shape[1]
            return sdpa(q, k.repeat_interleave(n, 1), v.repeat_interleave(n, 1), is_causal=causal).transpose(1, 2)
        return sdpa(q, k, v, is_causal=causal, enable_gqa=k.shape[1] != q.shape[1]).transpose(1, 2)

    def call(q, k, v, causal):
        if backend is None:
            return attend(q, k, v, causal)
        with sdpa_kernel(getattr(SDPBackend, backend)):
            try:
                return attend(q, k, v, causal)
            except RuntimeError:
                if repeat[0] or k.shape[2] == q.shape[2]:
                    raise
                repeat[0] = True
                return attend(q, k, v, causal)

    return call


def _flash_package(module: str):
    def make(ctx, args):
        if ctx.device.type != "cuda":
            raise Skip(f"{module} is CUDA only")
        try:
            mod = importlib.import_module(module)
        except Exception as e:
            raise Skip(f"{module} not importable ({type(e).__name__}: {e})")

        def first(out):  # some versions return (out, lse)
            return out[0] if isinstance(out, tuple) else out

        return Impl(
            dense=lambda q, k, v, causal: first(mod.flash_attn_func(q, k, v, causal=causal)),
            varlen=lambda q, k, v, cu, n, causal: first(
                mod.flash_attn_varlen_func(q, k, v, cu, cu, n, n, causal=causal)
            ),
        )

    return make


IMPLS = {
    "tigon": _tigon(True),
    "tigon_unordered": _tigon(False),  # deterministic=False
    "torch_eager": _sdpa(None),  # SDPA as transformers calls it: torch picks the backend
    "sdpa_flash": _sdpa("FLASH_ATTENTION"),
    "sdpa_cudnn": _sdpa("CUDNN_ATTENTION"),
    "flash_attn": _flash_package("flash_attn"),
    "flash_attn3": _flash_package("flash_attn_interface"),
}


# ---- inputs: dense, packed, and the packed batch padded -------------------------------------------------------------


def _inputs(case: Case, ctx):
    gen = torch.Generator(device=ctx.device).manual_seed(0)
    lead = (case.S,) if case.lengths else (case.B, case.S)

    def rand(h):
        return torch.randn(*lead, h, case.D, generator=gen, device=ctx.device).to(ctx.dtype)

    return rand(case.Hq), rand(case.Hkv), rand(case.Hkv), rand(case.Hq)


def _pad_index(case: Case, device) -> tuple[torch.Tensor, int]:
    """Where each packed token sits in the (n, longest) padded batch, flattened; and the longest length."""
    longest = max(case.lengths)
    rows = [torch.arange(n) + b * longest for b, n in enumerate(case.lengths)]
    return torch.cat(rows).to(device), longest


def _padded(x: torch.Tensor, index: torch.Tensor, n: int, longest: int) -> torch.Tensor:
    out = x.new_zeros(n * longest, *x.shape[1:])
    out[index] = x
    return out.view(n, longest, *x.shape[1:])


def _runner(impl: Impl, case: Case, tensors, ctx):
    """(fn, inputs, dout, to_packed): what to time for this implementation, and how to read its outputs back in the
    case's own layout (identity, or the padded batch's real rows)."""
    q, k, v, do = tensors
    if not case.lengths:
        return (lambda q, k, v: impl.dense(q, k, v, case.causal)), (q, k, v), do, lambda t: t
    if impl.varlen is not None:
        cu = torch.tensor([0] + list(case.lengths), device=ctx.device).cumsum(0).to(torch.int32)
        longest = max(case.lengths)
        return (lambda q, k, v: impl.varlen(q, k, v, cu, longest, case.causal)), (q, k, v), do, lambda t: t
    index, longest = _pad_index(case, ctx.device)
    n = len(case.lengths)
    pad = [_padded(t, index, n, longest) for t in (q, k, v, do)]
    return (lambda q, k, v: impl.dense(q, k, v, case.causal)), tuple(pad[:3]), pad[3], lambda t: t.flatten(0, 1)[index]


def _forward_backward(fn, inputs, do):
    leaves = [t.detach().clone().requires_grad_() for t in inputs]
    o = fn(*leaves)
    return (o, *torch.autograd.grad(o, leaves, do))


def _reference(case: Case, tensors):
    """o, dq, dk, dv in float32 from SDPA (its memory-efficient path: no score matrix), sequence by sequence when
    packed."""
    q, k, v, do = (t.float() for t in tensors)
    efficient = _sdpa_call("EFFICIENT_ATTENTION" if q.is_cuda else None)
    group = q.shape[-2] // k.shape[-2]

    def call(q, k, v, causal):  # k and v repeated inside: their gradients sum over the group
        return efficient(q, k.repeat_interleave(group, -2), v.repeat_interleave(group, -2), causal)

    if not case.lengths:
        return _forward_backward(lambda q, k, v: call(q, k, v, case.causal), (q, k, v), do)
    outs, start = [], 0
    for n in case.lengths:
        part = (t[None, start : start + n] for t in (q, k, v))
        outs.append(
            _forward_backward(lambda q, k, v: call(q, k, v, case.causal), tuple(part), do[None, start : start + n])
        )
        start += n
    return tuple(torch.cat([o[i][0] for o in outs]) for i in range(4))


def _errors(fn, inputs, do, to_packed, ref) -> dict:
    got = [to_packed(t) for t in _forward_backward(fn, inputs, do)]
    names = ("y", "dx", "dw")  # the table's columns: o, dq, dk (dv is checked with dk: the larger error is shown)
    errs = [(g.float() - r).abs().max().item() for g, r in zip(got, ref)]
    return {f"err_{n}": e for n, e in zip(names, errs[:2] + [max(errs[2:])])}


def _cases(args, ctx) -> list[Case]:
    gpu = ctx.device.type == "cuda"
    shapes = bench_shapes(OP, args, ctx, GPU_SHAPES, CPU_SHAPES, DIMS)
    Hq, Hkv, D, lengths = VARLEN_GPU if gpu else VARLEN_CPU
    if args.quick and not args.shapes:
        shapes = shapes[:1]
    cases = [Case(B, Hq_, Hkv_, S, D_, bool(c)) for B, Hq_, Hkv_, S, D_, c in shapes]
    if not args.shapes:
        cases.append(Case(len(lengths), Hq, Hkv, sum(lengths), D, True, tuple(lengths)))
    return cases


def _time(fn, runners: dict, ctx) -> dict:
    _, inputs, do, _ = next(r for r in runners.values() if r[0] is fn)
    return time_fwd_bwd(OP, fn, inputs, (0, 1, 2), do, ctx)


def _tflops(res: dict, case: Case) -> None:
    """TFLOP/s of the forward and of forward + backward, from device time where measured (else the eager call)."""
    fwd = case.flops_fwd()
    res["flops_fwd"] = fwd
    for key, flops in (("fwd", fwd), ("full", 3.5 * fwd)):
        ms = res.get(f"{key}_dev_ms") or res.get(f"{key}_ms")
        res[f"{key}_tflops"] = flops / (ms * 1e-3) / 1e12 if ms else None


def run(args, ctx) -> list[dict]:
    fns = make_impls(OP, IMPLS, args, ctx)
    results = []
    for case in _cases(args, ctx):
        tensors = _inputs(case, ctx)
        elt = tensors[0].element_size()
        qo = 2 * case.S * case.Hq * case.D * (1 if case.lengths else case.B) * elt  # q and o (or do)
        kv = 2 * case.S * case.Hkv * case.D * (1 if case.lengths else case.B) * elt
        nbytes = {"fwd": qo + kv, "bwd": 2 * qo + 2 * kv + qo // 2, "full": 3 * qo + 3 * kv + qo // 2}
        runners = {}
        for name, impl in fns.items():
            runners[name] = _runner(impl, case, tensors, ctx)
            if case.lengths and impl.varlen is None:
                ctx.note(f"{OP}: {name} runs the variable-length case as the padded dense batch")
        ref = _reference(case, tensors)
        checks = run_checks(runners, lambda r: _errors(*r, ref))
        del ref
        label = f"{OP} {case.label}"
        rows = time_checked(
            OP,
            label,
            case.shape,
            {name: r[0] for name, r in runners.items()},
            checks,
            lambda fn: _time(fn, runners, ctx),
            nbytes,
            ctx,
        )
        for res in rows:
            res["varlen"] = bool(case.lengths)
            if not res.get("error"):
                _tflops(res, case)
                progress(
                    f"{label} {res['impl']}: {res['fwd_tflops']:.3g} TFLOP/s forward, {res['full_tflops']:.3g} "
                    f"forward + backward"
                )
        results += rows
        del tensors, runners
    return results
