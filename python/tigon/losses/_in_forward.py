"""A loss of the policy's per-token log-probabilities with its gradient made in the forward: one logits GEMM per
chunk instead of two.

The preference and RL losses take the policy's per-token log-probabilities p of the targets, and their gradient with
respect to p is known only once the loss is. Through autograd (selective_log_probs) the forward computes p chunk by
chunk and the backward recomputes each chunk's logits to apply the per-token upstream gradient: the logits GEMM
twice, five GEMMs over the vocabulary per step with a reference model where four suffice. Here every chunk holds
whole groups of sequences over which the loss separates (a chosen / rejected pair, or single completions), so once a
chunk's p are known, so is the loss's gradient on them: the chunk's logits become their cross-entropy gradient in
place (Tigon's cross entropy) and give dX and dW (and db) at once through cuBLAS, the per-token scale applied to the
hidden-sized operands and results rather than to the logits. The loss's
backward only scales those gradients by its grad_output.

The loss's gradient on a group is taken by autograd on [B, T] values: the loss evaluated with that chunk's rows set
and every other row at a neutral filler. That is exact when the loss separates over the groups (a sum of terms each
reading one group's rows, with constants from the masks), as every loss of this package does; the tests check each
against the autograd path.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from tigon.losses.log_probs import selective_log_probs
from tigon.ops._common import compiling
from tigon.ops.cross_entropy import REDUCTIONS, _fwd_inplace_impl

__all__ = ["policy_loss", "pair_groups", "sequence_groups", "DEFAULT_BUDGET"]

DEFAULT_BUDGET = 512 << 20  # bytes of logits per chunk (a chosen / rejected pair of 1024 tokens at V = 128256)
_FILLER = -1.0  # the log-probability other groups' rows read while one group's gradient is taken (finite anywhere)


def pair_groups(pairs: int) -> list[list[int]]:
    """The paired losses' groups: sequence i with its counterpart i + pairs ([2P, T] batches, chosen first)."""
    return [[i, i + pairs] for i in range(pairs)]


def sequence_groups(batch: int) -> list[list[int]]:
    return [[i] for i in range(batch)]


def _chunks(groups: list[list[int]], row_bytes: int, budget: int) -> list[list[int]]:
    """Consecutive groups packed into chunks of at most budget bytes of logits (at least one group each)."""
    chunks, current = [], []
    for g in groups:
        if current and (len(current) + len(g)) * row_bytes > budget:
            chunks.append(current)
            current = []
        current = current + g
    return chunks + ([current] if current else [])


class _PrecomputedLoss(torch.autograd.Function):
    """Returns the loss computed by run() and, in the backward, the gradients run() made, times grad_output."""

    @staticmethod
    def forward(ctx, x, weight, bias, run):
        loss, per_token, grads = run()
        ctx.have = tuple(g is not None for g in grads)
        ctx.save_for_backward(*(g for g in grads if g is not None))
        ctx.mark_non_differentiable(per_token)
        return loss, per_token

    @staticmethod
    def backward(ctx, grad_loss, grad_per_token):
        saved = iter(ctx.saved_tensors)
        grads = [next(saved) if have else None for have in ctx.have]
        if grad_loss is None:
            return None, None, None, None
        torch.autograd.graph.increment_version(tuple(g for g in grads if g is not None))  # a second backward raises
        return (*(None if g is None else g.mul_(grad_loss.to(g.dtype)) for g in grads), None)


