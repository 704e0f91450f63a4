"""tigon.ops.rms_norm and tigon.nn.RMSNorm against Hugging Face's formula in float64: output and both gradients in
every casting mode and dtype, odd shapes, strided rows, in-place backward, torch.compile, CUDA graphs, bad input."""

import pytest
import torch

import tigon
from conftest import DEVICES, backward_with_fresh_gradients, needs_cuda
from tolerances import assert_close

MODES = ["llama", "gemma", "none"]


def reference(x, w, eps, offset):
    """Hugging Face's RMSNorm in float64 (every casting mode is this function without roundings)."""
    x64 = x.detach().double().requires_grad_(True)
    w64 = None if w is None else w.detach().double().requires_grad_(True)
    y = x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + eps)
    if w64 is not None:
        y = y * (offset + w64)
    return y, x64, w64


def make_inputs(shape, dtype, w_dtype, mode, device, row_pad=0):
    cols = shape[-1]
    x = (torch.randn(*shape[:-1], cols + row_pad, device=device) * 1.5 + 0.25).to(dtype)
    if row_pad:  # rows of a wider buffer: row stride cols + row_pad
        x = x[..., :cols]
    offset = 1.0 if mode == "gemma" else 0.0
    w = (torch.randn(cols, device=device) * 0.3 + (0.0 if mode == "gemma" else 1.0)).to(w_dtype)
    return x.requires_grad_(True), w.requires_grad_(True), offset


def run_and_check(x, w, offset, mode, eps=1e-6, in_place=False):
    y = tigon.ops.rms_norm(x, w, eps, offset, mode, in_place=in_place)
    y_ref, x64, w64 = reference(x, w, eps, offset)
    assert_close(y, y_ref, x.dtype, name="y")  # x's precision bounds y's even when y is wider (llama, fp32 weight)
    dy = torch.randn_like(y)
    y.backward(dy)
    y_ref.backward(dy.double())
    assert_close(x.grad, x64.grad, name="dx")
    if w is not None:
        assert_close(w.grad, w64.grad, name="dw")
    return y


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    "dtype,w_dtype",
    [
        (torch.float32, torch.float32),
        (torch.float16, torch.float16),
        (torch.bfloat16, torch.bfloat16),
        (torch.bfloat16, torch.float32),
        (torch.float16, torch.float32),
    ],
)
@pytest.mark.parametrize("shape", [(5, 123), (3, 65537), (1, 1), (2, 3, 64), (64, 4096)])
def test_matches_float64_reference(device, mode, dtype, w_dtype, shape):
    x, w, offset = make_inputs(shape, dtype, w_dtype, mode, device)
    y = run_and_check(x, w, offset, mode)
    expected = torch.promote_types(dtype, w_dtype) if mode == "llama" else dtype
    assert y.dtype == expected and x.grad.dtype == dtype and w.grad.dtype == w_dtype


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("cols", [64, 4096, 5000])
def test_zero_tiny_and_large_rows(device, mode, dtype, cols):
    """A row of zeros (rstd = 1/sqrt(eps), y = 0, dx = rstd * dy * w), rows of ~1e-4 (eps dominates the mean square)
    and rows of ~200 (squares near fp16's largest value, summed in fp32)."""
    x = torch.randn(5, cols, device=device)
    x[0] = 0.0
    x[1] *= 1e-4
    x[2] = 200.0 + x[2]
    x = x.to(dtype).requires_grad_(True)
    offset = 1.0 if mode == "gemma" else 0.0
    w = (torch.randn(cols, device=device) * 0.3 + 1.0 - offset).to(dtype).requires_grad_(True)
    run_and_check(x, w, offset, mode)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_strided_rows_and_no_weight(device, dtype):
    x, w, offset = make_inputs((7, 257), dtype, dtype, "llama", device, row_pad=9)
    assert not x.is_contiguous()
    run_and_check(x, w, offset, "llama")
    x2, _, _ = make_inputs((4, 6, 96), dtype, dtype, "llama", device, row_pad=32)
    run_and_check(x2, None, 0.0, "llama")


@pytest.mark.parametrize("device", DEVICES)
def test_module_takes_a_transposed_view(device):
    # Gemma 3 normalises q as (B, T, H, D).transpose(1, 2): the module normalises the memory-order view and returns
    # the same strides as its input, as Hugging Face's elementwise formula does.
    norm = tigon.nn.GemmaRMSNorm(16).to(device)
    with torch.no_grad():
        norm.weight.normal_()
    x = torch.randn(2, 5, 3, 16, device=device).transpose(1, 2).requires_grad_(True)
    y = norm(x)
    y_ref, x64, w64 = reference(x, norm.weight, 1e-6, 1.0)
    assert y.stride() == x.stride()
    assert_close(y, y_ref, name="y")
    dy = torch.randn_like(y)
    y.backward(dy)
    y_ref.backward(dy.double())
    assert_close(x.grad, x64.grad, name="dx")
    assert_close(norm.weight.grad, w64.grad, name="dw")


