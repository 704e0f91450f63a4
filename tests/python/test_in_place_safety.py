"""The in_place options tell autograd what they overwrite: an op that saved the overwritten tensor raises torch's
in-place error instead of computing a wrong gradient, a leaf that requires grad is refused, a second backward over
a buffer scaled in place raises, and the ordinary case (nobody else needs the buffer) still runs in eager mode and
under torch.compile."""

import re

import pytest
import torch
import torch.nn.functional as F

from conftest import DEVICES
from tigon.nn import CrossEntropyLoss
from tigon.ops import cross_entropy, fused_linear_cross_entropy, layer_norm, rms_norm, rope
from tigon.ops.swiglu import geglu, geglu_fused, swiglu, swiglu_fused
from tolerances import assert_close

IN_PLACE_ERROR = "modified by an inplace operation"


def logits_and_target(n, v, device):
    return torch.randn(n, v, device=device, requires_grad=True), torch.randint(0, v, (n,), device=device)


# ---- cross entropy (the gradient written over the logits in the forward) -------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_cross_entropy_over_logits_an_op_saved_raises(device):
    z, t = logits_and_target(8, 32, device)
    logits = z.exp()  # exp saves its output for the backward: these very logits
    loss = cross_entropy(logits, t, in_place=True)
    with pytest.raises(RuntimeError, match=IN_PLACE_ERROR):
        loss.backward()


@pytest.mark.parametrize("device", DEVICES)
def test_cross_entropy_refuses_a_leaf_in_place(device):
    x, t = logits_and_target(4, 16, device)
    before = x.detach().clone()
    with pytest.raises(ValueError, match="'logits' is a leaf"):
        cross_entropy(x, t, in_place=True)
    with pytest.raises(ValueError, match="'logits' is a leaf"):
        CrossEntropyLoss(in_place=True)(x, t)
    assert torch.equal(x.detach(), before)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("in_place", [False, True])
def test_cross_entropy_second_backward_raises(device, in_place):
    # the backward scales its gradient buffer in place: a second pass over it would scale it twice
    x, t = logits_and_target(6, 16, device)
    loss = cross_entropy(x * 1, t, in_place=in_place, reduction="sum") * 3.0
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match=IN_PLACE_ERROR):
        loss.backward()


@pytest.mark.parametrize("device", DEVICES)
def test_fused_linear_cross_entropy_second_backward_raises(device):
    x, t = logits_and_target(6, 16, device)
    w = torch.randn(24, 16, device=device, requires_grad=True)
    loss = fused_linear_cross_entropy(x, w, t.clamp(max=23)) * 3.0
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match=IN_PLACE_ERROR):
        loss.backward()


@pytest.mark.parametrize("device", DEVICES)
def test_cross_entropy_module_leaves_the_logits_alone_by_default(device):
    # softmax and argmax read after the loss, as a training loop's metrics do: right values and gradients
    x, t = logits_and_target(16, 24, device)
    t[:8] = x.detach()[:8].argmax(-1)
    grads, accs = [], []
    for loss_fn in (CrossEntropyLoss(), torch.nn.CrossEntropyLoss()):
        logits = x * 1
        loss = loss_fn(logits, t)
        accs.append((logits.argmax(-1) == t).float().mean())
        loss = loss + (logits.softmax(-1) * torch.arange(24.0, device=device)).sum()
        grads.append(torch.autograd.grad(loss, x)[0])
    assert accs[0] == accs[1] and accs[0] >= 0.5
    assert_close(grads[0], grads[1].double(), name="dx with softmax after the loss")


@pytest.mark.parametrize("device", DEVICES)
def test_cross_entropy_in_place_under_compile(device):
    x, t = logits_and_target(8, 64, device)

    def step(z):
        return cross_entropy(z * 2.0, t, in_place=True)

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager" if device == "cpu" else "inductor")
    (got,) = torch.autograd.grad(compiled(x), x)
    (ref,) = torch.autograd.grad(F.cross_entropy(x.double() * 2.0, t), x)
    assert_close(got, ref, name="dx compiled")


# ---- gated activations (da, db written over a, b in the backward) -------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", ["swiglu", "geglu", "swiglu_fused", "geglu_fused"])
def test_glu_over_inputs_an_op_saved_raises(device, kind):
    x = torch.randn(4, 32, device=device, requires_grad=True)
    up = torch.randn(4, 32, device=device, requires_grad=True) * 1
    gate = x.exp()  # exp saves its output: the gate the backward overwrites
    if kind.endswith("fused"):
        gate_up = torch.cat([x, up], -1).exp()  # one saved tensor, overwritten as a whole
        out = (swiglu_fused if kind == "swiglu_fused" else geglu_fused)(gate_up, in_place=True)
    else:
        out = (swiglu if kind == "swiglu" else geglu)(gate, up, in_place=True)
    with pytest.raises(RuntimeError, match=IN_PLACE_ERROR):
        out.sum().backward()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", ["swiglu", "geglu", "swiglu_fused", "geglu_fused"])
