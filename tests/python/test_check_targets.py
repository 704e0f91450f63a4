"""check_targets=True: a target outside [0, V) that is not ignore_index raises an error naming 'target' and the first
bad row and value (on a GPU the unchecked default gives NaN rows without a synchronisation); valid and ignored
targets pass, in eager mode and under torch.compile."""

import pytest
import torch

from conftest import DEVICES
from tigon.nn import CrossEntropyLoss, FusedLinearCrossEntropyLoss
from tigon.ops import cross_entropy, fused_linear_cross_entropy

V = 40


def bad_targets(device, n=12, bad_row=5, bad_value=V):
    t = torch.randint(0, V, (n,), device=device)
    t[1] = -100  # ignored: fine
    t[bad_row] = bad_value
    t[bad_row + 3] = -7  # a later bad one: the first is named
    return t


def losses(device, check):
    """Every entry point, each called with check_targets=check: (name, fn(target) -> loss)."""
    logits = torch.randn(12, V, device=device, requires_grad=True)
    x = torch.randn(3, 4, 16, device=device, requires_grad=True)
    w = torch.randn(V, 16, device=device, requires_grad=True)
    return [
        ("op cross_entropy", lambda t: cross_entropy(logits, t, check_targets=check)),
        ("op fused", lambda t: fused_linear_cross_entropy(x, w, t.view(3, 4), check_targets=check)),
        ("module cross_entropy", lambda t: CrossEntropyLoss(check_targets=check)(logits, t)),
        ("module fused", lambda t: FusedLinearCrossEntropyLoss(check_targets=check)(w, x, t.view(3, 4))),
    ]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("bad_value", [V, -1, 10**9])
def test_out_of_range_target_names_target_row_and_value(device, bad_value):
    t = bad_targets(device, bad_value=bad_value)
    for name, loss in losses(device, True):
        with pytest.raises(ValueError, match=rf"'target'.*\[5\] = {bad_value}$"):
            loss(t)


@pytest.mark.parametrize("device", DEVICES)
def test_valid_and_ignored_targets_pass(device):
    t = bad_targets(device)
    t[5], t[8] = V - 1, 0
    for name, loss in losses(device, True):
        checked = loss(t)
        assert torch.isfinite(checked).all(), name
        checked.backward()


def test_under_torch_compile_asserts_on_the_device():
    # CPU only: a failed device-side assert on a GPU ends the process's CUDA context
    logits = torch.randn(12, V, requires_grad=True)
    step = torch.compile(lambda z, t: cross_entropy(z * 1, t, check_targets=True), fullgraph=True, backend="aot_eager")
    good = bad_targets("cpu")
    good[5], good[8] = 3, 4
    torch.autograd.grad(step(logits, good), logits)
    with pytest.raises(RuntimeError, match="'target'"):
        step(logits, bad_targets("cpu"))
