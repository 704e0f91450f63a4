"""FusedLinearDPOLoss under FSDP2: a tiny Llama backbone and its lm_head sharded with fully_shard over 2 gloo CPU
processes, each rank on its half of the preference pairs, matches one process on all of them: the loss and, after
backward, every parameter's gradient (the lm_head's arriving in its row shards), for 2 SGD steps. fp32.

The loss runs outside the module's forward, where FSDP2 leaves the lm_head sharded: its weight is gathered explicitly
with full_tensor(grad_placements=[Partial("avg")]), so that backward reduce-scatters the ranks' gradients averaged, as
FSDP2 does for the parameters it gathered itself in forward (each rank's loss is the mean over its own pairs)."""

import os
import tempfile

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from tolerances import assert_close

transformers = pytest.importorskip("transformers")
from tigon.losses import FusedLinearDPOLoss  # noqa: E402

WORLD, PAIRS, SEQ, STEPS = 2, 4, 12, 2  # PAIRS is the global count: each rank takes PAIRS // WORLD
CONFIG = dict(
    vocab_size=96,
    hidden_size=48,
    intermediate_size=80,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
    tie_word_embeddings=False,
)


class Policy(torch.nn.Module):
    """A causal LM split where the loss wants it: forward returns the last hidden states; lm_head is applied by the
    loss."""

    def __init__(self, seed: int):
        super().__init__()
        torch.manual_seed(seed)
        lm = transformers.LlamaForCausalLM(transformers.LlamaConfig(**CONFIG))
        lm.config._attn_implementation = "eager"
        self.backbone, self.lm_head = lm.model, lm.lm_head

    def forward(self, ids):
        return self.backbone(input_ids=ids).last_hidden_state


def pairs(step: int):
    """[2P, SEQ] token ids and targets: chosen rows then rejected rows, the first 4 positions a prompt (ignored)."""
    g = torch.Generator().manual_seed(step)
    ids = torch.randint(0, CONFIG["vocab_size"], (2 * PAIRS, SEQ), generator=g)
    target = ids.roll(-1, 1)
    target[:, :4] = -100
    target[:, -1] = -100
    return ids, target


def rank_rows(rank: int, world: int) -> torch.Tensor:
    """This rank's pairs: its chosen rows and the matching rejected rows, so chosen still precedes rejected."""
    per = PAIRS // world
    chosen = torch.arange(rank * per, (rank + 1) * per)
    return torch.cat([chosen, chosen + PAIRS])


def run(policy, reference, rank: int, world: int, head_weight):
    """STEPS SGD steps; each step's loss (averaged over ranks) and gradients."""
    loss_fn = FusedLinearDPOLoss(beta=0.5)
    opt = torch.optim.SGD(policy.parameters(), lr=0.5)
    losses, grads = [], []
    for step in range(STEPS):
        ids, target = pairs(step)
        rows = rank_rows(rank, world)
        ids, target = ids[rows], target[rows]
        with torch.no_grad():
            ref_hidden = reference(ids)
        loss, _ = loss_fn(
            head_weight(policy), policy(ids), target, ref_input=ref_hidden, ref_weight=reference.lm_head.weight
        )
        loss.backward()
        grads.append({n: _full(p.grad).clone() for n, p in policy.named_parameters()})
        opt.step()
        opt.zero_grad(set_to_none=True)
        if world > 1:
            loss = loss.detach().clone()
            dist.all_reduce(loss)
            loss /= world
        losses.append(loss.detach())
    return torch.stack(losses), grads


def _full(t):
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def _gathered_head(policy):
    from torch.distributed.tensor import Partial

    return policy.lm_head.weight.full_tensor(grad_placements=[Partial("avg")])


def _worker(rank: int, init: str, out: str):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=WORLD)
    try:
        torch.set_num_threads(1)
        policy, reference = Policy(0), Policy(1).eval()
        mesh = init_device_mesh("cpu", (WORLD,))
        for layer in policy.backbone.layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(policy.lm_head, mesh=mesh)  # its own group: never called, so it stays sharded
        fully_shard(policy, mesh=mesh)
        head = policy.lm_head.weight
        sharded = (type(head).__name__, str(head.placements), tuple(head.to_local().shape))
        losses, grads = run(policy, reference, rank, WORLD, _gathered_head)
        if rank == 0:
            torch.save({"losses": losses, "grads": grads, "sharded": sharded}, out)
    finally:
        dist.barrier()
        dist.destroy_process_group()


def _fsdp2_missing() -> str | None:
    if not dist.is_available() or not dist.is_gloo_available():
        return "torch built without torch.distributed / gloo"
    try:
        from torch.distributed.fsdp import fully_shard  # noqa: F401
        from torch.distributed.tensor import Partial  # noqa: F401
    except ImportError as e:
        return f"torch {torch.__version__} has no FSDP2 / DTensor Partial: {e}"
    return None


@pytest.mark.skipif(_fsdp2_missing() is not None, reason=str(_fsdp2_missing()))
def test_dpo_loss_with_fsdp2_sharded_lm_head_follows_one_process():
    policy, reference = Policy(0), Policy(1).eval()
    want_losses, want_grads = run(policy, reference, 0, 1, lambda p: p.lm_head.weight)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "result.pt")
        mp.spawn(_worker, args=(f"file://{os.path.join(tmp, 'rendezvous')}", out), nprocs=WORLD, join=True)
        got = torch.load(out)
    name, placements, local_shape = got["sharded"]
    assert name == "DTensor" and "Shard(dim=0)" in placements
    assert local_shape == (CONFIG["vocab_size"] // WORLD, CONFIG["hidden_size"])
    # The reference differs from the policy, so the loss is not log 2 and every gradient is live
    assert (want_losses - torch.log(torch.tensor(2.0))).abs().min() > 1e-3
    torch.testing.assert_close(got["losses"], want_losses, rtol=1e-5, atol=1e-6)
    for step, (g, w) in enumerate(zip(got["grads"], want_grads)):
        assert g.keys() == w.keys()
        for n in w:
            assert w[n].abs().max() > 0, n
            assert_close(g[n].double(), w[n].double(), torch.float32, name=f"step {step} grad {n}")