@pytest.mark.parametrize("device", DEVICES)
def test_in_place_backward_writes_dx_over_dy(device):
    x, w, _ = make_inputs((16, 512), torch.bfloat16, torch.bfloat16, "llama", device)
    dy = torch.randn(16, 512, device=device, dtype=torch.bfloat16)
    y = tigon.ops.rms_norm(x, w, 1e-6)
    dx, dw = torch.autograd.grad(y, (x, w), dy.clone())
    y2 = tigon.ops.rms_norm(x, w, 1e-6, in_place=True)
    (dx2, dw2), received = backward_with_fresh_gradients([y2], (x, w), dy.clone())
    assert torch.equal(dx, dx2) and torch.equal(dw, dw2)
    assert dx2.data_ptr() == received[0]  # no new activation-sized buffer


@pytest.mark.parametrize("device", DEVICES)
def test_expanded_output_gradient(device):
    # y.sum() hands backward a gradient with stride 0 everywhere; the op must still be right.
    x, w, _ = make_inputs((8, 64), torch.float32, torch.float32, "llama", device)
    tigon.ops.rms_norm(x, w, 1e-6).sum().backward()
    y_ref, x64, w64 = reference(x, w, 1e-6, 0.0)
    y_ref.sum().backward()
    assert_close(x.grad, x64.grad, name="dx")
    assert_close(w.grad, w64.grad, name="dw")


@pytest.mark.parametrize("device", DEVICES)
def test_modules_match_hugging_face(device):
    modeling_llama = pytest.importorskip("transformers.models.llama.modeling_llama")
    modeling_gemma = pytest.importorskip("transformers.models.gemma.modeling_gemma")
    for hf_cls, ours_cls, dtype in [
        (modeling_llama.LlamaRMSNorm, tigon.nn.RMSNorm, torch.bfloat16),
        (modeling_gemma.GemmaRMSNorm, tigon.nn.GemmaRMSNorm, torch.bfloat16),
    ]:
        hf = hf_cls(96, eps=1e-5).to(device=device, dtype=dtype)
        with torch.no_grad():
            hf.weight.add_(torch.randn_like(hf.weight) * 0.1)
        ours = ours_cls(96, eps=1e-5).to(device=device, dtype=dtype)
        ours.load_state_dict(hf.state_dict())
        x = torch.randn(3, 5, 96, device=device, dtype=dtype)
        y_hf, y_ours = hf(x), ours(x)
        assert y_ours.dtype == y_hf.dtype
        assert_close(y_ours, y_hf.double(), name=hf_cls.__name__)


def _step(fn, x, w, dy):
    y = fn(x, w)
    dx, dw = torch.autograd.grad(y, (x, w), dy)
    return y, dx, dw


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph_equals_eager(device):
    def f(x, w):
        return tigon.ops.rms_norm(x, w, 1e-6) * 2.0

    x, w, _ = make_inputs((32, 256), torch.bfloat16, torch.float32, "llama", device)
    dy = torch.randn(32, 256, device=device)
    eager = _step(f, x, w, dy)
    compiled = _step(torch.compile(f, fullgraph=True, backend="aot_eager" if device == "cpu" else "inductor"), x, w, dy)
    for a, b in zip(eager, compiled):
        assert torch.equal(a, b)


@needs_cuda
def test_cuda_graph_replay_equals_eager():
    x, w, _ = make_inputs((64, 1024), torch.bfloat16, torch.bfloat16, "llama", "cuda")
    dy = torch.randn(64, 1024, device="cuda", dtype=torch.bfloat16)
    static_x, static_dy = x.detach().clone().requires_grad_(True), dy.clone()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up outside capture (workspace sizes cached, kernels loaded)
        _step(lambda a, b: tigon.ops.rms_norm(a, b, 1e-6), static_x, w, static_dy)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = _step(lambda a, b: tigon.ops.rms_norm(a, b, 1e-6), static_x, w, static_dy)
    for _ in range(2):  # fresh inputs each replay
        new_x, new_dy = torch.randn_like(x), torch.randn_like(dy)
        with torch.no_grad():
            static_x.copy_(new_x)
        static_dy.copy_(new_dy)
        g.replay()
        torch.cuda.synchronize()
        ref = _step(lambda a, b: tigon.ops.rms_norm(a, b, 1e-6), new_x.requires_grad_(True), w, new_dy)
        for a, b in zip(out, ref):
            assert torch.equal(a, b)


