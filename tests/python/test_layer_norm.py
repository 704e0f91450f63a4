"""tigon.ops.layer_norm.layer_norm and tigon.nn.layer_norm.LayerNorm against F.layer_norm in float64: output and every
gradient for every dtype, weight/bias present or absent, odd and strided shapes, in-place backward, torch.compile,
CUDA graphs, determinism, > 2^31 elements, bad input."""

import pytest
import torch
import torch.nn.functional as F

from conftest import DEVICES, backward_with_fresh_gradients, needs_cuda
from tigon.nn.layer_norm import LayerNorm
from tigon.ops.layer_norm import layer_norm
from tolerances import assert_close

DTYPE_PAIRS = [
    (torch.float32, torch.float32),
    (torch.float16, torch.float16),
    (torch.bfloat16, torch.bfloat16),
    (torch.bfloat16, torch.float32),
    (torch.float16, torch.float32),
]


def reference(x, w, b, eps):
    """F.layer_norm in float64 on detached copies (returned so their gradients can be read)."""
    x64 = x.detach().double().requires_grad_(True)
    w64 = None if w is None else w.detach().double().requires_grad_(True)
    b64 = None if b is None else b.detach().double().requires_grad_(True)
    return F.layer_norm(x64, x64.shape[-1:], w64, b64, eps), x64, w64, b64


def make_inputs(shape, dtype, p_dtype, device, has_w=True, has_b=True, row_pad=0):
    cols = shape[-1]
    x = (torch.randn(*shape[:-1], cols + row_pad, device=device) * 1.5 + 2.0).to(dtype)  # mean far from 0
    if row_pad:  # rows of a wider buffer: row stride cols + row_pad
        x = x[..., :cols]
    w = (torch.randn(cols, device=device) * 0.3 + 1.0).to(p_dtype).requires_grad_(True) if has_w else None
    b = (torch.randn(cols, device=device) * 0.3).to(p_dtype).requires_grad_(True) if has_b else None
    return x.requires_grad_(True), w, b


def run_and_check(x, w, b, eps=1e-5, in_place=False):
    y = layer_norm(x, w, b, eps, in_place=in_place)
    y_ref, x64, w64, b64 = reference(x, w, b, eps)
    assert y.dtype == x.dtype
    assert_close(y, y_ref, name="y")
    dy = torch.randn_like(y)
    y.backward(dy)
    y_ref.backward(dy.double())
    # dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * w: a difference of terms of size rstd * |g|, which
    # is large where a row's variance is tiny (rstd -> 1/sqrt(eps) for a single column): scale atol by those terms.
    rstd = torch.rsqrt(x64.detach().var(-1, unbiased=False, keepdim=True) + eps)
    g = dy.double() * (1.0 if w is None else w.detach().double())
    assert_close(x.grad, x64.grad, name="dx", scale=max(1.0, (rstd * g.abs()).max().item()))
    if w is not None:
        assert w.grad.dtype == w.dtype
        assert_close(w.grad, w64.grad, name="dw")
    if b is not None:
        assert b.grad.dtype == b.dtype
        assert_close(b.grad, b64.grad, name="db")
    return y


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype,p_dtype", DTYPE_PAIRS)
@pytest.mark.parametrize("has_w,has_b", [(True, True), (True, False), (False, True), (False, False)])
@pytest.mark.parametrize(
    "shape",
    [
        (5, 123),
        (3, 65),
        (3, 65537),
        (1, 1),
        (257, 1),
        (2, 3, 64),
        (257, 1000),
        (1, 4096),
        (64, 4096),
        (8, 8192),
        (4, 16384),
        (2, 32768),
    ],
)
def test_matches_float64_reference(device, dtype, p_dtype, has_w, has_b, shape):
    # The size classes of the kernels (see tests/cpp/test_layer_norm_cuda.cpp): rows shorter than a warp, padded
    # vectors (1000), one row per block slot (4096, 8192), the longest cached rows (16384 backward, 32768 forward),
    # and uncached odd, long or single-element rows; 1, 3 and 257 rows leave the second row of a backward pair empty.
    if device == "cpu" and shape[-1] >= 8192 and (has_w, has_b) != (True, True):
        pytest.skip("long rows on the CPU: one parameter combination is enough")
    x, w, b = make_inputs(shape, dtype, p_dtype, device, has_w, has_b)
    run_and_check(x, w, b)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("cols", [64, 4096, 5000])
