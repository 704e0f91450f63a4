"""tigon.ops.gemv against F.linear in float64: 1 to 40 rows, K a multiple of 8 or odd, odd N, bias, leading
dimensions, strided rows of x, the autograd fallback, torch.compile, CUDA graphs, determinism, bad input."""

import pytest
import torch

import tigon
from conftest import DEVICES, needs_cuda
from tolerances import assert_close


def make(m, n, k, dtype, device, lead=None, bias=True):
    x = torch.randn(*(lead or (m,)), k, device=device).to(dtype)
    w = (torch.randn(n, k, device=device) / k**0.5).to(dtype)
    b = torch.randn(n, device=device).to(dtype) if bias else None
    return x, w, b


def reference(x, w, b):
    return torch.nn.functional.linear(x.double(), w.double(), None if b is None else b.double())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize(
    "m,n,k", [(1, 257, 1000), (3, 64, 200), (16, 33, 520), (17, 40, 264), (2, 31, 33), (1, 1, 8), (40, 17, 136)]
)
@pytest.mark.parametrize("bias", [False, True])
def test_matches_float64_reference(device, dtype, m, n, k, bias):
    x, w, b = make(m, n, k, dtype, device, bias=bias)
    y = tigon.ops.gemv(x, w, b)
    assert y.shape == (m, n) and y.dtype == dtype and y.is_contiguous()
    assert_close(y, reference(x, w, b), name="y")


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("m,n,k", [(1, 4096, 4096), (1, 14336, 4096), (8, 4096, 14336), (16, 1024, 4096)])
def test_cuda_decode_shapes(dtype, m, n, k):
    x, w, b = make(m, n, k, dtype, "cuda", bias=False)
    assert_close(tigon.ops.gemv(x, w), reference(x, w, None), name="y")


@pytest.mark.parametrize("device", DEVICES)
def test_leading_dimensions_strided_rows_and_padded_weight(device):
    x, w, b = make(0, 48, 128, torch.bfloat16, device, lead=(2, 3))
    y = tigon.ops.gemv(x, w, b)
    assert y.shape == (2, 3, 48)
    assert_close(y, reference(x, w, b), name="y")
    wide = torch.randn(5, 200, device=device, dtype=torch.bfloat16)
    xs = wide[:, :136]  # rows of x with stride 200
    padded = torch.randn(48, 144, device=device, dtype=torch.bfloat16)[:, :136]  # weight rows with stride 144
    assert_close(tigon.ops.gemv(xs, padded), reference(xs, padded, None), name="strided")
    xt = torch.randn(136, 4, device=device, dtype=torch.bfloat16).t()  # a column-major x is copied
    assert_close(tigon.ops.gemv(xt, padded), reference(xt, padded, None), name="transposed x")


@pytest.mark.parametrize("device", DEVICES)
def test_autograd_falls_back_to_linear(device):
    x, w, b = make(3, 16, 32, torch.float32, device)
    w.requires_grad_(True)
    y = tigon.ops.gemv(x, w, b)
    y.sum().backward()
    assert_close(w.grad, x.double().sum(0).expand(16, 32), name="dw")
    with torch.no_grad():
        assert_close(tigon.ops.gemv(x, w, b), reference(x, w, b), name="no_grad")


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph_equals_eager(device):
    def f(x, w, b):
        return tigon.ops.gemv(x * 2.0, w, b) + 1.0

    x, w, b = make(4, 96, 256, torch.bfloat16, device)
    compiled = torch.compile(f, fullgraph=True, backend="aot_eager" if device == "cpu" else "inductor")
    assert torch.equal(f(x, w, b), compiled(x, w, b))


@needs_cuda
def test_cuda_graph_replay_and_determinism():
    x, w, b = make(2, 4096, 4096, torch.bfloat16, "cuda")  # few columns: K is split over a cluster
    static_x = x.clone()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        tigon.ops.gemv(static_x, w, b)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = tigon.ops.gemv(static_x, w, b)
    for _ in range(2):
        new_x = torch.randn_like(x)
        static_x.copy_(new_x)
        g.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, tigon.ops.gemv(new_x, w, b))
    assert all(torch.equal(tigon.ops.gemv(x, w, b), tigon.ops.gemv(x, w, b)) for _ in range(3))


