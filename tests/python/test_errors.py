"""One validation: the C API checks dtypes, shapes, strides and devices and names the argument; Python raises its
message as a TypeError (dtype) or a ValueError (anything else about the argument)."""

import importlib

import pytest
import torch

import tigon
from tigon import _lib
from tigon.ops import cross_entropy, fused_linear_cross_entropy, layer_norm, rms_norm, rope, swiglu

x8 = lambda dtype=torch.float32: torch.randn(4, 8).to(dtype)  # noqa: E731
cases = {
    "rms_norm": lambda x, w: rms_norm(x, w),
    "layer_norm": lambda x, w: layer_norm(x, w),
    "swiglu_a": lambda x, w: swiglu(x, x8()),
    "cross_entropy": lambda x, w: cross_entropy(x, torch.zeros(4, dtype=torch.int64)),
    "fused_linear_cross_entropy": lambda x, w: fused_linear_cross_entropy(x, torch.randn(5, 8), torch.zeros(4).long()),
}


@pytest.mark.parametrize("name", sorted(cases))
@pytest.mark.parametrize("dtype", [torch.float64, torch.int32, torch.bool])
def test_dtype_refused_by_the_c_api_as_a_type_error(name, dtype):
    with pytest.raises(tigon.TigonDTypeError, match=r"tigon_\w+: argument '(x|a|logits)': dtype ") as info:
        cases[name](x8(dtype), torch.ones(8))
    assert isinstance(info.value, TypeError) and isinstance(info.value, ValueError)


@pytest.mark.parametrize("name", ["rms_norm", "layer_norm"])
def test_shape_refused_by_the_c_api_as_a_value_error(name):
    with pytest.raises(
        tigon.TigonArgumentError, match=r"tigon_\w+_fwd: argument 'weight': expected 8 elements"
    ) as info:
        cases[name](x8(), torch.ones(7))
    assert not isinstance(info.value, TypeError)


def test_stride_refused_by_the_c_api_names_the_argument():
    with pytest.raises(ValueError, match="tigon_swiglu_fwd: argument 'b': last dimension must be contiguous"):
        swiglu(x8(), torch.randn(8, 4).t())


def test_rope_dtype_mismatch_is_a_type_error():
    q = torch.randn(1, 2, 3, 8)
    cos = sin = torch.randn(1, 3, 8)
    with pytest.raises(TypeError, match="argument 'k': dtype float16 differs from q's float32"):
        rope(q, q.half(), cos, sin)


def test_check_maps_the_status_and_the_dtype_convention():
    mod = importlib.import_module("tigon.ops.rms_norm")
    x = torch.randn(4, 8)
    y_int = torch.empty(4, 8, dtype=torch.int32)
    with pytest.raises(TypeError, match="tigon_rms_norm_fwd: argument 'y': dtype int32"):
        _lib.check(
            mod._fwd(_lib.tensor_arg(x), None, _lib.tensor_arg(y_int), None, mod.RMSNormParams(1e-6, 0.0, 0), None)
        )


def test_gate_up_halves_are_named_gate_up():
    with pytest.raises(TypeError, match=r"argument 'gate_up' \(gate half\): dtype int32"):
        tigon.ops.swiglu_fused(torch.zeros(4, 8, dtype=torch.int32))


@pytest.mark.parametrize("op", ["rms_norm", "layer_norm", "swiglu"])
def test_expanded_gradient_of_a_sum(op):
    """backward makes a stride-0 gradient contiguous (without reading strides, which torch < 2.7 cannot trace)."""
    x = torch.randn(3, 8, dtype=torch.float64).float().requires_grad_()
    fn = {
        "rms_norm": lambda t: rms_norm(t, None),
        "layer_norm": lambda t: layer_norm(t),
        "swiglu": lambda t: swiglu(t, t * 1),
    }[op]
    ref = {
        "rms_norm": lambda t: t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + 1e-6),
        "layer_norm": lambda t: torch.nn.functional.layer_norm(t, t.shape[-1:], eps=1e-5),
        "swiglu": lambda t: torch.nn.functional.silu(t) * t,
    }[op]
    (g,) = torch.autograd.grad(fn(x).sum(), x)
    x64 = x.detach().double().requires_grad_()
    (g64,) = torch.autograd.grad(ref(x64).sum(), x64)
    torch.testing.assert_close(g.double(), g64, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["rms_norm", "layer_norm"])
def test_bad_shape_under_torch_compile_names_the_argument(name):
    """The fakes do not call C: a bad shape must still end in the named error, not a crash."""
    fn = torch.compile(cases[name], backend="aot_eager", fullgraph=True)
    with pytest.raises(ValueError, match="argument 'weight'"):
        fn(x8(), torch.ones(7))
    torch._dynamo.reset()


def test_bad_dtype_under_torch_compile_is_a_type_error():
    fn = torch.compile(cases["cross_entropy"], backend="aot_eager", fullgraph=True)
    with pytest.raises(TypeError, match="argument 'logits'"):
        fn(x8(torch.float64), None)
    torch._dynamo.reset()
