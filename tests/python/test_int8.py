"""Int8 inference: tigon.ops.quantize_rows / int8_linear / gemv_int8 against float64 torch references (the integer
parts exact: q and the int32 dot products), the quantization error bound, every activation and dtype, leading
dimensions and strided rows, the no-backward error, torch.compile, CUDA graphs, bad input; then tigon.quantize on a
tiny MLP and a tiny random Llama (w8a8 and weight-only) against the float model."""

import copy

import pytest
import torch
import torch.nn.functional as F

import tigon
from conftest import DEVICES, needs_cuda
from test_linear_act import TORCH_ACT as ACTS
from tolerances import assert_close


def ref_quantize(x):
    """scale = max|x| / 127 (one correctly rounded fp32 division), q = round-half-even(x / scale) (fp32), clamped;
    zero rows: 0. The quotient is taken in fp64 and rounded: torch on CUDA divides by a Python scalar as a multiply
    by its reciprocal, which can differ in the last bit."""
    amax = x.float().abs().amax(-1)
    scale = (amax.double() / 127).float()
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = torch.round(x.float() / safe[..., None]).clamp(-127, 127)
    q = torch.where(scale[..., None] > 0, q, torch.zeros_like(q))
    return q.to(torch.int8), scale


def ref_int8_linear(q_x, s_x, q_w, s_w, bias, act):
    acc = (q_x.cpu().long() @ q_w.cpu().long().T).to(q_x.device)  # exact (CUDA has no int64 matmul)
    y = acc.double() * s_x.double()[:, None] * s_w.double()[None, :]
    if bias is not None:
        y = y + bias.double()
    return ACTS[act](y)


def rand_int8(*shape, device):
    return torch.randint(-127, 128, shape, dtype=torch.int8, device=device)


# ---- quantize_rows ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("m,k", [(1, 1), (3, 37), (16, 4096), (5, 1000)])
def test_quantize_rows_exact_and_within_half_a_step(device, dtype, m, k):
    x = (torch.randn(m, k, device=device) * 3).to(dtype)
    x[-1] = 0  # a zero row
    q, s = tigon.ops.quantize_rows(x)
    rq, rs = ref_quantize(x)
    assert q.dtype == torch.int8 and s.dtype == torch.float32 and q.shape == x.shape and s.shape == (m,)
    assert torch.equal(s, rs)
    assert torch.equal(q, rq)
    err = (x.double() - q.double() * s.double()[:, None]).abs()
    assert (err <= s.double()[:, None] * (0.5 + 1e-5)).all()  # half a step, plus x / scale's fp32 rounding
    assert s[-1] == 0 and (q[-1] == 0).all()


@pytest.mark.parametrize("device", DEVICES)
def test_quantize_rows_half_to_even_leading_dims_and_strides(device):
    x = torch.tensor([[127.0, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 126.5]], device=device)
    q, s = tigon.ops.quantize_rows(x)
    assert s.item() == 1.0 and q.tolist() == [[127, 0, 2, 2, 0, -2, -2, 126]]
    x3 = torch.randn(2, 3, 40, device=device, dtype=torch.bfloat16)
    q3, s3 = tigon.ops.quantize_rows(x3)
    assert q3.shape == (2, 3, 40) and s3.shape == (2, 3)
    assert torch.equal(q3, ref_quantize(x3)[0])
    wide = torch.randn(4, 64, device=device, dtype=torch.bfloat16)
    qs, ss = tigon.ops.quantize_rows(wide[:, :40])  # rows with stride 64
    assert torch.equal(qs, ref_quantize(wide[:, :40])[0]) and torch.equal(ss, ref_quantize(wide[:, :40])[1])
    qt, _ = tigon.ops.quantize_rows(wide.t())  # column-major: copied
    assert torch.equal(qt, ref_quantize(wide.t())[0])


