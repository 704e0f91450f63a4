"""tigon.ops.rope and tigon.nn.rope.apply_rotary_pos_emb against Hugging Face's apply_rotary_pos_emb in float64 and its
autograd: both layouts and pair styles, partial rotary, GQA, per-batch tables, in place, odd sizes, head slices of a
fused qkv, torch.compile, CUDA graphs, bad input."""

import importlib

import pytest
import torch

from conftest import DEVICES, backward_with_fresh_gradients, needs_cuda
from tigon.nn.rope import apply_rotary_pos_emb
from tigon.ops.rope import rope, rope_one, rotates_in_place
from tolerances import assert_close

DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def rotate_every_two(x):
    return torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)


def hf_apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1, interleaved=False):
    """Hugging Face's apply_rotary_pos_emb, with the partial-rotary split the models that use it do around it."""
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    rot = rotate_every_two if interleaved else rotate_half
    r = cos.shape[-1]
    out = []
    for x in (q, k):
        x_rot, x_pass = x[..., :r], x[..., r:]
        out.append(torch.cat((x_rot * cos + rot(x_rot) * sin, x_pass), dim=-1))
    return tuple(out)


def make_tables(batch, seq, rotary, interleaved, device, dtype=torch.float32, base=10000.0):
    """cos/sin as HF's rotary embedding returns them: (batch, seq, rotary), positions differing per batch row."""
    inv_freq = 1.0 / base ** (torch.arange(0, rotary, 2, dtype=torch.float64) / rotary)
    pos = torch.arange(seq, dtype=torch.float64)[None, :] + 3 * torch.arange(batch, dtype=torch.float64)[:, None]
    freqs = pos[..., None] * inv_freq
    emb = freqs.repeat_interleave(2, dim=-1) if interleaved else torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(device=device, dtype=dtype), emb.sin().to(device=device, dtype=dtype)


def make_qk(batch, hq, hk, seq, dim, dtype, device, layout):
    shape = (lambda h: (batch, h, seq, dim)) if layout == "bhtd" else (lambda h: (batch, seq, h, dim))
    q = torch.randn(*shape(hq), device=device).to(dtype).requires_grad_(True)
    k = torch.randn(*shape(hk), device=device).to(dtype).requires_grad_(True)
    return q, k


def check_against_reference(q, k, cos, sin, layout, interleaved, in_place=False):
    unsqueeze_dim = 1 if layout == "bhtd" else 2
    q64, k64 = (t.detach().double().requires_grad_(True) for t in (q, k))
    q_ref, k_ref = hf_apply_rotary_pos_emb(q64, k64, cos.double(), sin.double(), unsqueeze_dim, interleaved)
    dq_out, dk_out = torch.randn(q_ref.shape, device=q.device), torch.randn(k_ref.shape, device=k.device)
    torch.autograd.backward((q_ref, k_ref), (dq_out.double(), dk_out.double()))
    # in place: q and k are overwritten, so rotate non-leaf copies of them
    q_in, k_in = (q.clone(), k.clone()) if in_place else (q, k)
    q_out, k_out = rope(q_in, k_in, cos, sin, layout=layout, interleaved=interleaved, in_place=in_place)
    if in_place:
        assert q_out.data_ptr() == q_in.data_ptr() and k_out.data_ptr() == k_in.data_ptr()
    assert q_out.dtype == q.dtype and k_out.shape == k.shape
    assert_close(q_out, q_ref, q.dtype, name="q_out")
    assert_close(k_out, k_ref, k.dtype, name="k_out")
    dq, dk = torch.autograd.grad((q_out, k_out), (q, k), (dq_out.to(q.dtype), dk_out.to(k.dtype)))
    assert_close(dq, q64.grad, q.dtype, name="dq")
    assert_close(dk, k64.grad, k.dtype, name="dk")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cos_fp32", [True, False])
@pytest.mark.parametrize("layout", ["bhtd", "bthd"])
@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize(
    "batch,hq,hk,seq,dim,rotary,table_batch",
    [
        (2, 4, 2, 16, 64, 64, 1),  # GQA, full rotary
        (2, 4, 4, 7, 128, 64, 2),  # partial rotary, per-batch tables
        (1, 3, 1, 7, 8, 8, 1),  # tiny heads
        (3, 2, 1, 5, 96, 96, 3),  # head dim not a power of two
        (1, 2, 2, 3, 10, 6, 1),  # odd pass-through width, scalar path
    ],
)
def test_matches_hugging_face_in_float64(
    device, dtype, cos_fp32, layout, interleaved, batch, hq, hk, seq, dim, rotary, table_batch
):
    q, k = make_qk(batch, hq, hk, seq, dim, dtype, device, layout)
    cos, sin = make_tables(table_batch, seq, rotary, interleaved, device, torch.float32 if cos_fp32 else dtype)
    check_against_reference(q, k, cos, sin, layout, interleaved)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["bhtd", "bthd"])
