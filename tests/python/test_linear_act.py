"""tigon.ops.linear_act and tigon.nn.Linear against F.linear + activation (+ residual) in float64: the output and the
gradients of x, weight, bias and residual for every activation, bias and residual option and dtype; odd and strided
shapes, torch.compile, CUDA graphs, determinism of the bias gradient, the drop-in module, bad input."""

import pytest
import torch
import torch.nn.functional as F

import tigon
from conftest import DEVICES, needs_cuda
from tigon.ops import linear_act
from tolerances import TOL, assert_close

ACTS = ["none", "relu", "gelu", "gelu_tanh", "silu"]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
TORCH_ACT = {
    "none": lambda y: y,
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_tanh": lambda y: F.gelu(y, approximate="tanh"),
    "silu": F.silu,
}


def make(m, k, n, dtype, device, bias=True, residual=False, lead=()):
    x = torch.randn(*lead, m, k, device=device).to(dtype).requires_grad_()
    w = (torch.randn(n, k, device=device) / k**0.5).to(dtype).requires_grad_()
    b = (torch.randn(n, device=device) * 0.5).to(dtype).requires_grad_() if bias else None
    r = torch.randn(*lead, m, n, device=device).to(dtype).requires_grad_() if residual else None
    return x, w, b, r


def reference(act, x, w, b, r):
    """float64 F.linear + activation (+ residual) and its inputs as float64 leaves."""
    leaves = [t.detach().double().requires_grad_() if t is not None else None for t in (x, w, b, r)]
    x64, w64, b64, r64 = leaves
    y = TORCH_ACT[act](F.linear(x64, w64, b64))
    return (y + r64 if r64 is not None else y), leaves


def check(act, x, w, b, r, dtype=None):
    """Forward and every gradient against float64 (tolerances of `dtype`, default x's; a rounding of z and of dZ
    before the GEMMs, so twice the table)."""
    y = linear_act(x, w, b, act, r)
    y_ref, leaves = reference(act, x, w, b, r)
    dtype = dtype or x.dtype
    tol = {k: 2 * v for k, v in TOL[dtype].items()}
    assert y.dtype == x.dtype and y.shape == y_ref.shape
    assert_close(y, y_ref, dtype, name="out", tol=tol)
    dy = torch.randn_like(y)
    inputs = [t for t in (x, w, b, r) if t is not None]
    got_grads = torch.autograd.grad(y, inputs, dy)
    want = torch.autograd.grad(y_ref, [t for t in leaves if t is not None], dy.double())
    for name, g, ref in zip(["dx", "dw", "db", "dresidual"][: len(inputs)], got_grads, want):
        assert g.dtype == x.dtype
        assert_close(g, ref, dtype, name=name, tol=tol)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("residual", [False, True])
def test_matches_float64_reference(device, act, dtype, bias, residual):
    torch.manual_seed(0)
    check(act, *make(24, 40, 48, dtype, device, bias, residual))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (1, 17, 9), (3, 33, 5), (3, 7, 1000), (2, 1000, 3)])
def test_odd_shapes(device, act, m, k, n):
    # M = 1 and 3, K and N not multiples of 8 (cuBLASLt's unaligned kernels, the scalar elementwise path)
    check(act, *make(m, k, n, torch.bfloat16, device, True, True))
    check(act, *make(m, k, n, torch.float32, device, False, False))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("act", ["relu", "gelu_tanh", "silu"])
def test_leading_dimensions_and_strided_rows(device, act):
    x, w, b, r = make(5, 24, 16, torch.bfloat16, device, True, True, lead=(2, 3))
    check(act, x, w, b, r)
    # x and residual as column slices of wider buffers (row strides > K, N), weight as rows of a wider matrix
    xb = torch.randn(7, 40, device=device, dtype=torch.bfloat16).requires_grad_()
    rb = torch.randn(7, 30, device=device, dtype=torch.bfloat16).requires_grad_()
    wb = torch.randn(16, 48, device=device, dtype=torch.bfloat16).requires_grad_()
    xs, ws, rs = xb[:, :24], wb[:, :24], rb[:, :16]
    assert not xs.is_contiguous() and not rs.is_contiguous()
    check(act, xs, ws, None, rs)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("act", ACTS)
def test_no_grad_and_partial_grads(device, act):
    x, w, b, r = make(6, 16, 12, torch.float32, device, True, True)
    with torch.no_grad():
        y = linear_act(x, w, b, act, r)
    y_ref, _ = reference(act, x, w, b, r)
    assert not y.requires_grad
    assert_close(y, y_ref.detach(), name="out (no_grad)")
    # only the weight needs a gradient (frozen input), only x (frozen weights)
    for wants in ("w", "x"):
        xx = x.detach().requires_grad_(wants == "x")
        ww = w.detach().requires_grad_(wants == "w")
        y = linear_act(xx, ww, b.detach(), act)
        y_ref, leaves = reference(act, xx, ww, b.detach(), None)
        dy = torch.randn_like(y)
        (g,) = torch.autograd.grad(y, [xx if wants == "x" else ww], dy)
        (g_ref,) = torch.autograd.grad(y_ref, [leaves[0] if wants == "x" else leaves[1]], dy.double())
        assert_close(g, g_ref, name=f"d{wants}")