@needs_cuda
def test_weight_gradient_is_deterministic():
    x, w, _ = make_inputs((8192, 2048), torch.bfloat16, torch.float32, "llama", "cuda")
    dy = torch.randn(8192, 2048, device="cuda", dtype=torch.float32)
    grads = [torch.autograd.grad(tigon.ops.rms_norm(x, w, 1e-6), w, dy)[0] for _ in range(3)]
    assert all(torch.equal(grads[0], g) for g in grads[1:])


@needs_cuda
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    "dtype,w_dtype",
    [
        (torch.bfloat16, torch.bfloat16),
        (torch.bfloat16, torch.float32),
        (torch.float16, torch.float16),
        (torch.float32, torch.float32),
    ],
)
@pytest.mark.parametrize("shape", [(1000, 8), (257, 1000), (64, 4096), (4, 16384)])
def test_uncached_kernels_match_reference(uncached_norms, mode, dtype, w_dtype, shape):
    """The uncached kernels at the shapes the library's plan gives the cached ones; strided rows, the in-place
    backward and a deterministic weight gradient on them too."""
    x, w, offset = make_inputs(shape, dtype, w_dtype, mode, "cuda")
    run_and_check(x, w, offset, mode)
    if shape == (64, 4096) and mode == "llama":
        test_strided_rows_and_no_weight("cuda", dtype)
        test_in_place_backward_writes_dx_over_dy("cuda")
        test_weight_gradient_is_deterministic()


@needs_cuda
def test_more_than_2_31_elements():
    rows, cols = (2**31) // 4096 + 3, 4096  # 2^31 + 12288 elements: offsets past int32
    x = torch.randn(rows, cols, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(cols, device="cuda", dtype=torch.bfloat16).requires_grad_(True)
    x.requires_grad_(True)
    y = tigon.ops.rms_norm(x, w, 1e-6)
    dy = torch.randn_like(y)
    dx, dw = torch.autograd.grad(y, (x, w), dy)
    tail = slice(rows - 5, rows)  # the last rows live past 2^31 elements
    y_ref, x64, w64 = reference(x[tail], w, 1e-6, 0.0)
    assert_close(y[tail], y_ref, name="y tail")
    (dx_ref,) = torch.autograd.grad(y_ref, x64, dy[tail].double())
    assert_close(dx[tail], dx_ref, name="dx tail")
    assert_close(
        dw,
        (dy.float() * (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6))).sum(0).double(),
        name="dw",
    )


# ---- bad input: a clear error naming the argument, never a crash ------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs,exc,arg",
    [
        (dict(x=torch.ones(4, 8, dtype=torch.int64)), TypeError, "'x'"),
        (dict(weight=torch.ones(7)), ValueError, "'weight'"),
        (dict(weight=torch.ones(8, dtype=torch.float16)), TypeError, "'weight'"),
        (dict(x=torch.randn(8, 4).t()), ValueError, "'x'"),
        (dict(x=torch.randn(4, 0)), ValueError, "'x'"),
        (dict(casting_mode="llama3"), ValueError, "'casting_mode'"),
        (dict(eps=-1.0), ValueError, "'eps'"),
        (dict(weight=None, offset=1.0), ValueError, "'offset'"),
    ],
)
def test_bad_input_names_the_argument(kwargs, exc, arg):
    args = dict(x=torch.randn(4, 8, dtype=torch.bfloat16), weight=torch.ones(8, dtype=torch.bfloat16), eps=1e-6)
    args.update(kwargs)
    with pytest.raises(exc, match=arg):
        tigon.ops.rms_norm(**args)


def test_c_library_errors_surface_with_the_message():
    import importlib
    from tigon import _lib

    mod = importlib.import_module("tigon.ops.rms_norm")
    x = torch.randn(4, 8)
    y_bad = torch.empty(3, 8)
    with pytest.raises(tigon.TigonArgumentError, match="tigon_rms_norm_fwd: argument 'y'"):
        _lib.check(
            mod._fwd(_lib.tensor_arg(x), None, _lib.tensor_arg(y_bad), None, mod.RMSNormParams(1e-6, 0.0, 0), None)
        )


@needs_cuda
def test_device_mismatch_names_the_argument():
    with pytest.raises(ValueError, match="'weight'"):
        tigon.ops.rms_norm(torch.randn(4, 8, device="cuda"), torch.ones(8), 1e-6)
