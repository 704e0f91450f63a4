"""MoE experts (tigon.ops.moe_experts) against a float64 loop over experts (transformers' eager experts forward): the
output and every gradient for each dtype, activation and top-k, experts nobody chose (zero gradients), expert-parallel
sentinel ids, int32 ids, strided x, no tokens, autocast, torch.compile(fullgraph=True), bad input naming the argument,
and which transformers experts modules experts_activation() lets through."""

import pytest
import torch
import torch.nn.functional as F

import tigon
from conftest import DEVICES
from tigon.ops.moe import experts_activation
from tolerances import assert_close

ACT = {"silu": F.silu, "gelu_tanh": lambda a: F.gelu(a, approximate="tanh"), "gelu": F.gelu}
T, H, I, E = 24, 32, 16, 6  # the last expert is never chosen


def make(device, dtype, k, index_dtype=torch.int64, weights_dtype=torch.float32, sentinels=False):
    x = torch.randn(T, H, device=device).to(dtype)
    ids = torch.rand(T, E - 1, device=device).argsort(-1)[:, :k]  # k distinct experts per token, as top-k picks
    if sentinels:  # ids another rank holds: E and beyond (transformers' sentinel), or negative
        ids[::3, 0] = E
        ids[1::5, -1] = -1
    weights = torch.rand(T, k, device=device).to(weights_dtype)
    gate_up = (torch.randn(E, 2 * I, H, device=device) / H**0.5).to(dtype)
    down = (torch.randn(E, H, I, device=device) / I**0.5).to(dtype)
    return x, ids.to(index_dtype), weights, gate_up, down


def reference(x, ids, weights, gate_up, down, act):
    """float64, one expert at a time over the tokens that chose it; ids outside [0, E) are never visited."""
    out = torch.zeros_like(x)
    for e in range(gate_up.shape[0]):
        tok, j = torch.where(ids == e)
        gate, up = F.linear(x[tok], gate_up[e]).chunk(2, dim=-1)
        y = F.linear(ACT[act](gate) * up, down[e])
        out = out.index_add(0, tok, y * weights[tok, j, None])
    return out


def run_both(x, ids, weights, gate_up, down, act, dout):
    """(output, dx, dweights, dgate_up, ddown) of the op and of the float64 reference."""
    leaves = [t.detach().requires_grad_() for t in (x, weights, gate_up, down)]
    out = tigon.ops.moe_experts(leaves[0], ids, *leaves[1:], activation=act)
    got = (out, *torch.autograd.grad(out, leaves, dout))
    ref_leaves = [t.detach().double().requires_grad_() for t in (x, weights, gate_up, down)]
    ref_out = reference(ref_leaves[0], ids, *ref_leaves[1:], act)
    ref = (ref_out, *torch.autograd.grad(ref_out, ref_leaves, dout.double()))
    return got, ref


NAMES = ("out", "dx", "dweights", "dgate_up", "ddown")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("act", ["silu", "gelu_tanh", "gelu"])
@pytest.mark.parametrize("k", [1, 2, 4])
@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32])
def test_matches_float64_reference(device, dtype, act, k, index_dtype):
    if device == "cuda" and dtype == torch.float32:
        pytest.skip("CUDA takes fp16 and bf16 experts")
    weights_dtype = torch.float32 if k != 2 else dtype  # routing weights in fp32 or in the experts' dtype
    x, ids, weights, gate_up, down = make(device, dtype, k, index_dtype, weights_dtype)
    dout = torch.randn(T, H, device=device).to(dtype)
    got, ref = run_both(x, ids, weights, gate_up, down, act, dout)
    assert got[0].dtype == dtype and got[2].dtype == weights_dtype
    for name, g, r in zip(NAMES, got, ref):
        assert_close(g, r, dtype, name=name)
    # the expert nobody chose: whole gradients, exactly zero
    assert not got[3][E - 1].any() and not got[4][E - 1].any()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_sentinel_ids_and_strided_x(device, dtype):
    """ids outside [0, E) contribute nothing and their routing weights get a zero gradient; x may be a view with a
    row stride wider than H. A token whose every choice is a sentinel gets zeros."""
    if device == "cuda" and dtype == torch.float32:
        pytest.skip("CUDA takes fp16 and bf16 experts")
    x, ids, weights, gate_up, down = make(device, dtype, 2, sentinels=True)
    ids[4] = E + 3  # both choices held elsewhere
    wide = torch.randn(T, H + 8, device=device).to(dtype)
    wide[:, :H] = x
    x = wide[:, :H]
    assert x.stride(0) == H + 8
    dout = torch.randn(T, H, device=device).to(dtype)
    got, ref = run_both(x, ids, weights, gate_up, down, "silu", dout)
    for name, g, r in zip(NAMES, got, ref):
        assert_close(g, r, dtype, name=name)
    outside = (ids < 0) | (ids >= E)
    assert outside.any() and not got[2][outside].any()
    assert not got[0][4].any() and not got[1][4].any()


