"""tigon.ops.flash_attention against a float64 attention written plainly (the score matrix and the mask materialised)
and its autograd: causal (bottom-right), windows, softcap, GQA, scale, Sq != Sk, fully masked rows, variable length,
(B, H, S, D) tensors passed transposed, deterministic backward, torch.compile, CUDA graphs, bad input."""

import importlib
import math

import pytest
import torch

from conftest import DEVICES, needs_cuda
from tigon.ops import flash_attention
from tolerances import ATTENTION_TOL, assert_close

CUDA_HEAD_DIMS = [64, 96, 128, 256]


def reference(q, k, v, causal=False, scale=None, softcap=0.0, window=(-1, -1)):
    """Dense (B, Sq, Hq, D) attention in float64: o and lse (B, Hq, Sq). Rows with no visible key give o = 0 and
    lse = -inf; masked scores never meet an exp (so gradients stay finite)."""
    q, k, v = (t.double() for t in (q, k, v))
    sq, sk, hq, d = q.shape[1], k.shape[1], q.shape[2], q.shape[3]
    group = hq // k.shape[2]
    qh = q.transpose(1, 2)
    kh = k.repeat_interleave(group, dim=2).transpose(1, 2)
    vh = v.repeat_interleave(group, dim=2).transpose(1, 2)
    s = (1.0 / math.sqrt(d) if scale is None else scale) * qh @ kh.transpose(-1, -2)
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    i = torch.arange(sq, device=q.device)[:, None] + (sk - sq)  # each query's position among the keys
    j = torch.arange(sk, device=q.device)[None, :]
    visible = torch.ones(sq, sk, dtype=torch.bool, device=q.device)
    right = 0 if causal else window[1]
    if right >= 0:
        visible &= j <= i + right
    if window[0] >= 0:
        visible &= j >= i - window[0]
    m = torch.where(visible, s, -torch.inf).amax(-1, keepdim=True).detach()
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = torch.where(visible, torch.exp(torch.where(visible, s, m) - m), torch.zeros_like(s))
    total = e.sum(-1, keepdim=True)
    p = e / torch.where(total > 0, total, torch.ones_like(total))
    lse = torch.where(total > 0, m + torch.log(total), torch.full_like(total, -torch.inf)).squeeze(-1)
    return (p @ vh).transpose(1, 2), lse


def reference_varlen(q, k, v, cu_q, cu_k, **kw):
    """Packed sequences: the dense reference on each, concatenated; lse (Hq, Tq)."""
    outs, lses = [], []
    for b in range(cu_q.numel() - 1):
        qs, ks = slice(int(cu_q[b]), int(cu_q[b + 1])), slice(int(cu_k[b]), int(cu_k[b + 1]))
        o, lse = reference(q[None, qs], k[None, ks], v[None, ks], **kw)
        outs.append(o[0])
        lses.append(lse[0])
    return torch.cat(outs), torch.cat(lses, dim=-1)


def make(batch, sq, sk, hq, hkv, d, dtype, device, packed=False):
    lead = (sq,) if packed else (batch, sq)
    lead_k = (sk,) if packed else (batch, sk)
    q = torch.randn(*lead, hq, d, device=device).to(dtype).requires_grad_(True)
    k = torch.randn(*lead_k, hkv, d, device=device).to(dtype).requires_grad_(True)
    v = torch.randn(*lead_k, hkv, d, device=device).to(dtype).requires_grad_(True)
    return q, k, v


def cu_seqlens(lengths, device):
    return torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device=device)


def tolerance(dtype, device, backward=False):
    if device == "cpu" or dtype == torch.float32:
        return None  # the table's own entry: the CPU reference rounds once from fp64
    tol = ATTENTION_TOL[dtype]
    return {name: value * (2 if backward else 1) for name, value in tol.items()}


