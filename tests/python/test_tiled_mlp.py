"""Tiled MLP (tigon.nn.tiled_mlp, TiledSwiGLUMLP, TiledGEGLUMLP, TiledMLP): outputs and every gradient equal the
untiled MLP's (the same math, summed over shards), for any shard count including one and uneven ones, leading
dimensions, frozen parameters, inputs without grad; the state dict is the plain MLP's; bad input names the argument;
on the GPU the forward + backward peak falls with the shards."""

import types

import pytest
import torch
from torch import nn

import tigon
from conftest import DEVICES, needs_cuda
from tolerances import assert_close


def config(hidden=32, inter=80, act="silu"):
    return types.SimpleNamespace(hidden_size=hidden, intermediate_size=inter, hidden_act=act, mlp_bias=False)


def pair(cls, base, device, dtype, **kw):
    torch.manual_seed(0)
    cfg = config(act="gelu_pytorch_tanh" if base is tigon.nn.GemmaMLP else "silu")
    ref = base(cfg).to(device, dtype)
    tiled = cls(cfg, **kw).to(device, dtype)
    tiled.load_state_dict(ref.state_dict())
    return ref, tiled


def run(module, x, dy):
    x = x.detach().requires_grad_(x.requires_grad)
    y = module(x)
    y.backward(dy)
    grads = {n: p.grad for n, p in module.named_parameters() if p.requires_grad}
    return y, x.grad, grads


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(
    "cls,base", [(tigon.nn.TiledSwiGLUMLP, tigon.nn.LlamaMLP), (tigon.nn.TiledGEGLUMLP, tigon.nn.GemmaMLP)]
)
@pytest.mark.parametrize("shards", [None, 1, 3, 7, 1000])
def test_matches_the_untiled_mlp(device, dtype, cls, base, shards):
    ref, tiled = pair(cls, base, device, dtype, num_shards=shards)
    x = torch.randn(2, 37, 32, device=device, dtype=dtype, requires_grad=True)
    dy = torch.randn(2, 37, 32, device=device, dtype=dtype)
    y_ref, dx_ref, g_ref = run(ref, x, dy)
    y, dx, g = run(tiled, x, dy)
    assert_close(y, y_ref, name="out")
    assert_close(dx, dx_ref, name="dx")
    assert g.keys() == g_ref.keys() and len(g) == 3
    for name in g:  # fp32: summing shards is one more rounding per shard; bf16 adds one per shard in the param dtype
        assert_close(
            g[name], g_ref[name], name=name, tol=dict(atol=2e-5 * 8, rtol=2e-5 * 8) if dtype == torch.float32 else None
        )


@pytest.mark.parametrize("device", DEVICES)
def test_frozen_parameters_and_inputs_without_grad(device):
    ref, tiled = pair(tigon.nn.TiledSwiGLUMLP, tigon.nn.LlamaMLP, device, torch.float32, num_shards=4)
    for m in (ref, tiled):
        m.up_proj.weight.requires_grad_(False)
    x = torch.randn(50, 32, device=device)  # no grad: only the parameters' gradients
    dy = torch.randn(50, 32, device=device)
    y_ref, _, g_ref = run(ref, x, dy)
    y, dx, g = run(tiled, x, dy)
    assert dx is None and set(g) == {"gate_proj.weight", "down_proj.weight"}
    assert tiled.up_proj.weight.grad is None
    for name in g:
        assert_close(g[name], g_ref[name], name=name, tol=dict(atol=1e-4, rtol=1e-4))
    with torch.no_grad():  # inference: no autograd node, the same output
        assert_close(tiled(x), y_ref, name="no_grad out")


@pytest.mark.parametrize("device", DEVICES)
def test_functional_and_wrapper_with_gradient_accumulation(device):
    torch.manual_seed(1)
    mlp = nn.Sequential(nn.Linear(16, 48), nn.GELU(), nn.Linear(48, 24)).to(device)
    wrapped = tigon.nn.TiledMLP(mlp, num_shards=5)
    x = torch.randn(3, 11, 16, device=device, requires_grad=True)
    y = wrapped(x)
    assert y.shape == (3, 11, 24)
    (y.square().sum() + wrapped(x).sum()).backward()  # two uses in one graph: gradients add
    got = [p.grad.clone() for p in mlp.parameters()] + [x.grad.clone()]
    for p in mlp.parameters():
        p.grad = None
    x.grad = None
    (mlp(x).square().sum() + mlp(x).sum()).backward()
    want = [p.grad for p in mlp.parameters()] + [x.grad]
    for a, b in zip(got, want):
        assert_close(a, b, tol=dict(atol=1e-4, rtol=1e-4))
    out = tigon.nn.tiled_mlp(mlp, x, list(mlp.parameters()))  # default shards: ceil(33 / 16) = 3
    assert_close(out, mlp(x), name="functional")


def test_state_dict_is_the_plain_mlps():
    ref, tiled = pair(tigon.nn.TiledSwiGLUMLP, tigon.nn.LlamaMLP, "cpu", torch.float32)
    assert tiled.state_dict().keys() == ref.state_dict().keys()
    assert tigon.nn.tiled_mlp.__module__ == "tigon.nn.tiled_mlp"


def test_bad_input_names_the_argument():
    mlp = nn.Linear(4, 4)
    with pytest.raises(ValueError, match="'num_shards'"):
        tigon.nn.tiled_mlp(mlp, torch.randn(3, 4), list(mlp.parameters()), num_shards=0)
    with pytest.raises(ValueError, match="'num_shards'"):
        tigon.nn.tiled_mlp(mlp, torch.randn(3, 4), list(mlp.parameters()), num_shards=2.5)
    with pytest.raises(TypeError, match="'x'"):
        tigon.nn.tiled_mlp(mlp, [1.0, 2.0], list(mlp.parameters()))


@needs_cuda
def test_cuda_peak_memory_falls_with_shards():
    cfg = config(hidden=1024, inter=4096)
    mlp = tigon.nn.TiledSwiGLUMLP(cfg, num_shards=1).cuda().to(torch.bfloat16)
    x = torch.randn(16384, 1024, device="cuda", dtype=torch.bfloat16, requires_grad=True)

    def peak(shards):
        mlp.num_shards = shards
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        mlp(x).sum().backward()
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - base

    one, sixteen = peak(1), peak(16)
    assert sixteen < 0.5 * one, (one, sixteen)  # the [rows, 4096] intermediates shrink 16×