@pytest.mark.parametrize("interleaved", [False, True])
def test_in_place_matches_reference(device, dtype, layout, interleaved):
    q, k = make_qk(2, 8, 2, 9, 128, dtype, device, layout)
    cos, sin = make_tables(1, 9, 64, interleaved, device)
    check_against_reference(q, k, cos, sin, layout, interleaved, in_place=True)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("in_place", [True, False])
def test_backward_writes_over_the_output_gradient(device, in_place):
    """Private output gradients take the input gradients, whether or not the forward ran in place."""
    q, k = make_qk(2, 4, 2, 8, 64, torch.bfloat16, device, "bhtd")
    cos, sin = make_tables(1, 8, 64, False, device)
    dq_out, dk_out = torch.randn_like(q), torch.randn_like(k)
    expect = torch.autograd.grad(rope(q, k, cos, sin), (q, k), (dq_out.clone(), dk_out.clone()))
    outs = rope(q.clone(), k.clone(), cos, sin, in_place=in_place)
    got, received = backward_with_fresh_gradients(outs, (q, k), (dq_out, dk_out))
    assert [got[0].data_ptr(), got[1].data_ptr()] == received
    for a, b in zip(got, expect):
        assert torch.equal(a, b)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("layout", ["bhtd", "bthd"])
def test_head_slices_of_a_fused_qkv(device, dtype, layout):
    # q and k as views of one (B, T, Hq + 2 Hk, D) projection: heads and time strided, never copied.
    batch, seq, hq, hk, dim = 2, 7, 4, 2, 64
    qkv = torch.randn(batch, seq, hq + 2 * hk, dim, device=device).to(dtype).requires_grad_(True)
    q, k = qkv[:, :, :hq], qkv[:, :, hq : hq + hk]
    if layout == "bhtd":
        q, k = q.transpose(1, 2), k.transpose(1, 2)
    assert not q.is_contiguous() and not k.is_contiguous()
    cos, sin = make_tables(batch, seq, dim, False, device)
    q_out, k_out = rope(q, k, cos, sin, layout=layout)
    q_ref, k_ref = hf_apply_rotary_pos_emb(
        q.double(), k.double(), cos.double(), sin.double(), 1 if layout == "bhtd" else 2
    )
    assert_close(q_out, q_ref, dtype, name="q_out")
    assert_close(k_out, k_ref, dtype, name="k_out")
    (q_out.float().square().sum() + k_out.float().sum()).backward()
    qkv64 = qkv.detach().double().requires_grad_(True)
    q64, k64 = qkv64[:, :, :hq], qkv64[:, :, hq : hq + hk]
    if layout == "bhtd":
        q64, k64 = q64.transpose(1, 2), k64.transpose(1, 2)
    r = hf_apply_rotary_pos_emb(q64, k64, cos.double(), sin.double(), 1 if layout == "bhtd" else 2)
    (r[0].square().sum() + r[1].sum()).backward()
    assert_close(qkv.grad, qkv64.grad, dtype, name="dqkv")


@pytest.mark.parametrize("device", DEVICES)
def test_two_dimensional_tables_and_expanded_gradient(device):
    q, k = make_qk(2, 2, 1, 5, 16, torch.float32, device, "bhtd")
    cos, sin = make_tables(1, 5, 16, False, device)
    q_out, k_out = rope(q, k, cos[0], sin[0])  # (T, R) tables
    (q_out.sum() + k_out.sum()).backward()  # stride-0 gradients
    q64, k64 = (t.detach().double().requires_grad_(True) for t in (q, k))
    r = hf_apply_rotary_pos_emb(q64, k64, cos.double(), sin.double())
    (r[0].sum() + r[1].sum()).backward()
    assert_close(q_out, r[0], name="q_out")
    assert_close(q.grad, q64.grad, name="dq")
    assert_close(k.grad, k64.grad, name="dk")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("unsqueeze_dim", [1, 2])