def check(q, k, v, dtype, device, varlen=None, **kw):
    """Forward, lse and the q, k, v gradients against the float64 reference."""
    q64, k64, v64 = (t.detach().double().requires_grad_(True) for t in (q, k, v))
    if varlen is None:
        o_ref, lse_ref = reference(q64, k64, v64, **kw)
        extra = {}
    else:
        cu_q, cu_k = varlen
        o_ref, lse_ref = reference_varlen(q64, k64, v64, cu_q.cpu(), cu_k.cpu(), **kw)
        extra = dict(
            cu_seqlens_q=cu_q,
            cu_seqlens_k=cu_k,
            max_seqlen_q=int((cu_q[1:] - cu_q[:-1]).max()),
            max_seqlen_k=int((cu_k[1:] - cu_k[:-1]).max()),
        )
    o, lse = flash_attention(q, k, v, return_lse=True, **kw, **extra)
    assert o.shape == q.shape and o.dtype == q.dtype and o.is_contiguous()
    assert lse.dtype == torch.float32 and lse.shape == lse_ref.shape and not lse.requires_grad
    assert_close(o, o_ref, dtype, name="o", tol=tolerance(dtype, device))
    masked = torch.isinf(lse_ref)
    assert torch.equal(torch.isinf(lse) & (lse < 0), masked), "lse: -inf exactly on rows that see no key"
    assert_close(lse[~masked], lse_ref[~masked], torch.float32, name="lse", scale=1.0, tol=dict(atol=1e-4, rtol=1e-4))
    dout = torch.randn_like(o_ref)
    o_ref.backward(dout)
    grads = torch.autograd.grad(o, (q, k, v), dout.to(dtype))
    for name, got, want in zip(("dq", "dk", "dv"), grads, (q64.grad, k64.grad, v64.grad)):
        assert_close(got, want, dtype, name=name, tol=tolerance(dtype, device, backward=True))
    return o, lse, grads


# feature name -> (batch, sq, sk, hq, hkv, options)
FEATURES = {
    "full": (2, 9, 9, 2, 2, {}),
    "causal": (2, 11, 11, 2, 2, dict(causal=True)),
    "causal_gqa": (2, 10, 10, 4, 2, dict(causal=True)),
    "mqa_scale": (1, 7, 12, 3, 1, dict(scale=0.3)),
    "window": (2, 13, 13, 2, 1, dict(window=(3, 2))),
    "causal_window": (1, 12, 15, 2, 2, dict(causal=True, window=(4, 0))),
    "softcap": (2, 8, 10, 2, 1, dict(softcap=2.0, causal=True)),
    "sq_lt_sk_causal": (2, 4, 13, 2, 2, dict(causal=True)),
    "sq_gt_sk_causal": (1, 12, 5, 2, 1, dict(causal=True)),  # the first 7 rows see nothing
    "empty_window": (1, 9, 4, 2, 2, dict(window=(0, 0))),  # rows whose window lies beyond the keys
}


@pytest.mark.parametrize("dtype,head_dim", [(torch.float32, 40), (torch.bfloat16, 16), (torch.float16, 24)])
@pytest.mark.parametrize("feature", list(FEATURES))
def test_cpu_matches_float64_reference(dtype, head_dim, feature):
    batch, sq, sk, hq, hkv, kw = FEATURES[feature]
    q, k, v = make(batch, sq, sk, hq, hkv, head_dim, dtype, "cpu")
    check(q, k, v, dtype, "cpu", **kw)


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("feature", list(FEATURES))
@pytest.mark.parametrize("head_dim", CUDA_HEAD_DIMS)
def test_cuda_matches_float64_reference(dtype, feature, head_dim):
    batch, sq, sk, hq, hkv, kw = FEATURES[feature]
    grow = 13  # past one tile in each direction, partial last tiles
    q, k, v = make(batch, sq * grow, sk * grow, hq, hkv, head_dim, dtype, "cuda")
    if "window" in kw:
        kw = dict(kw, window=tuple(w * grow if w > 0 else w for w in kw["window"]))
    check(q, k, v, dtype, "cuda", **kw)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("options", [dict(causal=True), dict(window=(3, 1), softcap=3.0), {}])
def test_varlen_matches_reference_and_dense_per_sequence(device, options):
    dtype, d = torch.bfloat16, (16 if device == "cpu" else 128)
    lens_q, lens_k = [3, 1, 9, 0, 5], [6, 1, 9, 2, 5]
    if device == "cuda":
        lens_q, lens_k = [x * 17 for x in lens_q], [x * 17 for x in lens_k]
    cu_q, cu_k = cu_seqlens(lens_q, device), cu_seqlens(lens_k, device)
    q, k, v = make(1, sum(lens_q), sum(lens_k), 4, 2, d, dtype, device, packed=True)
    o, lse, grads = check(q, k, v, dtype, device, varlen=(cu_q, cu_k), **options)
    for b in range(len(lens_q)):  # the same bits as one dense call per sequence
        qs, ks = slice(int(cu_q[b]), int(cu_q[b + 1])), slice(int(cu_k[b]), int(cu_k[b + 1]))
        qb, kb, vb = (t.detach()[None, s].clone().requires_grad_(True) for t, s in ((q, qs), (k, ks), (v, ks)))
        ob, lseb = flash_attention(qb, kb, vb, return_lse=True, **options)
        if device == "cpu":
            assert torch.equal(ob[0], o[qs]) and torch.equal(lseb[0], lse[:, qs])
        else:  # tiles fall differently in a packed batch: compare as results, not bits
            assert_close(ob[0], o[qs].double(), dtype, name="o per sequence", tol=tolerance(dtype, device))