def _bad_cases():
    x, w, b = make(2, 8, 16, torch.bfloat16, "cpu")
    return (
        [
            (dict(x=[1.0]), TypeError, "'x'"),
            (dict(weight=None), TypeError, "'weight'"),
            (dict(bias="b"), TypeError, "'bias'"),
            (dict(x=x.long()), TypeError, "'x'"),
            (dict(weight=w.half()), TypeError, "'weight'"),
            (dict(bias=b.float()), TypeError, "'bias'"),
            (dict(weight=w[:, :15]), ValueError, "'weight'"),
            (dict(weight=w[None]), ValueError, "'weight'"),
            (dict(weight=w.t().contiguous().t()), ValueError, "'weight'"),  # column-major: never copied
            (dict(bias=b[:7]), ValueError, "'bias'"),
            (dict(x=x[:, :0], weight=w[:, :0]), ValueError, "'x'"),
        ],
        dict(x=x, weight=w, bias=b),
    )


@pytest.mark.parametrize("case", range(len(_bad_cases()[0])))
def test_bad_input_names_the_argument(case):
    cases, args = _bad_cases()
    kwargs, exc, arg = cases[case]
    args.update(kwargs)
    with pytest.raises(exc, match=arg):
        tigon.ops.gemv(args["x"], args["weight"], args["bias"])


@needs_cuda
def test_cuda_errors_name_the_argument():
    x, w, b = make(2, 8, 16, torch.bfloat16, "cuda")
    with pytest.raises(ValueError, match="'weight'"):
        tigon.ops.gemv(x, w.cpu(), b)


# ---- several weights in one pass (gemv_parts) ----------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("m,k,rows", [(1, 4096, (4096, 1024, 1024)), (3, 520, (33, 7)), (16, 264, (100, 1, 17, 40))])
def test_parts_are_the_concatenated_weights(device, dtype, m, k, rows):
    """Outputs side by side, each against F.linear in float64; biases on some parts only."""
    x = torch.randn(m, k, device=device).to(dtype)
    ws = [(torch.randn(n, k, device=device) / k**0.5).to(dtype) for n in rows]
    bs = [torch.randn(n, device=device).to(dtype) if i % 2 == 0 else None for i, n in enumerate(rows)]
    y = tigon.ops.gemv_parts(x, ws, bs)
    assert y.shape == (m, sum(rows)) and y.dtype == dtype and y.is_contiguous()
    want = torch.cat([reference(x, w, b) for w, b in zip(ws, bs)], dim=-1)
    assert_close(y, want, name="y")


@pytest.mark.parametrize("device", DEVICES)
def test_parts_compile_and_fall_back_for_autograd(device):
    x, w0, b0 = make(2, 24, 64, torch.float32, device)
    w1 = torch.randn(8, 64, device=device)
    compiled = torch.compile(
        lambda x: tigon.ops.gemv_parts(x, [w0, w1], [b0, None]), fullgraph=True, backend="aot_eager"
    )
    assert torch.equal(compiled(x), tigon.ops.gemv_parts(x, [w0, w1], [b0, None]))
    w1.requires_grad_()
    y = tigon.ops.gemv_parts(x, (w0, w1))  # autograd needs a backward: F.linear per weight
    y.sum().backward()
    assert w1.grad is not None and y.shape == (2, 32)


def test_parts_bad_arguments_are_named():
    x, w, _ = make(2, 8, 16, torch.float32, "cpu")
    with pytest.raises(ValueError, match="'weights'"):
        tigon.ops.gemv_parts(x, [w] * 5)
    with pytest.raises(ValueError, match="'biases'"):
        tigon.ops.gemv_parts(x, [w, w], [None])
    with pytest.raises(Exception, match=r"'weights\[1\]'"):
        tigon.ops.gemv_parts(x, [w, torch.randn(8, 15)])
    with pytest.raises(Exception, match=r"'weights\[1\]'"):
        tigon.ops.gemv_parts(x, [w, w.double()])