def test_apply_rotary_pos_emb_matches_transformers(device, unsqueeze_dim):
    modeling_llama = pytest.importorskip("transformers.models.llama.modeling_llama")
    layout = "bhtd" if unsqueeze_dim == 1 else "bthd"
    q, k = make_qk(2, 4, 2, 6, 32, torch.bfloat16, device, layout)
    cos, sin = make_tables(2, 6, 32, False, device, torch.bfloat16)
    ours = apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=unsqueeze_dim)
    theirs = modeling_llama.apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=unsqueeze_dim)
    for a, b in zip(ours, theirs):  # HF rounds each product to bf16; ours rounds once
        assert_close(a, b.double(), name="apply_rotary_pos_emb")


@pytest.mark.parametrize("device", DEVICES)
def test_multimodal_rotary_merges_sections_by_axis(device):
    """Qwen2-VL's apply-time mRoPE (the transformers releases that merge there): with different temporal, height and
    width positions, section i of each half of the head turns by axis i mod 3's angles; gradients as the formula's."""
    from tigon.transformers._modules import apply_multimodal_rotary_pos_emb

    sections, dim = [2, 3, 3], 16
    q, k = make_qk(2, 4, 2, 6, dim, torch.float32, device, "bhtd")
    inv_freq = 1.0 / 10000.0 ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    pos = torch.stack([torch.arange(6.0), 2 * torch.arange(6.0) + 1, torch.arange(6.0).flip(0)])  # [3, T]
    freqs = pos[:, None, :, None].expand(3, 2, 6, 1).double() * inv_freq  # [3, B, T, D / 2]
    emb = torch.cat((freqs, freqs), -1)
    cos, sin = emb.cos().float().to(device), emb.sin().float().to(device)
    q_out, k_out = apply_multimodal_rotary_pos_emb(q, k, cos, sin, sections)
    # the merged table by hand: columns [0, 2) from axis 0, [2, 5) from axis 1, [5, 8) from axis 2, each half alike
    axis = torch.tensor([0, 0, 1, 1, 1, 2, 2, 2] * 2, device=device)
    pick = lambda t: t.double().gather(0, axis.view(1, 1, 1, dim).expand(1, *t.shape[1:]))[0]  # noqa: E731
    q64, k64 = (t.detach().double().requires_grad_(True) for t in (q, k))
    ref = hf_apply_rotary_pos_emb(q64, k64, pick(cos), pick(sin))
    assert_close(q_out, ref[0], name="q_out")
    assert_close(k_out, ref[1], name="k_out")
    dq, dk = torch.randn_like(q), torch.randn_like(k)
    got = torch.autograd.grad((q_out, k_out), (q, k), (dq, dk))
    want = torch.autograd.grad(ref, (q64, k64), (dq.double(), dk.double()))
    for name, a, b in zip(("dq", "dk"), got, want, strict=True):
        assert_close(a, b, name=name)
    with pytest.raises(ValueError, match="'cos'"):
        apply_multimodal_rotary_pos_emb(q, k, cos[0], sin[0], sections)


def _step(fn, q, k, cos, sin, dq_out, dk_out, fresh_grads=False):
    outs = fn(q, k, cos, sin)
    if fresh_grads:  # an in-place backward writes over the output gradients it is handed
        dq_out, dk_out = dq_out.clone(), dk_out.clone()
    return (*outs, *torch.autograd.grad(outs, (q, k), (dq_out, dk_out)))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("in_place", [False, True])
def test_torch_compile_fullgraph_equals_eager(device, in_place):
    def f(q, k, cos, sin):
        if in_place:  # rotate fresh activations in place, as an attention block would
            q, k = q * 1.0, k * 1.0
        q_out, k_out = rope(q, k, cos, sin, in_place=in_place)
        return q_out * 2.0, k_out + 1.0

    q, k = make_qk(2, 4, 2, 8, 64, torch.bfloat16, device, "bhtd")
    cos, sin = make_tables(1, 8, 64, False, device)
    dq_out, dk_out = torch.randn_like(q), torch.randn_like(k)
    eager = _step(f, q, k, cos, sin, dq_out, dk_out, fresh_grads=True)
    compiled_fn = torch.compile(f, fullgraph=True, backend="aot_eager" if device == "cpu" else "inductor")
    compiled = _step(compiled_fn, q, k, cos, sin, dq_out, dk_out, fresh_grads=True)
    for a, b in zip(eager, compiled):
        assert torch.equal(a, b)