@needs_cuda
@pytest.mark.parametrize("act", ACTS)
@pytest.mark.parametrize(
    "m,k,n,dtype,bias", [(1000, 72, 8200, torch.bfloat16, True), (300, 64, 520, torch.float16, False)]
)
def test_inference_matches_float64_reference(act, m, k, n, dtype, bias):
    # no gradient wanted: cuBLASLt's epilogues, or the two-pass path writing z into the output and finishing in place,
    # on products with partial tiles at both edges
    x, w, b, _ = make(m, k, n, dtype, "cuda", bias)
    with torch.no_grad():
        y = linear_act(x, w, b, act)
        y_ref, _ = reference(act, x, w, b, None)
        assert_close(y, y_ref, dtype, name="out (no_grad)", tol={k: 2 * v for k, v in TOL[dtype].items()})
        # a graph replay gives the same bits
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            y_graph = linear_act(x, w, b, act)
        g.replay()
        torch.cuda.synchronize()
        assert torch.equal(y_graph, y)


@pytest.mark.parametrize("device", DEVICES)
def test_expanded_output_gradient_and_none_activation(device):
    x, w, b, _ = make(8, 16, 32, torch.float32, device)
    linear_act(x, w, b, None).sum().backward()
    x64, w64, b64 = (t.detach().double().requires_grad_() for t in (x, w, b))
    F.linear(x64, w64, b64).sum().backward()
    for got, want, name in ((x.grad, x64.grad, "dx"), (w.grad, w64.grad, "dw"), (b.grad, b64.grad, "db")):
        assert_close(got, want, name=name)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("act", ["relu", "silu"])
def test_second_backward_raises(device, act):
    # the backward writes dZ over the saved z (or over the output gradient): a second pass must raise, not reuse it
    x, w, b, _ = make(4, 8, 8, torch.float32, device)
    y = linear_act(x, w, b, act) * 2.0
    y.sum().backward(retain_graph=True)
    if act == "silu":
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.sum().backward()


@pytest.mark.parametrize("device", DEVICES)
def test_bias_gradient_is_deterministic(device):
    x, w, b, _ = make(300, 64, 96, torch.bfloat16, device)
    dy = torch.randn(300, 96, device=device, dtype=torch.bfloat16)
    grads = [torch.autograd.grad(linear_act(x, w, b, "gelu_tanh"), b, dy)[0] for _ in range(3)]
    assert all(torch.equal(g, grads[0]) for g in grads)


@pytest.mark.parametrize("device", DEVICES)
def test_autocast_casts_like_f_linear(device):
    x = torch.randn(4, 16, device=device, requires_grad=True)
    lin = torch.nn.Linear(16, 8, device=device)
    with torch.autocast(device, dtype=torch.bfloat16):
        y = linear_act(x, lin.weight, lin.bias, "relu")
        y_ref = F.relu(lin(x))
    assert y.dtype == y_ref.dtype == torch.bfloat16
    torch.testing.assert_close(y, y_ref, atol=2e-2, rtol=2e-2)
    y.float().sum().backward()
    assert lin.weight.grad.dtype == torch.float32 and x.grad.dtype == torch.float32


# ---- torch.compile and CUDA graphs --------------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("act", ["relu", "gelu_tanh", "silu"])
@pytest.mark.parametrize("residual", [False, True])
def test_torch_compile_fullgraph_equals_eager(device, act, residual):
    torch._dynamo.reset()  # f's code object is compiled once per case: twelve cases would pass the recompile limit
    x, w, b, r = make(16, 32, 24, torch.bfloat16, device, True, residual)
    dy = torch.randn(16, 24, device=device, dtype=torch.bfloat16)

    def f(x, w, b, r):
        return linear_act(x * 1, w, b, act, r) * 2.0

    def step(fn):
        y = fn(x, w, b, r)
        inputs = [t for t in (x, w, b, r) if t is not None]
        return (y, *torch.autograd.grad(y, inputs, dy))

    eager = step(f)
    compiled = step(torch.compile(f, fullgraph=True, backend="aot_eager" if device == "cpu" else "inductor"))
    for a, c in zip(eager, compiled):
        assert torch.equal(a, c)


@needs_cuda
@pytest.mark.parametrize("act", ["relu", "gelu_tanh", "silu"])
def test_cuda_graph_replay_equals_eager(act):
    x, w, b, _ = make(64, 256, 512, torch.bfloat16, "cuda")
    dy = torch.randn(64, 512, device="cuda", dtype=torch.bfloat16)

    def step(x, dy):
        y = linear_act(x, w, b, act)
        return (y, *torch.autograd.grad(y, (x, w, b), dy))

    static_x, static_dy = x.detach().clone().requires_grad_(), dy.clone()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        step(static_x, static_dy)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = step(static_x, static_dy)
    for _ in range(2):
        new_x, new_dy = torch.randn_like(x), torch.randn_like(dy)
        with torch.no_grad():
            static_x.copy_(new_x)
        static_dy.copy_(new_dy)
        g.replay()
        torch.cuda.synchronize()
        ref = step(new_x.requires_grad_(), new_dy)
        for a, c in zip(out, ref):
            assert torch.equal(a, c)