def _run(x, weight, bias, target, ignore_index, temperature, groups, loss_of, budget, need):
    batch, length, hidden = x.shape
    dev = x.device
    x, w = x.detach(), weight.detach()
    b = None if bias is None else bias.detach() / temperature
    need_dx, need_dw, need_db = need
    dx = torch.empty_like(x) if need_dx else None  # every row is some group's: each chunk writes its own
    dw = torch.zeros_like(w) if need_dw else None
    db = torch.zeros(w.shape[0], dtype=torch.float32, device=dev) if need_db else None
    per_token = torch.zeros(batch, length, dtype=torch.float32, device=dev)
    filler = torch.full_like(per_token, _FILLER)
    chunks = _chunks(groups, length * w.shape[0] * w.element_size(), budget)
    # every chunk's rows in one copy, from pinned memory so the host does not wait for the queued work
    order = torch.tensor([r for c in chunks for r in c], dtype=torch.int64)
    order = order.pin_memory().to(dev, non_blocking=True) if dev.type == "cuda" else order
    start = 0
    for chunk in chunks:
        rows = order[start : start + len(chunk)]
        start += len(chunk)
        xc = x.index_select(0, rows).reshape(-1, hidden)
        if temperature != 1.0:
            xc = xc / temperature
        logits = xc @ w.T if b is None else torch.addmm(b.to(xc.dtype), xc, w.T)
        tgt = target.index_select(0, rows).reshape(-1)
        # the rows' cross entropy -p, and its gradient (softmax - onehot) written over the logits
        nll = _fwd_inplace_impl(logits, tgt, None, ignore_index, 0.0, 0.0, 0.0, REDUCTIONS["none"], False, False)[0]
        p = -nll.view(len(chunk), length)
        per_token.index_copy_(0, rows, p)
        trial = filler.index_copy(0, rows, p).requires_grad_()
        with torch.enable_grad():
            trial_loss = loss_of(trial)
            g = None
            if trial_loss.requires_grad:  # a chunk whose every target is ignored may not reach the loss at all
                (g,) = torch.autograd.grad(trial_loss, trial, allow_unused=True)
        if g is None:
            g = torch.zeros_like(trial)
        # d loss / d logits = diag(s) (softmax - onehot), s = -(d loss / d p) per token. The rows' scale goes onto the
        # [tokens, hidden] operands and results instead of the [tokens, vocabulary] logits, sparing a read and a write
        # of the logits per chunk: dX = diag(s) (G W), dW = Gᵀ (diag(s) xc). With a bias, db = Gᵀ s needs the scaled
        # logits anyway (a column sum), so they are scaled in place then.
        s = -g.index_select(0, rows).reshape(-1, 1)
        if need_db:
            logits.mul_(s)
            s = None
        if need_dx:
            dxc = logits @ w
            if s is not None or temperature != 1.0:  # in place, in fp32 and rounded once
                dxc.mul_((1.0 if s is None else s) / temperature)
            dx.index_copy_(0, rows, dxc.view(len(chunk), length, hidden))
        if need_dw:  # xc (this chunk's own copy of its rows) carries the 1 / temperature already
            dw.addmm_(logits.T, xc if s is None else xc.mul_(s))
        if need_db:
            db.add_(logits.sum(0, dtype=torch.float32), alpha=1.0 / temperature)
        del logits
    loss = loss_of(per_token).detach()
    return loss, per_token, (dx, dw, None if db is None else db.to(bias.dtype))


def in_forward_applies(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> bool:
    """Whether the gradient can be made in the forward: autograd on, not traced by torch.compile, one dtype for
    x, weight and bias and no autocast (else F.linear's casts, which autograd's path reproduces)."""
    same_dtype = x.dtype == weight.dtype and (bias is None or bias.dtype == x.dtype)
    autocast = torch.is_autocast_enabled(x.device.type)
    return torch.is_grad_enabled() and same_dtype and not autocast and not compiling()


def policy_loss(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    target: torch.Tensor,
    ignore_index: int,
    temperature: float,
    groups: list[list[int]],
    loss_of: Callable[[torch.Tensor], torch.Tensor],
    fuse: bool = True,
    memory_budget: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss, per-token log-probabilities [B, T] detached) for loss = loss_of(p), p = log softmax((x @ weight.T +
    bias) / temperature)[target] per token of x [B, T, H] (0 where target is ignore_index). loss_of must separate over
    groups (lists of batch rows covering every row once) and read nothing else that needs a gradient. The gradient
    is made in the forward (above) unless fuse is False, torch.compile is tracing, or nothing needs a gradient: then
    p comes from selective_log_probs and autograd takes the loss's gradient."""
    need = (x.requires_grad, weight.requires_grad, bias is not None and bias.requires_grad)
    if not (fuse and any(need) and in_forward_applies(x, weight, bias)):
        p = selective_log_probs(x, weight, target, bias, temperature, ignore_index)
        return loss_of(p), p.detach()

    def run():
        budget = memory_budget or DEFAULT_BUDGET
        return _run(x, weight, bias, target, ignore_index, float(temperature), groups, loss_of, budget, need)

    return _PrecomputedLoss.apply(x, weight, bias, run)
