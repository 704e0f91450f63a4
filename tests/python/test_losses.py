"""tigon.losses against float64 references written straight from the papers' and TRL's formulas on materialised
logits: every loss, every aux output and the gradients of the hidden states, the weight and the bias, across the
options; bf16 on a GPU with stated tolerances; bad input."""

import math

import pytest
import torch
import torch.nn.functional as F

from conftest import needs_cuda
from tigon.losses import (
    DPO_LOSS_TYPES,
    FusedLinearCPOLoss,
    FusedLinearDPOLoss,
    FusedLinearGRPOLoss,
    FusedLinearKTOLoss,
    FusedLinearORPOLoss,
    FusedLinearSimPOLoss,
    kto_kl,
    selective_log_probs,
)
from tolerances import assert_close

P, T, H, V = 2, 7, 16, 40  # pairs, tokens per sequence, hidden, vocabulary
# bf16 on a GPU: the logits are rounded to bf16 before the softmax (as x @ W.T in bf16 gives them), about 2^-9 of a
# logit per token, and those errors add up over a sequence's tokens before the losses' nonlinearities.
BF16_TOL = dict(atol=3e-2, rtol=3e-2)


# ---- the float64 references -----------------------------------------------------------------------------------------


def ref_token_logps(x, w, t, b=None, temperature=1.0, ignore_index=-100):
    """log softmax((x W^T + b) / T)[t] per token (0 where ignored), the mask, and the logits, all float64."""
    logits = x.double() @ w.double().T
    if b is not None:
        logits = logits + b.double()
    logp = torch.log_softmax(logits / temperature, dim=-1)
    mask = t != ignore_index
    tok = logp.gather(-1, torch.where(mask, t, 0).unsqueeze(-1)).squeeze(-1)
    return torch.where(mask, tok, 0.0), mask, logits


def ref_seq_logps(x, w, t, b, average, ignore_index=-100):
    tok, mask, logits = ref_token_logps(x, w, t, b, ignore_index=ignore_index)
    s = tok.sum(-1)
    return (s / mask.sum(-1).clamp(min=1) if average else s), tok, mask, logits


def ref_nll(tok, mask, pairs):
    return -tok[:pairs].sum() / mask[:pairs].sum()


def ref_logits_means(logits, pairs):
    n = pairs * logits.shape[1] * logits.shape[2]
    return logits[:pairs].sum() / n, logits[pairs:].sum() / n


def ref_dpo(x, w, t, b, refs, beta, loss_type, ls, tau, alpha, nll_on, average):
    """TRL's DPOTrainer per-sequence losses (Liger's conventions for the mean and the NLL)."""
    logps, tok, mask, logits = ref_seq_logps(x, w, t, b, average)
    pi_c, pi_r = logps[:P], logps[P:]
    ref_c, ref_r = refs
    c, r = pi_c - ref_c, pi_r - ref_r
    d = beta * (c - r)
    sig, logsig = torch.sigmoid, F.logsigmoid
    if loss_type == "sigmoid":
        losses = -(1 - ls) * logsig(d) - ls * logsig(-d)
    elif loss_type == "robust":
        losses = (-(1 - ls) * logsig(d) + ls * logsig(-d)) / (1 - 2 * ls)
    elif loss_type == "hinge":
        losses = torch.relu(1 - d)
    elif loss_type == "ipo":
        n = mask.sum(-1).double()
        cc, rr = (c, r) if average else (c / n[:P], r / n[P:])
        losses = (cc - rr - 1 / (2 * beta)) ** 2
    elif loss_type == "exo_pair":
        losses = sig(d) * (logsig(d) - math.log(1 - ls)) + sig(-d) * (logsig(-d) - math.log(ls))
    elif loss_type == "nca_pair":
        losses = -logsig(beta * c) - 0.5 * logsig(-beta * c) - 0.5 * logsig(-beta * r)
    elif loss_type == "bco_pair":
        losses = -logsig(beta * c) - logsig(-beta * r)
    elif loss_type == "sppo_hard":
        losses = (c - 0.5 / beta) ** 2 + (r + 0.5 / beta) ** 2
    elif loss_type == "apo_zero":
        losses = (1 - sig(beta * c)) + sig(beta * r)
    elif loss_type == "apo_down":
        losses = sig(beta * c) + (1 - sig(beta * (c - r)))
    elif loss_type == "discopop":
        m = sig(d / tau)
        losses = -logsig(d) * (1 - m) + torch.exp(-d) * m
    nll = ref_nll(tok, mask, P) if nll_on else torch.zeros((), dtype=torch.float64)
    loss = losses.mean() + alpha * nll
    return loss, (pi_c, pi_r, *ref_logits_means(logits, P), nll, beta * c, beta * r)