# ---- int8_linear -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("act", list(ACTS))
@pytest.mark.parametrize("m,n,k,bias", [(3, 8, 12, True), (17, 36, 64, False), (1, 4, 4, True)])
def test_int8_linear_matches_float64(device, dtype, act, m, n, k, bias):
    q_x, q_w = rand_int8(m, k, device=device), rand_int8(n, k, device=device)
    s_x = torch.rand(m, device=device) * 0.02 + 0.01
    s_w = (torch.rand(n, device=device) + 0.5) / (127 * k**0.5)
    b = torch.randn(n, device=device).to(dtype) if bias else None
    out = tigon.ops.int8_linear(q_x, s_x, q_w, s_w, b, act, out_dtype=dtype)
    assert out.shape == (m, n) and out.dtype == dtype
    assert_close(out, ref_int8_linear(q_x, s_x, q_w, s_w, b, act), name="out")


@pytest.mark.parametrize("device", DEVICES)
def test_int8_linear_integer_part_is_exact(device):
    # unit scales, no bias, float32 out: the output is the int32 dot product itself (exact in fp32 below 2^24)
    q_x, q_w = rand_int8(5, 256, device=device), rand_int8(12, 256, device=device)
    one_x, one_w = torch.ones(5, device=device), torch.ones(12, device=device)
    out = tigon.ops.int8_linear(q_x, one_x, q_w, one_w, out_dtype=torch.float32)
    assert torch.equal(out.long().cpu(), q_x.cpu().long() @ q_w.cpu().long().T)


@pytest.mark.parametrize("device", DEVICES)
def test_int8_linear_of_quantized_float_inputs(device):
    x = torch.randn(2, 3, 64, device=device, dtype=torch.bfloat16)
    w = torch.randn(32, 64, device=device) / 8
    b = torch.randn(32, device=device, dtype=torch.bfloat16)
    q_x, s_x = tigon.ops.quantize_rows(x)
    q_w, s_w = tigon.ops.quantize_rows(w)
    out = tigon.ops.int8_linear(q_x, s_x, q_w, s_w, b, "silu")
    assert out.shape == (2, 3, 32) and out.dtype == torch.bfloat16
    ref = ref_int8_linear(q_x.reshape(6, 64), s_x.reshape(6), q_w, s_w, b, "silu").reshape(2, 3, 32)
    assert_close(out, ref, name="out")
    exact = F.silu(F.linear(x.double(), w.double(), b.double()))
    assert ((out.double() - exact).norm() / exact.norm()).item() < 0.03  # int8's own error, not the kernel's


# ---- gemv_int8 -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("m,n,k", [(1, 257, 1000), (3, 64, 200), (16, 33, 528), (17, 40, 264), (2, 31, 33)])
@pytest.mark.parametrize("bias", [False, True])
def test_gemv_int8_matches_float64(device, dtype, m, n, k, bias):
    x = torch.randn(m, k, device=device).to(dtype)
    q_w = rand_int8(n, k, device=device)
    s_w = (torch.rand(n, device=device) + 0.5) / (127 * k**0.5)
    b = torch.randn(n, device=device).to(dtype) if bias else None
    y = tigon.ops.gemv_int8(x, q_w, s_w, b)
    assert y.shape == (m, n) and y.dtype == dtype
    ref = (x.double() @ q_w.double().T) * s_w.double()
    if bias:
        ref = ref + b.double()
    assert_close(y, ref, name="y")


@needs_cuda
@pytest.mark.parametrize("m,n,k", [(1, 14336, 4096), (1, 4096, 4096), (8, 4096, 14336), (16, 1024, 4096)])
def test_gemv_int8_cuda_decode_shapes(m, n, k):
    x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    q_w, s_w = tigon.ops.quantize_rows(torch.randn(n, k, device="cuda") / k**0.5)
    ref = (x.double() @ q_w.double().T) * s_w.double()
    assert_close(tigon.ops.gemv_int8(x, q_w, s_w), ref, name="y")