def test_constant_and_far_off_centre_rows(device, dtype, cols):
    """Rows with no variance (y = b, rstd = 1/sqrt(eps)) and rows whose mean is ~500 standard deviations from 0 (where
    E[x^2] - mean^2 would cancel every digit; the kernels centre on the row's first element)."""
    x = torch.randn(6, cols, device=device)
    x[0] = 3.0
    x[1] = -0.25
    x[2:] = 500.0 + x[2:]
    x = x.to(dtype).requires_grad_(True)
    w = (torch.randn(cols, device=device) * 0.3 + 1.0).to(dtype).requires_grad_(True)
    b = (torch.randn(cols, device=device) * 0.3).to(dtype).requires_grad_(True)
    run_and_check(x, w, b)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_strided_rows(device, dtype):
    x, w, b = make_inputs((7, 257), dtype, dtype, device, row_pad=9)
    assert not x.is_contiguous()
    run_and_check(x, w, b)
    x2, w2, b2 = make_inputs((4, 6, 96), dtype, torch.float32, device, row_pad=32)  # aligned stride: cached kernels
    run_and_check(x2, w2, b2)
    x3, _, _ = make_inputs((5, 1024), dtype, dtype, device, has_w=False, has_b=False, row_pad=1)  # unaligned rows
    run_and_check(x3, None, None)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_in_place_backward_writes_dx_over_dy(device, dtype):
    x, w, b = make_inputs((16, 512), dtype, dtype, device)
    dy = torch.randn(16, 512, device=device, dtype=dtype)
    dx, dw, db = torch.autograd.grad(layer_norm(x, w, b), (x, w, b), dy.clone())
    y2 = layer_norm(x, w, b, in_place=True)
    (dx2, dw2, db2), received = backward_with_fresh_gradients([y2], (x, w, b), dy.clone())
    assert torch.equal(dx, dx2) and torch.equal(dw, dw2) and torch.equal(db, db2)
    assert dx2.data_ptr() == received[0]  # no new activation-sized buffer


@pytest.mark.parametrize("device", DEVICES)
def test_expanded_output_gradient(device):
    # y.sum() hands backward a gradient with stride 0 everywhere; the op must still be right.
    x, w, b = make_inputs((8, 64), torch.float32, torch.float32, device)
    layer_norm(x, w, b).sum().backward()
    y_ref, x64, w64, b64 = reference(x, w, b, 1e-5)
    y_ref.sum().backward()
    assert_close(x.grad, x64.grad, name="dx")
    assert_close(w.grad, w64.grad, name="dw")
    assert_close(b.grad, b64.grad, name="db")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("kwargs", [{}, dict(bias=False), dict(elementwise_affine=False), dict(eps=1e-6)])
def test_module_matches_torch_layer_norm(device, dtype, kwargs):
    theirs = torch.nn.LayerNorm(96, device=device, dtype=dtype, **kwargs)
    with torch.no_grad():
        for p in theirs.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    ours = LayerNorm(96, device=device, dtype=dtype, **kwargs)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    ours.load_state_dict(theirs.state_dict())
    assert ours.normalized_shape == theirs.normalized_shape and ours.eps == theirs.eps
    x = (torch.randn(3, 5, 96, device=device) + 1).to(dtype)
    x1, x2 = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    y_theirs, y_ours = theirs(x1), ours(x2)
    assert y_ours.dtype == y_theirs.dtype
    assert_close(y_ours, y_theirs.double(), name="y")
    dy = torch.randn_like(y_ours)
    y_ours.backward(dy)
    y_theirs.backward(dy)
    assert_close(x2.grad, x1.grad.double(), name="dx")
    for (name, p_ours), p_theirs in zip(ours.named_parameters(), theirs.parameters()):
        assert_close(
            p_ours.grad, p_theirs.grad.double(), dtype=torch.float32 if dtype == torch.float32 else dtype, name=name
        )


