"""tigon.losses' fused linear distillation against an unfused float64 reference (both models' logits materialised):
the loss and the gradients of the student's hidden states, weight and bias, for every divergence, hard/soft weights,
temperatures, ignored tokens, several chunks; the teacher gets no gradient; bad input."""

import pytest
import torch
import torch.nn.functional as F

from conftest import DEVICES, needs_cuda
from tigon.losses import FusedLinearDistillationLoss, FusedLinearJSDLoss, fused_linear_distillation
from tolerances import assert_close

N, HS, HT, V = 13, 16, 24, 50


def ref_divergence(s_logits, t_logits, divergence, beta, temperature):
    """Per-token divergence of the two models' distributions at the temperature (float64)."""
    x = torch.log_softmax(s_logits / temperature, -1)
    y = torch.log_softmax(t_logits / temperature, -1)
    q, p = x.exp(), y.exp()
    if divergence == "tvd":
        return 0.5 * (q - p).abs().sum(-1)
    if divergence == "kl" or beta == 0:
        return (p * (y - x)).sum(-1)
    if beta == 1:
        return (q * (x - y)).sum(-1)
    lm = (beta * p + (1 - beta) * q).log()
    return beta * (p * (y - lm)).sum(-1) + (1 - beta) * (q * (x - lm)).sum(-1)


def reference(xs, ws, bs, xt, wt, bt, labels, divergence, beta, temperature, w_hard, w_soft, ignore_index=-100):
    s = xs.double() @ ws.double().T + (0 if bs is None else bs.double())
    t = xt.double() @ wt.double().T + (0 if bt is None else bt.double())
    keep = torch.ones(xs.shape[0], dtype=torch.bool, device=xs.device) if labels is None else labels != ignore_index
    soft = torch.where(keep, ref_divergence(s, t, divergence, beta, temperature), 0.0).sum()
    hard = 0.0
    if labels is not None and w_hard:
        hard = F.cross_entropy(s, labels, ignore_index=ignore_index, reduction="sum")
    return (w_hard * hard + w_soft * soft) / keep.sum()


