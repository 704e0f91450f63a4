"""tigon.optimize_model against transformers itself, on the tiny random models of test_transformers.py (no
downloads): greedy generation token for token (one prompt and a left-padded batch), the prompt pass's logits at every
position, sampling reproducible under a seed, stop tokens and padding as transformers writes them, the fallbacks to
transformers' generate, the static cache allocated once, and revert. The CUDA-graph tests run on a GPU only."""

import contextlib
import copy
import json
import warnings

import pytest
import torch

from conftest import needs_cuda

transformers = pytest.importorskip("transformers")
import tigon  # noqa: E402
from test_transformers import build, family_param  # noqa: E402

DENSE = ["llama", "mistral", "ministral", "ministral3", "seed_oss", "qwen2", "qwen3", "granite", "gemma", "gemma2"]
DENSE += ["gemma3", "phi3", "olmo2", "olmo3", "helium", "ernie4_5", "glm", "glm4", "smollm3", "hunyuan_v1_dense"]
DENSE += ["exaone4", "starcoder2", "stablelm", "cohere", "cohere2"]
MOE = ["qwen3_moe", "mixtral", "olmoe", "qwen2_moe", "ernie4_5_moe", "glm4_moe", "dots1", "hunyuan_v1_moe"]
MOE += ["granitemoe", "granitemoeshared"]
FAMILIES = DENSE + MOE
PARAMS = [family_param(n) for n in FAMILIES]
NEW_TOKENS = 64
VOCAB = 320  # test_transformers' tiny vocabulary; ids 0-2 are pad, bos, eos


def pair(name: str, dtype=torch.float32, batch: int = 2, seq: int = 128):
    """transformers' model and an optimized copy of it (the same weights)."""
    ref = build(name, dtype=dtype).eval()
    ref.config.output_router_logits = False  # MoE: no router loss while generating (transformers' fails on a mask)
    return ref, tigon.optimize_model(copy.deepcopy(ref), max_batch_size=batch, max_seq_len=seq)


def prompts(batch: int = 2, length: int = 12, padding: int = 4):
    """Random token ids (no special ids) and an attention mask with `padding` left-padding slots in the last row."""
    ids = torch.randint(3, VOCAB, (batch, length))
    mask = torch.ones_like(ids)
    if batch > 1:
        ids[-1, :padding], mask[-1, :padding] = 0, 0
    return ids, mask


@contextlib.contextmanager
def no_fallback():
    """Fails the test on any tigon.inference warning (a fallback would compare transformers with itself)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="tigon.inference")
        yield


@pytest.mark.parametrize("name", PARAMS)
def test_greedy_matches_transformers(name):
    ref, opt = pair(name)
    ids, mask = prompts()
    for batch in (1, 2):
        kw = dict(max_new_tokens=NEW_TOKENS, do_sample=False, attention_mask=mask[-batch:])
        expected = ref.generate(ids[-batch:], **kw)
        with no_fallback():
            got = opt.generate(ids[-batch:], **kw)
        assert torch.equal(got, expected), (
            f"batch {batch}: first mismatch at {(got != expected).nonzero()[:1].tolist()}"
        )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("name", PARAMS)
def test_forward_logits_match_transformers(name, dtype):
    """Teacher-forced logits at every position of a left-padded batch (positions past the padding: the padding's own
    are not defined). bf16: both sides round every op to bf16 but SDPA and eager attention sum in other orders, so
    the logits agree to a few bf16 units of their largest magnitude (5%)."""
    if dtype == torch.bfloat16 and name in MOE:
        pytest.skip(
            "bf16 MoE: one rounding apart in the hidden state can flip a token's top-k expert (a discrete jump)"
        )
    ref, opt = pair(name, dtype)
    ids, mask = prompts()
    with torch.no_grad():
        expected = ref(ids, attention_mask=mask).logits
        got = opt(ids, attention_mask=mask).logits
    valid = mask.bool()
    scale = expected[valid].abs().max().item()
    tol = dict(atol=1e-5 * scale, rtol=1e-5) if dtype == torch.float32 else dict(atol=5e-2 * scale, rtol=0)
    torch.testing.assert_close(got[valid].float(), expected[valid].float(), **tol)


@pytest.mark.parametrize("name", PARAMS)
def test_tigon_kernel_path_matches_transformers(monkeypatch, name):
    """The step as it runs where Tigon's kernels apply (16-bit on sm_90: GEMV, decode attention, fused residual add +
    RMSNorm, RoPE, SwiGLU / GeGLU), here on those ops' CPU references in fp32: the prompt's logits and greedy
    tokens as transformers'."""
    from tigon.inference import _decoder, _ops

    for module in (_ops, _decoder):
        monkeypatch.setattr(module, "_tigon_kernels", lambda x: True)
    ref, opt = pair(name)
    ids, mask = prompts()
    with torch.no_grad():
        expected, got = ref(ids, attention_mask=mask).logits, opt(ids, attention_mask=mask).logits
    valid = mask.bool()
    scale = expected[valid].abs().max().item()
    torch.testing.assert_close(got[valid], expected[valid], atol=1e-5 * scale, rtol=1e-5)
    kw = dict(attention_mask=mask, max_new_tokens=32, do_sample=False)
    with no_fallback():
        assert torch.equal(opt.generate(ids, **kw), ref.generate(ids, **kw))