@pytest.mark.parametrize("device", DEVICES)
def test_bhsd_passed_transposed_equals_bshd(device):
    d = 16 if device == "cpu" else 64
    qb, kb, vb = (torch.randn(2, h, 11, d, device=device, dtype=torch.bfloat16) for h in (4, 2, 2))  # (B, H, S, D)
    leaves = [t.clone().requires_grad_(True) for t in (qb, kb, vb)]
    views = [t.transpose(1, 2) for t in leaves]  # (B, S, H, D) views, head_dim stride 1: no copy
    assert not views[0].is_contiguous()
    dense = [t.transpose(1, 2).contiguous().requires_grad_(True) for t in (qb, kb, vb)]
    o1 = flash_attention(*views, causal=True)
    o2 = flash_attention(*dense, causal=True)
    assert torch.equal(o1, o2)
    dout = torch.randn_like(o1)
    g1 = torch.autograd.grad(o1, leaves, dout)
    g2 = torch.autograd.grad(o2, dense, dout)
    for a, b in zip(g1, g2):
        assert torch.equal(a.transpose(1, 2), b)


@pytest.mark.parametrize("device", DEVICES)
def test_strided_head_dim_is_copied_and_expanded_gradient(device):
    d, dtype = (16, torch.float32) if device == "cpu" else (64, torch.bfloat16)
    q, k, v = make(1, 6, 6, 2, 2, d, dtype, device)
    qs = torch.randn(1, 6, 2, 2 * d, device=device, dtype=dtype)[..., ::2]  # head_dim stride 2: copied
    o = flash_attention(qs, k, v)
    o_ref, _ = reference(qs, k, v)
    assert_close(o, o_ref, dtype, name="o (strided head_dim)", tol=tolerance(dtype, device))
    flash_attention(q, k, v).sum().backward()  # a stride-0 output gradient
    assert torch.isfinite(q.grad).all() and torch.isfinite(k.grad).all()


@pytest.mark.parametrize("device", DEVICES)
def test_fully_masked_rows_give_zero_and_no_gradient(device):
    d = 16 if device == "cpu" else 64
    q, k, v = make(1, 8, 3, 2, 2, d, torch.bfloat16, device)
    o, lse = flash_attention(q, k, v, causal=True, return_lse=True)
    assert torch.all(o[:, :5] == 0) and torch.all(lse[:, :, :5] == -torch.inf)
    (dq,) = torch.autograd.grad(o, q, torch.randn_like(o))
    assert torch.all(dq[:, :5] == 0) and torch.isfinite(dq).all()


@needs_cuda
@pytest.mark.parametrize("head_dim", CUDA_HEAD_DIMS)
@pytest.mark.parametrize("varlen", [False, True])
def test_deterministic_backward_is_bit_equal(head_dim, varlen):
    if varlen:
        lens = [130, 7, 300]
        cu = cu_seqlens(lens, "cuda")
        q, k, v = make(1, sum(lens), sum(lens), 8, 2, head_dim, torch.bfloat16, "cuda", packed=True)
        kw = dict(cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=300, max_seqlen_k=300)
    else:
        q, k, v = make(2, 333, 333, 8, 2, head_dim, torch.bfloat16, "cuda")
        kw = {}
    dout = torch.randn(q.shape, device="cuda", dtype=q.dtype)
    runs = [torch.autograd.grad(flash_attention(q, k, v, causal=True, **kw), (q, k, v), dout) for _ in range(2)]
    for a, b in zip(*runs):
        assert torch.equal(a, b)
    fast = torch.autograd.grad(flash_attention(q, k, v, causal=True, deterministic=False, **kw), (q, k, v), dout)
    for a, b in zip(fast, runs[0]):
        assert_close(
            a, b.double(), torch.bfloat16, name="deterministic=False", tol=tolerance(torch.bfloat16, "cuda", True)
        )