@needs_cuda
def test_cuda_graph_replay_equals_eager():
    q, k = make_qk(2, 8, 2, 64, 128, torch.bfloat16, "cuda", "bhtd")
    cos, sin = make_tables(1, 64, 128, False, "cuda", torch.bfloat16)
    static = [t.detach().clone().requires_grad_(True) for t in (q, k)]
    grads = [torch.randn_like(q), torch.randn_like(k)]
    fn = lambda a, b, c, s: rope(a, b, c, s)  # noqa: E731
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        _step(fn, *static, cos, sin, *grads)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = _step(fn, *static, cos, sin, *grads)
    for _ in range(2):  # fresh inputs each replay
        new = [torch.randn_like(q), torch.randn_like(k)]
        new_grads = [torch.randn_like(q), torch.randn_like(k)]
        with torch.no_grad():
            for s, n in zip(static, new):
                s.copy_(n)
        for s, n in zip(grads, new_grads):
            s.copy_(n)
        g.replay()
        torch.cuda.synchronize()
        ref = _step(fn, *(n.requires_grad_(True) for n in new), cos, sin, *new_grads)
        for a, b in zip(out, ref):
            assert torch.equal(a, b)


@needs_cuda
def test_more_than_2_31_elements():
    batch, heads, seq, dim = 1, 1024 * 16 + 1, 1024, 128  # 2^31 + 128 Ki elements in q
    q = torch.randn(batch, heads, seq, dim, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(1, 1, seq, dim, device="cuda", dtype=torch.bfloat16)
    cos, sin = make_tables(1, seq, dim, False, "cuda")
    q_out, _ = rope(q, k, cos, sin)
    tail = slice(heads - 2, heads)  # heads past 2^31 elements
    q_ref, _ = hf_apply_rotary_pos_emb(q[:, tail].double(), k.double(), cos.double(), sin.double())
    assert_close(q_out[:, tail], q_ref, name="q_out tail")


# ---- bad input: a clear error naming the argument, never a crash ------------------------------------------------------


def _bad_cases():
    q, k = torch.randn(2, 4, 6, 16), torch.randn(2, 2, 6, 16)
    cos, sin = torch.randn(1, 6, 16), torch.randn(1, 6, 16)
    return [
        (dict(q=q.long()), TypeError, "'q'"),
        (dict(q=[1.0]), TypeError, "'q'"),
        (dict(k=k.half()), TypeError, "'k'"),
        (dict(cos=cos.half(), sin=sin.half()), TypeError, "'cos'"),
        (dict(sin=sin.double()), TypeError, "'sin'"),
        (dict(q=torch.randn(2, 4, 96)), ValueError, "'q'"),
        (dict(q=torch.randn(2, 4, 16, 6).transpose(2, 3)), ValueError, "'q'"),
        (dict(k=torch.randn(2, 2, 5, 16)), ValueError, "'k'"),
        (dict(k=torch.randn(3, 2, 6, 16)), ValueError, "'k'"),
        (dict(cos=torch.randn(1, 6, 18), sin=torch.randn(1, 6, 18)), ValueError, "'cos'"),  # R > D
        (dict(cos=torch.randn(1, 6, 7), sin=torch.randn(1, 6, 7)), ValueError, "'cos'"),  # odd R
        (dict(cos=torch.randn(1, 5, 16), sin=torch.randn(1, 5, 16)), ValueError, "'cos'"),  # seq mismatch
        (dict(cos=torch.randn(3, 6, 16), sin=torch.randn(3, 6, 16)), ValueError, "'cos'"),  # batch mismatch
        (dict(cos=torch.randn(1, 1, 6, 16), sin=torch.randn(1, 1, 6, 16)), ValueError, "'cos'"),
        (dict(sin=torch.randn(1, 6, 8)), ValueError, "'sin'"),
        (dict(layout="bsnd"), ValueError, "'layout'"),
        (dict(layout="bthd"), ValueError, "'k'|'cos'"),  # T is dim 1 there: 4 != 6
        (dict(interleaved=1), TypeError, "'interleaved'"),
    ], dict(q=q, k=k, cos=cos, sin=sin)


@pytest.mark.parametrize("case", range(len(_bad_cases()[0])))
def test_bad_input_names_the_argument(case):
    cases, args = _bad_cases()
    kwargs, exc, arg = cases[case]
    args.update(kwargs)
    with pytest.raises(exc, match=arg):
        rope(**args)


def test_bad_unsqueeze_dim_is_named():
    q, k = torch.randn(1, 2, 3, 8), torch.randn(1, 2, 3, 8)
    cos, sin = make_tables(1, 3, 8, False, "cpu")
    with pytest.raises(ValueError, match="'unsqueeze_dim'"):
        apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=3)


