"""tigon.ops.swiglu (swiglu, geglu and their fused gate_up forms) and the tigon.nn.swiglu MLP blocks against torch's
F.silu / F.gelu in float64: output and both gradients for every activation and dtype, in place and not, odd and
strided shapes, torch.compile, CUDA graphs, memory, Hugging Face modules, bad input."""

import importlib

import pytest
import torch
import torch.nn.functional as F

from conftest import DEVICES, needs_cuda
from tigon.ops.swiglu import geglu, geglu_fused, swiglu, swiglu_fused
from tolerances import assert_close

ACTS = ["silu", "gelu_tanh", "gelu_erf"]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def torch_act(act, a):
    if act == "silu":
        return F.silu(a)
    return F.gelu(a, approximate="tanh" if act == "gelu_tanh" else "none")


def tigon_glu(act, a, b, in_place=False, **mult):
    if act == "silu":
        return swiglu(a, b, in_place=in_place, **mult)
    return geglu(a, b, approximate="tanh" if act == "gelu_tanh" else "none", in_place=in_place, **mult)


def tigon_glu_fused(act, gate_up, in_place=False, **mult):
    if act == "silu":
        return swiglu_fused(gate_up, in_place=in_place, **mult)
    return geglu_fused(gate_up, approximate="tanh" if act == "gelu_tanh" else "none", in_place=in_place, **mult)


def rows_of(shape, dtype, device, pad=0, scale=2.0):
    """A [..., I] tensor; with pad, the first I columns of a [..., I + pad] buffer (row stride I + pad)."""
    t = (torch.randn(*shape[:-1], shape[-1] + pad, device=device) * scale).to(dtype)
    return t[..., : shape[-1]] if pad else t


def check_pair(act, a_leaf, b_leaf, in_place, a_in=None, b_in=None):
    """Runs tigon on (a_in, b_in) (default the leaves), backward with a random dc; checks c, da, db in float64."""
    a_in = a_leaf if a_in is None else a_in
    b_in = b_leaf if b_in is None else b_in
    c = tigon_glu(act, a_in, b_in, in_place=in_place)
    a64, b64 = a_leaf.detach().double().requires_grad_(), b_leaf.detach().double().requires_grad_()
    c_ref = torch_act(act, a64) * b64
    assert c.dtype == a_leaf.dtype and c.shape == a_leaf.shape and c.is_contiguous()
    assert_close(c, c_ref, name="c")
    dc = torch.randn_like(c)
    c.backward(dc)
    c_ref.backward(dc.double())
    assert_close(a_leaf.grad, a64.grad, name="da")
    assert_close(b_leaf.grad, b64.grad, name="db")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(3, 1001), (1, 1), (5, 7, 33), (8, 4096), (2, 0, 16)])
@pytest.mark.parametrize("in_place", [False, True])
def test_matches_float64_reference(device, act, dtype, shape, in_place):
    a_leaf = rows_of(shape, dtype, device).requires_grad_()
    b_leaf = rows_of(shape, dtype, device).requires_grad_()
    if in_place:  # the gradients are written over a and b: give it intermediates, as inside a model
        check_pair(act, a_leaf, b_leaf, True, a_leaf * 1, b_leaf * 1)
    else:
        check_pair(act, a_leaf, b_leaf, False)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_saturated_inputs(device, act, dtype):
    """Far into both tails (where the activation is 0 or the identity, and where exp overflows inside the kernels'
    sigmoid forms) outputs and gradients stay finite and match float64, 16 columns so the vector path runs."""
    tails = torch.tensor(
        [-1e4, -600.0, -88.0, -20.0, -9.0, -5.0, -2.0, 0.0, 2.0, 5.0, 9.0, 20.0, 88.0, 600.0, 1e4, -0.5]
    )
    a_leaf = tails.repeat(3, 1).to(device=device, dtype=dtype).requires_grad_()
    b_leaf = (torch.randn(3, 16, device=device) + 2).to(dtype).requires_grad_()
    check_pair(act, a_leaf, b_leaf, False)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(3, 1001), (1, 1), (5, 7, 33), (8, 4096)])