def test_unsupported_family_is_returned_unchanged():
    model = build("gemma4").eval()
    forward, generate = model.forward, model.generate
    with pytest.warns(UserWarning, match="not supported for inference yet: model type 'gemma4_text'"):
        assert tigon.optimize_model(model) is model
    assert not hasattr(model, "tigon_inference")
    assert model.forward == forward and model.generate == generate


@pytest.mark.parametrize("change", ["router", "part"])
def test_moe_block_beyond_router_experts_and_shared_mlp_is_returned_unchanged(change):
    """The decode loop replays an MoE block as router + experts (+ shared MLP): a router that hands back logits only
    (routing left to the block's forward) or a part it would leave out keeps the model transformers'."""
    model = build("qwen3_moe").eval()
    mlp = model.model.layers[0].mlp  # the tiny model's MoE layer (its second is dense)
    if change == "router":
        mlp.gate = torch.nn.Linear(model.config.hidden_size, model.config.num_experts, bias=False)
    else:
        mlp.bias_mlp = torch.nn.Linear(model.config.hidden_size, model.config.hidden_size)
    match = "MoE router Linear" if change == "router" else "MoE block parts \\['bias_mlp'\\]"
    with pytest.warns(UserWarning, match=match):
        assert tigon.optimize_model(model) is model
    assert not hasattr(model, "tigon_inference")


def test_decoder_block_with_a_part_the_loop_would_leave_out_is_returned_unchanged():
    """A module in the block that the loop does not know (an adapter beside the MLP, say) would be left out."""
    model = build("llama").eval()
    model.model.layers[1].adapter = torch.nn.Linear(model.config.hidden_size, model.config.hidden_size)
    with pytest.warns(UserWarning, match="decoder block parts \\['adapter'\\]"):
        assert tigon.optimize_model(model) is model


def test_unsupported_rope_type_is_returned_unchanged():
    ref = build("llama").eval()
    ref.config.rope_parameters = dict(rope_type="dynamic", rope_theta=10000.0, factor=2.0)
    with pytest.warns(UserWarning, match="not supported for inference yet: RoPE type 'dynamic'"):
        tigon.optimize_model(ref, max_seq_len=64)
    assert not hasattr(ref, "tigon_inference")


