"""DyT (tigon.ops.dyt, tigon.nn.DyT) against torch's float64 formula: the output and every gradient (x, alpha, gamma,
beta), with and without beta, parameters in fp32 or x's dtype (and a model cast to bf16), non-contiguous input,
torch.compile(fullgraph=True), bad input naming the argument."""

import pytest
import torch

import tigon
from conftest import DEVICES
from tolerances import assert_close


def reference(x, alpha, gamma, beta):
    y = gamma.double() * torch.tanh(alpha.double() * x.double())
    return y + beta.double() if beta is not None else y


def leaves(device, dtype, pdtype, c, beta=True):
    torch.manual_seed(0)
    x = (torch.randn(3, 41, c, device=device) * 2).to(dtype).requires_grad_()
    alpha = torch.tensor([0.6], device=device).requires_grad_()
    gamma = (1 + 0.3 * torch.randn(c, device=device)).to(pdtype).requires_grad_()
    b = (0.2 * torch.randn(c, device=device)).to(pdtype).requires_grad_() if beta else None
    return x, alpha, gamma, b


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("param_fp32", [True, False])
@pytest.mark.parametrize("beta", [True, False])
def test_matches_float64_reference(device, dtype, param_fp32, beta):
    x, alpha, gamma, b = leaves(device, dtype, torch.float32 if param_fp32 else dtype, 96, beta)
    dy = torch.randn(x.shape, device=device).to(dtype)
    y = tigon.ops.dyt(x, alpha, gamma, b)
    assert y.dtype == dtype and y.shape == x.shape
    y.backward(dy)
    got = [y, x.grad, alpha.grad, gamma.grad] + ([b.grad] if beta else [])
    ref_leaves = [t.detach().double().requires_grad_() for t in (x, alpha, gamma)] + (
        [b.detach().double().requires_grad_()] if beta else []
    )
    ref = reference(*ref_leaves[:3], ref_leaves[3] if beta else None)
    ref.backward(dy.double())
    want = [ref] + [t.grad for t in ref_leaves]
    names = ["y", "dx", "dalpha", "dgamma", "dbeta"]
    for name, g, w, leaf in zip(names, got, want, [x, x, alpha, gamma, b]):
        assert g.dtype == leaf.dtype, name
        # sums over 123 rows (dgamma, dbeta) and every element (dalpha) in fp32, stored in the parameter's dtype
        assert_close(g, w, name=name, scale=max(1.0, w.abs().max().item()) if name != "dalpha" else w.abs().item() + 1)


@pytest.mark.parametrize("device", DEVICES)
def test_module_cast_to_bf16_and_strided_input(device):
    m = tigon.nn.DyT(64, init_alpha=0.8).to(device)
    assert m.alpha.shape == (1,) and m.gamma.shape == (64,) and m.beta.shape == (64,)
    m = m.to(torch.bfloat16)
    x = torch.randn(10, 128, device=device, dtype=torch.bfloat16)[:, ::2].requires_grad_()  # stride 2: copied
    y = m(x)
    y.float().sum().backward()
    assert m.alpha.grad.dtype == torch.bfloat16 and m.gamma.grad.dtype == torch.bfloat16
    assert_close(y, torch.tanh(0.8 * x.double()), name="y")
    no_beta = tigon.nn.DyT(64, beta=False).to(device)
    assert no_beta.beta is None and "beta=False" in repr(no_beta)


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph_equals_eager(device):
    x, alpha, gamma, b = leaves(device, torch.bfloat16, torch.float32, 64)

    def f(x, alpha, gamma, b):
        return tigon.ops.dyt(x * 1.5, alpha, gamma, b)

    eager = f(x, alpha, gamma, b)
    eager.float().sum().backward()
    grads = [t.grad.clone() for t in (x, alpha, gamma, b)]
    for t in (x, alpha, gamma, b):
        t.grad = None
    compiled = torch.compile(f, fullgraph=True)(x, alpha, gamma, b)
    compiled.float().sum().backward()
    assert torch.equal(compiled, eager)
    for g, t in zip(grads, (x, alpha, gamma, b)):
        assert torch.equal(g, t.grad)


def test_bad_input_names_the_argument():
    x, alpha, gamma, b = leaves("cpu", torch.float32, torch.float32, 8)
    cases = [
        (lambda: tigon.ops.dyt([1.0], alpha, gamma), TypeError, "'x'"),
        (lambda: tigon.ops.dyt(x, 0.5, gamma), TypeError, "'alpha'"),
        (lambda: tigon.ops.dyt(x, torch.ones(2), gamma), ValueError, "'alpha'"),
        (lambda: tigon.ops.dyt(x, alpha, torch.ones(7)), ValueError, "'gamma'"),
        (lambda: tigon.ops.dyt(x, alpha, gamma, torch.ones(9)), ValueError, "'beta'"),
        (lambda: tigon.ops.dyt(torch.tensor(1.0), alpha, gamma), ValueError, "'x'"),
        (lambda: tigon.ops.dyt(x.long(), alpha, gamma), TypeError, "'x'"),
    ]
    for call, err, match in cases:
        with pytest.raises(err, match=match):
            call()