@pytest.mark.parametrize("in_place", [False, True])
def test_fused_matches_float64_reference(device, act, dtype, shape, in_place):
    leaf = rows_of((*shape[:-1], 2 * shape[-1]), dtype, device).requires_grad_()
    gate_up = leaf * 1 if in_place else leaf
    c = tigon_glu_fused(act, gate_up, in_place=in_place)
    g64 = leaf.detach().double().requires_grad_()
    gate, up = g64.chunk(2, dim=-1)  # Phi-3's order: gate first
    c_ref = torch_act(act, gate) * up
    assert c.shape == c_ref.shape and c.dtype == dtype
    assert_close(c, c_ref, name="c")
    dc = torch.randn_like(c)
    c.backward(dc)
    c_ref.backward(dc.double())
    assert_close(leaf.grad, g64.grad, name="dgate_up")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_strided_rows(device, act, dtype):
    # a and b with different row strides (vector-friendly padding and odd padding), and a 3-D view of a wider buffer
    for shape, pad_a, pad_b in [((7, 256), 8, 3), ((4, 6, 96), 32, 0), ((9, 33), 1, 64)]:
        a = rows_of(shape, dtype, device, pad_a).requires_grad_()
        b = rows_of(shape, dtype, device, pad_b).requires_grad_()
        assert not a.is_contiguous()
        check_pair(act, a, b, False)
    # the two halves of a gate_up with padded rows, through the fused and the unfused API
    for fused in (True, False):
        buf = rows_of((5, 2 * 40), dtype, device, pad=16).requires_grad_()
        c = tigon_glu_fused(act, buf) if fused else tigon_glu(act, *buf.chunk(2, dim=-1))
        buf64 = buf.detach().double().requires_grad_()
        gate, up = buf64.chunk(2, dim=-1)
        c_ref = torch_act(act, gate) * up
        assert_close(c, c_ref, name=f"c of padded gate_up (fused={fused})")
        dc = torch.randn_like(c)
        c.backward(dc)
        c_ref.backward(dc.double())
        assert_close(buf.grad, buf64.grad, name=f"dgate_up of padded gate_up (fused={fused})")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fused", [False, True])
def test_in_place_backward_writes_over_the_inputs(device, fused):
    shape = (16, 512)
    src = rows_of((16, 1024) if fused else shape, torch.bfloat16, device).requires_grad_()
    dc = torch.randn(shape, device=device, dtype=torch.bfloat16)
    if fused:
        expect = torch.autograd.grad(swiglu_fused(src), src, dc)[0]
        gate_up = src.detach().clone().requires_grad_()
        inner = gate_up * 1
        got = torch.autograd.grad(swiglu_fused(inner, in_place=True), inner, dc)[0]
        assert torch.equal(got, expect)
        assert got.data_ptr() == inner.data_ptr()  # dgate_up is gate_up's own memory
    else:
        b_src = rows_of(shape, torch.bfloat16, device).requires_grad_()
        expect = torch.autograd.grad(swiglu(src, b_src), (src, b_src), dc)
        a, b = src.detach().requires_grad_() * 1, b_src.detach().requires_grad_() * 1  # intermediates, not leaves
        got = torch.autograd.grad(swiglu(a, b, in_place=True), (a, b), dc)
        assert torch.equal(got[0], expect[0]) and torch.equal(got[1], expect[1])
        assert got[0].data_ptr() == a.data_ptr() and got[1].data_ptr() == b.data_ptr()


@pytest.mark.parametrize("device", DEVICES)
def test_expanded_output_gradient(device):
    # c.sum() hands backward a stride-0 gradient; fp32 inputs with a float64 reference
    a, b = rows_of((8, 64), torch.float32, device).requires_grad_(), rows_of((8, 64), torch.float32, device)
    b.requires_grad_()
    geglu(a, b).sum().backward()
    a64, b64 = a.detach().double().requires_grad_(), b.detach().double().requires_grad_()
    (F.gelu(a64, approximate="tanh") * b64).sum().backward()
    assert_close(a.grad, a64.grad, name="da")
    assert_close(b.grad, b64.grad, name="db")