def test_glu_refuses_a_leaf_in_place(device, kind):
    a = torch.randn(4, 32, device=device, requires_grad=True)
    b = torch.randn(4, 32, device=device) * 1
    arg = "gate_up" if kind.endswith("fused") else "a"
    with pytest.raises(ValueError, match=f"'{arg}' is a leaf"):
        if kind.endswith("fused"):
            (swiglu_fused if kind == "swiglu_fused" else geglu_fused)(a, in_place=True)
        else:
            (swiglu if kind == "swiglu" else geglu)(a, b, in_place=True)
    with torch.no_grad():  # nothing is written without a backward: allowed
        swiglu(a, b, in_place=True)


@pytest.mark.parametrize("kind", ["swiglu", "geglu", "swiglu_fused", "geglu_fused"])
def test_glu_in_place_under_compile_is_never_silently_wrong(kind):
    # Compiled, nothing can tell that exp saved the gate the backward would overwrite: the public ops run out of place.
    x = torch.randn(4, 32, requires_grad=True)
    up = torch.randn(4, 32, requires_grad=True)

    def loss(x, up, in_place):
        if kind.endswith("fused"):
            fn = swiglu_fused if kind == "swiglu_fused" else geglu_fused
            return fn(torch.cat([x, up], -1).exp(), in_place=in_place).sum()
        return (swiglu if kind == "swiglu" else geglu)(x.exp(), up * 1, in_place=in_place).sum()

    got = torch.autograd.grad(torch.compile(loss, fullgraph=True, backend="aot_eager")(x, up, True), (x, up))
    want = torch.autograd.grad(loss(x, up, False), (x, up))
    for g, r, name in zip(got, want, ("dx", "dup")):
        assert_close(g, r, name=name)


@pytest.mark.parametrize("device", DEVICES)
def test_glu_second_backward_raises(device):
    a = torch.randn(4, 32, device=device, requires_grad=True)
    b = torch.randn(4, 32, device=device, requires_grad=True)
    out = swiglu(a * 1, b * 1, in_place=True).sum()
    out.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match=IN_PLACE_ERROR):
        out.backward()


# ---- norms and RoPE (the input gradient written over the output gradient in the backward) -------------------------


def _norm_or_rope(op, x, w, in_place):
    if op == "rope":
        cos, sin = torch.linspace(-1, 1, 32, device=x.device).reshape(4, 8), torch.ones(4, 8, device=x.device)
        return torch.stack(rope(x * 1, x * 2, cos, sin, in_place=in_place))
    return (rms_norm if op == "rms_norm" else layer_norm)(x * 1, w, in_place=in_place)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", ["rms_norm", "layer_norm", "rope"])
def test_output_gradient_held_elsewhere_is_left_alone(device, op):
    # The caller keeps dy (and exp saved it): the backward must not write dx over it.
    x = torch.randn(2, 2, 4, 8, device=device, requires_grad=True)
    w = torch.ones(8, device=device, requires_grad=True)
    y = _norm_or_rope(op, x, w, True)
    dy = torch.randn(y.shape, device=device, requires_grad=True).exp()
    before = dy.detach().clone()
    (got,) = torch.autograd.grad(y, x, dy)
    (want,) = torch.autograd.grad(_norm_or_rope(op, x, w, False), x, before)
    assert torch.equal(dy.detach(), before)
    assert_close(got, want, name="dx")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", ["rms_norm", "layer_norm", "rope"])
@pytest.mark.parametrize("compiled", [False, True])
def test_output_gradient_shared_by_an_add_is_left_alone(device, op, compiled):
    # An add hands both operands one gradient tensor: the first backward to run must not overwrite what the second reads.
    x1 = torch.randn(2, 2, 4, 8, device=device, requires_grad=True)
    x2 = torch.randn(2, 2, 4, 8, device=device, requires_grad=True)
    w = torch.ones(8, device=device)

    def loss(x1, x2, in_place):
        y = _norm_or_rope(op, x1, w, in_place) + _norm_or_rope(op, x2 * 3, w, in_place)
        return (y * torch.linspace(-1, 1, y.numel(), device=device).reshape(y.shape)).sum()

    fn = torch.compile(loss, fullgraph=True, backend="aot_eager") if compiled else loss
    got = torch.autograd.grad(fn(x1, x2, True), (x1, x2))
    want = torch.autograd.grad(loss(x1, x2, False), (x1, x2))
    for g, r, name in zip(got, want, ("dx1", "dx2")):
        assert_close(g, r, name=name)


def _count_in_place_norm_backwards(monkeypatch) -> list:
    """A list that gets an entry each time an RMSNorm backward writes over its incoming gradient."""
    import sys

    module = sys.modules["tigon.ops.rms_norm"]
    calls = []
    impl = module._bwd_inplace_impl
    monkeypatch.setattr(module, "_bwd_inplace_impl", lambda *a: calls.append(1) or impl(*a))
    return calls


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.skipif(not hasattr(torch.Tensor, "_use_count"), reason="this torch cannot tell who holds a tensor")
def test_norm_writes_over_a_gradient_nobody_else_holds(device, monkeypatch):
    # The ordinary case (dy fresh from the next layer's backward) keeps its memory saving.
    calls = _count_in_place_norm_backwards(monkeypatch)
    x = torch.randn(4, 8, device=device, requires_grad=True)
    proj = torch.randn(8, 8, device=device)
    (rms_norm(x * 1, torch.ones(8, device=device), in_place=True) @ proj).sum().backward()
    assert calls == [1]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.skipif(not hasattr(torch.Tensor, "_use_count"), reason="this torch cannot tell who holds a tensor")