def _step(fn, q, k, v, dout):
    o = fn(q, k, v)
    return (o, *torch.autograd.grad(o, (q, k, v), dout))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("varlen", [False, True])
def test_torch_compile_fullgraph_equals_eager(device, varlen):
    d = 16 if device == "cpu" else 128
    if varlen:
        cu_q, cu_k = cu_seqlens([5, 3], device), cu_seqlens([7, 3], device)
        q, k, v = make(1, 8, 10, 4, 2, d, torch.bfloat16, device, packed=True)
        kw = dict(cu_seqlens_q=cu_q, cu_seqlens_k=cu_k, max_seqlen_q=5, max_seqlen_k=7)
    else:
        q, k, v = make(2, 9, 12, 4, 2, d, torch.bfloat16, device)
        kw = {}

    def f(q, k, v):
        o, lse = flash_attention(q * 1.0, k, v, causal=True, softcap=3.0, return_lse=True, **kw)
        return o * 2.0 + lse.sum()

    dout = torch.randn(q.shape, device=device, dtype=q.dtype)
    eager = _step(f, q, k, v, dout)
    compiled = _step(
        torch.compile(f, fullgraph=True, backend="aot_eager" if device == "cpu" else "inductor"), q, k, v, dout
    )
    for a, b, name in zip(eager, compiled, ("o", "dq", "dk", "dv")):
        if device == "cpu":
            assert torch.equal(a, b), name
        else:  # inductor fuses `o * 2 + lse.sum()` into one rounding where eager rounds twice
            assert_close(b, a, name=name)


@needs_cuda
def test_cuda_graph_replay_equals_eager():
    q, k, v = make(2, 200, 200, 8, 2, 128, torch.bfloat16, "cuda")
    static = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    dout = torch.randn(q.shape, device="cuda", dtype=q.dtype)

    def fn(a, b, c):
        return flash_attention(a, b, c, causal=True)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        _step(fn, *static, dout)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = _step(fn, *static, dout)
    for _ in range(2):  # fresh inputs each replay
        new = [torch.randn_like(t) for t in static]
        new_dout = torch.randn_like(dout)
        with torch.no_grad():
            for s, n in zip(static, new):
                s.copy_(n)
        dout.copy_(new_dout)
        g.replay()
        torch.cuda.synchronize()
        ref = _step(fn, *(n.requires_grad_(True) for n in new), new_dout)
        for a, b in zip(out, ref):
            assert torch.equal(a, b)


# ---- bad input: a clear error naming the argument, never a crash ------------------------------------------------------


