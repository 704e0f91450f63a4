"""Tigon inside DDP and FSDP2: a patched tiny Llama trained in 2 processes, each on its half of the batch,
follows the single-process run of the same patched model on the whole batch, and the unpatched transformers model
under the same wrapper. The fused linear + CE loss is the one that runs, and under FSDP2 the lm_head gradient lands
in the sharded parameter. CPU: gloo, 2 processes, fp32. GPU: the same with NCCL, 2 GPUs (skips with fewer).
DTensor inputs to tigon.ops.rms_norm / tigon.nn.RMSNorm are checked on a 2-process mesh."""

import datetime
import os
import tempfile

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from tolerances import assert_close

transformers = pytest.importorskip("transformers")
import tigon.transformers as tt  # noqa: E402
from tigon.bench.train_step_distributed import finish, wrap  # noqa: E402
from tigon.transformers import _causal_lm  # noqa: E402

WORLD, BATCH, SEQ, STEPS = 2, 4, 24, 20  # BATCH is the global batch: each rank trains on BATCH // WORLD rows
CONFIG = dict(
    vocab_size=512,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=128,
    initializer_range=0.05,
    tie_word_embeddings=False,
)


def build(patched: bool, device="cpu"):
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**CONFIG))
    model.config._attn_implementation = "eager"
    with torch.no_grad():  # norm weights off their ones, so a dropped weight shows
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.2 * torch.randn_like(p))
    if patched:
        tt.apply_tigon_to_llama(model=model)
    return model.to(device).train()


def token_stream(n: int = 4096) -> torch.Tensor:
    """A 64-token phrase repeated with 10% noise: the loss falls within the 20 steps."""
    g = torch.Generator().manual_seed(5)
    toks = torch.randint(1, CONFIG["vocab_size"], (64,), generator=g)[torch.arange(n) % 64]
    noise = torch.rand(n, generator=g) < 0.1
    toks[noise] = torch.randint(1, CONFIG["vocab_size"], (int(noise.sum()),), generator=g)
    return toks


def batch(step: int, rows: slice) -> torch.Tensor:
    # Every row has SEQ - 1 targets, so the mean of the ranks' mean losses is the whole batch's mean loss.
    toks = token_stream()
    start = (step * 53) % (len(toks) - BATCH * SEQ)
    return toks[start : start + BATCH * SEQ].view(BATCH, SEQ)[rows]


def train(model, params, rows: slice, device="cpu", on_loss=None):
    """STEPS AdamW steps; per-step losses and the lm_head weight's gradient of step 0 (before Adam moved anything)."""
    opt = torch.optim.AdamW(params, lr=3e-3, weight_decay=0.01)
    losses, head_grad = [], None
    for step in range(STEPS):
        ids = batch(step, rows).to(device)
        out = model(input_ids=ids, labels=ids)
        out.loss.backward()
        if step == 0:
            head_grad = (out.logits, _head(model).weight.grad)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(on_loss(out.loss.detach()) if on_loss else out.loss.detach())
    return torch.stack(losses).double().cpu(), head_grad


def _head(model):
    return getattr(model, "module", model).lm_head


def _full(t):
    return t.full_tensor() if hasattr(t, "full_tensor") else t


# ---- the 2-process side ----------------------------------------------------------------------------------------------