def test_c_library_errors_surface_with_the_message():
    import tigon

    mod = importlib.import_module("tigon.ops.rope")  # the module: tigon.ops.rope is the function
    x, cos, sin = torch.randn(1, 2, 3, 8), torch.randn(1, 3, 8), torch.randn(1, 3, 8)
    with pytest.raises(tigon.TigonArgumentError, match="tigon_rope_fwd: argument 'out'"):
        mod._launch(mod._fwd, x, cos, sin, torch.empty(1, 2, 3, 7), 0, False)
    with pytest.raises(tigon.TigonArgumentError, match="tigon_rope_bwd: argument 'layout'"):
        mod._launch(mod._bwd, x, cos, sin, torch.empty_like(x), 7, False)


@needs_cuda
def test_device_mismatch_names_the_argument():
    q, k = torch.randn(1, 2, 3, 8, device="cuda"), torch.randn(1, 2, 3, 8, device="cuda")
    cos, sin = make_tables(1, 3, 8, False, "cpu")
    with pytest.raises(ValueError, match="'cos'"):
        rope(q, k, cos, sin)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout", ["bhtd", "bthd"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rope_one_is_rope_of_one_tensor(device, layout, dtype):
    """rope_one(x) (Gemma 4 rotates q and k in separate calls): rope's q output and gradient, bit for bit, with a
    partial-rotary table."""
    g = torch.Generator().manual_seed(3)
    shape = (2, 3, 5, 16) if layout == "bhtd" else (2, 5, 3, 16)
    x = torch.randn(shape, generator=g).to(device, dtype)
    cos, sin = (torch.randn(2, 5, 8, generator=g).to(device) for _ in range(2))
    dy = torch.randn(shape, generator=g).to(device, dtype)
    a = x.clone().requires_grad_()
    b = x.clone().requires_grad_()
    y_one = rope_one(a, cos, sin, layout=layout)
    y_pair, _ = rope(b, x.clone(), cos, sin, layout=layout)
    assert torch.equal(y_one, y_pair)
    y_one.backward(dy)
    y_pair.backward(dy)
    assert torch.equal(a.grad, b.grad)
    with pytest.raises(ValueError, match="'cos'"):
        rope_one(x, cos[:, :4], sin[:, :4], layout=layout)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_in_place_over_projection_views_matches_out_of_place(device, dtype):
    """q and k as transformers makes them, transposed views of projections, rotated in place (one Function per
    tensor): the same values and input gradient as the out-of-place op, and the results alias the projections."""
    b, t, hq, hk, d = 2, 7, 4, 2, 64
    x = torch.randn(b, t, 32, device=device, dtype=dtype, requires_grad=True)
    wq, wk = (torch.randn(32, h * d, device=device, dtype=dtype) / 6 for h in (hq, hk))
    cos, sin = make_tables(1, t, d, False, device)
    dq_out, dk_out = (
        torch.randn(b, hq, t, d, device=device, dtype=dtype),
        torch.randn(b, hk, t, d, device=device, dtype=dtype),
    )

    def run(in_place):
        q, k = (x @ wq).view(b, t, hq, d).transpose(1, 2), (x @ wk).view(b, t, hk, d).transpose(1, 2)
        assert rotates_in_place(q, k)
        q_out, k_out = rope(q, k, cos, sin, in_place=in_place)
        assert (q_out.data_ptr() == q.data_ptr()) == in_place
        (dx,) = torch.autograd.grad((q_out, k_out), (x,), (dq_out, dk_out))
        return q_out.detach(), k_out.detach(), dx

    for a, c in zip(run(False), run(True)):
        assert torch.equal(a, c)


def test_rotates_in_place_only_where_safe():
    q = torch.randn(1, 2, 3, 8)
    k = torch.randn(1, 2, 3, 8)
    assert rotates_in_place(q, k)
    assert not rotates_in_place(q.requires_grad_(), k)  # a leaf that requires grad
    assert not rotates_in_place(torch.randn(1, 1, 3, 8).expand(1, 2, 3, 8), k)  # stride 0
    qkv = torch.randn(1, 3, 3 * 16)  # interleaved slices of one fused projection: kept out of place
    view = lambda t: t.view(1, 3, 2, 8).transpose(1, 2)  # noqa: E731
    assert not rotates_in_place(view(qkv[..., :16]), view(qkv[..., 16:32]))
    assert not rotates_in_place(k, k)
    y = torch.randn(3, 32) @ torch.randn(32, 32, requires_grad=True)
    a, b = y.split([16, 16], -1)  # pieces of a split: autograd refuses a Function writing over them
    assert not rotates_in_place(view(a), view(b))