# ---- inputs and comparison ------------------------------------------------------------------------------------------


def make(batch=2 * P, device="cpu", dtype=torch.float32, bias=False, seed=0):
    """x [batch, T, H], w [V, H] (logits of a few units), targets with a prompt of -100 of 1-3 tokens per sequence,
    optional bias."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, T, H, generator=g)
    w = torch.randn(V, H, generator=g) * (2.0 / H**0.5)
    b = torch.randn(V, generator=g) * 0.5 if bias else None
    t = torch.randint(0, V, (batch, T), generator=g)
    for i in range(batch):
        t[i, : 1 + i % 3] = -100
    cast = lambda v: None if v is None else v.to(device=device, dtype=dtype)  # noqa: E731
    return cast(x), cast(w), t.to(device), cast(b)


def ref_model(batch=2 * P, device="cpu", dtype=torch.float32, bias=False):
    """The reference model's hidden states, weight and bias: the policy's (make's) moved a little, as a reference is
    close to the policy it started (far apart, exp(p_ref - p) in the KL reaches 1e4 and fp32 rounding shows)."""
    x, w, _, b = make(batch, "cpu", torch.float32, bias)
    dx, dw, _, db = make(batch, "cpu", torch.float32, bias, seed=1)
    cast = lambda v, d: None if v is None else (v + 0.2 * d).to(device=device, dtype=dtype)  # noqa: E731
    return cast(x, dx), cast(w, dw), cast(b, db)


def compare(fn, ref_fn, leaves, tol=None, dtype=torch.float32):
    """fn(*leaves) and ref_fn(*float64 copies) -> (loss, aux): the loss, every aux output and the gradient of every
    leaf that is not None (random scale of the loss, so the backward's grad_output is exercised)."""
    mine = [None if v is None else v.detach().clone().requires_grad_(True) for v in leaves]
    theirs = [None if v is None else v.detach().cpu().double().requires_grad_(True) for v in leaves]
    loss, aux = fn(*mine)
    loss_r, aux_r = ref_fn(*theirs)
    assert loss.dtype == torch.float32
    assert_close(loss.cpu(), loss_r.detach(), dtype, "loss", tol=tol)
    assert len(aux) == len(aux_r)
    for i, (a, r) in enumerate(zip(aux, aux_r)):
        assert not a.requires_grad, f"aux {i} carries a gradient"
        assert_close(a.cpu().reshape(r.shape), r.detach(), dtype, f"aux {i}", tol=tol)
    scale = 1.7
    got = torch.autograd.grad(loss * scale, [v for v in mine if v is not None])
    want = torch.autograd.grad(loss_r * scale, [v for v in theirs if v is not None])
    for name, g, r in zip(("input", "weight", "bias"), got, want):
        assert_close(g.cpu(), r, dtype, f"d{name}", tol=tol)


# ---- selective_log_probs --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("bias", [False, True])
def test_selective_log_probs(temperature, bias):
    x, w, t, b = make(bias=bias)
    up = torch.randn(t.shape, dtype=torch.float64)

    def fn(x, w, b):
        out = selective_log_probs(x, w, t, b, temperature=temperature)
        assert out.shape == t.shape and out.dtype == torch.float32
        assert (out[t == -100] == 0).all()
        return (out * up.float()).sum(), (out.detach(),)

    def ref(x, w, b):
        tok = ref_token_logps(x, w, t, b, temperature)[0]
        return (tok * up).sum(), (tok,)

    compare(fn, ref, (x, w, b))


def test_selective_log_probs_other_ignore_index_and_int32_targets():
    x, w, t, _ = make()
    t = torch.where(t == -100, 3, t).to(torch.int32)
    t[0, 0] = 3
    got = selective_log_probs(x, w, t, ignore_index=3)
    want = ref_token_logps(x, w, t.long(), ignore_index=3)[0]
    assert_close(got, want, torch.float32, "log-probs")


# ---- DPO ------------------------------------------------------------------------------------------------------------


def _smoothing(loss_type):
    return {"robust": 0.2, "exo_pair": 1e-3, "sigmoid": 0.1}.get(loss_type, 0.0)


@pytest.mark.parametrize("loss_type", DPO_LOSS_TYPES)
@pytest.mark.parametrize("average_log_prob", [False, True])
def test_dpo_loss_types(loss_type, average_log_prob):
    x, w, t, b = make(bias=True)
    rx, rw, rb = ref_model(bias=True)
    ls = _smoothing(loss_type)
    opts = dict(beta=0.1, alpha=0.5, compute_nll_loss=True, average_log_prob=average_log_prob, loss_type=loss_type)
    loss_fn = FusedLinearDPOLoss(label_smoothing=ls, discopop_tau=0.05, **opts)

    def fn(x, w, b):
        return loss_fn(w, x, t, b, ref_input=rx, ref_weight=rw, ref_bias=rb)

    def ref(x, w, b):
        ref_logps = ref_seq_logps(rx, rw, t, rb, average_log_prob)[0]
        refs = ref_logps[:P], ref_logps[P:]
        return ref_dpo(x, w, t, b, refs, 0.1, loss_type, ls, 0.05, 0.5, True, average_log_prob)

    compare(fn, ref, (x, w, b))


@pytest.mark.parametrize("reference", ["computed", "given", "none"])
@pytest.mark.parametrize("nll", [False, True])
@pytest.mark.parametrize("bias", [False, True])
def test_dpo_reference_nll_and_bias(reference, nll, bias):
    x, w, t, b = make(bias=bias)
    rx, rw, _ = ref_model()
    ref_logps = ref_seq_logps(rx, rw, t, None, False)[0]
    loss_fn = FusedLinearDPOLoss(beta=0.3, compute_nll_loss=nll, use_ref_model=reference != "none")

    def fn(x, w, b):
        if reference == "given":
            return loss_fn(w, x, t, b, ref_chosen_logps=ref_logps[:P].float(), ref_rejected_logps=ref_logps[P:].float())
        return loss_fn(w, x, t, b, ref_input=rx, ref_weight=rw)

    def ref(x, w, b):
        refs = (0.0, 0.0) if reference == "none" else (ref_logps[:P], ref_logps[P:])
        return ref_dpo(x, w, t, b, refs, 0.3, "sigmoid", 0.0, 0.05, 1.0, nll, False)

    compare(fn, ref, (x, w, b))


def test_dpo_gradient_of_the_weight_alone():
    x, w, t, _ = make()
    w = w.clone().requires_grad_(True)
    loss, _ = FusedLinearDPOLoss(use_ref_model=False)(w, x, t)
    (gw,) = torch.autograd.grad(loss, w)
    w64 = w.detach().double().requires_grad_(True)
    loss_r = ref_dpo(x, w64, t, None, (0.0, 0.0), 0.1, "sigmoid", 0.0, 0.05, 1.0, False, False)[0]
    assert_close(gw, torch.autograd.grad(loss_r, w64)[0], torch.float32, "dweight")


# ---- ORPO, CPO, SimPO -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("nll", [False, True])
@pytest.mark.parametrize("nll_target", [False, True])
def test_orpo(nll, nll_target):
    x, w, t, b = make(bias=True)
    other = torch.where(t == -100, -100, (t + 1) % V) if nll_target else None
    other = None if other is None else torch.where(torch.arange(T) == T - 1, -100, other)
    loss_fn = FusedLinearORPOLoss(beta=0.2, compute_nll_loss=nll)

    def fn(x, w, b):
        return loss_fn(w, x, t, b, nll_target=other)

    def ref(x, w, b):
        logps, tok, mask, logits = ref_seq_logps(x, w, t, b, average=True)
        c, r = logps[:P], logps[P:]
        log_odds = (c - r) - (torch.log1p(-torch.exp(c)) - torch.log1p(-torch.exp(r)))
        ratio = F.logsigmoid(log_odds)
        if not nll:
            nll_loss = torch.zeros((), dtype=torch.float64)
        elif other is None:
            nll_loss = ref_nll(tok, mask, P)
        else:
            otok, omask, _ = ref_token_logps(x, w, other, b)
            nll_loss = ref_nll(otok, omask, P)
        loss = -0.2 * ratio.mean() + nll_loss
        aux = (c, r, *ref_logits_means(logits, P), nll_loss, 0.2 * c, 0.2 * r, ratio.mean(), log_odds.mean())
        return loss, aux

    compare(fn, ref, (x, w, b))


@pytest.mark.parametrize("simpo", [False, True])
@pytest.mark.parametrize("label_smoothing", [0.0, 0.15])
@pytest.mark.parametrize("average_log_prob", [False, True])
def test_cpo_and_simpo(simpo, label_smoothing, average_log_prob):
    if simpo and not average_log_prob:
        pytest.skip("SimPO always averages")
    x, w, t, b = make(bias=True)
    beta, alpha, gamma = 0.2, 0.7, (0.4 if simpo else 0.0)
    common = dict(beta=beta, alpha=alpha, label_smoothing=label_smoothing, compute_nll_loss=True)
    if simpo:
        loss_fn = FusedLinearSimPOLoss(gamma=gamma, **common)
    else:
        loss_fn = FusedLinearCPOLoss(average_log_prob=average_log_prob, **common)

    def ref(x, w, b):
        logps, tok, mask, logits = ref_seq_logps(x, w, t, b, average_log_prob)
        c, r = logps[:P], logps[P:]
        z = beta * (c - r) - gamma
        losses = -(1 - label_smoothing) * F.logsigmoid(z) - label_smoothing * F.logsigmoid(-z)
        nll = ref_nll(tok, mask, P)
        return losses.mean() + alpha * nll, (c, r, *ref_logits_means(logits, P), nll, beta * c, beta * r)

    compare(lambda x, w, b: loss_fn(w, x, t, b), ref, (x, w, b))


# ---- KTO ------------------------------------------------------------------------------------------------------------

LABELS = torch.tensor([True, False, False, True, True])


@pytest.mark.parametrize("reference", ["computed", "given", "none"])
@pytest.mark.parametrize("kl", [None, 0.3])
@pytest.mark.parametrize("average_log_prob", [False, True])
def test_kto(reference, kl, average_log_prob):
    batch = len(LABELS)
    x, w, t, b = make(batch, bias=True)
    rx, rw, rb = ref_model(batch, bias=True)
    ref_logps = ref_seq_logps(rx, rw, t, rb, average_log_prob)[0]
    kl_t = None if kl is None else torch.tensor(kl)
    loss_fn = FusedLinearKTOLoss(beta=0.25, use_ref_model=reference == "computed", average_log_prob=average_log_prob)

    def fn(x, w, b):
        given = ref_logps.float() if reference == "given" else None
        return loss_fn(x, w, t, b, LABELS, rx, rw, rb, kl=kl_t, ref_log_probs=given)

    def ref(x, w, b):
        logps, _, _, logits = ref_seq_logps(x, w, t, b, average_log_prob)
        lr = logps if reference == "none" else logps - ref_logps
        z = kl or 0.0
        chosen = 1 - torch.sigmoid(0.25 * (lr - z))  # TRL: desirable
        rejected = 1 - torch.sigmoid(0.25 * (z - lr))  # undesirable
        loss = torch.where(LABELS, chosen, rejected).mean()
        seq_logits = logits.sum((1, 2))
        rewards = 0.25 * lr
        aux = (
            logps[LABELS].sum(),
            logps[~LABELS].sum(),
            seq_logits[LABELS].sum(),
            seq_logits[~LABELS].sum(),
            rewards[LABELS].sum(),
            rewards[~LABELS].sum(),
        )
        return loss, aux

    compare(fn, ref, (x, w, b))


def test_kto_kl_estimate():
    x, w, t, b = make(4, bias=True)
    rx, rw, rb = ref_model(4, bias=True)
    got = kto_kl(x, w, t, rx, rw, b, rb)
    want = (ref_seq_logps(x, w, t, b, False)[0] - ref_seq_logps(rx, rw, t, rb, False)[0]).mean().clamp(min=0)
    assert_close(got, want, torch.float32, "kl")
    assert kto_kl(x, w, t, x, w, b, b).item() == 0.0  # the same model: 0 (clamped from rounding either side)


# ---- GRPO -----------------------------------------------------------------------------------------------------------

B = 4  # completions


def grpo_batch(seed=2):
    """selected ids, a mask with padding at the end (junk ids there), advantages, old log-probs near the current
    ones (so that some ratios leave the clip range), given reference log-probs, vLLM ratios."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, V, (B, T), generator=g)
    mask = torch.ones(B, T)
    for i in range(B):
        mask[i, T - i :] = 0  # sequence i has i padding tokens
    ids = torch.where(mask.bool(), ids, V + 7)  # out of range where masked: never looked up
    adv = torch.randn(B, generator=g)
    noise = torch.randn(B, T, generator=g) * 0.3
    ratio = torch.rand(B, T, generator=g) * 0.5 + 0.75
    return ids, mask, adv, noise, ratio


def ref_grpo(x, w, b, ids, mask, adv, old, ref, opts, temperature, is_ratio, num_items):
    """TRL's GRPOTrainer._compute_loss, float64, on materialised logits."""
    safe = torch.where(mask.bool(), ids, 0)
    logp = ref_token_logps(x, w, safe, b, temperature)[0]
    mask = mask.double()
    old = logp.detach() if old is None else old.double()
    log_ratio = logp - old
    if opts["importance_sampling_level"] == "token":
        log_w = log_ratio
    else:
        log_w = ((log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).unsqueeze(-1)
    coef_1 = torch.exp(log_w)
    a = adv.double().unsqueeze(1) if adv.dim() == 1 else adv.double()  # TRL: (B,) or (B, T)
    lt, el, eh = opts["loss_type"], opts["epsilon_low"], opts["epsilon_high"]
    if lt == "cispo":
        per_token = -torch.clamp(coef_1, max=eh).detach() * a * logp
        clipped = (coef_1 > eh) & (a > 0)
    elif lt == "sapo":
        tau = torch.where(a > 0, opts["sapo_temperature_pos"], opts["sapo_temperature_neg"]).double()
        per_token = -(torch.sigmoid(tau * (coef_1 - 1)) * 4 / tau) * a
        clipped = torch.zeros_like(coef_1, dtype=torch.bool)
    else:
        coef_2 = torch.clamp(coef_1, 1 - el, 1 + eh)
        clipped = ((coef_1 < 1 - el) & (a < 0)) | ((coef_1 > 1 + eh) & (a > 0))
        c1 = coef_1 if opts.get("delta") is None else torch.clamp(coef_1, max=opts["delta"])
        per_token = -torch.min(c1 * a, coef_2 * a)
    if is_ratio is not None:
        per_token = per_token * is_ratio.double()
    metrics = []
    if opts["beta"] != 0.0:
        kl = torch.exp(ref - logp) - (ref - logp) - 1
        if opts.get("use_bias_correction_kl"):
            kl = kl * coef_1
        per_token = per_token + opts["beta"] * kl
        metrics.append((kl * mask).sum() / mask.sum())
    if lt in ("grpo", "sapo"):
        loss = ((per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    elif lt == "bnpo":
        loss = (per_token * mask).sum() / mask.sum().clamp(min=1.0)
    elif lt == "dr_grpo":
        loss = (per_token * mask).sum() / (per_token.size(0) * opts["max_completion_length"])
    else:
        loss = (per_token * mask).sum() / (mask.sum() if num_items is None else torch.tensor(float(num_items)))
    metrics.append((clipped.expand_as(mask) * mask).sum() / mask.sum())
    return loss, tuple(metrics)


GRPO_CASES = [
    dict(loss_type=lt, importance_sampling_level=lvl)
    for lt in ("grpo", "bnpo", "dr_grpo", "dapo", "cispo", "sapo")
    for lvl in ("token", "sequence")
    if not (lvl == "sequence" and lt in ("cispo", "sapo"))
]


def _grpo_check(case, beta=0.04, reference="computed", old=True, temperature=0.8, delta=None, is_ratio=False,
                num_items=None, bias_kl=False, bias=True, adv_per_token=False):  # fmt: skip
    x, w, _, b = make(B, bias=bias)
    rx, rw, rb = ref_model(B, bias=bias)
    ids, mask, adv, noise, ratio = grpo_batch()
    if adv_per_token:
        adv = adv.unsqueeze(1) * torch.linspace(0.5, 1.5, T)
    opts = dict(
        beta=beta,
        epsilon_low=0.2,
        epsilon_high=3.0 if case["loss_type"] == "cispo" else 0.28,
        max_completion_length=T + 3,
        temperature=temperature,
        delta=delta,
        use_bias_correction_kl=bias_kl,
        sapo_temperature_pos=1.0,
        sapo_temperature_neg=1.05,
        **case,
    )
    loss_fn = FusedLinearGRPOLoss(use_ref_model=reference != "none", **opts)
    safe = torch.where(mask.bool(), ids, 0)
    cur = ref_token_logps(x, w, safe, b, temperature)[0]
    old_logps = (cur + noise).float() if old else None
    ref_logps = ref_token_logps(rx, rw, safe, rb, temperature)[0]
    given_ref = torch.where(mask.bool(), ref_logps, 123.0).float()  # junk where masked: must not matter
    if old_logps is not None:
        old_logps = torch.where(mask.bool(), old_logps, float("nan"))
    is_r = ratio if is_ratio else None

    def fn(x, w, b):
        return loss_fn(
            x,
            w,
            ids,
            mask,
            adv,
            b,
            ref_per_token_logps=given_ref if reference == "given" else None,
            old_per_token_logps=old_logps,
            ref_input=rx,
            ref_weight=rw,
            ref_bias=rb,
            vllm_is_ratio=is_r,
            num_items_in_batch=num_items,
        )

    def ref(x, w, b):
        safe_old = None if old_logps is None else torch.where(mask.bool(), old_logps.double(), 0.0)
        r = ref_logps if reference != "none" else ref_token_logps(x, w, safe, b, temperature)[0].detach()
        return ref_grpo(x, w, b, ids, mask, adv, safe_old, r, opts, temperature, is_r, num_items)

    compare(fn, ref, (x, w, b))


@pytest.mark.parametrize("case", GRPO_CASES, ids=lambda c: f"{c['loss_type']}-{c['importance_sampling_level']}")
def test_grpo_loss_types(case):
    _grpo_check(case)


@pytest.mark.parametrize(
    "option",
    [
        dict(beta=0.0),
        dict(reference="given"),
        dict(reference="none"),
        dict(old=False),
        dict(temperature=1.0),
        dict(delta=1.1),
        dict(is_ratio=True),
        dict(num_items=23),
        dict(bias_kl=True),
        dict(bias=False),
        dict(adv_per_token=True),
    ],
    ids=lambda o: "-".join(f"{k}={v}" for k, v in o.items()),
)
@pytest.mark.parametrize("level", ["token", "sequence"])
def test_grpo_options(option, level):
    _grpo_check(dict(loss_type="dapo" if "num_items" in option else "grpo", importance_sampling_level=level), **option)


# ---- bad input ------------------------------------------------------------------------------------------------------


# ---- the gradient made in the forward --------------------------------------------------------------------------------


def _dpo_call(x, w, t, b, rx, rw):
    return FusedLinearDPOLoss(beta=0.2, compute_nll_loss=True)(w, x, t, b, ref_input=rx, ref_weight=rw)


def _grpo_call(x, w, t, b, rx, rw):
    ids, mask, adv, noise, _ = grpo_batch()
    return FusedLinearGRPOLoss(beta=0.05, loss_type="grpo", temperature=0.8)(
        x, w, ids, mask, adv, b, ref_input=rx, ref_weight=rw
    )


def _loss_and_grads(call, batch, bias=True):
    x, w, t, b = make(batch, bias=bias)
    rx, rw, _ = ref_model(batch)
    leaves = [v.clone().requires_grad_(True) for v in (x, w, b) if v is not None]
    loss, aux = call(*leaves[:2], t, leaves[2] if bias else None, rx, rw)
    return loss, aux, torch.autograd.grad(loss * 1.3, leaves)


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
@pytest.mark.parametrize("call, batch", [(_dpo_call, 2 * P), (_grpo_call, B)], ids=["dpo", "grpo"])
def test_gradient_made_in_the_forward_matches_autograd(monkeypatch, call, batch, bias):
    """The policy's gradient made in the forward (one logits GEMM per chunk) against autograd through the op's
    backward, chunked one group at a time and several groups a chunk; the policy never goes through
    selective_log_probs (only the reference does, without a gradient). With a bias the logits are scaled per token in
    place (db sums them); without one the scale goes onto the hidden-sized operands."""
    from tigon.losses import _in_forward

    calls = []
    real = _in_forward.selective_log_probs
    monkeypatch.setattr(_in_forward, "selective_log_probs", lambda *a, **k: calls.append(1) or real(*a, **k))
    loss, aux, grads = _loss_and_grads(call, batch, bias)
    assert type(loss.grad_fn).__name__ == "_PrecomputedLossBackward" and not calls
    row_bytes = T * V * 4
    for budget in (1, 2 * row_bytes):  # every group in a chunk of its own; two sequences a chunk
        monkeypatch.setattr(_in_forward, "DEFAULT_BUDGET", budget)
        loss_c, aux_c, grads_c = _loss_and_grads(call, batch, bias)
        torch.testing.assert_close(loss_c, loss)
        for a, c in zip((*aux, *grads), (*aux_c, *grads_c)):
            torch.testing.assert_close(c, a)
    monkeypatch.setattr(_in_forward, "in_forward_applies", lambda *a: False)
    loss_a, aux_a, grads_a = _loss_and_grads(call, batch, bias)
    assert calls, "the autograd path was not taken"
    torch.testing.assert_close(loss_a, loss)
    for a, c in zip((*aux, *grads), (*aux_a, *grads_a)):
        torch.testing.assert_close(c, a, atol=1e-6, rtol=1e-5)


def test_gradient_made_in_the_forward_refuses_a_second_backward():
    x, w, t, _ = make()
    w = w.clone().requires_grad_(True)
    loss, _ = FusedLinearDPOLoss(use_ref_model=False)(w, x, t)
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


def test_bad_input_names_the_argument():
    x, w, t, _ = make()
    dpo = FusedLinearDPOLoss(use_ref_model=False)
    with pytest.raises(ValueError, match="'_input'"):
        dpo(w, x[:3], t[:3])  # odd batch
    with pytest.raises(ValueError, match="'_input'"):
        dpo(w, x[0], t[0])
    with pytest.raises(ValueError, match="'target'"):
        dpo(w, x, t[:, :-1])
    with pytest.raises(TypeError, match="'target'"):
        dpo(w, x, t.float())
    with pytest.raises(ValueError, match="'weight'"):
        dpo(w[:, :-1], x, t)
    with pytest.raises(ValueError, match="'ref_input'"):
        FusedLinearDPOLoss()(w, x, t)  # use_ref_model without a reference
    with pytest.raises(ValueError, match="'ref_chosen_logps'"):
        dpo(w, x, t, ref_chosen_logps=torch.zeros(P + 1), ref_rejected_logps=torch.zeros(P))
    with pytest.raises(ValueError, match="'loss_type'"):
        FusedLinearDPOLoss(loss_type="nope")
    with pytest.raises(ValueError, match="'label_smoothing'"):
        FusedLinearDPOLoss(loss_type="robust", label_smoothing=0.5)
    with pytest.raises(ValueError, match="'beta'"):
        FusedLinearDPOLoss(beta=0.0)
    with pytest.raises(ValueError, match="'nll_target'"):
        FusedLinearORPOLoss()(w, x, t, nll_target=t[:, :-1])
    with pytest.raises(ValueError, match="'preference_labels'"):
        FusedLinearKTOLoss()(x, w, t, preference_labels=torch.ones(2 * P))
    with pytest.raises(TypeError, match="'preference_labels'"):
        FusedLinearKTOLoss()(x, w, t)
    with pytest.raises(ValueError, match="'temperature'"):
        selective_log_probs(x, w, t, temperature=0.0)


def test_grpo_bad_input_names_the_argument():
    x, w, _, _ = make(B)
    ids, mask, adv, _, _ = grpo_batch()
    grpo = FusedLinearGRPOLoss(beta=0.0)
    with pytest.raises(ValueError, match="'attention_mask'"):
        grpo(x, w, ids, mask[:, :-1], adv)
    with pytest.raises(ValueError, match="'advantages'"):
        grpo(x, w, ids, mask, adv[:-1])
    with pytest.raises(ValueError, match="'old_per_token_logps'"):
        grpo(x, w, ids, mask, adv, old_per_token_logps=torch.zeros(B))
    with pytest.raises(ValueError, match="'vllm_is_ratio'"):
        grpo(x, w, ids, mask, adv, vllm_is_ratio=torch.ones(B, 2))
    with pytest.raises(ValueError, match="'ref_per_token_logps'"):
        FusedLinearGRPOLoss(beta=0.1)(x, w, ids, mask, adv)
    with pytest.raises(ValueError, match="'max_completion_length'"):
        FusedLinearGRPOLoss(loss_type="dr_grpo")
    with pytest.raises(ValueError, match="'importance_sampling_level'"):
        FusedLinearGRPOLoss(loss_type="cispo", importance_sampling_level="sequence")
    with pytest.raises(ValueError, match="'loss_type'"):
        FusedLinearGRPOLoss(loss_type="vespo")
    with pytest.raises(ValueError, match="'delta'"):
        FusedLinearGRPOLoss(delta=0.0)
    with pytest.raises(TypeError, match="'num_items_in_batch'"):
        grpo(x, w, ids, mask, adv, num_items_in_batch="12")


# ---- GPU, bf16 ------------------------------------------------------------------------------------------------------


def _on_gpu(*tensors):
    return [None if t is None else t.to("cuda", torch.bfloat16) for t in tensors]


@needs_cuda
@pytest.mark.parametrize("loss_type", ["sigmoid", "ipo", "apo_zero"])
def test_dpo_bf16_on_gpu(loss_type):
    x, w, t, b = make(bias=True)
    rx, rw, rb = ref_model(bias=True)
    x, w, b, rx, rw, rb = _on_gpu(x, w, b, rx, rw, rb)
    loss_fn = FusedLinearDPOLoss(beta=0.1, compute_nll_loss=True, loss_type=loss_type)
    tc = t.cuda()

    def ref(x, w, b):
        ref_logps = ref_seq_logps(rx.cpu(), rw.cpu(), t, rb.cpu(), False)[0]
        return ref_dpo(x, w, t, b, (ref_logps[:P], ref_logps[P:]), 0.1, loss_type, 0.0, 0.05, 1.0, True, False)

    compare(lambda x, w, b: loss_fn(w, x, tc, b, rx, rw, rb), ref, (x, w, b), BF16_TOL, torch.bfloat16)


@needs_cuda
@pytest.mark.parametrize("module", [FusedLinearORPOLoss, FusedLinearCPOLoss, FusedLinearSimPOLoss])
def test_reference_free_bf16_on_gpu(module):
    x, w, t, b = make(bias=True)
    x, w, b = _on_gpu(x, w, b)
    cpu_fn, gpu_fn, tc = module(), module(), t.cuda()

    def ref(x, w, b):  # the same module on the CPU in fp32 from the same bf16 values: checked above against float64
        loss, aux = cpu_fn(w.float(), x.float(), t, b.float())
        return loss.double(), tuple(a.double() for a in aux)

    compare(lambda x, w, b: gpu_fn(w, x, tc, b), ref, (x, w, b), BF16_TOL, torch.bfloat16)


@needs_cuda
@pytest.mark.parametrize("level", ["token", "sequence"])
def test_grpo_bf16_on_gpu(level):
    x, w, _, b = make(B, bias=True)
    rx, rw, rb = ref_model(B, bias=True)
    ids, mask, adv, noise, _ = grpo_batch()
    safe = torch.where(mask.bool(), ids, 0)
    x, w, b, rx, rw, rb = _on_gpu(x, w, b, rx, rw, rb)
    old = ref_token_logps(x.cpu(), w.cpu(), safe, b.cpu(), 0.8)[0] + noise
    opts = dict(beta=0.04, loss_type="grpo", importance_sampling_level=level, temperature=0.8)
    loss_fn = FusedLinearGRPOLoss(**opts)
    ref_opts = dict(opts, epsilon_low=0.2, epsilon_high=0.2)
    ref_logps = ref_token_logps(rx.cpu(), rw.cpu(), safe, rb.cpu(), 0.8)[0]

    def fn(x, w, b):
        args = (ids.cuda(), mask.cuda(), adv.cuda(), b)
        return loss_fn(x, w, *args, old_per_token_logps=old.float().cuda(), ref_input=rx, ref_weight=rw, ref_bias=rb)

    def ref(x, w, b):
        return ref_grpo(x, w, b, ids, mask, adv, old, ref_logps, ref_opts, 0.8, None, None)

    compare(fn, ref, (x, w, b), BF16_TOL, torch.bfloat16)


@needs_cuda
def test_kto_bf16_on_gpu():
    x, w, t, b = make(len(LABELS), bias=True)
    x, w, b = _on_gpu(x, w, b)
    cpu_fn, gpu_fn = FusedLinearKTOLoss(), FusedLinearKTOLoss()
    kl = torch.tensor(0.2)

    def ref(x, w, b):
        loss, aux = cpu_fn(x.float(), w.float(), t, b.float(), LABELS, kl=kl)
        return loss.double(), tuple(a.double() for a in aux)

    def fn(x, w, b):
        return gpu_fn(x, w, t.cuda(), b, LABELS.cuda(), kl=kl.cuda())

    compare(fn, ref, (x, w, b), BF16_TOL, torch.bfloat16)


# ---- the benchmark runs ---------------------------------------------------------------------------------------------


def test_post_training_benchmark_runs_on_the_cpu(tmp_path):
    """python -m tigon.bench --ops post_training on the CPU's tiny shapes: every implementation checked against torch
    eager and timed (Liger noted as skipped: Triton is CUDA only)."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2] / "python"))
    cmd = [sys.executable, "-m", "tigon.bench", "--ops", "post_training", "--device", "cpu", "--quick"]
    cmd += ["--reps", "1", "--warmup", "0", "--no-chart", "--out", str(tmp_path)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    got = {(r["op"], r["impl"]) for r in rows if not r.get("error")}
    assert got >= {
        (op, impl) for op in ("post_training_dpo", "post_training_grpo") for impl in ("tigon", "torch_eager")
    }
    for r in rows:
        if r["impl"] == "tigon":
            assert r["err_y"] < 1e-3 and r["err_dx"] < 1e-2, r