@pytest.mark.parametrize("device", DEVICES)
def test_only_the_wanted_gradients(device):
    """Gradients nobody asks for are not computed (NULL to the C API); those asked for are unchanged."""
    x, ids, weights, gate_up, down = make(device, torch.bfloat16, 2)
    dout = torch.randn(T, H, device=device).to(torch.bfloat16)
    full = run_both(x, ids, weights, gate_up, down, "silu", dout)[0]
    for wanted in range(4):
        leaves = [t.detach().requires_grad_(i == wanted) for i, t in enumerate((x, weights, gate_up, down))]
        out = tigon.ops.moe_experts(leaves[0], ids, *leaves[1:])
        (g,) = torch.autograd.grad(out, leaves[wanted], dout)
        assert torch.equal(g, full[1 + wanted]), NAMES[1 + wanted]


def test_no_tokens():
    x, ids, weights, gate_up, down = make("cpu", torch.float32, 2)
    x, ids, weights = x[:0], ids[:0], weights[:0]
    leaves = [t.detach().requires_grad_() for t in (x, weights, gate_up, down)]
    out = tigon.ops.moe_experts(leaves[0], ids, *leaves[1:])
    assert out.shape == (0, H)
    dx, dw, dgu, dd = torch.autograd.grad(out, leaves, torch.empty(0, H))
    assert dx.shape == (0, H) and dw.shape == (0, 2)
    assert dgu.shape == gate_up.shape and not dgu.any() and dd.shape == down.shape and not dd.any()


def test_autocast_casts_as_linear_does():
    """fp32 experts under bf16 autocast: the op runs on bf16 casts of x and the expert weights, and the fp32
    parameters get the bf16 gradients through the casts."""
    x, ids, weights, gate_up, down = make("cpu", torch.float32, 2)
    leaves = [t.detach().requires_grad_() for t in (x, weights, gate_up, down)]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = tigon.ops.moe_experts(leaves[0], ids, *leaves[1:])
    assert out.dtype == torch.bfloat16
    dout = torch.randn(T, H).to(torch.bfloat16)
    grads = torch.autograd.grad(out, leaves, dout)
    half = [leaves[0].detach().bfloat16(), weights, gate_up.bfloat16(), down.bfloat16()]
    half = [t.detach().requires_grad_() for t in half]
    want = tigon.ops.moe_experts(half[0], ids, *half[1:])
    assert torch.equal(out, want)
    for g, w in zip(grads, torch.autograd.grad(want, half, dout)):
        assert g.dtype == torch.float32 and torch.equal(g, w.float())


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph_equals_eager(device):
    x, ids, weights, gate_up, down = make(device, torch.bfloat16, 2, sentinels=True)
    leaves = [t.detach().requires_grad_() for t in (x, weights, gate_up, down)]
    dout = torch.randn(T, H, device=device).to(torch.bfloat16)

    def f(x, weights, gate_up, down):
        return tigon.ops.moe_experts(x * 1, ids, weights.softmax(-1), gate_up, down, "gelu_tanh") * 2

    def step(fn):
        out = fn(*leaves)
        return (out, *torch.autograd.grad(out, leaves, dout))

    eager = step(f)
    compiled = step(torch.compile(f, fullgraph=True, backend="aot_eager" if device == "cpu" else "inductor"))
    for name, a, c in zip(NAMES, eager, compiled):
        if device == "cpu":  # aot_eager runs the same ops
            assert torch.equal(a, c), name
        else:  # inductor fuses the softmax and its backward around the op: they round differently
            assert_close(c, a, torch.bfloat16, name)
    torch._dynamo.reset()