@pytest.mark.parametrize(
    "option",
    [dict(num_beams=2), dict(output_scores=True, return_dict_in_generate=True), dict(min_new_tokens=8)],
    ids=["num_beams", "output_scores", "min_new_tokens"],
)
def test_unsupported_option_falls_back_to_transformers(option):
    ref, opt = pair("llama")
    ids, mask = prompts()
    kw = dict(max_new_tokens=16, do_sample=False, attention_mask=mask, **option)
    expected = ref.generate(ids, **kw)
    name = next(iter(option))
    with pytest.warns(UserWarning, match=f"tigon.inference: {name}=.* running transformers' generate"):
        got = opt.generate(ids, **kw)
    for a, b in [(got, expected)] if isinstance(got, torch.Tensor) else [(got.sequences, expected.sequences)]:
        assert torch.equal(a, b)


def test_too_long_or_too_wide_falls_back():
    ref, opt = pair("llama", batch=1, seq=32)
    ids, mask = prompts()
    for args, kw, what in [
        (ids, dict(attention_mask=mask, max_new_tokens=4), "batch 2 > max_batch_size 1"),
        (ids[:1], dict(max_new_tokens=30), r"prompt \+ new tokens \(12 \+ 30\) > max_seq_len 32"),
    ]:
        with pytest.warns(UserWarning, match=what):
            assert torch.equal(opt.generate(args, do_sample=False, **kw), ref.generate(args, do_sample=False, **kw))


def test_cache_is_allocated_once():
    _, opt = pair("qwen3")
    engine = opt.tigon_inference
    pointers = (engine.cache.k.data_ptr(), engine.cache.v.data_ptr(), engine.out.data_ptr())
    ids, mask = prompts()
    for batch, new in [(1, 5), (2, 40), (1, 64), (2, 3)] * 3:
        opt.generate(ids[-batch:], attention_mask=mask[-batch:], max_new_tokens=new, do_sample=False)
        assert opt.tigon_inference is engine
        assert (engine.cache.k.data_ptr(), engine.cache.v.data_ptr(), engine.out.data_ptr()) == pointers
    assert engine.cache.nbytes == 2 * 2 * 2 * 2 * 128 * 16 * 4  # K and V, layers, batch, KV heads, slots, head dim


def test_revert_restores_transformers():
    ref = build("llama").eval()
    forward, generate = ref.forward, ref.generate
    model = tigon.optimize_model(ref)
    assert model is ref and model.forward != forward and model.generate != generate
    assert tigon.inference.revert(model) is model
    assert model.forward == forward and model.generate == generate
    assert not hasattr(model, "tigon_inference")
    assert tigon.inference.revert(model) is model  # a model that is not optimized: nothing to do
    ids, _ = prompts(batch=1)
    tigon.optimize_model(model)
    with no_fallback():
        assert model.generate(ids, max_new_tokens=4, do_sample=False).shape == (1, 16)


def test_stop_tokens_and_padding_match_transformers():
    """Each row stops at a token it generates (an eos list, pad_token_id set), the batch ends when both have stopped
    and the stopped row is padded after its stop token, as transformers returns it."""
    ref, opt = pair("qwen2")
    ids, mask = prompts()
    free = ref.generate(ids, attention_mask=mask, max_new_tokens=NEW_TOKENS, do_sample=False)[:, ids.shape[1] :]
    stop = [int(free[0, 20]), int(free[1, 6])]
    for check_every in (1, 4, 16):
        opt.tigon_inference.check_every = check_every
        kw = dict(attention_mask=mask, max_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=stop, pad_token_id=7)
        expected = ref.generate(ids, **kw)
        with no_fallback():
            got = opt.generate(ids, **kw)
        assert torch.equal(got, expected)
    assert expected.shape[1] < ids.shape[1] + NEW_TOKENS and (expected == 7).any()


def test_repetition_penalty_matches_transformers():
    ref, opt = pair("gemma")
    ids, mask = prompts()
    kw = dict(attention_mask=mask, max_new_tokens=NEW_TOKENS, do_sample=False, repetition_penalty=1.5)
    expected = ref.generate(ids, **kw)
    with no_fallback():
        assert torch.equal(opt.generate(ids, **kw), expected)


