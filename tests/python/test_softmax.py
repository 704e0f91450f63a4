"""Softmax (tigon.ops.softmax, tigon.nn.Softmax) against torch in float64: the output and the gradient, rows held in
registers and the long-row path, unaligned rows, any dim, in eager and under torch.compile(fullgraph=True); bad input
names the argument."""

import pytest
import torch

import tigon
from conftest import DEVICES
from tolerances import assert_close


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", [(5, 1), (3, 7, 64), (2, 1000), (3, 40000), (1, 33), (17, 4096)])
def test_matches_float64_reference(device, dtype, shape):
    torch.manual_seed(0)
    x = (torch.randn(shape, device=device) * 3).to(dtype).requires_grad_()
    dy = torch.randn(shape, device=device).to(dtype)
    y = tigon.ops.softmax(x)
    y.backward(dy)
    ref_x = x.detach().double().requires_grad_()
    ref = torch.softmax(ref_x, -1)
    ref.backward(dy.double())
    assert y.dtype == dtype
    assert_close(y, ref, name="y")
    assert_close(x.grad, ref_x.grad, name="dx")


@pytest.mark.parametrize("device", DEVICES)
def test_other_dims_strides_and_the_module(device):
    x = torch.randn(4, 6, 10, device=device, requires_grad=True)
    for dim in (0, 1, -1, 2):
        assert_close(tigon.ops.softmax(x, dim), torch.softmax(x.double(), dim), name=f"dim {dim}")
    strided = torch.randn(8, 20, device=device)[:, ::2]
    assert_close(tigon.ops.softmax(strided), torch.softmax(strided.double(), -1), name="strided")
    m = tigon.nn.Softmax(dim=1)
    assert isinstance(m, torch.nn.Softmax)
    assert_close(m(x), torch.softmax(x.double(), 1), name="module")
    assert_close(
        tigon.ops.softmax(torch.tensor(2.0, device=device)),
        torch.tensor(1.0, dtype=torch.float64, device=device),
        name="0-d",
    )


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph_equals_eager(device):
    x = torch.randn(6, 256, device=device, dtype=torch.bfloat16, requires_grad=True)

    def f(x):
        return tigon.ops.softmax(x * 2)

    eager = f(x)
    eager.float().square().sum().backward()
    g = x.grad.clone()
    x.grad = None
    compiled = torch.compile(f, fullgraph=True)(x)
    compiled.float().square().sum().backward()
    assert torch.equal(compiled, eager) and torch.equal(x.grad, g)


def test_bad_input_names_the_argument():
    with pytest.raises(TypeError, match="'x'"):
        tigon.ops.softmax([1.0, 2.0])
    with pytest.raises(ValueError, match="'dim'"):
        tigon.ops.softmax(torch.randn(2, 3), dim=2)
    with pytest.raises(TypeError, match="'x'"):
        tigon.ops.softmax(torch.ones(2, 3, dtype=torch.int64))
    for empty in (torch.ones(2, 0, requires_grad=True), torch.ones(0, 5, requires_grad=True)):  # as torch: empty out
        y = tigon.ops.softmax(empty)
        y.sum().backward()
        assert y.shape == empty.shape and empty.grad.shape == empty.shape