# ---- Hugging Face's roundings and Falcon-H1's multipliers -------------------------------------------------------------


def assert_same_roundings(got, want, name):
    """got equals want but where fp32 math in another order (another library's tanh or erf, on the CPU) lands on the
    other side of a rounding: a few elements in 10^4, one unit apart (rounding act(a) and the product once instead of
    separately differs in ~4% of them). One unit is relative to the value, floored at the subnormal spacing."""
    diff = got.double() - want.double()
    differ = (diff != 0).double().mean().item()
    assert differ < 1e-3, f"{name}: {differ:.2%} of the elements differ from Hugging Face's roundings"
    info = torch.finfo(got.dtype)
    unit = info.eps * want.double().abs().clamp_min(info.smallest_normal)
    assert (diff.abs() <= unit).all(), f"{name}: more than one unit apart"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("fused", [False, True])
def test_rounds_where_hugging_face_rounds(device, act, dtype, fused):
    """``act_fn(a) * b`` in bf16/fp16 rounds act(a), then the product; autograd through it rounds dc * b, then
    multiplies by act'(a) and rounds. The op rounds at the same points. On CUDA the activation is torch's own formula
    in fp32 (what Hugging Face's module computes there); the CPU reference takes it in float64, as does this test there
    (torch's CPU kernels use other tanh / erf approximations, which differ in the negative tail)."""
    a = rows_of((64, 1000), dtype, device, scale=1.5).requires_grad_()
    b = rows_of((64, 1000), dtype, device).requires_grad_()
    dc = torch.randn(64, 1000, device=device, dtype=dtype)
    c = tigon_glu_fused(act, torch.cat([a, b], -1)) if fused else tigon_glu(act, a, b)
    da, db = torch.autograd.grad(c, (a, b), dc)
    if device == "cuda":
        c_hf = torch_act(act, a) * b
        da_hf, db_hf = torch.autograd.grad(c_hf, (a, b), dc)
    else:
        a64 = a.detach().double().requires_grad_()
        f64 = torch_act(act, a64)
        (df64,) = torch.autograd.grad(f64.sum(), a64)
        f = f64.detach().to(dtype)  # act_fn(a), rounded
        c_hf, db_hf = f * b.detach(), dc * f
        da_hf = ((dc * b.detach()).double() * df64).to(dtype)
    assert_same_roundings(c, c_hf, "c")
    assert_same_roundings(da, da_hf, "da")
    assert_same_roundings(db, db_hf, "db")