def test_bad_input_names_the_argument():
    x, ids, weights, gate_up, down = make("cpu", torch.float32, 2)
    op = tigon.ops.moe_experts
    cases = [
        (lambda: op(x.tolist(), ids, weights, gate_up, down), TypeError, "'x'"),
        (lambda: op(x[0], ids, weights, gate_up, down), ValueError, "'x'"),
        (lambda: op(x.double(), ids, weights, gate_up, down), TypeError, "'x'"),
        (lambda: op(x, ids.float(), weights, gate_up, down), TypeError, "'ids'"),
        (lambda: op(x, ids[1:], weights, gate_up, down), ValueError, "'ids'"),
        (lambda: op(x, ids, weights[:, :1], gate_up, down), ValueError, "'weights'"),
        (lambda: op(x, ids, weights.long(), gate_up, down), TypeError, "'weights'"),
        (lambda: op(x, ids, weights, gate_up[:, :, 1:], down), ValueError, "'gate_up_weight'"),
        (lambda: op(x, ids, weights, gate_up[:, 1:], down), ValueError, "'gate_up_weight'"),
        (lambda: op(x, ids, weights, gate_up, down[:, :, 1:]), ValueError, "'down_weight'"),
        (lambda: op(x, ids, weights, gate_up, down[1:]), ValueError, "'down_weight'"),
        (lambda: op(x, ids, weights, gate_up.bfloat16(), down), TypeError, "'gate_up_weight'"),
        (lambda: op(x, ids, weights, gate_up, down.half()), TypeError, "'down_weight'"),
        (lambda: op(x, ids, weights, gate_up, down, activation="relu"), ValueError, "'activation'"),
        (lambda: op(x, ids, weights, gate_up, down, activation=None), ValueError, "'activation'"),
    ]
    for call, err, match in cases:
        with pytest.raises(err, match=match):
            call()


# ---- experts_activation: which transformers experts modules take the fused path --------------------------------------


def tiny_experts(hidden_act="silu", **extra):
    transformers = pytest.importorskip("transformers")
    config = transformers.Qwen3MoeConfig(
        hidden_size=H, moe_intermediate_size=I, num_experts=E, num_experts_per_tok=2, hidden_act=hidden_act, **extra
    )
    modeling = __import__("transformers.models.qwen3_moe.modeling_qwen3_moe", fromlist=["_"])
    return modeling.Qwen3MoeExperts(config)


def test_experts_activation_accepts_the_plain_layout():
    for hidden_act, want in [
        ("silu", "silu"),
        ("swish", "silu"),
        ("gelu", "gelu"),
        ("gelu_pytorch_tanh", "gelu_tanh"),
        ("gelu_new", "gelu_tanh"),
    ]:
        assert experts_activation(tiny_experts(hidden_act)) == want, hidden_act
    m = tiny_experts()
    m.act_fn = torch.nn.GELU(approximate="tanh")
    assert experts_activation(m) == "gelu_tanh"
    assert experts_activation(m.bfloat16()) == "gelu_tanh"


def test_experts_activation_refuses_what_the_op_does_not_compute():
    def changed(fn):
        m = tiny_experts()
        fn(m)
        return experts_activation(m)

    assert experts_activation(tiny_experts("relu")) is None
    assert experts_activation(tiny_experts("gelu_10")) is None  # a clipped GELU
    assert changed(lambda m: setattr(m, "is_transposed", True)) is None
    assert changed(lambda m: setattr(m, "is_concatenated", False)) is None  # interleaved gate / up
    assert changed(lambda m: setattr(m, "has_bias", True)) is None
    assert changed(lambda m: setattr(m, "has_post_expert_norm", True)) is None
    assert changed(lambda m: setattr(m, "gate_up_proj_bias", torch.nn.Parameter(torch.zeros(E, 2 * I)))) is None
    assert changed(lambda m: setattr(m, "_is_expert_parallel", True)) is None
    assert changed(lambda m: setattr(m, "num_experts", E // 2)) is None  # a local expert count beside global ids
    assert changed(lambda m: setattr(m, "_apply_gate", lambda gate_up: gate_up[..., :I])) is None  # its own gate
    assert changed(lambda m: setattr(m, "down_proj", torch.nn.Parameter(torch.zeros(E, I, H)))) is None  # transposed
    assert changed(lambda m: setattr(m, "gate_up_proj", torch.nn.Parameter(torch.zeros(E, 2 * I + 2, H)))) is None
    assert experts_activation(tiny_experts().double()) is None
    assert experts_activation(torch.nn.Linear(2, 2)) is None
    # GPT-OSS: transposed, interleaved, biased, a clamped gate
    transformers = pytest.importorskip("transformers")
    if hasattr(transformers, "GptOssConfig"):
        modeling = __import__("transformers.models.gpt_oss.modeling_gpt_oss", fromlist=["_"])
        config = transformers.GptOssConfig(hidden_size=H, intermediate_size=I, num_local_experts=E)
        assert experts_activation(modeling.GptOssExperts(config)) is None