def make(device="cpu", dtype=torch.float32, bias=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    xs = torch.randn(N, HS, generator=g)
    ws = torch.randn(V, HS, generator=g) * (2.0 / HS**0.5)
    xt = torch.randn(N, HT, generator=g)
    wt = torch.randn(V, HT, generator=g) * (2.0 / HT**0.5)
    bs = torch.randn(V, generator=g) * 0.5 if bias else None
    bt = torch.randn(V, generator=g) * 0.5 if bias else None
    labels = torch.randint(0, V, (N,), generator=g)
    labels[[2, 7, 8]] = -100
    cast = lambda v: None if v is None else v.to(device=device, dtype=dtype)  # noqa: E731
    return cast(xs), cast(ws), cast(bs), cast(xt), cast(wt), cast(bt), labels.to(device)


def check(device, dtype, divergence, beta, temperature, w_hard, w_soft, bias, chunk_rows, with_labels=True, tol=None):
    xs, ws, bs, xt, wt, bt, labels = make(device, dtype, bias)
    labels = labels if with_labels else None
    leaves = [t.detach().clone().requires_grad_(True) for t in (xs, ws) + ((bs,) if bias else ())]
    teacher = [t.detach().clone().requires_grad_(True) for t in (xt, wt)]
    loss = fused_linear_distillation(
        leaves[0],
        leaves[1],
        teacher[0],
        teacher[1],
        labels,
        leaves[2] if bias else None,
        bt,
        divergence,
        beta,
        temperature,
        weight_hard_loss=w_hard,
        weight_soft_loss=w_soft,
        chunk_rows=chunk_rows,
    )
    refs = [t.detach().double().requires_grad_(True) for t in (xs, ws) + ((bs,) if bias else ())]
    ref = reference(
        refs[0], refs[1], refs[2] if bias else None, xt, wt, bt, labels, divergence, beta, temperature, w_hard, w_soft
    )
    assert loss.dtype == torch.float32 and loss.shape == ()
    assert_close(loss, ref, dtype, name="loss", tol=tol)
    go = 0.75  # a grad_output other than 1: the backward scales
    grads = torch.autograd.grad(loss * go, leaves)
    ref_grads = torch.autograd.grad(ref * go, refs)
    for name, got, want, leaf in zip(("dx", "dW", "db"), grads, ref_grads, leaves):
        assert got.dtype == leaf.dtype and got.shape == leaf.shape
        assert_close(got, want, dtype, name=name, tol=tol)
    assert all(t.grad is None for t in teacher)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("divergence,beta", [("jsd", 0.5), ("jsd", 0.0), ("jsd", 1.0), ("kl", 0.5), ("tvd", 0.5)])
@pytest.mark.parametrize("weights", [(0.0, 1.0), (0.5, 0.5), (1.0, 0.0)], ids=["soft", "both", "hard"])
@pytest.mark.parametrize("temperature", [1.0, 2.0])
@pytest.mark.parametrize("chunk_rows", [None, 4])
def test_matches_unfused_float64_reference(device, divergence, beta, weights, temperature, chunk_rows):
    check(device, torch.float32, divergence, beta, temperature, *weights, bias=False, chunk_rows=chunk_rows)


@pytest.mark.parametrize("device", DEVICES)
def test_bias_and_no_labels(device):
    check(device, torch.float32, "jsd", 0.3, 1.5, 0.4, 0.6, bias=True, chunk_rows=5)
    check(device, torch.float32, "kl", 0.5, 1.0, 0.0, 1.0, bias=False, chunk_rows=3, with_labels=False)


@pytest.mark.parametrize("device", DEVICES)
def test_modules_take_liger_arguments(device):
    xs, ws, _, xt, wt, _, labels = make(device)
    xs.requires_grad_(True)
    loss = FusedLinearJSDLoss(jsd_beta=0.2, temperature=2.0)(xs, ws, xt, wt, labels)
    ref = reference(xs, ws, None, xt, wt, None, labels, "jsd", 0.2, 2.0, 0.0, 1.0)
    assert_close(loss, ref, name="FusedLinearJSDLoss")
    module = FusedLinearDistillationLoss(weight_hard_loss=0.3, weight_soft_loss=0.7, beta=0.5, temperature=1.0)
    loss = module(xs, ws, xt, wt, labels)
    assert_close(loss, reference(xs, ws, None, xt, wt, None, labels, "jsd", 0.5, 1.0, 0.3, 0.7), name="module")
    loss.backward()
    assert xs.grad is not None


@pytest.mark.parametrize("device", DEVICES)
def test_memory_budget_chunks_equal_one_chunk(device):
    xs, ws, _, xt, wt, _, labels = make(device)
    xs.requires_grad_(True)
    one = fused_linear_distillation(xs, ws, xt, wt, labels, weight_hard_loss=0.5)
    (g1,) = torch.autograd.grad(one, xs)
    many = fused_linear_distillation(xs, ws, xt, wt, labels, weight_hard_loss=0.5, memory_budget=2 * 3 * V * 4)
    (g2,) = torch.autograd.grad(many, xs)
    assert_close(many, one.double(), name="loss")
    assert_close(g2, g1.double(), name="dx")


@needs_cuda
@pytest.mark.parametrize("divergence,beta", [("jsd", 0.5), ("kl", 0.5), ("tvd", 0.5)])
def test_bf16_on_gpu(divergence, beta):
    # The logits are rounded to bf16 before the softmax (as x @ W.T in bf16 gives them), like the fused CE losses.
    check(
        "cuda", torch.bfloat16, divergence, beta, 1.0, 0.5, 0.5, bias=True, chunk_rows=4, tol=dict(atol=3e-2, rtol=3e-2)
    )


@pytest.mark.parametrize(
    "kwargs,exc,arg",
    [
        (dict(student_input=[1.0]), TypeError, "'student_input'"),
        (dict(student_weight=torch.randn(V, HS + 1)), ValueError, "'student_weight'"),
        (dict(teacher_weight=torch.randn(V + 1, HT)), ValueError, "'teacher_weight'"),
        (dict(teacher_input=torch.randn(N + 1, HT)), ValueError, "'teacher_input'"),
        (dict(labels=torch.zeros(N + 1, dtype=torch.int64)), ValueError, "'labels'"),
        (dict(divergence="js"), ValueError, "'divergence'"),
        (dict(beta=1.5), ValueError, "'beta'"),
        (dict(temperature=0.0), ValueError, "'temperature'"),
        (dict(weight_hard_loss="x"), TypeError, "'weight_hard_loss'"),
    ],
)
def test_bad_input_names_the_argument(kwargs, exc, arg):
    xs, ws, _, xt, wt, _, labels = make()
    args = dict(student_input=xs, student_weight=ws, teacher_input=xt, teacher_weight=wt, labels=labels)
    args.update(kwargs)
    with pytest.raises(exc, match=arg):
        fused_linear_distillation(**args)
