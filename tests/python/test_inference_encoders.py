"""tigon.optimize_model on encoders (BERT, RoBERTa, DistilBERT, a sequence-classification head) against transformers'
eager forward, on tiny random models (no downloads): outputs with and without padding and token types, fp32 and
bf16, the fallbacks to the model's own forward, unsupported activations, and revert. The CUDA-graph tests run on a
GPU only."""

import contextlib
import copy
import json
import warnings

import pytest
import torch

from conftest import needs_cuda

transformers = pytest.importorskip("transformers")
import tigon  # noqa: E402
from tigon.inference import configs  # noqa: E402

# name -> (configs.ENCODERS entry, transformers head class)
MODELS = {
    "bert": ("tiny-bert", "AutoModel"),
    "roberta": ("tiny-roberta", "AutoModel"),
    "distilbert": ("tiny-distilbert", "AutoModel"),
    "bert-seqcls": ("tiny-bert", "AutoModelForSequenceClassification"),
    "distilbert-seqcls": ("tiny-distilbert", "AutoModelForSequenceClassification"),
}
FIRST_ID = 3  # ids below are special (RoBERTa's pad is 1)


def pair(name: str, dtype=torch.float32, device="cpu"):
    """transformers' model and an optimized copy of it (the same weights)."""
    shape, head = MODELS[name]
    ref = configs.build_encoder(shape, dtype, device, head)
    return ref, tigon.optimize_model(copy.deepcopy(ref))


