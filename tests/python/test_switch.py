"""tigon.swap_modules, tigon.enable / disable / enabled: which modules are swapped (and which are not), that the
swapped model keeps its parameters, state dict and isinstance checks and computes what the original computes, and
that disable() puts back exactly what enable() changed."""

import copy
import io
import sys

import pytest
import torch
from torch import nn

import tigon
import tigon.switch as switch
from conftest import DEVICES
from tolerances import assert_close


def rebound():
    """Every attribute enable() may rebind, with the object it holds now."""
    names = [(path, attr) for path, attr, _ in switch._NAMES]
    return {(p, a): getattr(sys.modules[p], a) for p, a in names} | {
        ("torch.nn.Sequential", "__init__"): nn.Sequential.__dict__["__init__"]
    }


def mlp(device="cpu", dtype=torch.float32):
    return nn.Sequential(
        nn.Linear(16, 32),
        nn.GELU(approximate="tanh"),
        nn.LayerNorm(32),
        nn.Linear(32, 32),
        nn.ReLU(inplace=True),
        nn.Linear(32, 24),
        nn.SiLU(),
        nn.RMSNorm(24),
        nn.Linear(24, 8),
    ).to(device=device, dtype=dtype)


def test_enable_disable_round_trip_restores_exactly():
    before = rebound()
    assert not switch.is_enabled()
    tigon.enable()
    try:
        during = rebound()
        assert during[("torch.nn", "LayerNorm")] is switch.LayerNorm
        assert during[("torch.nn.modules.normalization", "RMSNorm")] is switch.RMSNorm
        assert during[("torch.nn", "ReLU")] is tigon.nn.ReLU
        assert during[("torch.nn.modules.activation", "Softmax")] is tigon.nn.Softmax
        assert during[("torch.nn.Sequential", "__init__")] is not before[("torch.nn.Sequential", "__init__")]
        tigon.enable()  # again: nothing more changes
        assert rebound() == during
    finally:
        tigon.disable()
    after = rebound()
    assert after.keys() == before.keys()
    for key in before:
        assert after[key] is before[key], key
    assert nn.LayerNorm.__module__ == "torch.nn.modules.normalization"
    tigon.disable()  # again: nothing happens
    assert rebound() == before


def test_enabled_block_restores_even_on_error_and_nests():
    before = rebound()
    with pytest.raises(RuntimeError, match="inside"):
        with tigon.enabled():
            raise RuntimeError("inside")
    assert rebound() == before
    with tigon.enabled():
        with tigon.enabled():
            pass
        assert switch.is_enabled()  # the inner block leaves the outer one's switch on
    assert not switch.is_enabled() and rebound() == before


@pytest.mark.parametrize("device", DEVICES)
def test_models_built_while_enabled_match_the_originals(device):
    torch.manual_seed(0)
    ref = mlp(device)
    with tigon.enabled():
        ours = mlp(device)
    types = [type(m) for m in ours]
    assert types == [
        tigon.nn.Linear,
        nn.Identity,
        switch.LayerNorm,
        tigon.nn.Linear,
        nn.Identity,
        tigon.nn.Linear,
        nn.Identity,
        switch.RMSNorm,
        nn.Linear,
    ]
    assert [m.activation for m in ours if isinstance(m, tigon.nn.Linear)] == ["gelu_tanh", "relu", "silu"]
    assert ours.state_dict().keys() == ref.state_dict().keys()
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(5, 16, device=device)
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    ya, yb = ours(xa), ref(xb)
    assert_close(ya, yb.double(), name="y")
    ya.sum().backward()
    yb.sum().backward()
    assert_close(xa.grad, xb.grad.double(), name="dx")
    for (name, p), q in zip(ref.named_parameters(), ours.parameters()):
        assert_close(q.grad, p.grad.double(), name=f"d{name}")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_swap_modules_keeps_parameters_and_outputs(device, dtype):
    model = nn.Sequential(nn.Linear(12, 16), nn.Sequential(*mlp()[:-1]), nn.Linear(24, 4)).to(device, dtype)
    ref = copy.deepcopy(model)
    params = {n: p for n, p in model.named_parameters()}
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    out = tigon.swap_modules(model)
    assert out is model
    # the same Parameter objects (the optimizer built before still trains the model), the same state dict
    assert {n: p for n, p in model.named_parameters()} == params
    assert all(isinstance(m, torch.nn.Linear) for m in (model[1][0], model[1][3], model[1][5]))
    assert isinstance(model[1][2], nn.LayerNorm) and isinstance(model[1][7], nn.RMSNorm)
    x = torch.randn(3, 7, 12, device=device, dtype=dtype)
    assert_close(model(x), ref(x).double(), dtype, name="y")
    model(x).float().sum().backward()
    opt.step()
    assert not torch.equal(model[0].weight, ref[0].weight)


