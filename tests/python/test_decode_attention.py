"""tigon.ops.decode_attention against the float64 attention of test_attention.py run on each sequence's valid cache
rows (causal, aligned bottom-right): GQA, several new tokens, sliding window, softcap, lengths from 0 to S_max,
(B, H, S, D) caches passed transposed, torch.compile, CUDA graphs whose lengths change on the device, bad input."""

import math

import pytest
import torch

from conftest import DEVICES, needs_cuda
from test_attention import reference as attention_reference
from tigon.ops import append_to_cache, decode_attention
from tolerances import ATTENTION_TOL, TOL, assert_close


def reference(q, k, v, lens, scale=None, softcap=0.0, window=-1):
    """out (B, Tq, Hq, D) and lse (B, Hq, Tq) in float64, sequence by sequence."""
    outs, lses = [], []
    for b, n in enumerate(lens.tolist()):
        if n == 0:
            outs.append(torch.zeros_like(q[b], dtype=torch.float64))
            lses.append(torch.full((q.shape[2], q.shape[1]), -math.inf, dtype=torch.float64, device=q.device))
            continue
        o, lse = attention_reference(
            q[b : b + 1],
            k[b : b + 1, :n],
            v[b : b + 1, :n],
            causal=True,
            scale=scale,
            softcap=softcap,
            window=(window - 1 if window > 0 else -1, -1),
        )
        outs.append(o[0])
        lses.append(lse[0])
    return torch.stack(outs), torch.stack(lses)


def make(lens, tq, hq, hkv, d, dtype, device, s_max=None, bhsd=False):
    s_max = s_max or max(lens)
    b = len(lens)
    q = torch.randn(b, tq, hq, d, device=device).to(dtype)
    shape = (b, hkv, s_max, d) if bhsd else (b, s_max, hkv, d)
    k, v = (torch.randn(shape, device=device).to(dtype) for _ in range(2))
    if bhsd:
        k, v = k.transpose(1, 2), v.transpose(1, 2)
    for i, n in enumerate(lens):  # past each length: NaN, which a kernel reading it would spread
        k[i, n:] = float("nan")
        v[i, n:] = float("nan")
    return q, k, v, torch.tensor(lens, dtype=torch.int32, device=device)


def check(q, k, v, lens, **kw):
    out, lse = decode_attention(q, k, v, lens, return_lse=True, **kw)
    ref_out, ref_lse = reference(q, k, v, lens, **kw)
    tol = ATTENTION_TOL.get(q.dtype, TOL[torch.float32]) if q.is_cuda else None
    assert out.shape == q.shape and out.dtype == q.dtype
    assert_close(out, ref_out, name="out", tol=tol)
    finite = torch.isfinite(ref_lse)
    assert torch.equal(torch.isfinite(lse), finite), "lse: -inf where a token sees no key, finite elsewhere"
    assert_close(lse[finite], ref_lse[finite], torch.float32, name="lse", tol=dict(atol=2e-5, rtol=2e-5))