@needs_cuda
@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_every_16_bit_input_rounds_as_torch_does(act, dtype):
    """On CUDA the op equals Hugging Face's ``act_fn(a) * b`` bit for bit: every 16-bit a (NaNs aside) against dy =
    dc * b of every sign and mantissa of the dtype at two exponents, forward and both gradients. SiLU's forward takes
    a fast form whose rounding is certified or recomputed (common/activation_fast.cuh): this checks its bound over
    every input; the rest are torch's own formulas in fp32, checked here over every input too."""
    x = torch.arange(-32768, 32768, dtype=torch.int16, device="cuda").view(dtype)
    x = x[~x.isnan()]
    mantissas = 128 if dtype == torch.bfloat16 else 1024
    mant = 1 + torch.arange(mantissas, device="cuda") / mantissas
    dy = torch.cat([mant, mant / 4096, -mant, -mant / 4096]).to(dtype)
    a = x[:, None].expand(-1, dy.numel()).contiguous().requires_grad_()
    b = torch.ones_like(a, requires_grad=True)
    dc = dy[None, :].expand_as(a).contiguous()
    c = tigon_glu(act, a, b)
    da, db = torch.autograd.grad(c, (a, b), dc)
    c_hf = torch_act(act, a) * b
    da_hf, db_hf = torch.autograd.grad(c_hf, (a, b), dc)
    for name, got, want in (("c", c, c_hf), ("da", da, da_hf), ("db", db, db_hf)):
        differ = got.view(torch.int16) != want.view(torch.int16)
        differ &= ~(got.isnan() & want.isnan())
        assert not differ.any(), (
            f"{name}: {int(differ.sum())} of {differ.numel()} elements differ from torch's, first at "
            f"a = {a[differ][0].item()!r}, dy = {dc[differ][0].item()!r}"
        )


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fused", [False, True])
def test_multipliers_match_float64_reference(device, act, dtype, fused):
    """Falcon-H1's MLP: ``act(a * g) * b * d`` (d scales the product, which equals scaling a bias-free down
    projection's output), forward and both gradients, against float64 from the dtype-rounded a * g."""
    g, d = 0.8125, 1.75
    shape = (5, 7, 264)  # 16-byte vectors
    a_leaf, b_leaf = rows_of(shape, dtype, device).requires_grad_(), rows_of(shape, dtype, device).requires_grad_()
    if fused:
        c = tigon_glu_fused(act, torch.cat([a_leaf, b_leaf], -1), gate_multiplier=g, down_multiplier=d)
    else:
        c = tigon_glu(act, a_leaf, b_leaf, gate_multiplier=g, down_multiplier=d)
    a64, b64 = a_leaf.detach().double().requires_grad_(), b_leaf.detach().double().requires_grad_()
    ag = a64 * g
    ag = ag + ((a_leaf.detach() * g).double() - ag).detach()  # the op's a * g is rounded to the dtype, as torch's is
    c_ref = torch_act(act, ag) * b64 * d
    assert_close(c, c_ref, dtype, name="c")
    dc = torch.randn_like(c)
    got = torch.autograd.grad(c, (a_leaf, b_leaf), dc)
    want = torch.autograd.grad(c_ref, (a64, b64), dc.double())
    assert_close(got[0], want[0], name="da")
    assert_close(got[1], want[1], name="db")


@pytest.mark.parametrize(
    "kwargs,exc",
    [
        (dict(gate_multiplier=float("nan")), ValueError),
        (dict(down_multiplier=0.0), ValueError),
        (dict(gate_multiplier="2"), TypeError),
        (dict(down_multiplier=True), TypeError),
    ],
)
def test_bad_multipliers_name_the_argument(kwargs, exc):
    arg = next(iter(kwargs))
    with pytest.raises(exc, match=f"'{arg}'"):
        swiglu(torch.randn(2, 8), torch.randn(2, 8), **kwargs)
    with pytest.raises(exc, match=f"'{arg}'"):
        geglu_fused(torch.randn(2, 8), **kwargs)


# ---- Hugging Face modules ---------------------------------------------------------------------------------------------


