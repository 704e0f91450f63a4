"""Convolution with its fused epilogue (tigon.ops.conv2d) against torch's conv2d in float64: bias, the residual
added before the activation, ReLU, strides, padding and dilation, inputs taken channels-last or converted from NCHW,
torch.compile(fullgraph=True), CUDA-graph capture, and bad input naming the argument."""

import pytest
import torch
import torch.nn.functional as F

import tigon
from conftest import DEVICES, needs_cuda
from tolerances import assert_close

# (N, C, H, W), (K, R, S), stride, padding, dilation: ResNet-style 3x3 and 1x1 layers, a strided 7x7 stem-like
# layer, a dilated one, odd spatial sizes
CASES = [
    ((2, 16, 14, 14), (32, 3, 3), 1, 1, 1),
    ((3, 32, 9, 11), (16, 1, 1), 1, 0, 1),
    ((2, 16, 23, 17), (64, 7, 7), 2, 3, 1),
    ((1, 24, 13, 13), (8, 3, 3), (1, 2), (2, 1), (2, 1)),
    ((2, 16, 10, 12), (96, 3, 3), 1, 1, 1),  # K > 64: the CUDA path's wider tile
]


def inputs(device, dtype, xs, ks, seed=0):
    torch.manual_seed(seed)
    x = torch.randn(*xs, device=device).to(dtype).to(memory_format=torch.channels_last)
    w = (torch.randn(ks[0], xs[1], ks[1], ks[2], device=device) / (xs[1] * ks[1] * ks[2]) ** 0.5).to(dtype)
    b = torch.randn(ks[0], device=device).to(dtype)
    return x, w.to(memory_format=torch.channels_last), b


def reference(x, w, b, stride, padding, dilation, residual, relu):
    y = F.conv2d(x.double(), w.double(), None if b is None else b.double(), stride, padding, dilation)
    if residual is not None:
        y = y + residual.double()
    return torch.relu(y) if relu else y


def dtypes(device):
    return [torch.float32, torch.bfloat16, torch.float16] if device == "cpu" else [torch.bfloat16, torch.float16]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize(
    "relu,with_bias,with_residual", [(True, True, True), (False, False, False), (True, True, False)]
)
def test_matches_float64_reference(device, case, relu, with_bias, with_residual):
    xs, ks, stride, padding, dilation = case
    for dtype in dtypes(device):
        x, w, b = inputs(device, dtype, xs, ks)
        b = b if with_bias else None
        shape = reference(x, w, b, stride, padding, dilation, None, False).shape
        r = torch.randn(shape, device=device).to(dtype).to(memory_format=torch.channels_last) if with_residual else None
        with torch.no_grad():
            y = tigon.ops.conv2d(x, w, b, stride, padding, dilation, "relu" if relu else None, residual=r)
        assert y.dtype == dtype and y.is_contiguous(memory_format=torch.channels_last)
        assert_close(y, reference(x, w, b, stride, padding, dilation, r, relu), name=f"y {dtype}")


@pytest.mark.parametrize("device", DEVICES)
def test_nchw_inputs_are_converted(device):
    x, w, b = inputs(device, torch.bfloat16, (2, 16, 8, 8), (16, 3, 3))
    with torch.inference_mode():
        y = tigon.ops.conv2d(x.contiguous(), w.contiguous(), b, padding=1, activation="relu")
    assert_close(y, reference(x, w, b, 1, 1, 1, None, True), name="y")


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph_equals_eager(device):
    x, w, b = inputs(device, torch.bfloat16, (2, 16, 10, 10), (32, 3, 3))

    def f(x, w, b):
        return tigon.ops.conv2d(x, w, b, padding=1, activation="relu") * 2

    with torch.no_grad():
        eager = f(x, w, b)
        compiled = torch.compile(f, fullgraph=True, backend="aot_eager" if device == "cpu" else "inductor")(x, w, b)
    torch.testing.assert_close(compiled, eager, atol=0, rtol=0)


@needs_cuda
def test_cuda_graph_capture_replays():
    x, w, b = inputs("cuda", torch.bfloat16, (4, 64, 28, 28), (64, 3, 3))
    r = torch.randn(4, 64, 28, 28, device="cuda").to(torch.bfloat16).to(memory_format=torch.channels_last)
    with torch.no_grad():
        tigon.ops.conv2d(x, w, b, padding=1, activation="relu", residual=r)  # first call outside the capture
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            y = tigon.ops.conv2d(x, w, b, padding=1, activation="relu", residual=r)
        x.copy_(torch.randn_like(x))
        g.replay()
        torch.cuda.synchronize()
    assert_close(y, reference(x, w, b, 1, 1, 1, r, True), name="replayed")


@needs_cuda
def test_more_than_2_31_elements():
    # 2200 x 64 x 128 x 128 = 2^31 + 159 M elements in x and in y: the last image lives past int32 offsets
    x, w, b = inputs("cuda", torch.bfloat16, (2200, 64, 128, 128), (64, 3, 3))
    y = tigon.ops.conv2d(x, w, b, padding=1, activation="relu")
    want = torch.relu(F.conv2d(x[-1:].float(), w.float(), b.float(), padding=1))
    assert_close(y[-1:], want.double(), name="y, last image")


@needs_cuda
def test_cuda_refuses_channels_not_a_multiple_of_8():
    x, w, b = inputs("cuda", torch.bfloat16, (1, 12, 8, 8), (16, 3, 3))
    with torch.no_grad(), pytest.raises(ValueError, match="argument 'x'.*multiple of 8"):
        tigon.ops.conv2d(x, w, b)


def test_bad_input_names_the_argument():
    x, w, b = inputs("cpu", torch.float32, (1, 8, 6, 6), (8, 3, 3))
    with torch.no_grad():
        with pytest.raises(ValueError, match="argument 'activation'"):
            tigon.ops.conv2d(x, w, activation="gelu")
        with pytest.raises(ValueError, match="argument 'stride'"):
            tigon.ops.conv2d(x, w, stride=0)
        with pytest.raises(ValueError, match="argument 'padding'"):
            tigon.ops.conv2d(x, w, padding="same")
        with pytest.raises(ValueError, match="argument 'weight'"):
            tigon.ops.conv2d(x, w[:, :4])  # groups != 1
        with pytest.raises(ValueError, match="argument 'x'"):
            tigon.ops.conv2d(x[0], w)
        with pytest.raises(ValueError, match="argument 'weight'"):
            tigon.ops.conv2d(x, w.to(torch.bfloat16))
        with pytest.raises(ValueError, match="argument 'residual'"):
            tigon.ops.conv2d(x, w, residual=torch.zeros(1, 8, 5, 5))
        with pytest.raises(ValueError, match="argument 'bias'"):
            tigon.ops.conv2d(x, w, torch.zeros(7))
        with pytest.raises(TypeError, match="argument 'bias'"):
            tigon.ops.conv2d(x, w, [0.0] * 8)
    with pytest.raises(RuntimeError, match="forward only"):
        tigon.ops.conv2d(x, w.requires_grad_())