def test_sampling_is_reproducible_under_a_seed():
    _, opt = pair("llama")
    ids, mask = prompts()
    kw = dict(attention_mask=mask, max_new_tokens=32, do_sample=True, temperature=1.5, top_k=40, top_p=0.95)
    runs = []
    for seed in (3, 3, 4):
        torch.manual_seed(seed)
        with no_fallback():
            runs.append(opt.generate(ids, **kw))
    assert torch.equal(runs[0], runs[1]) and not torch.equal(runs[0], runs[2])


def test_sampling_filters_match_transformers():
    from transformers.generation.logits_process import TopKLogitsWarper, TopPLogitsWarper

    from tigon.inference._sampling import _top_k, _top_p

    logits = torch.randn(4, 100) * 3
    logits[0, :10] = 1.0  # ties at the k-th value
    assert torch.equal(_top_k(logits, 7), TopKLogitsWarper(7)(None, logits.clone()))
    for p in (0.1, 0.5, 0.9, 0.999):
        assert torch.equal(_top_p(logits, p), TopPLogitsWarper(p)(None, logits.clone()))


def test_sampling_draws_from_the_distribution():
    from tigon.inference._sampling import Sampling, next_tokens

    probs = torch.tensor([0.5, 0.3, 0.15, 0.05, 0.0])
    logits = probs.log().expand(20000, -1).contiguous()
    gen = torch.Generator().manual_seed(0)
    drawn = next_tokens(logits, Sampling(do_sample=True), None, gen)
    freq = torch.bincount(drawn, minlength=5).double() / drawn.numel()
    torch.testing.assert_close(freq, probs.double(), atol=0.015, rtol=0)


class Recorder:
    def __init__(self):
        self.calls = []

    def put(self, value):
        self.calls.append(value.clone())

    def end(self):
        self.calls.append("end")


def test_streamer_sees_what_transformers_streams():
    ref, opt = pair("phi3")
    ids, _ = prompts(batch=1)
    seen = []
    for model in (ref, opt):
        streamer = Recorder()
        model.generate(ids, max_new_tokens=20, do_sample=False, streamer=streamer)
        seen.append(streamer.calls)
    assert seen[1][-1] == "end" and len(seen[1]) == len(seen[0]) == 22
    for got, expected in zip(seen[1][:-1], seen[0][:-1]):
        assert torch.equal(got.reshape(-1), expected.reshape(-1))


# ---- GPU: the decode step replayed from CUDA graphs --------------------------------------------------------------


def cuda_pair(name: str, batch: int = 4):
    ref = build(name, device="cuda").eval()
    return ref, tigon.optimize_model(copy.deepcopy(ref), max_batch_size=batch, max_seq_len=256)


@needs_cuda
@pytest.mark.parametrize("name", [family_param(n) for n in ("llama", "gemma2", "gemma3", "phi3")])
def test_cuda_graphs_match_transformers(name):
    """Greedy tokens from graph replays (batch buckets 1 and 2 of 4; cache buckets 128 and 256) against transformers
    on the same GPU, fp32 without TF32."""
    torch.backends.cuda.matmul.allow_tf32 = False
    ref, opt = cuda_pair(name)
    ids, mask = (t.cuda() for t in prompts(length=100))
    for batch in (1, 2):
        kw = dict(attention_mask=mask[-batch:], max_new_tokens=NEW_TOKENS, do_sample=False)
        with no_fallback():
            got = opt.generate(ids[-batch:], **kw)
        assert torch.equal(got, ref.generate(ids[-batch:], **kw))
    keys = set(opt.tigon_inference.graphs.graphs)
    assert {(k[0], k[1]) for k in keys} == {(1, 128), (1, 256), (2, 128), (2, 256)}


