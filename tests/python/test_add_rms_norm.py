"""tigon.ops.add_rms_norm and tigon.nn.FusedAddRMSNorm (the residual add fused in front of RMSNorm) against a pre-norm
decoder layer's two steps in float64: both outputs, the gradients of x, residual and weight when both outputs feed
the loss, one of them alone, odd shapes, strided rows, torch.compile, CUDA graphs and bad input."""

import pytest
import torch

import tigon
from conftest import DEVICES, needs_cuda
from tolerances import assert_close


def reference(x, residual, w, eps, offset):
    """h = (residual + x) in x's dtype, then Hugging Face's RMSNorm of h in float64 (through the rounded h, as the
    two-step layer computes it)."""
    leaves = [t.detach().double().requires_grad_(True) for t in (x, residual)]
    w64 = None if w is None else w.detach().double().requires_grad_(True)
    h = leaves[0] + leaves[1]
    h = h + (h.detach().to(x.dtype).double() - h.detach())  # the add's rounding, with the exact gradient
    y = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    if w64 is not None:
        y = y * (offset + w64)
    return y, h, leaves, w64


def inputs(shape, dtype, device, mode="llama", row_pad=0):
    cols = shape[-1]
    x = (torch.randn(*shape[:-1], cols + row_pad, device=device) * 1.5).to(dtype)[..., :cols]
    residual = (torch.randn(*shape, device=device) * 2).to(dtype)
    offset = 1.0 if mode == "gemma" else 0.0
    w = (torch.randn(cols, device=device) * 0.3 + 1.0 - offset).to(dtype)
    return x.requires_grad_(True), residual.requires_grad_(True), w.requires_grad_(True), offset


def check(x, residual, w, offset, mode, use=("y", "h"), eps=1e-6):
    y, h = tigon.ops.add_rms_norm(x, residual, w, eps, offset, mode)
    y_ref, h_ref, (x64, r64), w64 = reference(x, residual, w, eps, offset)
    assert h.dtype == x.dtype
    assert_close(h, h_ref, x.dtype, name="h")
    assert_close(y, y_ref, x.dtype, name="y")
    dy, dh = torch.randn_like(y), torch.randn_like(h)
    loss = sum((out * g.to(out.dtype)).sum() for name, out, g in (("y", y, dy), ("h", h, dh)) if name in use)
    loss_ref = sum((out * g.double()).sum() for name, out, g in (("y", y_ref, dy), ("h", h_ref, dh)) if name in use)
    loss.backward()
    loss_ref.backward()
    assert_close(x.grad, x64.grad, name="dx")
    assert_close(residual.grad, r64.grad, name="dresidual")
    if w is not None and "y" in use:
        assert_close(w.grad, w64.grad, name="dw")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", ["llama", "gemma", "none"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", [(5, 123), (2, 3, 64), (64, 4096), (3, 65537)])
def test_matches_the_add_then_rms_norm_in_float64(device, mode, dtype, shape):
    check(*inputs(shape, dtype, device, mode), mode)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("use", [("y",), ("h",)])
def test_one_output_alone(device, use):
    x, residual, w, offset = inputs((6, 256), torch.bfloat16, device)
    check(x, residual, w, offset, "llama", use=use)


@pytest.mark.parametrize("device", DEVICES)
def test_strided_rows_and_no_weight(device):
    x, residual, _, _ = inputs((7, 257), torch.bfloat16, device, row_pad=9)
    assert not x.is_contiguous()
    check(x, residual, None, 0.0, "llama")


@pytest.mark.parametrize("device", DEVICES)
def test_module_is_rms_norm_with_the_residual_add(device):
    norm = tigon.nn.FusedAddRMSNorm(64, eps=1e-5).to(device)
    plain = tigon.nn.RMSNorm(64, eps=1e-5).to(device)
    plain.load_state_dict(norm.state_dict())
    x, residual = torch.randn(3, 5, 64, device=device), torch.randn(3, 5, 64, device=device)
    y, h = norm(x, residual)
    torch.testing.assert_close(h, x + residual)
    torch.testing.assert_close(y, plain(x + residual))


def _step(fn, x, residual, w):
    y, h = fn(x, residual, w, 1e-6)
    return (y * 2 + h).sum()


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_fullgraph_equals_eager(device):
    x, residual, w, _ = inputs((8, 128), torch.float32, device)
    grads = torch.autograd.grad(_step(tigon.ops.add_rms_norm, x, residual, w), (x, residual, w))
    compiled = torch.compile(lambda *a: _step(tigon.ops.add_rms_norm, *a), fullgraph=True)
    grads_c = torch.autograd.grad(compiled(x, residual, w), (x, residual, w))
    for a, b in zip(grads, grads_c):
        torch.testing.assert_close(a, b)


@needs_cuda
def test_cuda_graph_replay_equals_eager():
    x, residual, w, _ = inputs((16, 1024), torch.bfloat16, "cuda")
    eager = torch.autograd.grad(_step(tigon.ops.add_rms_norm, x, residual, w), (x, residual, w))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            torch.autograd.grad(_step(tigon.ops.add_rms_norm, x, residual, w), (x, residual, w))
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = torch.autograd.grad(_step(tigon.ops.add_rms_norm, x, residual, w), (x, residual, w))
    graph.replay()
    torch.cuda.synchronize()
    for a, b in zip(eager, captured):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize(
    "args,exc,arg",
    [
        (lambda x, r, w: (x, r.half(), w), TypeError, "residual"),
        (lambda x, r, w: (x, r[:, :8], w), ValueError, "residual"),
        (lambda x, r, w: (x, "r", w), TypeError, "residual"),
        (lambda x, r, w: (x, r, w[:8]), ValueError, "weight"),
    ],
)
def test_bad_input_names_the_argument(args, exc, arg):
    x, residual, w = torch.randn(4, 16), torch.randn(4, 16), torch.ones(16)
    with pytest.raises(exc, match=f"'{arg}'"):
        tigon.ops.add_rms_norm(*args(x, residual, w))