def test_module_rejects_multi_dim_normalized_shape():
    with pytest.raises(ValueError, match="'normalized_shape'"):
        LayerNorm((4, 8))
    assert LayerNorm((8,)).normalized_shape == (8,)
    with pytest.raises(ValueError, match="'x'"):
        LayerNorm(8)(torch.randn(2, 7))


def _step(fn, x, w, b, dy):
    y = fn(x, w, b)
    return (y,) + torch.autograd.grad(y, (x, w, b), dy)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("in_place", [False, True])
def test_torch_compile_fullgraph_equals_eager(device, in_place):
    def f(x, w, b):
        return layer_norm(x, w, b, 1e-5, in_place=in_place) * 2.0

    x, w, b = make_inputs((32, 256), torch.bfloat16, torch.float32, device)
    dy = torch.randn(32, 256, device=device, dtype=torch.bfloat16)
    eager = _step(f, x, w, b, dy)
    compiled = _step(
        torch.compile(f, fullgraph=True, backend="aot_eager" if device == "cpu" else "inductor"), x, w, b, dy
    )
    for a, c in zip(eager, compiled):
        assert torch.equal(a, c)


@needs_cuda
def test_cuda_graph_replay_equals_eager():
    x, w, b = make_inputs((64, 1024), torch.bfloat16, torch.bfloat16, "cuda")
    dy = torch.randn(64, 1024, device="cuda", dtype=torch.bfloat16)
    static_x, static_dy = x.detach().clone().requires_grad_(True), dy.clone()
    fn = lambda a, w_, b_: layer_norm(a, w_, b_)  # noqa: E731
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up outside capture (workspace sizes cached, kernels loaded)
        _step(fn, static_x, w, b, static_dy)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = _step(fn, static_x, w, b, static_dy)
    for _ in range(2):  # fresh inputs each replay
        new_x, new_dy = torch.randn_like(x), torch.randn_like(dy)
        with torch.no_grad():
            static_x.copy_(new_x)
        static_dy.copy_(new_dy)
        g.replay()
        torch.cuda.synchronize()
        ref = _step(fn, new_x.requires_grad_(True), w, b, new_dy)
        for a, c in zip(out, ref):
            assert torch.equal(a, c)


@needs_cuda
@pytest.mark.parametrize("shape", [(8192, 2048), (1000, 16384), (517, 123)])
def test_parameter_gradients_are_deterministic(shape):
    x, w, b = make_inputs(shape, torch.bfloat16, torch.float32, "cuda")
    dy = torch.randn(*shape, device="cuda", dtype=torch.bfloat16)
    grads = [torch.autograd.grad(layer_norm(x, w, b), (w, b), dy) for _ in range(3)]
    for dw, db in grads[1:]:
        assert torch.equal(grads[0][0], dw) and torch.equal(grads[0][1], db)


@needs_cuda
def test_more_than_2_31_elements():
    rows, cols = (2**31) // 4096 + 3, 4096  # 2^31 + 12288 elements: offsets past int32
    x = torch.randn(rows, cols, device="cuda", dtype=torch.bfloat16).requires_grad_(True)
    w = torch.randn(cols, device="cuda", dtype=torch.bfloat16).requires_grad_(True)
    b = torch.randn(cols, device="cuda", dtype=torch.bfloat16).requires_grad_(True)
    y = layer_norm(x, w, b)
    dy = torch.randn_like(y)
    dx, dw, db = torch.autograd.grad(y, (x, w, b), dy)
    tail = slice(rows - 5, rows)  # the last rows live past 2^31 elements
    y_ref, x64, _, _ = reference(x[tail], w, b, 1e-5)
    assert_close(y[tail], y_ref, name="y tail")
    (dx_ref,) = torch.autograd.grad(y_ref, x64, dy[tail].double())
    assert_close(dx[tail], dx_ref, name="dx tail")
    xf = x.detach().float()
    xhat = (xf - xf.mean(-1, keepdim=True)) * torch.rsqrt(xf.var(-1, unbiased=False, keepdim=True) + 1e-5)
    assert_close(dw, (dy.float() * xhat).sum(0).double(), name="dw")
    assert_close(db, dy.float().sum(0).double(), name="db")


