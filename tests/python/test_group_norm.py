"""GroupNorm (tigon.ops.group_norm, tigon.nn.GroupNorm) against torch's group_norm in float64: the output and every
gradient (x, weight, bias), with and without affine parameters, parameters in fp32 or x's dtype, spatial shapes from
none ([N, C]) to 2-D, non-contiguous input, the module swap, torch.compile(fullgraph=True), bad input naming the
argument."""

import pytest
import torch
import torch.nn.functional as F

import tigon
from conftest import DEVICES
from tolerances import assert_close


def leaves(device, dtype, pdtype, shape, affine=True):
    torch.manual_seed(0)
    x = (torch.randn(*shape, device=device) * 2 + 3).to(dtype).requires_grad_()  # a mean well away from 0
    c = shape[1]
    w = (1 + 0.3 * torch.randn(c, device=device)).to(pdtype).requires_grad_() if affine else None
    b = (0.2 * torch.randn(c, device=device)).to(pdtype).requires_grad_() if affine else None
    return x, w, b


def double_leaf(t):
    return None if t is None else t.detach().double().requires_grad_()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("param_fp32", [True, False])
@pytest.mark.parametrize("shape,groups", [((4, 32, 96), 8), ((3, 12, 5, 7), 3), ((9, 48), 16), ((2, 64, 130), 1)])
def test_matches_float64_reference(device, dtype, param_fp32, shape, groups):
    x, w, b = leaves(device, dtype, torch.float32 if param_fp32 else dtype, shape)
    dy = torch.randn(x.shape, device=device).to(dtype)
    y = tigon.ops.group_norm(x, groups, w, b)
    assert y.dtype == dtype and y.shape == x.shape
    y.backward(dy)
    xd, wd, bd = double_leaf(x), double_leaf(w), double_leaf(b)
    ref = F.group_norm(xd, groups, wd, bd, 1e-5)
    ref.backward(dy.double())
    assert_close(y, ref, name="y")
    # dx = rstd * (a difference of terms the size of dy * w): its rounding is relative to those terms
    rstd = 1 / x.detach().double().reshape(shape[0], groups, -1).std(-1, unbiased=False).max().item()
    assert_close(x.grad, xd.grad, name="dx", scale=max(1.0, rstd * dy.abs().max().item()))
    for name, g, want, leaf in (("dweight", w.grad, wd.grad, w), ("dbias", b.grad, bd.grad, b)):
        assert g.dtype == leaf.dtype, name
        assert_close(g, want, name=name)


@pytest.mark.parametrize("device", DEVICES)
def test_without_affine_and_strided_input(device):
    x, _, _ = leaves(device, torch.bfloat16, torch.float32, (4, 16, 40), affine=False)
    strided = x.detach()[:, :, ::2].requires_grad_()  # stride 2 in the last dimension: copied
    y = tigon.ops.group_norm(strided, 4)
    dy = torch.randn_like(y)
    y.backward(dy)
    xd = double_leaf(strided)
    ref = F.group_norm(xd, 4)
    ref.backward(dy.double())
    assert_close(y, ref, name="y")
    assert_close(strided.grad, xd.grad, name="dx", scale=4.0)
    bias_only = torch.randn(16, device=device, requires_grad=True)  # bias alone: dbias = 4 samples x 40 positions
    tigon.ops.group_norm(x, 2, None, bias_only).float().sum().backward()
    assert_close(bias_only.grad, torch.full((16,), 160.0, dtype=torch.float64, device=device), name="dbias")


@pytest.mark.parametrize("device", DEVICES)
def test_module_and_swap(device):
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.GroupNorm(4, 8)).to(device)
    x = torch.randn(2, 3, 10, 10, device=device)
    want = m(x)
    tigon.swap_modules(m)
    assert type(m[1]) is tigon.nn.GroupNorm and isinstance(m[1], torch.nn.GroupNorm)
    assert_close(m(x), want.double(), name="swapped")
    with tigon.enabled():
        built = torch.nn.GroupNorm(2, 8)
    assert type(built) is tigon.nn.GroupNorm and torch.nn.GroupNorm is not tigon.nn.GroupNorm
    # a channels_last input takes torch's forward, so the output's layout is torch's (kept on the CPU, not on CUDA)
    cl = x.to(memory_format=torch.channels_last)
    m2 = tigon.nn.GroupNorm(1, 3).to(device)
    got, ref = m2(cl), torch.nn.functional.group_norm(cl, 1, m2.weight, m2.bias, m2.eps)
    assert got.stride() == ref.stride()
    assert_close(got, ref.double(), name="channels_last")


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph_equals_eager(device):
    x, w, b = leaves(device, torch.bfloat16, torch.float32, (2, 16, 64))

    def f(x, w, b):
        return tigon.ops.group_norm(x * 1.5, 4, w, b)

    eager = f(x, w, b)
    eager.float().sum().backward()
    grads = [t.grad.clone() for t in (x, w, b)]
    for t in (x, w, b):
        t.grad = None
    compiled = torch.compile(f, fullgraph=True)(x, w, b)
    compiled.float().sum().backward()
    assert torch.equal(compiled, eager)
    for g, t in zip(grads, (x, w, b)):
        assert torch.equal(g, t.grad)


def test_bad_input_names_the_argument():
    x, w, b = leaves("cpu", torch.float32, torch.float32, (2, 8, 3))
    cases = [
        (lambda: tigon.ops.group_norm([1.0], 2), TypeError, "'x'"),
        (lambda: tigon.ops.group_norm(x.long(), 2), TypeError, "'x'"),
        (lambda: tigon.ops.group_norm(x[0, 0], 2), ValueError, "'x'"),
        (lambda: tigon.ops.group_norm(x, 3), ValueError, "'num_groups'"),
        (lambda: tigon.ops.group_norm(x, 0), ValueError, "'num_groups'"),
        (lambda: tigon.ops.group_norm(x, 2.0), ValueError, "'num_groups'"),
        (lambda: tigon.ops.group_norm(x, 2, torch.ones(7)), ValueError, "'weight'"),
        (lambda: tigon.ops.group_norm(x, 2, w, torch.ones(9)), ValueError, "'bias'"),
        (lambda: tigon.ops.group_norm(x, 2, w, "b"), TypeError, "'bias'"),
        (lambda: tigon.ops.group_norm(x, 2, eps=-1.0), ValueError, "'eps'"),
    ]
    for call, err, match in cases:
        with pytest.raises(err, match=match):
            call()
