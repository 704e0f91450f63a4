"""Sparsemax (tigon.ops.sparsemax, tigon.nn.Sparsemax) against a float64 sort-based reference: the output (exact zeros,
rows summing to 1) and the gradient, every dtype, any dim, strided input, torch.compile(fullgraph=True), bad input
naming the argument."""

import pytest
import torch

import tigon
from conftest import DEVICES
from tolerances import assert_close


def reference(x, dim=-1):
    """Sparsemax in float64 through sorting, differentiable by autograd (the support is fixed by the comparison)."""
    z = x.double().movedim(dim, -1)
    srt, _ = torch.sort(z, dim=-1, descending=True)
    k = torch.arange(1, z.shape[-1] + 1, device=z.device, dtype=z.dtype)
    cums = srt.cumsum(-1)
    support = (1 + k * srt > cums).sum(-1, keepdim=True)
    tau = (cums.gather(-1, support - 1) - 1) / support
    return torch.clamp(z - tau, min=0).movedim(-1, dim)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("cols", [1, 7, 256, 3000])
def test_matches_float64_reference(device, dtype, cols):
    torch.manual_seed(cols)
    x = (torch.randn(37, cols, device=device) * 2).to(dtype).requires_grad_()
    y = tigon.ops.sparsemax(x)
    assert y.dtype == dtype and y.shape == x.shape
    xd = x.detach().double().requires_grad_()
    ref = reference(xd)
    assert_close(y, ref, name="y", scale=2.0)
    ones = torch.ones(37, dtype=torch.float64, device=device)
    assert_close(y.double().sum(-1), ones, dtype, name="row sums", scale=cols**0.5)
    if cols > 1:
        assert (y == 0).any(), "sparsemax of random rows has exact zeros"
    dy = torch.randn(x.shape, device=device).to(dtype)
    (dx,) = torch.autograd.grad(y, x, dy)
    # the gradient from tigon's own support (an element at tau may fall either side of it in low precision)
    support = y.detach().double() > 0
    mean = (dy.double() * support).sum(-1, keepdim=True) / support.sum(-1, keepdim=True)
    assert_close(dx, torch.where(support, dy.double() - mean, torch.zeros_like(mean)), name="dx", scale=2.0)


@pytest.mark.parametrize("device", DEVICES)
def test_any_dim_strided_and_module(device):
    x = torch.randn(4, 9, 6, device=device, requires_grad=True)
    for dim in (0, 1, -1):
        assert_close(tigon.ops.sparsemax(x, dim), reference(x.detach(), dim), name=f"dim {dim}")
    strided = torch.randn(8, 40, device=device)[:, ::2]
    assert_close(tigon.ops.sparsemax(strided), reference(strided), name="strided")
    m = tigon.nn.Sparsemax(dim=1)
    assert "dim=1" in repr(m)
    assert_close(m(x), reference(x.detach(), 1), name="module")
    one = torch.tensor(1.0, dtype=torch.float64, device=device)
    assert_close(tigon.ops.sparsemax(torch.tensor(2.0, device=device)), one, name="0-d")


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph_equals_eager(device):
    x = torch.randn(16, 300, device=device, dtype=torch.bfloat16, requires_grad=True)

    def f(x):
        return tigon.ops.sparsemax(x * 1.5)

    eager = f(x)
    (g_eager,) = torch.autograd.grad(eager.float().pow(2).sum(), x)
    compiled = torch.compile(f, fullgraph=True)(x)
    (g_compiled,) = torch.autograd.grad(compiled.float().pow(2).sum(), x)
    assert torch.equal(compiled, eager)
    assert torch.equal(g_compiled, g_eager)


def test_bad_input_names_the_argument():
    x = torch.randn(3, 4)
    cases = [
        (lambda: tigon.ops.sparsemax([1.0]), TypeError, "'x'"),
        (lambda: tigon.ops.sparsemax(x, 2), ValueError, "'dim'"),
        (lambda: tigon.ops.sparsemax(x, 1.0), ValueError, "'dim'"),
        (lambda: tigon.ops.sparsemax(x.long()), Exception, "'x'"),
    ]
    for call, err, match in cases:
        with pytest.raises(err, match=match):
            call()
    assert tigon.ops.sparsemax(torch.randn(3, 0)).shape == (3, 0)  # empty in, empty out, as torch's softmax