@needs_cuda
@pytest.mark.parametrize("act", ["none", "gelu_tanh"])
def test_gpu_memory_no_more_than_torch(act):
    # peak of forward + backward: the saved z (or nothing) and the gradients, no [M, N] buffer beyond torch's own
    m, k, n = 2048, 1024, 4096
    x, w, b, _ = make(m, k, n, torch.bfloat16, "cuda")
    dy = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    peaks = []
    for fn in (lambda: linear_act(x, w, b, act), lambda: TORCH_ACT[act](F.linear(x, w, b))):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        torch.autograd.grad(fn(), (x, w, b), dy)
        torch.cuda.synchronize()
        peaks.append(torch.cuda.max_memory_allocated() - before)
    gemm_ws = 2 * (32 << 20) + (4 << 20)  # cuBLASLt's scratch in the forward and the backward, the partial sums
    assert peaks[0] <= peaks[1] + gemm_ws, f"tigon {peaks[0] / 2**20:.0f} MiB, torch {peaks[1] / 2**20:.0f} MiB"


# ---- the module ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("act", [None, "relu", "gelu_tanh", "silu"])
@pytest.mark.parametrize("bias", [False, True])
def test_module_is_a_drop_in_for_nn_linear(device, act, bias):
    torch.manual_seed(3)
    ref = torch.nn.Linear(24, 40, bias=bias, device=device)
    torch.manual_seed(3)
    ours = tigon.nn.Linear(24, 40, bias=bias, activation=act, device=device)
    assert isinstance(ours, torch.nn.Linear)
    assert ours.state_dict().keys() == ref.state_dict().keys()
    for k, v in ref.state_dict().items():
        assert torch.equal(ours.state_dict()[k], v), k  # the same initialisation
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(3, 5, 24, device=device)
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    y, y_ref = ours(x1), TORCH_ACT[act or "none"](ref(x2))
    assert_close(y, y_ref.double(), name="y")
    dy = torch.randn_like(y)
    y.backward(dy)
    y_ref.backward(dy)
    assert_close(x1.grad, x2.grad.double(), name="dx")
    for (name, p), q in zip(ref.named_parameters(), ours.parameters()):
        assert_close(q.grad, p.grad.double(), name=f"d{name}")
    assert f"activation={act or 'none'!r}" in repr(ours)


def test_module_falls_back_to_torch_for_float64():
    m = tigon.nn.Linear(8, 4, activation="silu", dtype=torch.float64)
    x = torch.randn(2, 8, dtype=torch.float64)
    torch.testing.assert_close(m(x), F.silu(F.linear(x, m.weight, m.bias)))


def test_module_rejects_an_unknown_activation():
    with pytest.raises(ValueError, match="'activation'"):
        tigon.nn.Linear(4, 4, activation="tanh")


# ---- bad input: a clear error naming the argument ----------------------------------------------------------------


def _args(**kw):
    args = dict(x=torch.randn(4, 8), weight=torch.randn(6, 8), bias=torch.randn(6), residual=torch.randn(4, 6))
    args.update(kw)
    return args


@pytest.mark.parametrize(
    "kwargs,exc,arg",
    [
        (_args(x=[1.0]), TypeError, "'x'"),
        (_args(weight=None), TypeError, "'weight'"),
        (_args(x=torch.randn(4, 0), weight=torch.randn(6, 0)), ValueError, "'x'"),
        (_args(weight=torch.randn(6, 7)), ValueError, "'weight'"),
        (_args(weight=torch.randn(2, 3, 8)), ValueError, "'weight'"),
        (_args(bias=torch.randn(5)), ValueError, "'bias'"),
        (_args(bias=1.0), TypeError, "'bias'"),
        (_args(residual=torch.randn(4, 5)), ValueError, "'residual'"),
        (_args(activation="tanh"), ValueError, "'activation'"),
        (_args(activation=3), ValueError, "'activation'"),
        (_args(x=torch.randn(4, 8, dtype=torch.float64)), TypeError, "'x'"),
        (_args(weight=torch.randn(6, 8, dtype=torch.bfloat16)), TypeError, "'weight'"),
        (_args(bias=torch.randn(6, dtype=torch.float16)), TypeError, "'bias'"),
        (_args(residual=torch.randn(4, 6, dtype=torch.bfloat16)), TypeError, "'residual'"),
    ],
)
def test_bad_input_names_the_argument(kwargs, exc, arg):
    with pytest.raises(exc, match=arg):
        linear_act(**kwargs)