@needs_cuda
@pytest.mark.parametrize("dtype,p_dtype", DTYPE_PAIRS)
@pytest.mark.parametrize("shape", [(1000, 8), (257, 1000), (64, 4096), (8, 8192), (4, 16384), (2, 32768)])
def test_uncached_kernels_match_reference(uncached_norms, dtype, p_dtype, shape):
    """The uncached kernels at the shapes the library's plan gives the cached ones; strided rows, the in-place
    backward and deterministic parameter gradients on them too."""
    x, w, b = make_inputs(shape, dtype, p_dtype, "cuda")
    run_and_check(x, w, b)
    if shape == (64, 4096):
        test_strided_rows("cuda", dtype)
        test_in_place_backward_writes_dx_over_dy("cuda", dtype)
        test_parameter_gradients_are_deterministic((517, 4096))


# ---- bad input: a clear error naming the argument, never a crash ------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs,exc,arg",
    [
        (dict(x=torch.ones(4, 8, dtype=torch.int64)), TypeError, "'x'"),
        (dict(x="not a tensor"), TypeError, "'x'"),
        (dict(x=torch.randn(8, 4).t()), ValueError, "'x'"),
        (dict(x=torch.randn(4, 0)), ValueError, "'x'"),
        (dict(weight=torch.ones(7)), ValueError, "'weight'"),
        (dict(weight=torch.ones(8, dtype=torch.float16)), TypeError, "'weight'"),
        (dict(weight=[1.0] * 8), TypeError, "'weight'"),
        (dict(bias=torch.ones(9)), ValueError, "'bias'"),
        (dict(bias=torch.ones(8, dtype=torch.float64)), TypeError, "'bias'"),
        (dict(bias=torch.ones(8, dtype=torch.float32)), TypeError, "'bias'"),  # weight is bf16: dtypes must agree
        (dict(eps=-1.0), ValueError, "'eps'"),
        (dict(eps=float("nan")), ValueError, "'eps'"),
        (dict(eps="1e-5"), ValueError, "'eps'"),
    ],
)
def test_bad_input_names_the_argument(kwargs, exc, arg):
    args = dict(
        x=torch.randn(4, 8, dtype=torch.bfloat16),
        weight=torch.ones(8, dtype=torch.bfloat16),
        bias=torch.zeros(8, dtype=torch.bfloat16),
        eps=1e-5,
    )
    args.update(kwargs)
    with pytest.raises(exc, match=arg):
        layer_norm(**args)


def test_c_library_errors_surface_with_the_message():
    import tigon
    from tigon import _lib
    import importlib

    mod = importlib.import_module("tigon.ops.layer_norm")  # the module: tigon.ops.layer_norm is the function
    x = torch.randn(4, 8)
    y_bad = torch.empty(3, 8)
    with pytest.raises(tigon.TigonArgumentError, match="tigon_layer_norm_fwd: argument 'y'"):
        _lib.check(
            mod._fwd(
                _lib.tensor_arg(x), None, None, _lib.tensor_arg(y_bad), None, None, mod.LayerNormParams(1e-5), None
            )
        )


@needs_cuda
def test_device_mismatch_names_the_argument():
    with pytest.raises(ValueError, match="'weight'"):
        layer_norm(torch.randn(4, 8, device="cuda"), torch.ones(8))
    with pytest.raises(ValueError, match="'bias'"):
        layer_norm(torch.randn(4, 8, device="cuda"), None, torch.ones(8))