def test_norm_before_the_fused_loss_writes_over_its_gradient(device, monkeypatch):
    # The fused loss takes [B, T, H] whole and hands back a gradient of that shape that is no view: the final norm of a
    # patched model writes its input gradient over it instead of copying one at the backward's peak.
    calls = _count_in_place_norm_backwards(monkeypatch)
    x = torch.randn(2, 3, 8, device=device, requires_grad=True)
    w, lm = torch.ones(8, device=device), torch.randn(16, 8, device=device, requires_grad=True)
    t = torch.randint(0, 16, (2, 3), device=device)

    def grads(in_place):
        y = rms_norm(x * 1, w, in_place=in_place)
        return torch.autograd.grad(fused_linear_cross_entropy(y, lm, t) * 1.5, (x, lm))

    got = grads(True)
    assert calls == [1]
    for g, r, name in zip(got, grads(False), ("dx", "dweight")):
        assert_close(g, r, name=name)


def test_under_compile_cross_entropy_over_a_saved_tensor_is_never_silently_wrong():
    # CPU (aot_eager): the forward marks the logits dirty; depending on torch's version the trace raises torch's
    # in-place error or functionalisation keeps exp's saved output intact. Either is fine; a wrong gradient is not.
    # (Compiled backwards of the other ops run out of place: test_glu_in_place_under_compile_is_never_silently_wrong,
    # test_output_gradient_shared_by_an_add_is_left_alone.)
    x, t = logits_and_target(4, 16, "cpu")
    (want,) = torch.autograd.grad(cross_entropy(x.exp(), t), x)
    fn = lambda z: cross_entropy(z.exp(), t, in_place=True)  # noqa: E731
    try:
        (got,) = torch.autograd.grad(torch.compile(fn, fullgraph=True, backend="aot_eager")(x), x)
    except Exception as e:  # noqa: BLE001
        assert re.search(IN_PLACE_ERROR, str(e)), e
    else:
        torch.testing.assert_close(got, want)


# ---- pointwise activations (the output written over the input in the forward) ------------------------------------


def _activation(kind):
    from tigon.ops import gelu, relu, silu

    return {"relu": relu, "gelu": gelu, "silu": silu}[kind]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", ["relu", "gelu", "silu"])
def test_activation_over_an_input_an_op_saved_raises(device, kind):
    x = torch.randn(4, 32, device=device, requires_grad=True)
    saved = x.exp()  # exp saves its output: the very tensor the activation overwrites
    y = _activation(kind)(saved, in_place=True)
    with pytest.raises(RuntimeError, match=IN_PLACE_ERROR):
        y.sum().backward()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", ["relu", "gelu", "silu"])
def test_activation_refuses_a_leaf_in_place(device, kind):
    x = torch.randn(4, 16, device=device, requires_grad=True)
    before = x.detach().clone()
    with pytest.raises(ValueError, match="'x' is a leaf"):
        _activation(kind)(x, in_place=True)
    assert torch.equal(x.detach(), before)
    with torch.no_grad():  # no autograd, nothing to protect: allowed, as torch allows it
        _activation(kind)(x, in_place=True)


@pytest.mark.parametrize("device", DEVICES)
def test_in_place_relu_keeps_only_its_output(device):
    # the backward reads the output's sign: the one saved tensor is x's own memory, now holding relu(x)
    leaf = torch.randn(8, 64, device=device, requires_grad=True)
    x = leaf * 1
    kept = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: kept.append(t) or t, lambda t: t):
        y = _activation("relu")(x, in_place=True)
    assert y.data_ptr() == x.data_ptr()
    assert [t.data_ptr() for t in kept] == [x.data_ptr()]
    (g,) = torch.autograd.grad(y, leaf, torch.ones_like(y))
    assert torch.equal(g, (leaf > 0).to(g.dtype))


@pytest.mark.parametrize("kind", ["relu", "gelu", "silu"])
def test_activation_in_place_under_compile_is_never_silently_wrong(kind):
    x = torch.randn(4, 32, requires_grad=True)

    def loss(x, in_place):
        return (_activation(kind)(x.exp(), in_place=in_place) * torch.arange(32.0)).sum()

    want = torch.autograd.grad(loss(x, False), x)[0]
    try:
        got = torch.autograd.grad(torch.compile(loss, fullgraph=True, backend="aot_eager")(x, True), x)[0]
    except RuntimeError as e:  # torch's in-place error is a right answer too
        assert IN_PLACE_ERROR in str(e) or "inplace" in str(e)
        return
    assert_close(got, want, name="dx compiled")