def test_unsupported_and_subclassed_modules_stay():
    class MyLinear(nn.Linear):
        pass

    model = nn.Sequential(
        MyLinear(4, 4),
        nn.ReLU(),
        nn.LayerNorm((4, 4)),  # two normalised dimensions
        nn.ReLU(),  # not in place and not after a Linear: torch's is as good
        nn.Linear(4, 4),
        nn.Tanh(),  # no fused form
        nn.Conv1d(4, 4, 1),
    )
    kinds = [type(m) for m in model]
    tigon.swap_modules(model)
    assert [type(m) for m in model] == kinds
    # the module itself, when it is one that is swapped
    ln = nn.LayerNorm(8)
    assert type(tigon.swap_modules(ln)) is switch.LayerNorm and type(ln) is nn.LayerNorm
    relu = nn.ReLU(inplace=True)
    assert type(tigon.swap_modules(relu)) is tigon.nn.ReLU
    with pytest.raises(TypeError, match="'model'"):
        tigon.swap_modules("not a model")


def test_a_linear_shared_outside_its_sequential_keeps_its_forward():
    lin = nn.Linear(6, 6)
    model = nn.Sequential(lin, nn.ReLU())
    tigon.swap_modules(model)
    x = -torch.ones(2, 6) * 3
    assert torch.equal(lin(x), nn.functional.linear(x, lin.weight, lin.bias))  # no ReLU applied to the shared module
    assert model[0].weight is lin.weight


@pytest.mark.parametrize("device", DEVICES)
def test_conv_relu_pairs_fuse_and_still_train(device):
    torch.manual_seed(3)
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    model = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 8, 1)).to(device, dtype)
    x = torch.randn(2, 16, 7, 7, device=device, dtype=dtype)
    with torch.no_grad():
        want = model.double()(x.double())
    model.to(dtype)
    weight = model[0].weight
    tigon.swap_modules(model)
    assert type(model[0]) is tigon.nn.Conv2d and model[0].activation == "relu" and type(model[1]) is nn.Identity
    assert type(model[2]) is nn.Conv2d and model[0].weight is weight  # no ReLU after it: left as it was
    with torch.no_grad():
        assert_close(model(x), want, dtype=dtype, name="fused (kernel)")
    y = model(x)  # gradients wanted: torch's convolution and ReLU, and the parameters get them
    y.float().sum().backward()
    assert weight.grad is not None
    assert_close(y.detach(), want, dtype=dtype, name="fused (torch path)")


def test_transformer_layers_and_pickled_models_loaded_while_enabled():
    layer = nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, dropout=0.0, batch_first=True)
    buf = io.BytesIO()
    torch.save(layer, buf)
    with tigon.enabled():
        built = nn.TransformerEncoderLayer(16, 2, dim_feedforward=32, dropout=0.0, batch_first=True)
        buf.seek(0)
        loaded = torch.load(buf, weights_only=False)
    for m in (built, loaded):
        assert type(m.norm1) is switch.LayerNorm and type(m.norm2) is switch.LayerNorm
    loaded.eval(), layer.eval()
    x = torch.randn(2, 5, 16)
    assert_close(loaded(x), layer(x).double(), name="encoder layer")


@pytest.mark.parametrize("device", DEVICES)
def test_softmax_is_swapped_and_falls_back(device):
    model = nn.Sequential(nn.Linear(8, 8), nn.Softmax(dim=-1)).to(device)
    ref = copy.deepcopy(model)
    tigon.swap_modules(model)
    assert type(model[1]) is tigon.nn.Softmax and isinstance(model[1], nn.Softmax)
    x = torch.randn(5, 8, device=device)
    assert_close(model(x), ref(x).double(), name="softmax")
    legacy = tigon.nn.Softmax()  # dim=None: torch's choice (dim 1 of a 2-D input)
    assert_close(legacy(x), torch.softmax(x.double(), 1), name="dim None")
    assert_close(tigon.nn.Softmax(0)(x.double()), torch.softmax(x.double(), 0), torch.float64, name="fp64: torch's")


def test_norms_fall_back_to_torch_where_the_kernels_do_not_apply():
    ln, rms = switch.LayerNorm(8, dtype=torch.float64), switch.RMSNorm(8, eps=None)
    x = torch.randn(3, 8, dtype=torch.float64)
    torch.testing.assert_close(ln(x), nn.functional.layer_norm(x, (8,), ln.weight, ln.bias))
    y = torch.randn(3, 8)
    torch.testing.assert_close(rms(y), nn.functional.rms_norm(y, (8,), rms.weight), atol=1e-6, rtol=1e-5)