@needs_cuda
def test_cuda_memory_does_not_grow():
    _, opt = cuda_pair("qwen3")
    ids, mask = (t.cuda() for t in prompts())
    run = lambda: opt.generate(ids, attention_mask=mask, max_new_tokens=NEW_TOKENS, do_sample=True, top_k=20)  # noqa: E731
    run()  # captures this bucket's graph
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    for _ in range(10):
        run()
    torch.cuda.synchronize()
    assert torch.cuda.memory_allocated() <= before  # the first call's transients may be freed since


@needs_cuda
def test_cuda_graph_sampling_is_reproducible():
    _, opt = cuda_pair("llama")
    ids, mask = (t.cuda() for t in prompts())
    runs = []
    for seed in (5, 5, 6):
        torch.manual_seed(seed)
        runs.append(opt.generate(ids, attention_mask=mask, max_new_tokens=32, do_sample=True, temperature=1.5))
    assert opt.tigon_inference.graphs.graphs, "the sampling step was not captured"
    assert torch.equal(runs[0], runs[1]) and not torch.equal(runs[0], runs[2])


# ---- GPU: Tigon's decode kernels in the step (16-bit dtypes, head dims the kernels take) -------------------------


def decode_case(d: int, hq: int, hkv: int, batch: int = 3, slots: int = 300, seed: int = 0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    r = lambda *shape: torch.randn(*shape, generator=g, device="cuda")  # noqa: E731
    q, k, v = r(batch, hq, 1, d), r(batch, hkv, slots, d), r(batch, hkv, slots, d)
    lengths = torch.tensor([slots, 1, 171][:batch], dtype=torch.int32, device="cuda")
    starts = torch.tensor([0, 0, 9][:batch], dtype=torch.int32, device="cuda")
    return q, k, v, lengths, starts


@needs_cuda
@pytest.mark.parametrize(
    "d,hq,hkv,softcap,window",
    [
        (64, 8, 2, None, None),
        (128, 32, 8, None, None),
        (128, 8, 8, 50.0, 16),
        (256, 8, 4, 30.0, None),
        (96, 4, 4, None, 5),
    ],
)
def test_cuda_decode_attention_in_the_step_matches_torch(monkeypatch, d, hq, hkv, softcap, window):
    """_ops._decode_attention on Tigon's kernel (bf16) against its torch body in fp32: lengths per row, left padding,
    softcap and window as the engine passes them."""
    from tigon.inference import _ops

    q, k, v, lengths, starts = decode_case(d, hq, hkv)
    scale = d**-0.5
    q, k, v = (t.bfloat16() for t in (q, k, v))
    got = _ops._decode_attention(q, k, v, lengths, starts, scale, softcap, window)
    monkeypatch.setattr(_ops, "_tigon_kernels", lambda x: False)
    want = _ops._decode_attention(q.float(), k.float(), v.float(), lengths, starts, scale, softcap, window)
    assert got.dtype == torch.bfloat16 and got.shape == want.shape
    torch.testing.assert_close(got.float(), want, atol=2e-2, rtol=2e-2)


@needs_cuda
@pytest.mark.parametrize("rows", [1, 4, 5, 8, 16, 17])
def test_cuda_linear_in_the_step_matches_torch(rows):
    """_ops._linear: Tigon's GEMV up to 4 rows (F.linear from 5), bf16 against an fp32 reference; _ops._projections:
    Tigon's GEMV over several weights up to 16 rows (CUDA cores to 4, tensor cores from 5)."""
    from tigon.inference import _ops

    g = torch.Generator(device="cuda").manual_seed(rows)
    x, w, b = (torch.randn(*s, generator=g, device="cuda") for s in ((rows, 1, 512), (1000, 512), (1000,)))
    got = _ops._linear(x.bfloat16(), w.bfloat16(), b.bfloat16())
    want = torch.nn.functional.linear(*(t.bfloat16().float() for t in (x, w, b)))
    torch.testing.assert_close(got.float(), want, atol=0.1, rtol=2e-2)
    lin = [torch.nn.Linear(512, n, device="cuda", dtype=torch.bfloat16) for n in (1000, 200)]
    for got, m in zip(_ops._projections(x.bfloat16(), lin), lin):
        want = torch.nn.functional.linear(x.bfloat16().float(), m.weight.float(), m.bias.float())
        torch.testing.assert_close(got.float(), want, atol=0.1, rtol=2e-2)


SPECIAL_IDS = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2)  # within the tiny vocabulary
KERNEL_MODELS = {  # tiny models with head dims Tigon's decode attention takes (test_transformers' use 16)
    "llama": ("LlamaConfig", dict(head_dim=64)),
    "gemma2": (
        "Gemma2Config",
        dict(
            head_dim=128,
            query_pre_attn_scalar=128,
            attn_logit_softcapping=50.0,
            final_logit_softcapping=30.0,
            sliding_window=16,
        ),
    ),
    # MoE: the router and tigon.ops.moe_experts inside the captured step (routing on the device, no host sync)
    "qwen3_moe": ("Qwen3MoeConfig", dict(head_dim=64, moe_intermediate_size=128, num_experts=8, num_experts_per_tok=2)),
    # the later families' own paths through the kernels: GLM's partial RoPE on adjacent pairs, Cohere's parallel
    # blocks and interleaved RoPE, StarCoder 2's LayerNorms and ungated MLP, Qwen2-MoE's gated shared expert
    "glm": ("GlmConfig", dict(head_dim=64, **SPECIAL_IDS)),
    "cohere": ("CohereConfig", dict(logit_scale=0.5, **SPECIAL_IDS)),
    "starcoder2": ("Starcoder2Config", dict(SPECIAL_IDS)),
    "qwen2_moe": (
        "Qwen2MoeConfig",
        dict(moe_intermediate_size=128, shared_expert_intermediate_size=256, num_experts=8, num_experts_per_tok=2),
    ),
}