def _hf_pairs():
    tf = pytest.importorskip("transformers")
    from tigon.nn import swiglu as ours
    from transformers.models.falcon_h1.modeling_falcon_h1 import FalconH1MLP
    from transformers.models.gemma.modeling_gemma import GemmaMLP
    from transformers.models.llama.modeling_llama import LlamaMLP
    from transformers.models.phi3.modeling_phi3 import Phi3MLP

    small = dict(hidden_size=48, intermediate_size=104, num_attention_heads=4, num_key_value_heads=4)
    return [
        (LlamaMLP, ours.LlamaMLP, tf.LlamaConfig(**small)),
        (LlamaMLP, ours.LlamaMLP, tf.LlamaConfig(**small, mlp_bias=True)),
        (GemmaMLP, ours.GemmaMLP, tf.GemmaConfig(**small)),
        (Phi3MLP, ours.Phi3MLP, tf.Phi3Config(**small)),
        (FalconH1MLP, ours.FalconH1MLP, tf.FalconH1Config(**small, mlp_multipliers=[0.8125, 1.75])),
        (FalconH1MLP, ours.FalconH1MLP, tf.FalconH1Config(**small, mlp_multipliers=[1.5, 0.625], mlp_bias=True)),
    ]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_modules_match_hugging_face(device, dtype):
    for hf_cls, ours_cls, config in _hf_pairs():
        hf = hf_cls(config).to(device=device, dtype=dtype)
        ours = ours_cls(config).to(device=device, dtype=dtype)
        assert ours.state_dict().keys() == hf.state_dict().keys(), hf_cls.__name__
        ours.load_state_dict(hf.state_dict())
        x = torch.randn(3, 5, config.hidden_size, device=device, dtype=dtype)
        x_hf, x_ours = x.clone().requires_grad_(), x.clone().requires_grad_()
        y_hf, y_ours = hf(x_hf), ours(x_ours)
        dy = torch.randn_like(y_hf)
        y_hf.backward(dy)
        y_ours.backward(dy)
        # Both sides are rounded (HF also rounds act(a) and the matmuls in dtype), so module against module with
        # about twice the per-dtype tolerance; the op itself is held to float64 in the tests above.
        name = f"{hf_cls.__name__} {dtype}"
        assert y_ours.dtype == y_hf.dtype
        tol = dict(atol=2e-5, rtol=2e-5) if dtype == torch.float32 else dict(atol=3e-2, rtol=3e-2)
        torch.testing.assert_close(y_ours, y_hf, **tol, msg=lambda m: f"{name} y: {m}")
        torch.testing.assert_close(x_ours.grad, x_hf.grad, **tol, msg=lambda m: f"{name} dx: {m}")
        for (k, p_hf), p_ours in zip(hf.named_parameters(), ours.parameters()):
            scale = max(1.0, p_hf.grad.abs().max().item())
            torch.testing.assert_close(
                p_ours.grad, p_hf.grad, atol=tol["atol"] * scale, rtol=tol["rtol"], msg=lambda m: f"{name} d{k}: {m}"
            )