def inputs(batch: int = 3, length: int = 17, padded: bool = True, token_types: bool = False, device="cpu"):
    """Random ids, an attention mask with right padding in the last row and in row 1 of three or more (or None), and
    token type ids (or None)."""
    ids = torch.randint(FIRST_ID, 512, (batch, length), device=device)
    kw = {}
    if padded:
        mask = torch.ones_like(ids)
        mask[-1, 2:] = 0
        if batch > 2:
            mask[1, length - 5 :] = 0
        kw["attention_mask"] = mask
    if token_types:
        kw["token_type_ids"] = (torch.arange(length, device=device) >= length // 2).long().expand(batch, -1)
    return ids, kw


def outputs(out) -> dict:
    names = ("last_hidden_state", "pooler_output", "logits")
    return {n: getattr(out, n) for n in names if getattr(out, n, None) is not None}


@contextlib.contextmanager
def no_fallback():
    """Fails the test on any tigon.inference warning (a fallback would compare transformers with itself)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="tigon.inference")
        yield


def assert_outputs_match(got, expected, dtype):
    """fp32: the same math in another order (SDPA, one rounding per fused op), to 1e-5 of the largest magnitude.
    bf16: transformers rounds after each linear, activation and residual add, linear_act once per fused op, so the
    outputs agree to a few bf16 units of their largest magnitude (2%; 1% seen)."""
    got, expected = outputs(got), outputs(expected)
    assert got.keys() == expected.keys()
    for name, e in expected.items():
        scale = e.abs().max().item()
        tol = dict(atol=1e-5 * scale, rtol=1e-5) if dtype == torch.float32 else dict(atol=2e-2 * scale, rtol=0)
        torch.testing.assert_close(got[name].float(), e.float(), **tol, msg=lambda m: f"{name}: {m}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("padded", [False, True], ids=["full", "padded"])
@pytest.mark.parametrize("name", list(MODELS))
def test_matches_transformers(name, padded, dtype):
    ref, opt = pair(name, dtype)
    ids, kw = inputs(padded=padded, token_types="distil" not in name)
    with torch.no_grad():
        expected = ref(ids, **kw)
        with no_fallback():
            got = opt(ids, **kw)
    assert type(got) is type(expected)
    assert_outputs_match(got, expected, dtype)


def test_encoder_layers_run_on_tigon(monkeypatch):
    """The optimized forward goes through the runner's layer stack, once per call, and not through the model's."""
    _, opt = pair("bert-seqcls")
    runner = opt.tigon_inference
    calls = []
    monkeypatch.setattr(runner, "layers", lambda h, mask, f=runner.layers: calls.append(h.shape) or f(h, mask))
    monkeypatch.setattr(type(opt.bert.encoder), "forward", lambda *a, **k: pytest.fail("transformers' encoder ran"))
    ids, kw = inputs()
    with torch.no_grad(), no_fallback():
        opt(ids, **kw)
    assert calls == [(3, 17, 64)]


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=needs_cuda)])
def test_weights_changed_after_optimizing_are_read(device):
    """The fused QKV weights are copies and CUDA graphs read weights where they were: an in-place edit of a query
    weight and a dtype change (new tensors) are both seen by the next call."""
    ref, opt = pair("bert", device=device)
    ids, kw = inputs(device=device)
    with torch.no_grad(), no_fallback():
        opt(ids, **kw)
        for model in (ref, opt):
            model.encoder.layer[0].attention.self.query.weight.mul_(2)
        assert_outputs_match(opt(ids, **kw), ref(ids, **kw), torch.float32)
        ref.bfloat16(), opt.bfloat16()
        assert_outputs_match(opt(ids, **kw), ref(ids, **kw), torch.bfloat16)


def test_return_dict_false_and_positional_arguments():
    ref, opt = pair("bert")
    ids, kw = inputs(token_types=True)
    with torch.no_grad():
        expected = ref(ids, kw["attention_mask"], kw["token_type_ids"], return_dict=False)
        with no_fallback():
            got = opt(ids, kw["attention_mask"], kw["token_type_ids"], return_dict=False)
    assert isinstance(got, tuple) and len(got) == len(expected) == 2
    for a, b in zip(got, expected):
        torch.testing.assert_close(a, b, atol=1e-5 * b.abs().max().item(), rtol=1e-5)


@pytest.mark.parametrize(
    "option",
    ["output_attentions", "output_hidden_states", "inputs_embeds", "gradients", "training"],
)
def test_unsupported_option_falls_back_once(option):
    ref, opt = pair("bert-seqcls")
    ids, kw = inputs()
    grad = contextlib.nullcontext() if option == "gradients" else torch.no_grad()
    if option in ("output_attentions", "output_hidden_states"):
        kw[option] = True
    elif option == "inputs_embeds":
        kw["inputs_embeds"], ids = ref.bert.embeddings.word_embeddings(ids), None
    elif option == "training":
        ref.train(), opt.train()
        torch.manual_seed(0)  # dropout's draws
    match = {"gradients": "a call with gradients enabled", "training": "training mode"}.get(option, option)
    with grad, pytest.warns(UserWarning, match=f"tigon.inference: {match}.* running the model's own forward"):
        got = opt(ids, **kw)
    if option == "training":
        torch.manual_seed(0)
    with grad:
        expected = ref(ids, **kw)
    assert torch.equal(got.logits, expected.logits)
    for field in ("attentions", "hidden_states"):
        a, b = getattr(got, field), getattr(expected, field)
        assert (a is None) == (b is None) and (a is None or all(torch.equal(x, y) for x, y in zip(a, b)))
    with grad, warnings.catch_warnings():
        warnings.filterwarnings("error", message="tigon.inference")  # warned once per option
        opt(ids, **kw)


def test_revert_round_trip():
    ref, opt = pair("roberta")
    base = opt.roberta if hasattr(opt, "roberta") else opt
    ids, kw = inputs()
    assert "forward" in base.__dict__ and hasattr(opt, "tigon_inference")
    assert tigon.inference.revert(opt) is opt
    assert "forward" not in base.__dict__ and not hasattr(opt, "tigon_inference")
    with torch.no_grad():
        assert torch.equal(opt(ids, **kw).last_hidden_state, ref(ids, **kw).last_hidden_state)
    tigon.optimize_model(opt)  # again, then once more: optimize_model reverts first
    tigon.optimize_model(opt)
    with torch.no_grad(), no_fallback():
        assert_outputs_match(opt(ids, **kw), ref(ids, **kw), torch.float32)
    tigon.inference.revert(opt)
    assert "forward" not in base.__dict__


def test_revert_of_a_head_model_restores_its_base():
    _, opt = pair("distilbert-seqcls")
    assert "forward" in opt.distilbert.__dict__ and "forward" not in opt.__dict__
    tigon.inference.revert(opt)
    assert "forward" not in opt.distilbert.__dict__ and not hasattr(opt, "_tigon_inference_saved")


@pytest.mark.parametrize(
    "name,change,what",
    [
        ("bert", dict(hidden_act="silu"), "hidden_act 'silu'"),
        ("distilbert", dict(activation="gelu_fast"), "hidden_act 'gelu_fast'"),
        ("bert", dict(is_decoder=True), "as a decoder"),
    ],
)
def test_unsupported_model_is_returned_unchanged(name, change, what):
    shape, head = MODELS[name]
    cls, kwargs = configs.ENCODERS[shape]
    config = getattr(transformers, cls)(**kwargs, **change)
    model = getattr(transformers, head).from_config(config, attn_implementation="eager").eval()
    with pytest.warns(UserWarning, match=f"not supported for inference yet: .*{what}"):
        assert tigon.optimize_model(model) is model
    assert not hasattr(model, "tigon_inference") and "forward" not in model.__dict__


@pytest.mark.parametrize(
    "act,expected", [("gelu_new", "gelu_tanh"), ("gelu_pytorch_tanh", "gelu_tanh"), ("relu", "relu")]
)
def test_activation_mapping(act, expected):
    cls, kwargs = configs.ENCODERS["tiny-bert"]
    ref = transformers.AutoModel.from_config(
        getattr(transformers, cls)(**kwargs, hidden_act=act), attn_implementation="eager"
    ).eval()
    opt = tigon.optimize_model(copy.deepcopy(ref))
    assert opt.tigon_inference.spec.activation == expected
    ids, kw = inputs()
    with torch.no_grad(), no_fallback():
        assert_outputs_match(opt(ids, **kw), ref(ids, **kw), torch.float32)


class EagerGraphs:
    """Stands in for the CUDA graphs on the CPU: records each bucket's key and runs its step eagerly, so the
    bucketing (padding the batch and the sequence, the mask) is checked here too."""

    enabled = True

    def __init__(self):
        self.graphs = {}

    def run(self, key, step):
        self.graphs[key] = self.graphs.get(key, 0) + 1
        step()

    def clear(self):
        self.graphs.clear()


BUCKET_CASES = [(4, 16, False), (3, 16, False), (4, 13, False), (3, 17, True), (1, 5, True), (3, 17, True)]
BUCKET_KEYS = {(4, 16, False, False), (4, 16, True, False), (4, 32, True, False), (1, 8, True, False)}


@pytest.mark.parametrize("name", ["bert-seqcls", "roberta", "distilbert"])
def test_buckets_match_transformers(name):
    """The bucketed path on the CPU: shapes that fill a bucket exactly (no mask), pad the batch or the sequence, and
    carry padding, each against transformers; the static buffers reused per bucket."""
    ref, opt = pair(name)
    runner = opt.tigon_inference
    runner.graphs = EagerGraphs()
    for batch, length, padded in BUCKET_CASES:
        ids, kw = inputs(batch, length, padded, token_types="distil" not in name)
        with torch.no_grad(), no_fallback():
            assert_outputs_match(opt(ids, **kw), ref(ids, **kw), torch.float32)
    assert set(runner.graphs.graphs) == set(runner.buffers) == BUCKET_KEYS
    assert runner.graphs.graphs[(4, 32, True, False)] == 2
    pooled = 0 if name == "distilbert" else 1
    # per token: ids, token types, positions (int64), the mask, the fp32 output; per row the pooled output
    assert runner.nbytes == sum(b * t * (3 * 8 + 1 + 64 * 4) + pooled * b * 64 * 4 for b, t, _, _ in BUCKET_KEYS)


@pytest.mark.parametrize("name", ["bert", "roberta"])
def test_buckets_take_token_types_and_positions_as_given(name):
    """Token types given, then not (zeros again, not the last call's), then position ids given: a bucket of its own."""
    ref, opt = pair(name)
    runner = opt.tigon_inference
    runner.graphs = EagerGraphs()
    ids, kw = inputs(3, 13, padded=True, token_types=True)
    positions = torch.arange(13).flip(0).expand(3, -1) + 2  # RoBERTa's positions start past its padding index
    with torch.no_grad(), no_fallback():
        for extra in (kw, {"attention_mask": kw["attention_mask"]}, dict(kw, position_ids=positions)):
            assert_outputs_match(opt(ids, **extra), ref(ids, **extra), torch.float32)
    assert set(runner.graphs.graphs) == {(4, 16, True, False), (4, 16, True, True)}


def test_encoder_benchmark_runs_on_the_cpu(tmp_path, capsys):
    from tigon.bench import DEFAULT_OPS, records
    from tigon.bench import __main__ as bench

    assert bench.main(["--ops", "encoder", "--quick", "--device", "cpu", "--no-chart", "--out", str(tmp_path)]) == 0
    rows = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert {r["impl"] for r in rows} == {"hf", "tigon"}  # the compiled rows need --cpu-compile
    assert {tuple(r["shape"]) for r in rows} == {(1, 16), (2, 32)}
    assert all(r["ms"] > 0 and r["sequences_per_s"] > 0 and r["max_diff"] < 1e-5 for r in rows)
    assert "encoder: cpu | tiny-bert float32" in capsys.readouterr().out
    assert "encoder" not in DEFAULT_OPS  # on request, like decode
    assert records.whole_model("encoder") == "encoder" and records.whole_model("encoder_x") is None


# ---- GPU: the layer stack replayed from CUDA graphs ----------------------------------------------------------------


@needs_cuda
@pytest.mark.parametrize("name", ["bert-seqcls", "roberta", "distilbert"])
def test_cuda_graph_buckets_match_transformers(name):
    """Shapes that fill a bucket exactly (no mask), pad the batch or the sequence, and carry padding, each against
    transformers on the same GPU in fp32 without TF32; each (batch, sequence, masked) bucket captured once."""
    torch.backends.cuda.matmul.allow_tf32 = False
    ref, opt = pair(name, device="cuda")
    runner = opt.tigon_inference
    for batch, length, padded in BUCKET_CASES:
        ids, kw = inputs(batch, length, padded, token_types="distil" not in name, device="cuda")
        with torch.no_grad():
            expected = ref(ids, **kw)
            with no_fallback():
                got = opt(ids, **kw)
        assert_outputs_match(got, expected, torch.float32)
    assert set(runner.graphs.graphs) == BUCKET_KEYS


@needs_cuda
def test_cuda_graph_memory_does_not_grow_and_revert_frees():
    _, opt = pair("bert", device="cuda")
    ids, kw = inputs(8, 40, device="cuda")
    with torch.no_grad():
        first = opt(ids, **kw).last_hidden_state
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        for _ in range(10):
            assert torch.equal(opt(ids, **kw).last_hidden_state, first)
        torch.cuda.synchronize()
    assert torch.cuda.memory_allocated() <= before  # the first call's transients may be freed since
    runner = opt.tigon_inference
    tigon.inference.revert(opt)
    assert not runner.graphs.graphs and not runner.buffers


@needs_cuda
def test_bf16_on_cuda_matches_transformers():
    """bf16 on the GPU with head dim 64: flash_attention on sm_90 for an unmasked full bucket, SDPA otherwise."""
    cls, kwargs = configs.ENCODERS["tiny-bert"]
    config = getattr(transformers, cls)(**dict(kwargs, hidden_size=128, num_attention_heads=2))
    with torch.device("cuda"):
        ref = transformers.AutoModelForSequenceClassification.from_config(
            config, dtype=torch.bfloat16, attn_implementation="eager"
        ).eval()
    opt = tigon.optimize_model(copy.deepcopy(ref))
    for padded in (False, True):
        ids, kw = inputs(4, 64, padded, token_types=True, device="cuda")
        with torch.no_grad():
            expected = ref(ids, **kw)
            with no_fallback():
                got = opt(ids, **kw)
        assert_outputs_match(got, expected, torch.bfloat16)