FEATURES = {
    "decode_gqa4": dict(lens=[37, 1, 20], tq=1, hq=8, hkv=2, kw={}),
    "mha_tq3": dict(lens=[9, 2, 16], tq=3, hq=2, hkv=2, kw={}),
    "gqa8_window_softcap": dict(lens=[30, 7], tq=2, hq=8, hkv=1, kw=dict(window=5, softcap=20.0)),
    "window1_scale": dict(lens=[12, 3], tq=4, hq=4, hkv=2, kw=dict(window=1, scale=0.3)),
    "empty_and_short": dict(lens=[0, 1, 2, 25], tq=3, hq=4, hkv=4, kw={}),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("feature", sorted(FEATURES))
def test_matches_float64_reference(device, dtype, feature):
    if device == "cuda" and dtype == torch.float32:
        pytest.skip("float32 runs on the CPU only")
    f = FEATURES[feature]
    q, k, v, lens = make(f["lens"], f["tq"], f["hq"], f["hkv"], 64 if device == "cuda" else 16, dtype, device)
    with torch.no_grad():
        check(q, k, v, lens, **f["kw"])


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("head_dim", [64, 80, 96, 128, 256])
@pytest.mark.parametrize("tq,hq,hkv", [(1, 32, 8), (1, 8, 8), (4, 16, 2), (16, 4, 1)])
def test_cuda_head_dims_and_groups(dtype, head_dim, tq, hq, hkv):
    lens = [2049, 1, 700, 64]
    q, k, v, lens_t = make(lens, tq, hq, hkv, head_dim, dtype, "cuda", s_max=2100)
    check(q, k, v, lens_t, window=256 if tq == 4 else -1, softcap=30.0 if hq == 8 else 0.0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cache_starts_hide_left_padding(device, dtype):
    """A left-padded batch: sequence b's keys start at cache_starts[b]; the padding before it (NaN here) is never
    read, and the result is the attention over the rows [start, length) alone."""
    if device == "cuda" and dtype == torch.float32:
        pytest.skip("float32 runs on the CPU only")
    lens, starts = [40, 9, 2100], [7, 0, 2098]
    q, k, v, lens_t = make(lens, 1, 8, 2, 64 if device == "cuda" else 16, dtype, device)
    for b, s in enumerate(starts):
        k[b, :s] = float("nan")
        v[b, :s] = float("nan")
    starts_t = torch.tensor(starts, dtype=torch.int32, device=device)
    with torch.no_grad():
        out, lse = decode_attention(q, k, v, lens_t, return_lse=True, window=64, cache_starts=starts_t)
    for b, (n, s) in enumerate(zip(lens, starts)):
        sub_lens = torch.tensor([n - s], dtype=torch.int32, device=device)
        ref_out, ref_lse = reference(q[b : b + 1], k[b : b + 1, s:], v[b : b + 1, s:], sub_lens, window=64)
        tol = ATTENTION_TOL.get(q.dtype, TOL[torch.float32]) if q.is_cuda else None
        assert_close(out[b : b + 1], ref_out, name=f"out {b}", tol=tol)
        assert_close(lse[b : b + 1], ref_lse, torch.float32, name=f"lse {b}", tol=dict(atol=2e-5, rtol=2e-5))


@pytest.mark.parametrize("device", DEVICES)
def test_bhsd_cache_passed_transposed_equals_bshd(device):
    dtype = torch.bfloat16
    q, k, v, lens = make([20, 5], 2, 4, 2, 64, dtype, device, bhsd=True)
    assert k.stride(1) == 64  # positions are the inner dimension
    out = decode_attention(q, k, v, lens)
    assert torch.equal(out, decode_attention(q, k.contiguous(), v.contiguous(), lens))


@pytest.mark.parametrize("device", DEVICES)
def test_writing_new_tokens_then_decoding(device):
    """The module docstring's recipe: the new keys and values go in at device-side positions, then one call."""
    b, s_max, hkv, d = 3, 16, 2, 64
    dtype = torch.bfloat16 if device == "cuda" else torch.float32  # CUDA takes bf16/fp16 only
    k_cache = torch.zeros(b, s_max, hkv, d, device=device, dtype=dtype)
    v_cache = torch.zeros_like(k_cache)
    lens = torch.tensor([4, 9, 0], dtype=torch.int32, device=device)
    k_cache[:, :9] = torch.randn(b, 9, hkv, d, device=device)
    v_cache[:, :9] = torch.randn(b, 9, hkv, d, device=device)
    k_new, v_new = (torch.randn(b, hkv, d, device=device, dtype=dtype) for _ in range(2))
    rows = torch.arange(b, device=device)
    k_cache[rows, lens.long()] = k_new
    v_cache[rows, lens.long()] = v_new
    lens = lens + 1
    q = torch.randn(b, 1, 4, d, device=device, dtype=dtype)
    check(q, k_cache, v_cache, lens)


def _append_case(device, dtype, tq=2, b=3, hkv=2, s_max=12, d=64):
    gen = torch.Generator(device="cpu").manual_seed(3)
    k_cache = torch.randn(b, hkv, s_max, d, generator=gen).to(device=device, dtype=dtype)  # kept [B, H, S, D]
    v_cache = torch.randn(b, hkv, s_max, d, generator=gen).to(device=device, dtype=dtype)
    k_new = torch.randn(b, tq, hkv, d, generator=gen).to(device=device, dtype=dtype)
    v_new = torch.randn(b, tq, hkv, d, generator=gen).to(device=device, dtype=dtype)
    lens = torch.tensor([5, 1, s_max][:b], dtype=torch.int32, device=device)
    return k_new, v_new, k_cache, v_cache, lens


def _appended(k_new, cache, lens):
    """What torch's indexing makes of the append: token t of sequence b at lens[b] - tq + t, when inside the cache."""
    want = cache.clone()
    tq = k_new.shape[1]
    for b in range(k_new.shape[0]):
        for t in range(tq):
            pos = int(lens[b]) - tq + t
            if 0 <= pos < cache.shape[2]:
                want[b, :, pos] = k_new[b, t]
    return want


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_append_to_cache_writes_where_the_attention_reads(device, dtype):
    k_new, v_new, k_cache, v_cache, lens = _append_case(device, dtype)
    want_k, want_v = _appended(k_new, k_cache, lens), _appended(v_new, v_cache, lens)
    append_to_cache(k_new, v_new, k_cache.transpose(1, 2), v_cache.transpose(1, 2), lens)
    assert torch.equal(k_cache, want_k) and torch.equal(v_cache, want_v)


@pytest.mark.parametrize("device", DEVICES)
def test_append_to_cache_then_decode_equals_indexing_then_decode(device):
    """One decode step both ways: the new token's k and v by append_to_cache, or by torch's indexing."""
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    k_new, v_new, k_cache, v_cache, lens = _append_case(device, dtype, tq=1)
    q = torch.randn(3, 1, 4, 64, device=device, dtype=dtype)
    kc, vc = k_cache.transpose(1, 2), v_cache.transpose(1, 2)
    ki, vi = _appended(k_new, k_cache, lens).transpose(1, 2), _appended(v_new, v_cache, lens).transpose(1, 2)
    append_to_cache(k_new, v_new, kc, vc, lens)
    assert torch.equal(decode_attention(q, kc, vc, lens), decode_attention(q, ki, vi, lens))


@pytest.mark.parametrize("device", DEVICES)
def test_append_to_cache_under_torch_compile_fullgraph(device):
    def step(k_new, v_new, kc, vc, lens):
        append_to_cache(k_new * 2, v_new, kc, vc, lens)
        return kc.sum()

    k_new, v_new, k_cache, v_cache, lens = _append_case(device, torch.bfloat16)
    eager_k = k_cache.clone()
    step(k_new, v_new, eager_k.transpose(1, 2), v_cache.clone().transpose(1, 2), lens)
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager" if device == "cpu" else "inductor")
    compiled(k_new, v_new, k_cache.transpose(1, 2), v_cache.transpose(1, 2), lens)
    assert torch.equal(k_cache, eager_k)


@needs_cuda
def test_append_to_cache_in_a_cuda_graph_follows_the_lengths():
    k_new, v_new, k_cache, v_cache, lens = _append_case("cuda", torch.bfloat16, tq=1)
    kc, vc = k_cache.transpose(1, 2), v_cache.transpose(1, 2)
    static_k, static_v = k_new.clone(), v_new.clone()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        append_to_cache(static_k, static_v, kc, vc, lens)
    for step in range(3):  # each replay writes the next position, as a decode loop's slot advances
        static_k.copy_(torch.randn_like(k_new))
        static_v.copy_(torch.randn_like(v_new))
        want_k, want_v = _appended(static_k, k_cache, lens), _appended(static_v, v_cache, lens)
        g.replay()
        torch.cuda.synchronize()
        assert torch.equal(k_cache, want_k) and torch.equal(v_cache, want_v), step
        lens += 1


@pytest.mark.parametrize(
    "change, exc, arg",
    [
        (dict(k_new=None), TypeError, "'k_new'"),
        (dict(v_new=[1.0]), TypeError, "'v_new'"),
        (dict(k_cache="cache"), TypeError, "'k_cache'"),
        (dict(cache_seqlens=None), TypeError, "'cache_seqlens'"),
        (dict(k_new=lambda a: a["k_new"].double()), TypeError, "'k_new'"),
        (dict(v_new=lambda a: a["v_new"][:, :1]), ValueError, "'v_new'"),
        (dict(k_new=lambda a: a["k_new"][:, :, :1]), ValueError, "'k_new'"),
        (dict(v_cache=lambda a: a["v_cache"][:, :5]), ValueError, "'v_cache'"),
        (dict(cache_seqlens=lambda a: a["cache_seqlens"].long()), TypeError, "'cache_seqlens'"),
        (dict(cache_seqlens=lambda a: a["cache_seqlens"] + 1), ValueError, "'cache_seqlens'"),  # 13 > S_max = 12
        (dict(k_new=lambda a: a["k_cache"][:, :2]), ValueError, "'k_cache'"),  # k_new inside the cache
    ],
)
def test_append_to_cache_bad_input_names_the_argument(change, exc, arg):
    k_new, v_new, k_cache, v_cache, lens = _append_case("cpu", torch.float32)
    args = dict(k_new=k_new, v_new=v_new, k_cache=k_cache.transpose(1, 2), v_cache=v_cache.transpose(1, 2))
    args["cache_seqlens"] = lens
    for key, value in change.items():
        args[key] = value(args) if callable(value) else value
    with pytest.raises(exc, match=arg):
        append_to_cache(**args)


def test_autograd_is_refused_with_a_clear_error():
    q, k, v, lens = make([5], 1, 2, 1, 8, torch.float32, "cpu")
    with pytest.raises(RuntimeError, match="inference op"):
        decode_attention(q.requires_grad_(True), k, v, lens)
    with torch.no_grad():
        decode_attention(q, k, v, lens)


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph_equals_eager(device):
    def f(q, k, v, lens):
        return decode_attention(q * 1.5, k, v, lens, window=8, return_lse=True)

    q, k, v, lens = make([20, 3], 2, 4, 2, 64, torch.bfloat16, device)
    compiled = torch.compile(f, fullgraph=True, backend="aot_eager" if device == "cpu" else "inductor")
    for a, b in zip(f(q, k, v, lens), compiled(q, k, v, lens)):
        assert torch.equal(a, b)


@needs_cuda
def test_cuda_graph_replay_follows_lengths_on_the_device():
    q, k, v, lens = make([4096, 4096], 1, 32, 8, 128, torch.bfloat16, "cuda")
    static_q, static_lens = q.clone(), lens.clone()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        decode_attention(static_q, k, v, static_lens)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = decode_attention(static_q, k, v, static_lens, return_lse=True)
    for new_lens in ([100, 4096], [1, 2000]):
        new_q = torch.randn_like(q)
        static_q.copy_(new_q)
        static_lens.copy_(torch.tensor(new_lens, dtype=torch.int32))
        g.replay()
        torch.cuda.synchronize()
        want = decode_attention(new_q, k, v, static_lens.clone(), return_lse=True)
        for a, b in zip(out, want):
            assert torch.equal(a, b)


# ---- bad input: a clear error naming the argument -------------------------------------------------------------------


def _bad_cases():
    q, k, v, lens = make([5, 6], 2, 4, 2, 8, torch.float32, "cpu")
    return (
        [
            (dict(q=[1.0]), TypeError, "'q'"),
            (dict(k_cache=None), TypeError, "'k_cache'"),
            (dict(cache_seqlens=[5, 6]), TypeError, "'cache_seqlens'"),
            (dict(q=q.long()), TypeError, "'q'"),
            (dict(k_cache=k.double()), TypeError, "'k_cache'"),
            (dict(v_cache=v.half()), TypeError, "'v_cache'"),
            (dict(cache_seqlens=lens.long()), TypeError, "'cache_seqlens'"),
            (dict(q=q[0]), ValueError, "'q'"),
            (dict(k_cache=k[:, :, :1].expand(2, 6, 3, 8)), ValueError, "'k_cache'"),  # 3 heads do not divide 4
            (dict(k_cache=k[:1]), ValueError, "'k_cache'"),
            (dict(v_cache=v[:, :5]), ValueError, "'v_cache'"),
            (dict(cache_seqlens=lens + 1), ValueError, "'cache_seqlens'"),  # 7 > S_max = 6
            (dict(cache_seqlens=lens[:1]), ValueError, "'cache_seqlens'"),
            (dict(scale=0.0), ValueError, "'scale'"),
            (dict(scale="1"), TypeError, "'scale'"),
            (dict(softcap=-1.0), ValueError, "'softcap'"),
            (dict(softcap=None), TypeError, "'softcap'"),
            (dict(window=0), ValueError, "'window'"),
            (dict(window=2.0), TypeError, "'window'"),
            (dict(return_lse=1), TypeError, "'return_lse'"),
            (dict(cache_starts=[0, 0]), TypeError, "'cache_starts'"),
            (dict(cache_starts=lens.long()), TypeError, "'cache_starts'"),
            (dict(cache_starts=lens + 1), ValueError, "'cache_starts'"),  # past each sequence's length
        ],
        dict(q=q, k_cache=k, v_cache=v, cache_seqlens=lens),
    )


@pytest.mark.parametrize("case", range(len(_bad_cases()[0])))
def test_bad_input_names_the_argument(case):
    cases, args = _bad_cases()
    kwargs, exc, arg = cases[case]
    args.update(kwargs)
    with pytest.raises(exc, match=arg):
        decode_attention(**args)


@needs_cuda
def test_cuda_only_errors_name_the_argument():
    q, k, v, lens = make([8], 1, 2, 1, 48, torch.bfloat16, "cuda")
    with pytest.raises(ValueError, match="'q': head_dim 48"):
        decode_attention(q, k, v, lens)
    q, k, v, lens = make([8], 1, 2, 1, 64, torch.bfloat16, "cuda")
    with pytest.raises(ValueError, match="'cache_seqlens'"):
        decode_attention(q, k, v, lens.cpu())
    with pytest.raises(TypeError, match="'q': dtype float32"):
        decode_attention(q.float(), k.float(), v.float(), lens)