@needs_cuda
@pytest.mark.parametrize("name,batch", [(n, 2) for n in KERNEL_MODELS] + [("llama", 8), ("qwen3_moe", 8)])
def test_cuda_bf16_step_runs_tigon_kernels_and_replays_what_it_ran(monkeypatch, name, batch):
    """A bf16 model whose decode step calls Tigon's GEMV (over several weights on tensor cores at batch 8), the cache
    append and decode attention: the graph replays give the tokens the same step gives run eagerly (the kernels are
    deterministic), and the kernels were called."""
    from tigon.inference import _ops

    config_cls, extra = KERNEL_MODELS[name]
    config = getattr(transformers, config_cls)(
        vocab_size=VOCAB, hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=512, **extra,
    )  # fmt: skip
    torch.manual_seed(0)
    model = getattr(transformers, config_cls.replace("Config", "ForCausalLM"))(config).to("cuda", torch.bfloat16).eval()
    calls = {"gemv": 0, "gemv_parts": 0, "decode_attention": 0, "append_to_cache": 0}
    for fn in calls:
        original = getattr(_ops, fn)
        monkeypatch.setattr(
            _ops, fn, lambda *a, _f=original, _n=fn, **kw: (calls.__setitem__(_n, calls[_n] + 1), _f(*a, **kw))[1]
        )
    opt = tigon.optimize_model(model, max_batch_size=batch, max_seq_len=256)
    ids, mask = (t.cuda() for t in prompts(batch=batch, length=40))
    kw = dict(attention_mask=mask, max_new_tokens=48, do_sample=False)
    with no_fallback():
        replayed = opt.generate(ids, **kw)
        assert opt.tigon_inference.graphs.graphs, "the step was not captured"
        opt.tigon_inference.graphs.enabled = False
        eager = opt.generate(ids, **kw)
    assert calls["gemv"] + calls["gemv_parts"] > 0 and calls["decode_attention"] > 0 and calls["append_to_cache"] > 0
    assert torch.equal(replayed, eager)