# (batch, seq, hidden, intermediate) at which GeGLU once missed Hugging Face's bf16 MLP by more than 1e-2: near-zero
# outputs of down_proj moved with every activation rounded once instead of twice. The large one takes ~30 s on a CPU.
LIGER_SHAPES = [(9, 41, 341, 4231), (2, 2048, 2048, 4096)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("family", ["gemma", "llama"])
@pytest.mark.parametrize("shape", LIGER_SHAPES, ids=["9x41x341-4231", "2x2048x2048-4096"])
def test_mlp_matches_hugging_face_in_bf16(device, family, shape):
    """tigon.nn.GemmaMLP / LlamaMLP against transformers' module in bf16 on the same weights: the projections are the
    same torch matmuls on both sides, so with the gated activation rounded as transformers rounds it, outputs and
    every gradient agree to 1e-2."""
    tf = pytest.importorskip("transformers")
    from tigon.nn import swiglu as ours

    if family == "gemma":
        from transformers.models.gemma.modeling_gemma import GemmaMLP as HF

        cfg_cls, ours_cls = tf.GemmaConfig, ours.GemmaMLP
    else:
        from transformers.models.llama.modeling_llama import LlamaMLP as HF

        cfg_cls, ours_cls = tf.LlamaConfig, ours.LlamaMLP
    bsz, seq, hidden, inter = shape
    config = cfg_cls(
        hidden_size=hidden, intermediate_size=inter, num_attention_heads=1, num_key_value_heads=1, head_dim=64
    )
    hf = HF(config).to(device=device, dtype=torch.bfloat16)
    mine = ours_cls(config).to(device=device, dtype=torch.bfloat16)
    mine.load_state_dict(hf.state_dict())
    x = torch.randn(bsz, seq, hidden, device=device, dtype=torch.bfloat16)
    x_hf, x_mine = x.clone().requires_grad_(), x.clone().requires_grad_()
    y_hf, y_mine = hf(x_hf), mine(x_mine)
    dy = torch.randn_like(y_hf)
    y_hf.backward(dy)
    y_mine.backward(dy)
    tol = dict(atol=1e-2, rtol=1e-2)
    torch.testing.assert_close(y_mine, y_hf, **tol)
    torch.testing.assert_close(x_mine.grad, x_hf.grad, **tol)
    for (k, p_hf), p_mine in zip(hf.named_parameters(), mine.parameters()):
        torch.testing.assert_close(p_mine.grad, p_hf.grad, **tol, msg=lambda m: f"d{k}: {m}")


def test_module_rejects_unknown_activation():
    tf = pytest.importorskip("transformers")
    from tigon.nn.swiglu import LlamaMLP

    with pytest.raises(ValueError, match="hidden_act"):
        LlamaMLP(
            tf.LlamaConfig(
                hidden_size=8, intermediate_size=16, num_attention_heads=2, num_key_value_heads=2, hidden_act="relu"
            )
        )


# ---- torch.compile and CUDA graphs --------------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("in_place", [False, True])
def test_torch_compile_fullgraph_equals_eager(device, fused, in_place):
    def f(a, b):
        if fused:
            return geglu_fused(torch.cat([a, b], dim=-1) * 1, in_place=in_place) * 2.0
        return swiglu(a * 1, b * 1, in_place=in_place) * 2.0

    a = rows_of((32, 256), torch.bfloat16, device).requires_grad_()
    b = rows_of((32, 256), torch.bfloat16, device).requires_grad_()
    dc = torch.randn(32, 256, device=device, dtype=torch.bfloat16)

    def step(fn):
        c = fn(a, b)
        return (c, *torch.autograd.grad(c, (a, b), dc))

    eager = step(f)
    compiled = step(torch.compile(f, fullgraph=True, backend="aot_eager" if device == "cpu" else "inductor"))
    for x, y in zip(eager, compiled):
        assert torch.equal(x, y)


@needs_cuda
@pytest.mark.parametrize("fused", [False, True])
def test_cuda_graph_replay_equals_eager(fused):
    def step(x, dc):
        inner = x * 1  # in place writes over this intermediate, never over the static input
        c = swiglu_fused(inner, in_place=True) if fused else geglu(*inner.chunk(2, dim=-1), in_place=True)
        return (c, *torch.autograd.grad(c, x, dc))

    x = rows_of((64, 2048), torch.bfloat16, "cuda").requires_grad_()
    dc = torch.randn(64, 1024, device="cuda", dtype=torch.bfloat16)
    static_x, static_dc = x.detach().clone().requires_grad_(), dc.clone()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        step(static_x, static_dc)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = step(static_x, static_dc)
    for _ in range(2):  # fresh inputs each replay
        new_x, new_dc = torch.randn_like(x), torch.randn_like(dc)
        with torch.no_grad():
            static_x.copy_(new_x)
        static_dc.copy_(new_dc)
        g.replay()
        torch.cuda.synchronize()
        ref = step(new_x.requires_grad_(), new_dc)
        for a, b in zip(out, ref):
            assert torch.equal(a, b)


# ---- memory and size ----------------------------------------------------------------------------------------------


@needs_cuda
@pytest.mark.parametrize("fused", [False, True])
def test_in_place_full_pass_allocates_only_the_output(fused):
    M, N = 8192, 14336  # the benchmark's shape: c is 224 MiB in bf16
    if fused:
        src = torch.randn(M, 2 * N, device="cuda", dtype=torch.bfloat16).requires_grad_()
        args = (src * 1,)  # in place takes intermediates (a leaf's gradient would overwrite it)
    else:
        args = tuple(torch.randn(M, N, device="cuda", dtype=torch.bfloat16).requires_grad_() * 1 for _ in range(2))
    dc = torch.randn(M, N, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    c = swiglu_fused(*args, in_place=True) if fused else swiglu(*args, in_place=True)
    grads = torch.autograd.grad(c, args, dc)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - before
    assert peak <= M * N * 2 + (1 << 20), f"peak extra {peak / 2**20:.1f} MiB, expected <= 224 MiB (c only)"
    assert all(g.data_ptr() == a.data_ptr() for g, a in zip(grads, args))


@needs_cuda
def test_more_than_2_31_elements():
    rows, cols = (2**31) // 4096 + 3, 4096  # offsets past int32 for the last rows
    a = torch.randn(rows, cols, device="cuda", dtype=torch.bfloat16).requires_grad_()
    b = torch.randn(rows, cols, device="cuda", dtype=torch.bfloat16).requires_grad_()
    c = swiglu(a, b)
    dc = torch.randn_like(c)
    da, db = torch.autograd.grad(c, (a, b), dc)
    tail = slice(rows - 5, rows)
    a64, b64 = a[tail].detach().double().requires_grad_(), b[tail].detach().double().requires_grad_()
    c_ref = F.silu(a64) * b64
    assert_close(c[tail], c_ref, torch.bfloat16, name="c tail")
    da_ref, db_ref = torch.autograd.grad(c_ref, (a64, b64), dc[tail].double())
    assert_close(da[tail], da_ref, name="da tail")
    assert_close(db[tail], db_ref, name="db tail")


# ---- bad input: a clear error naming the argument, never a crash ------------------------------------------------------


def _ab(**kw):
    args = dict(a=torch.randn(4, 8, dtype=torch.bfloat16), b=torch.randn(4, 8, dtype=torch.bfloat16))
    args.update(kw)
    return args


@pytest.mark.parametrize(
    "fn,kwargs,exc,arg",
    [
        (swiglu, _ab(a=torch.ones(4, 8, dtype=torch.int64)), TypeError, "'a'"),
        (swiglu, _ab(a=[1.0, 2.0]), TypeError, "'a'"),
        (swiglu, _ab(b=torch.ones(4, 8)), TypeError, "'b'"),
        (swiglu, _ab(b=torch.ones(4, 7, dtype=torch.bfloat16)), ValueError, "'b'"),
        (swiglu, _ab(b=torch.ones(8, 4, dtype=torch.bfloat16).t()), ValueError, "'b'"),
        (
            swiglu,
            _ab(a=torch.tensor(1.0, dtype=torch.bfloat16), b=torch.tensor(1.0, dtype=torch.bfloat16)),
            ValueError,
            "'a'",
        ),
        (swiglu, _ab(in_place=1), TypeError, "'in_place'"),
        (geglu, _ab(approximate="erf"), ValueError, "'approximate'"),
        (geglu, _ab(approximate=None), ValueError, "'approximate'"),
        (swiglu_fused, dict(gate_up=torch.randn(4, 7)), ValueError, "'gate_up'"),
        (swiglu_fused, dict(gate_up=torch.randn(4, 8, dtype=torch.float64)), TypeError, "'gate_up'"),
        (geglu_fused, dict(gate_up=torch.randn(4, 8), approximate="exact"), ValueError, "'approximate'"),
        (geglu_fused, dict(gate_up=torch.randn(4, 8), in_place="yes"), TypeError, "'in_place'"),
    ],
)
def test_bad_input_names_the_argument(fn, kwargs, exc, arg):
    with pytest.raises(exc, match=arg):
        fn(**kwargs)


def test_in_place_with_a_and_b_the_same_tensor_is_refused():
    x = torch.randn(4, 8)
    with pytest.raises(ValueError, match="'in_place'"):
        swiglu(x, x, in_place=True)
    swiglu(x, x)  # out of place is fine


def test_c_library_errors_surface_with_the_message():
    import tigon
    from tigon import _lib

    mod = importlib.import_module("tigon.ops.swiglu")  # the module: tigon.ops.swiglu is the function
    a, b, c_bad = torch.randn(4, 8), torch.randn(4, 8), torch.empty(3, 8)
    with pytest.raises(tigon.TigonArgumentError, match="tigon_swiglu_fwd: argument 'c'"):
        mod._launch_fwd(a, b, c_bad, 0)
    with pytest.raises(tigon.TigonArgumentError, match="tigon_swiglu_bwd: argument 'activation'"):
        mod._launch_bwd(a, a, b, torch.empty(4, 8), torch.empty(4, 8), 5)
    with pytest.raises(tigon.TigonArgumentError, match="argument 'db'"):
        out = torch.empty(4, 8)
        _lib.check(mod._bwd(*map(_lib.tensor_arg, (a, a, b, out, out)), mod.SwigluParams(0), None))


@needs_cuda
def test_device_mismatch_names_the_argument():
    with pytest.raises(ValueError, match="'b'"):
        swiglu(torch.randn(4, 8, device="cuda"), torch.randn(4, 8))