def _train_worker(rank: int, wrapper: str, backend: str, init: str, out: str):
    device = "cpu" if backend == "gloo" else f"cuda:{rank}"
    if device != "cpu":
        torch.cuda.set_device(device)
    torch.set_num_threads(1)  # two processes on a small CPU: no oversubscription
    # a rank that dies makes the others fail in a minute rather than wait forever
    dist.init_process_group(
        backend, init_method=init, rank=rank, world_size=WORLD, timeout=datetime.timedelta(seconds=60)
    )
    calls = []
    fused = _causal_lm.fused_linear_cross_entropy
    _causal_lm.fused_linear_cross_entropy = lambda *a, **k: calls.append(1) or fused(*a, **k)
    try:
        rows = slice(rank * BATCH // WORLD, (rank + 1) * BATCH // WORLD)
        results = {}
        for patched in (True, False):
            model = build(patched, device)
            wrapped = wrap(model, wrapper, torch.device(device), WORLD)
            calls.clear()
            losses, (logits, head_grad) = train(wrapped, wrapped.parameters(), rows, device, on_loss=lambda l: _mean(l))
            local = head_grad.to_local() if hasattr(head_grad, "to_local") else None
            results[patched] = dict(
                losses=losses,
                fused_calls=len(calls),
                logits_none=logits is None,
                head_grad=_full(head_grad).detach().cpu(),
                head_grad_type=type(head_grad).__name__,
                head_grad_placements=str(getattr(head_grad, "placements", None)),
                head_grad_local=None if local is None else local.detach().cpu(),
                params={n: _full(p).detach().cpu() for n, p in model.named_parameters()},
            )
            results[patched]["head_grad_all_local"] = _gather(results[patched]["head_grad_local"])
        if rank == 0:
            torch.save(results, out)
    except BaseException:
        dist.destroy_process_group()
        raise
    finally:
        _causal_lm.fused_linear_cross_entropy = fused
    finish()


def _mean(t):
    t = t.clone()
    dist.all_reduce(t)
    return t / WORLD


def _gather(t):
    if t is None:
        return None
    parts = [None] * WORLD
    dist.all_gather_object(parts, t)
    return parts


def spawn(fn, *args, backend="gloo"):
    """fn(rank, *args, backend, init, out) in WORLD processes; what rank 0 saved to `out`."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "result.pt")
        init = f"file://{os.path.join(tmp, 'rendezvous')}"  # no TCP port to race other jobs for
        mp.spawn(fn, args=(*args, backend, init, out), nprocs=WORLD, join=True)
        return torch.load(out)


# ---- the tests -------------------------------------------------------------------------------------------------------


def _check_run(results, ref_losses, ref_head_grad, ref_params, start, wrapper):
    got, plain = results[True], results[False]
    assert got["fused_calls"] == STEPS and got["logits_none"], "the fused linear + CE loss did not run"
    assert plain["fused_calls"] == 0
    assert ref_losses[-1] < ref_losses[0] - 0.5  # it learns
    # Tight on losses (5x fp32's rtol, as test_transformers); parameters as drift over the distance trained,
    # since Adam turns rounding-level gradient differences (another all-reduce order) into +-lr steps.
    for name, other in (("single-process", ref_losses), ("unpatched " + wrapper, plain["losses"])):
        torch.testing.assert_close(got["losses"], other, rtol=1e-4, atol=0, msg=lambda m: f"vs {name}: {m}")
    for pname, p in got["params"].items():
        for name, q in (("single-process", ref_params[pname]), ("unpatched", plain["params"][pname])):
            drift, moved = (p - q).norm().item(), (q - start[pname]).norm().item()
            assert drift <= 1e-2 * moved + 1e-6, f"{pname} vs {name}: {drift:.2e} apart after moving {moved:.2e}"
    # Step 0's lm_head gradient (the same weights everywhere) against the single process's, and the unpatched one's.
    assert got["head_grad"].abs().max() > 0
    assert_close(got["head_grad"], ref_head_grad.double(), torch.float32, name="lm_head grad")
    assert_close(got["head_grad"], plain["head_grad"].double(), torch.float32, name="lm_head grad vs unpatched")
    if wrapper == "fsdp2":  # the gradient reached the sharded parameter: a DTensor, each rank its rows
        assert got["head_grad_type"] == "DTensor" and "Shard(dim=0)" in got["head_grad_placements"]
        rows = ref_head_grad.shape[0] // WORLD
        for r, local in enumerate(got["head_grad_all_local"]):
            assert local.shape[0] == rows and local.abs().max() > 0
            assert_close(
                local,
                ref_head_grad[r * rows : (r + 1) * rows].double(),
                torch.float32,
                name=f"rank {r}'s lm_head grad shard",
                scale=ref_head_grad.abs().max().item(),
            )


_reference = {}


def reference():
    """The single-process run of the patched model on the whole batch (shared by the tests)."""
    if not _reference:
        model = build(True)
        start = {n: p.detach().clone() for n, p in model.named_parameters()}
        losses, (_, head_grad) = train(model, model.parameters(), slice(None))
        _reference.update(
            losses=losses,
            head_grad=head_grad,
            start=start,
            params={n: p.detach().clone() for n, p in model.named_parameters()},
        )
    r = _reference
    return r["losses"], r["head_grad"], r["params"], r["start"]


def _fsdp2_available() -> str | None:
    try:
        from torch.distributed.fsdp import fully_shard  # noqa: F401
    except ImportError as e:
        return f"torch {torch.__version__} has no FSDP2 (torch.distributed.fsdp.fully_shard): {e}"
    return None


needs_dist = pytest.mark.skipif(
    not dist.is_available() or not dist.is_gloo_available(), reason="torch built without torch.distributed / gloo"
)
WRAPPERS = [
    "ddp",
    pytest.param("fsdp2", marks=pytest.mark.skipif(_fsdp2_available() is not None, reason=str(_fsdp2_available()))),
]


@needs_dist
@pytest.mark.parametrize("wrapper", WRAPPERS)
def test_two_processes_follow_one_cpu(wrapper):
    _check_run(spawn(_train_worker, wrapper), *reference(), wrapper)


@pytest.mark.skipif(
    torch.cuda.device_count() < 2 or not dist.is_nccl_available(),
    reason=f"needs 2 CUDA GPUs and NCCL (found {torch.cuda.device_count()} GPUs)",
)
@pytest.mark.parametrize("wrapper", WRAPPERS)
def test_two_gpus_follow_one_cpu(wrapper):
    # The GPU kernels against the CPU reference path: same trajectory within the same fp32 criteria.
    _check_run(spawn(_train_worker, wrapper, backend="nccl"), *reference(), wrapper)


# ---- DTensor inputs to rms_norm ----------------------------------------------------------------------------------------


def _dtensor_worker(rank: int, backend: str, init: str, out: str):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_module, distribute_tensor

    from tigon.nn import RMSNorm
    from tigon.ops import rms_norm

    torch.set_num_threads(1)
    dist.init_process_group(
        backend, init_method=init, rank=rank, world_size=WORLD, timeout=datetime.timedelta(seconds=60)
    )
    try:
        mesh = init_device_mesh("cpu", (WORLD,))
        torch.manual_seed(0)  # the same full tensors on every rank
        x, w, dy = torch.randn(4, 6, 64), 1 + 0.2 * torch.randn(64), torch.randn(4, 6, 64)
        xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
        y_ref = rms_norm(xr, wr)
        y_ref.backward(dy)
        for placement in (Shard(0), Shard(1), Replicate()):
            xd = distribute_tensor(x, mesh, [placement]).requires_grad_()
            wd = distribute_tensor(w, mesh, [Replicate()]).requires_grad_()
            y = rms_norm(xd, wd)
            assert type(y).__name__ == "DTensor" and y.placements == (placement,), (type(y), y.placements)
            y.backward(distribute_tensor(dy, mesh, [placement]))
            assert_close(y.full_tensor(), y_ref.detach().double(), name=f"y {placement}")
            assert_close(xd.grad.full_tensor(), xr.grad.double(), name=f"dx {placement}")
            assert_close(wd.grad.full_tensor(), wr.grad.double(), name=f"dw {placement}")  # summed over the ranks
        norm = distribute_module(RMSNorm(64), mesh)  # parameters replicated
        assert_close(
            norm(distribute_tensor(x, mesh, [Shard(0)])).full_tensor(),
            rms_norm(x, torch.ones(64)).double(),
            name="module",
        )
        refusals = {
            "Shard(dim=2)": (distribute_tensor(x, mesh, [Shard(2)]), distribute_tensor(w, mesh, [Replicate()])),
            "plain tensor": (distribute_tensor(x, mesh, [Shard(0)]), w),
            "Shard(dim=0)": (distribute_tensor(x, mesh, [Shard(0)]), distribute_tensor(w, mesh, [Shard(0)])),
        }
        for words, args in refusals.items():
            try:
                rms_norm(*args)
            except TypeError as e:
                assert words in str(e) and "full_tensor()" in str(e), str(e)
            else:
                raise AssertionError(f"rms_norm accepted {words}")
        if rank == 0:
            torch.save("ok", out)
    except BaseException:
        dist.destroy_process_group()
        raise
    finish()


@needs_dist
def test_rms_norm_dtensor():
    """Sharded over leading dimensions or replicated: a DTensor out, placed as x, with the single tensor's values and
    gradients; sharded over the normalised dimension, a sharded weight, or DTensor mixed with a plain tensor: a
    TypeError naming the argument and the way out."""
    assert spawn(_dtensor_worker) == "ok"


# ---- the 2-GPU benchmark's run, on 2 CPU processes -----------------------------------------------------------------


@needs_dist
@pytest.mark.parametrize("wrapper", WRAPPERS)
def test_train_step_benchmark_runs_on_two_processes(wrapper):
    """python -m tigon.bench --ops train_step_fsdp2 / train_step_ddp (2+ GPUs, NCCL) is measure(); here the same on 2
    gloo CPU processes with a tiny model: it trains and reports for every rank's tokens."""
    from tigon.bench import train_step_distributed as tsd

    config = transformers.LlamaConfig(**CONFIG)
    res = tsd.measure(
        config, "tigon", wrapper, world=WORLD, batch=2, seq=SEQ, warmup=1, steps=2, dtype=torch.float32, backend="gloo"
    )
    assert res["step_ms"] > 0 and res["tokens_per_s"] == pytest.approx(WORLD * 2 * SEQ / (res["step_ms"] * 1e-3))
    assert 5 < res["loss_first"] < 8 and res["loss_last"] == res["loss_last"]  # ~ln(512) at the start, not NaN
    assert res["params"] == sum(p.numel() for p in transformers.LlamaForCausalLM(config).parameters())
