"""The mixture-of-experts benchmarks: the experts op (python -m tigon.bench --ops moe_experts) on the CPU's tiny shape,
and the train step's qwen3_moe configuration (GPU only; here its config and, shrunk, its loss)."""

import json

import pytest
import torch

pytest.importorskip("transformers")


def test_moe_experts_benchmark_runs_on_the_cpu(tmp_path):
    """Every implementation that runs on a CPU checked against the fp32 reference and timed, with its TFLOP/s (Liger
    noted as skipped: Triton is CUDA only)."""
    from tigon.bench import DEFAULT_OPS
    from tigon.bench import __main__ as bench

    assert "moe_experts" in DEFAULT_OPS
    argv = ["--ops", "moe_experts", "--device", "cpu", "--dtype", "fp32", "--quick", "--reps", "1", "--warmup", "0"]
    assert bench.main(argv + ["--no-chart", "--out", str(tmp_path)]) == 0
    rows = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert {r["impl"] for r in rows} == {"tigon", "torch_eager", "hf_loop"}
    for r in rows:
        assert r["error"] is None and r["shape"] == [64, 64, 32, 8, 2], r
        assert r["tflops_fwd"] > 0 and r["tflops_full"] > 0, r
        errs = [r[f"err_{n}"] for n in ("y", "dx", "dweights", "dgate_up", "ddown", "dw")]
        assert max(errs) < 1e-4, r


def test_moe_experts_reference_is_the_dense_mixture():
    """The benchmark's fp32 reference: every token's output is the routing-weighted sum of its experts' SwiGLU MLPs,
    computed here densely (every expert on every token, then the chosen ones picked)."""
    from tigon.bench.moe_experts import reference

    gen = torch.Generator().manual_seed(0)
    T, H, I, E, k = 6, 8, 4, 3, 2
    x = torch.randn(T, H, generator=gen, dtype=torch.float64)
    ids = torch.stack([torch.randperm(E, generator=gen)[:k] for _ in range(T)])
    weights = torch.rand(T, k, generator=gen, dtype=torch.float64)
    gate_up = torch.randn(E, 2 * I, H, generator=gen, dtype=torch.float64)
    down = torch.randn(E, H, I, generator=gen, dtype=torch.float64)
    gate, up = torch.einsum("th,eih->tei", x, gate_up).chunk(2, dim=-1)
    every = torch.einsum("tei,ehi->teh", torch.nn.functional.silu(gate) * up, down)  # [T, E, H]
    want = (every.gather(1, ids[..., None].expand(T, k, H)) * weights[..., None]).sum(1)
    torch.testing.assert_close(reference(x, ids, weights, gate_up, down), want)


def test_train_step_qwen3_moe_is_qwen3_30b_a3b_with_fewer_layers_and_trains_with_the_aux_loss():
    from transformers import AutoModelForCausalLM

    from tigon.bench import train_step

    assert train_step.CONFIGS["qwen3_moe"] == ("qwen3_moe", train_step.BATCH, train_step.SEQ, None)
    assert train_step.LIGER["qwen3_moe"] == "apply_liger_kernel_to_qwen3_moe"
    config = train_step._config("qwen3_moe", train_step.SEQ)
    shape = ("hidden_size", "moe_intermediate_size", "num_experts", "num_experts_per_tok", "head_dim", "vocab_size")
    assert tuple(getattr(config, k) for k in shape) == (2048, 768, 128, 8, 128, 151936)
    assert config.norm_topk_prob and config.output_router_logits and config.router_aux_loss_coef == 0.001
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    assert round(sum(p.numel() for p in model.parameters()) / 1e9, 1) == 5.6  # as the module docstring says

    # Shrunk to run here: the loss the benchmark backpropagates carries the load-balancing term.
    cls, kwargs = train_step.MODELS["qwen3_moe"]
    small = dict(hidden_size=64, moe_intermediate_size=32, num_hidden_layers=2, num_attention_heads=4)
    small.update(num_key_value_heads=2, head_dim=16, num_experts=8, num_experts_per_tok=2, vocab_size=128)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(type(config)(**{**kwargs, **small}))
    ids = torch.randint(0, 128, (2, 16))
    out = model(input_ids=ids, labels=ids, use_cache=False)
    plain = model(input_ids=ids, labels=ids, use_cache=False, output_router_logits=False)
    assert out.aux_loss is not None and plain.aux_loss is None
    torch.testing.assert_close(out.loss, plain.loss + 0.001 * out.aux_loss)