# ---- no backward, torch.compile, CUDA graphs, bad input ----------------------------------------------------------------


def test_autograd_is_refused_with_a_clear_error():
    x = torch.randn(2, 16, requires_grad=True)
    q_w, s_w = tigon.ops.quantize_rows(torch.randn(8, 16))
    for call in (
        lambda: tigon.ops.quantize_rows(x),
        lambda: tigon.ops.gemv_int8(x, q_w, s_w),
        lambda: tigon.ops.int8_linear(q_w, s_w.requires_grad_(True), q_w, s_w),
    ):
        with pytest.raises(RuntimeError, match="inference op"):
            call()
    with torch.no_grad():
        tigon.ops.gemv_int8(x, q_w, s_w.detach())


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph_equals_eager(device):
    w = torch.randn(32, 64, device=device)
    q_w, s_w = tigon.ops.quantize_rows(w)

    def f(x):
        q, s = tigon.ops.quantize_rows(x * 2)
        return tigon.ops.int8_linear(q, s, q_w, s_w, None, "relu", torch.bfloat16) + tigon.ops.gemv_int8(x, q_w, s_w)

    x = torch.randn(4, 64, device=device, dtype=torch.bfloat16)
    compiled = torch.compile(f, fullgraph=True, backend="aot_eager" if device == "cpu" else "inductor")
    assert torch.equal(f(x), compiled(x))


@needs_cuda
def test_cuda_graph_replay():
    w = torch.randn(4096, 4096, device="cuda") / 64
    q_w, s_w = tigon.ops.quantize_rows(w)
    static_x = torch.randn(2, 4096, device="cuda", dtype=torch.bfloat16)

    def f(x):
        q, s = tigon.ops.quantize_rows(x)
        return tigon.ops.int8_linear(q, s, q_w, s_w), tigon.ops.gemv_int8(x, q_w, s_w)

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        f(static_x)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        outs = f(static_x)
    for _ in range(2):
        new_x = torch.randn_like(static_x)
        static_x.copy_(new_x)
        g.replay()
        torch.cuda.synchronize()
        for got, want in zip(outs, f(new_x)):
            assert torch.equal(got, want)


def test_bad_input_names_the_argument():
    x = torch.randn(2, 16, dtype=torch.bfloat16)
    q_x, s_x = tigon.ops.quantize_rows(x)
    q_w, s_w = tigon.ops.quantize_rows(torch.randn(8, 16))
    cases = [
        (lambda: tigon.ops.quantize_rows([1.0]), TypeError, "'x'"),
        (lambda: tigon.ops.quantize_rows(x.long()), TypeError, "'x'"),
        (lambda: tigon.ops.int8_linear(q_x.float(), s_x, q_w, s_w), TypeError, "'q_x'"),
        (lambda: tigon.ops.int8_linear(q_x[:, :14], s_x, q_w[:, :14], s_w), ValueError, "'q_x'"),  # K % 4
        (lambda: tigon.ops.int8_linear(q_x, s_x, q_w[:6], s_w[:6]), ValueError, "'q_w'"),  # N % 4
        (lambda: tigon.ops.int8_linear(q_x, s_x, q_w[:, :12], s_w), ValueError, "'q_w'"),
        (lambda: tigon.ops.int8_linear(q_x, s_x[:1], q_w, s_w), ValueError, "'scale_x'"),
        (lambda: tigon.ops.int8_linear(q_x, s_x, q_w, s_w.half()), TypeError, "'scale_w'"),
        (lambda: tigon.ops.int8_linear(q_x, s_x, q_w, s_w, torch.zeros(8), out_dtype=torch.half), TypeError, "'bias'"),
        (lambda: tigon.ops.int8_linear(q_x, s_x, q_w, s_w, activation="tanh"), ValueError, "'activation'"),
        (lambda: tigon.ops.gemv_int8(x, q_w.float(), s_w), TypeError, "'q_w'"),
        (lambda: tigon.ops.gemv_int8(x, q_w[:, :8], s_w), ValueError, "'q_w'"),
        (lambda: tigon.ops.gemv_int8(x, q_w, s_w[:4]), ValueError, "'scale_w'"),
        (lambda: tigon.ops.gemv_int8(x, q_w, None), TypeError, "'scale_w'"),
    ]
    for i, (call, exc, arg) in enumerate(cases):
        with pytest.raises(exc, match=arg):
            call()
            pytest.fail(f"case {i} did not raise")


