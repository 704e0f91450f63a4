"""PolyNorm (tigon.ops.poly_norm, tigon.nn.PolyNorm) against a float64 formula written from PolyCom's definition: the
output and every gradient (x, the three weights, the bias), every dtype, odd rows, leading dimensions, a model cast
to bf16, torch.compile(fullgraph=True); bad input names the argument."""

import pytest
import torch

import tigon
from conftest import DEVICES
from tolerances import assert_close


def reference(x, weight, bias, eps):
    def norm(u):
        return u * torch.rsqrt(u.pow(2).mean(-1, keepdim=True) + eps)

    return weight[0] * norm(x**3) + weight[1] * norm(x**2) + weight[2] * norm(x) + bias


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
# on CUDA: rows kept in registers (2 or 4 vectors a thread), read twice (16384), not vectorizable (1001)
@pytest.mark.parametrize("shape", [(2, 9, 64), (5, 1001), (3, 4096), (3, 8192), (2, 16384), (1, 1)])
def test_matches_float64_reference(device, dtype, shape):
    torch.manual_seed(0)
    x = torch.randn(shape, device=device).to(dtype).requires_grad_()
    weight = torch.tensor([0.3, -0.5, 0.8], device=device, requires_grad=True)
    bias = torch.tensor(0.7, device=device, requires_grad=True)
    dy = torch.randn(shape, device=device).to(dtype)
    y = tigon.ops.poly_norm(x, weight, bias, 1e-6)
    y.backward(dy)
    leaves = [t.detach().double().requires_grad_() for t in (x, weight, bias)]
    ref = reference(*leaves, 1e-6)
    ref.backward(dy.double())
    assert y.dtype == dtype and y.shape == x.shape
    # x^3 terms amplify the input's rounding: the tolerance is relative to the largest term (scale)
    assert_close(y, ref, name="y", scale=max(1.0, ref.abs().max().item()))
    assert_close(x.grad, leaves[0].grad, name="dx", scale=max(1.0, leaves[0].grad.abs().max().item()))
    tol = dict(atol=2e-4, rtol=2e-4) if dtype == torch.float32 else None
    assert_close(weight.grad, leaves[1].grad, dtype, name="dweight", tol=tol)
    assert_close(bias.grad, leaves[2].grad, dtype, name="dbias", tol=tol)


@pytest.mark.parametrize("device", DEVICES)
def test_module_and_compile(device):
    m = tigon.nn.PolyNorm(eps=1e-5).to(device)
    assert torch.allclose(m.weight, torch.full((3,), 1 / 3, device=device)) and m.bias.item() == 1.0
    x = torch.randn(4, 32, device=device, requires_grad=True)
    eager = m(x)
    eager.square().sum().backward()
    grads = [x.grad.clone(), m.weight.grad.clone(), m.bias.grad.clone()]
    x.grad = m.weight.grad = m.bias.grad = None
    compiled = torch.compile(m, fullgraph=True)(x)
    compiled.square().sum().backward()
    assert torch.equal(compiled, eager)
    for a, b in zip(grads, [x.grad, m.weight.grad, m.bias.grad]):
        assert torch.equal(a, b)
    bf = tigon.nn.PolyNorm().to(device).to(torch.bfloat16)
    y = bf(torch.randn(3, 16, device=device, dtype=torch.bfloat16, requires_grad=True))
    y.float().sum().backward()
    assert bf.weight.grad.dtype == torch.bfloat16 and bf.bias.grad.shape == ()


def test_bad_input_names_the_argument():
    x, w, b = torch.randn(2, 8), torch.ones(3), torch.tensor(1.0)
    cases = [
        (lambda: tigon.ops.poly_norm([1.0], w, b), TypeError, "'x'"),
        (lambda: tigon.ops.poly_norm(x, torch.ones(2), b), ValueError, "'weight'"),
        (lambda: tigon.ops.poly_norm(x, w, torch.ones(2)), ValueError, "'bias'"),
        (lambda: tigon.ops.poly_norm(x, w, b, eps="1"), TypeError, "'eps'"),
        (lambda: tigon.ops.poly_norm(x, w, b, eps=0.0), ValueError, "'eps'"),
        (lambda: tigon.ops.poly_norm(x.long(), w, b), TypeError, "'x'"),
        (lambda: tigon.ops.poly_norm(torch.tensor(1.0), w, b), ValueError, "'x'"),
    ]
    for call, err, match in cases:
        with pytest.raises(err, match=match):
            call()