# ---- the command and the benchmark -------------------------------------------------------------------------------


def test_generate_command_prints_ids_and_speed(capsys):
    from tigon import generate

    assert (
        generate.main(["--model", "tiny-gemma2", "--prompt", "5 6 7", "--max-new-tokens", "6", "--device", "cpu"]) == 0
    )
    out, err = capsys.readouterr()
    assert len(out.split()) == 6 and all(w.isdigit() for w in out.split())
    assert "6 tokens in" in err and "tokens/s" in err


def test_decode_benchmark_runs_on_the_cpu(tmp_path, capsys):
    from tigon.bench import __main__ as bench

    assert bench.main(["--ops", "decode", "--quick", "--device", "cpu", "--no-chart", "--out", str(tmp_path)]) == 0
    rows = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert {r["impl"] for r in rows} == {"hf", "tigon", "tigon_generate"}  # the compiled rows need --cpu-compile
    assert all(r["tokens_per_s"] > 0 and r["agree"] == 1.0 for r in rows)
    assert "decode: cpu | tiny-llama float32" in capsys.readouterr().out


def test_decode_benchmark_shapes_pick_batches_prompts_and_lengths(tmp_path, capsys):
    from tigon.bench import __main__ as bench

    args = ["--ops", "decode", "--quick", "--device", "cpu", "--no-chart", "--out", str(tmp_path)]
    assert bench.main(args + ["--impls", "tigon", "--shapes", "3,2x8x4"]) == 0
    rows = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert [(r["batch"], r["prompt"], r["new_tokens"]) for r in rows] == [(3, 16, 32), (2, 8, 4)]
    out = capsys.readouterr().out
    assert "prompt 16, 32 new tokens" in out and "prompt 8, 4 new tokens" in out  # a table each


def test_model_patched_for_training_decodes_on_tigon_kernels():
    """A model patched by tigon.transformers keeps its Tigon norms in the decode loop (they are called as modules)."""
    import tigon.transformers

    ref = build("qwen3").eval()
    patched = tigon.transformers.patch(copy.deepcopy(ref))
    assert patched.tigon_patched["rms_norm"] > 0
    tigon.optimize_model(patched, max_batch_size=2, max_seq_len=128, dtype=torch.float32)
    ids, mask = prompts()
    kw = dict(attention_mask=mask, max_new_tokens=NEW_TOKENS, do_sample=False)
    with no_fallback():
        assert torch.equal(patched.generate(ids, **kw), ref.generate(ids, **kw))


def test_forward_outside_the_prompt_pass_is_transformers():
    """Labels, gradients or a cache passed in: the model's own forward (the loss, the gradient, the cached step)."""
    ref, opt = pair("llama")
    ids, _ = prompts(batch=1)
    expected, got = ref(ids, labels=ids), opt(ids, labels=ids)
    assert torch.equal(got.loss, expected.loss) and got.loss.requires_grad
    with torch.no_grad():
        first = opt(ids[:, :-1])  # the prompt pass, returning transformers' DynamicCache of the prompt
        step = opt(ids[:, -1:], **{k: v for k, v in first.items() if k in ("cache", "past_key_values")})
        whole = ref(ids)
    torch.testing.assert_close(step.logits[:, -1], whole.logits[:, -1], atol=1e-5, rtol=1e-5)


def test_dtype_converts_the_model_and_its_cache():
    model = tigon.optimize_model(build("gemma"), max_seq_len=64, dtype=torch.bfloat16)
    assert model.dtype == torch.bfloat16 and model.tigon_inference.cache.k.dtype == torch.bfloat16
    ids, _ = prompts(batch=1)
    with no_fallback():
        assert model.generate(ids, max_new_tokens=8, do_sample=False).shape == (1, 20)