def _bad_cases():
    q, k, v = torch.randn(2, 5, 4, 8), torch.randn(2, 6, 2, 8), torch.randn(2, 6, 2, 8)
    cu = torch.tensor([0, 5], dtype=torch.int32)
    packed = dict(q=torch.randn(5, 4, 8), k=torch.randn(6, 2, 8), v=torch.randn(6, 2, 8))
    varlen = dict(packed, cu_seqlens_q=cu, cu_seqlens_k=torch.tensor([0, 6], dtype=torch.int32))
    return [
        (dict(q=[1.0]), TypeError, "'q'"),
        (dict(k=None), TypeError, "'k'"),
        (dict(q=q.long()), TypeError, "'q'"),
        (dict(q=q.double(), k=k.double(), v=v.double()), TypeError, "'q'"),
        (dict(k=k.half()), TypeError, "'k'"),
        (dict(v=v.bfloat16()), TypeError, "'v'"),
        (dict(q=torch.randn(2, 5, 32)), ValueError, "'q'"),
        (dict(k=torch.randn(2, 6, 3, 8)), ValueError, "'k'"),  # 3 heads do not divide 4
        (dict(k=torch.randn(3, 6, 2, 8)), ValueError, "'k'"),
        (dict(k=torch.randn(2, 6, 2, 16)), ValueError, "'k'"),
        (dict(v=torch.randn(2, 7, 2, 8)), ValueError, "'v'"),
        (dict(q=torch.randn(2, 5, 4, 0)), ValueError, "'q'"),
        (dict(scale=0.0), ValueError, "'scale'"),
        (dict(scale=float("nan")), ValueError, "'scale'"),
        (dict(scale="0.1"), TypeError, "'scale'"),
        (dict(softcap=-1.0), ValueError, "'softcap'"),
        (dict(softcap=None), TypeError, "'softcap'"),
        (dict(causal=1), TypeError, "'causal'"),
        (dict(deterministic=None), TypeError, "'deterministic'"),
        (dict(return_lse="yes"), TypeError, "'return_lse'"),
        (dict(window=3), ValueError, "'window'"),
        (dict(window=(1, 2, 3)), ValueError, "'window'"),
        (dict(window=(1.5, 0)), TypeError, "'window'"),
        (dict(window=(-2, 0)), ValueError, "'window_left'"),
        (dict(window=(2**31, 0)), ValueError, "'window'"),
        (dict(window=(-1, 2), causal=True), ValueError, "'window_right'"),
        (dict(cu_seqlens_q=cu), ValueError, "'max_seqlen_q'"),  # varlen without bounds
        (dict(varlen, max_seqlen_q=5), ValueError, "'max_seqlen_k'"),
        (dict(varlen, max_seqlen_q=5.0, max_seqlen_k=6), TypeError, "'max_seqlen_q'"),
        (dict(varlen, max_seqlen_q=0, max_seqlen_k=6), ValueError, "'max_seqlen_q'"),
        (dict(varlen, max_seqlen_q=4, max_seqlen_k=6), ValueError, "'cu_seqlens_q'"),  # a length past the bound
        (dict(varlen, cu_seqlens_k=None, max_seqlen_q=5, max_seqlen_k=6), ValueError, "'cu_seqlens_k'"),
        (dict(varlen, cu_seqlens_q=cu.long(), max_seqlen_q=5, max_seqlen_k=6), TypeError, "'cu_seqlens_q'"),
        (
            dict(varlen, cu_seqlens_q=torch.tensor([0, 4], dtype=torch.int32), max_seqlen_q=5, max_seqlen_k=6),
            ValueError,
            "'cu_seqlens_q'",
        ),  # ends before the packed rows
        (dict(varlen, cu_seqlens_q="x", max_seqlen_q=5, max_seqlen_k=6), TypeError, "'cu_seqlens_q'"),
        (dict(cu_seqlens_q=cu, cu_seqlens_k=cu, max_seqlen_q=5, max_seqlen_k=6), ValueError, "'q'"),  # 4-D with cu
    ], dict(q=q, k=k, v=v)


@pytest.mark.parametrize("case", range(len(_bad_cases()[0])))
def test_bad_input_names_the_argument(case):
    cases, args = _bad_cases()
    kwargs, exc, arg = cases[case]
    args.update(kwargs)
    q, k, v = args.pop("q"), args.pop("k"), args.pop("v")
    with pytest.raises(exc, match=arg):
        flash_attention(q, k, v, **args)


def test_c_library_errors_surface_with_the_message():
    import tigon

    mod = importlib.import_module("tigon.ops.attention")
    q, k, v = torch.randn(1, 3, 2, 8), torch.randn(1, 3, 2, 8), torch.randn(1, 3, 2, 8)
    o, lse = mod._fwd_impl(q, k, v, None, None, 0.3, 0.0, True, -1, -1, 0, 0)
    with pytest.raises(tigon.TigonArgumentError, match="tigon_attention_bwd: argument 'lse'"):
        mod._bwd_impl(o, q, k, v, o, lse[:, :, :2], None, None, 0.3, 0.0, True, -1, -1, 0, 0, True)
    with pytest.raises(tigon.TigonArgumentError, match="tigon_attention_fwd: argument 'window_right'"):
        mod._fwd_impl(q, k, v, None, None, 0.3, 0.0, True, -1, 3, 0, 0)


@needs_cuda
def test_cuda_only_errors_name_the_argument():
    q, k, v = make(1, 4, 4, 2, 2, 80, torch.bfloat16, "cuda")
    with pytest.raises(ValueError, match="'q': head_dim 80"):
        flash_attention(q, k, v)
    q, k, v = make(1, 4, 4, 2, 2, 64, torch.float32, "cuda")
    with pytest.raises(TypeError, match="'q': dtype float32"):
        flash_attention(q, k, v)
    q, k, v = make(1, 4, 4, 2, 2, 64, torch.bfloat16, "cuda")
    with pytest.raises(ValueError, match="'k'"):
        flash_attention(q, k.cpu(), v)