# ---- tigon.quantize --------------------------------------------------------------------------------------------------


def rel_err(got, ref):
    return ((got.double() - ref.double()).norm() / ref.double().norm()).item()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", ["w8a8", "weight_only"])
def test_quantize_mlp(device, mode):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(64, 128),
        torch.nn.GELU(),
        tigon.nn.Linear(128, 96, activation="silu"),
        torch.nn.Linear(96, 12),
        torch.nn.Linear(12, 3),  # 3 outputs, not a multiple of 4: w8a8 leaves it float
    ).to(device)
    qmodel = tigon.quantize(copy.deepcopy(model), "int8", mode=mode)
    kinds = [type(m).__name__ for m in qmodel]
    want_last = "Int8Linear" if mode == "weight_only" else "Linear"
    assert kinds == ["Int8Linear", "GELU", "Int8Linear", "Int8Linear", want_last]
    assert qmodel[2].activation == "silu" and qmodel[0].q_weight.dtype == torch.int8
    with torch.no_grad():
        for rows in (1, 2, 5, 40):  # weight_only: the int8 GEMV up to 2 rows, the dequantized matmul beyond
            x = torch.randn(rows, 64, device=device)
            assert rel_err(qmodel(x), model(x)) < 0.03, rows
        with pytest.raises(RuntimeError, match="inference op"):
            with torch.enable_grad():
                qmodel(torch.randn(2, 64, device=device, requires_grad=True))
        back = tigon.dequantize(qmodel)
        assert all(not isinstance(m, tigon.Int8Linear) for m in back.modules())
        x = torch.randn(3, 64, device=device)
        assert rel_err(back(x), model(x)) < 0.03


def test_quantize_arguments_and_exclude():
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 8))
    with pytest.raises(ValueError, match="'mode'"):
        tigon.quantize(model, "int8", mode="w4a16")
    with pytest.raises(ValueError, match="'scheme'"):
        tigon.quantize(model, "int4")
    with pytest.raises(TypeError, match="'model'"):
        tigon.quantize("model")
    q = tigon.quantize(model, exclude=("1",))
    assert isinstance(q[0], tigon.Int8Linear) and type(q[1]) is torch.nn.Linear
    assert isinstance(tigon.quantize(torch.nn.Linear(8, 4)), tigon.Int8Linear)


transformers = pytest.importorskip("transformers")


@pytest.mark.parametrize("mode", ["w8a8", "weight_only"])
def test_quantize_tiny_llama_logits_and_perplexity(mode):
    from test_transformers import build

    from tigon.quantization import perplexity

    ref = build("llama", dtype=torch.float32).eval()
    qmodel = tigon.quantize(copy.deepcopy(ref), "int8", mode=mode)
    n_int8 = sum(isinstance(m, tigon.Int8Linear) for m in qmodel.modules())
    assert n_int8 == sum(type(m) is torch.nn.Linear for m in ref.modules())
    torch.manual_seed(1)
    ids = torch.randint(3, 320, (2, 24))
    with torch.no_grad():
        want, got = ref(ids).logits, qmodel(ids).logits
        assert rel_err(got, want) < 0.05  # stated bound: logits within 5% (relative Frobenius norm)
        ppl_ref, ppl_q = perplexity(ref, ids), perplexity(qmodel, ids)
    assert abs(ppl_q - ppl_ref) / ppl_ref < 0.02  # and the fixed text's perplexity within 2%
