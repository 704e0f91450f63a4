"""tigon.ops.relu / gelu / silu / relu_squared and the tigon.nn activation modules against torch in float64: output and gradient for
every activation, dtype and in_place option, odd and strided shapes, torch.compile, bad input. The in-place safety
rules (a saver of the overwritten input raises, leaves refused) are in test_in_place_safety.py."""

import pytest
import torch
import torch.nn.functional as F

import tigon
from conftest import DEVICES
from tigon.ops import gelu, relu, relu_squared, silu
from tolerances import assert_close

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
KINDS = {
    "relu": (lambda x, **kw: relu(x, **kw), F.relu),
    "gelu": (lambda x, **kw: gelu(x, **kw), F.gelu),
    "gelu_tanh": (lambda x, **kw: gelu(x, approximate="tanh", **kw), lambda x: F.gelu(x, approximate="tanh")),
    "silu": (lambda x, **kw: silu(x, **kw), F.silu),
    "relu_squared": (lambda x, **kw: relu_squared(x, **kw), lambda x: F.relu(x) ** 2),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(3, 1001), (1,), (), (5, 7, 33), (8, 4096), (2, 0, 16)])
@pytest.mark.parametrize("in_place", [False, True])
def test_matches_float64_reference(device, kind, dtype, shape, in_place):
    ours, ref = KINDS[kind]
    leaf = (torch.randn(shape, device=device) * 3).to(dtype).requires_grad_()
    x = leaf * 1 if in_place else leaf  # in place takes intermediates
    y = ours(x, in_place=in_place)
    assert y.shape == leaf.shape and y.dtype == dtype
    if in_place:
        assert y.data_ptr() == x.data_ptr() or y.numel() == 0
    x64 = leaf.detach().double().requires_grad_()
    y_ref = ref(x64)
    assert_close(y, y_ref, dtype, name="y")
    dy = torch.randn_like(y)
    (g,) = torch.autograd.grad(y, leaf, dy)
    (g_ref,) = torch.autograd.grad(y_ref, x64, dy.double())
    assert_close(g, g_ref, dtype, name="dx")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("in_place", [False, True])
def test_non_row_layouts(device, kind, in_place):
    # a transposed view (no row layout): computed in a copy, written back when in place
    ours, ref = KINDS[kind]
    leaf = torch.randn(16, 24, device=device, requires_grad=True)
    x = (leaf * 1).t()
    y = ours(x, in_place=in_place)
    if in_place:
        assert y.data_ptr() == x.data_ptr()
    leaf64 = leaf.detach().double().requires_grad_()
    y_ref = ref(leaf64.t())
    assert_close(y, y_ref, name="y")
    dy = torch.randn_like(y)
    (g,) = torch.autograd.grad(y, leaf, dy)
    (g_ref,) = torch.autograd.grad(y_ref, leaf64, dy.double())
    assert_close(g, g_ref, name="dx")


@pytest.mark.parametrize("device", DEVICES)
def test_in_place_writes_over_the_input_without_grad(device):
    x = torch.randn(4, 64, device=device)
    expect = F.silu(x.double())
    with torch.no_grad():
        out = silu(x, in_place=True)
    assert out.data_ptr() == x.data_ptr()
    assert_close(x, expect, name="x after silu in place")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("in_place", [False, True])
def test_torch_compile_fullgraph_equals_eager(device, in_place):
    x = torch.randn(32, 256, device=device, dtype=torch.bfloat16, requires_grad=True)
    dy = torch.randn(32, 256, device=device, dtype=torch.bfloat16)

    def f(x):
        return silu(relu(x * 2, in_place=in_place) - 1, in_place=in_place) * 3

    def step(fn):
        y = fn(x)
        return (y, *torch.autograd.grad(y, x, dy))

    eager = step(f)
    compiled = step(torch.compile(f, fullgraph=True, backend="aot_eager" if device == "cpu" else "inductor"))
    for a, b in zip(eager, compiled):
        assert torch.equal(a, b)


@pytest.mark.parametrize("device", DEVICES)
def test_modules_are_drop_ins(device):
    x = torch.randn(6, 40, device=device)
    pairs = [
        (tigon.nn.ReLU(), torch.nn.ReLU()),
        (tigon.nn.ReLU(inplace=True), torch.nn.ReLU(inplace=True)),
        (tigon.nn.GELU(), torch.nn.GELU()),
        (tigon.nn.GELU(approximate="tanh"), torch.nn.GELU(approximate="tanh")),
        (tigon.nn.SiLU(), torch.nn.SiLU()),
        (tigon.nn.SiLU(inplace=True), torch.nn.SiLU(inplace=True)),
    ]
    for ours, ref in pairs:
        assert isinstance(ours, type(ref)) and repr(ours) == repr(ref)
        leaf_a, leaf_b = x.clone().requires_grad_(), x.clone().requires_grad_()
        ya, yb = ours(leaf_a * 1), ref(leaf_b * 1)
        assert_close(ya, yb.double(), name=repr(ours))
        ya.sum().backward()
        yb.sum().backward()
        assert_close(leaf_a.grad, leaf_b.grad.double(), name=f"d {ours!r}")
    # float64 is not ours: torch's own forward
    assert torch.equal(tigon.nn.SiLU()(x.double()), F.silu(x.double()))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("inplace", [False, True])
def test_relu_squared_module(device, inplace):
    module = tigon.nn.ReLUSquared(inplace=inplace)
    assert repr(module) == f"ReLUSquared({'inplace=True' if inplace else ''})"
    leaf = torch.randn(6, 40, device=device, dtype=torch.bfloat16, requires_grad=True)
    x = leaf * 1
    y = module(x)
    assert (y.data_ptr() == x.data_ptr()) == inplace
    x64 = leaf.detach().double().requires_grad_()
    y_ref = F.relu(x64) ** 2
    assert_close(y, y_ref, torch.bfloat16, name="y")
    dy = torch.randn_like(y)
    assert_close(torch.autograd.grad(y, leaf, dy)[0], torch.autograd.grad(y_ref, x64, dy.double())[0], name="dx")
    assert torch.equal(module(x64.detach()), F.relu(x64.detach()) ** 2)  # float64: torch's own


@pytest.mark.parametrize("device", DEVICES)
def test_relu_squared_keeps_only_its_output(device):
    # the one tensor saved is the output, whatever the input: no copy of x survives the forward
    x = torch.randn(64, 256, device=device, dtype=torch.bfloat16, requires_grad=True) * 1
    y = relu_squared(x)
    saved = [t for t in y.grad_fn.saved_tensors]
    assert len(saved) == 1 and saved[0].data_ptr() == y.data_ptr()


@pytest.mark.parametrize(
    "fn,kwargs,exc,arg",
    [
        (relu, dict(x=[1.0]), TypeError, "'x'"),
        (relu, dict(x=torch.randn(3), in_place=1), TypeError, "'in_place'"),
        (relu, dict(x=torch.ones(3, dtype=torch.int64)), TypeError, "'x'"),
        (gelu, dict(x=torch.randn(3), approximate="erf"), ValueError, "'approximate'"),
        (silu, dict(x=torch.randn(3, dtype=torch.float64)), TypeError, "'x'"),
        (relu_squared, dict(x=torch.ones(3, dtype=torch.int64)), TypeError, "'x'"),
        (relu_squared, dict(x=torch.randn(3), in_place="yes"), TypeError, "'in_place'"),
    ],
)
def test_bad_input_names_the_argument(fn, kwargs, exc, arg):
    with pytest.raises(exc, match=arg):
        fn(**kwargs)
