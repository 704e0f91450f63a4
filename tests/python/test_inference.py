"""tigon.optimize_model against transformers itself, on the tiny random models of test_transformers.py (no
downloads): greedy generation token for token (one prompt and a left-padded batch), the prompt pass's logits at every
position, sampling reproducible under a seed, stop tokens and padding as transformers writes them, the fallbacks to
transformers' generate, the static cache allocated once, and revert. The CUDA-graph tests run on a GPU only."""

import contextlib
import copy
import warnings

import pytest
import torch


transformers = pytest.importorskip("transformers")
import tigon  # noqa: E402
from test_transformers import build, family_param  # noqa: E402

FAMILIES = ["llama", "mistral", "qwen2", "qwen3", "granite", "gemma", "gemma2", "gemma3", "phi3", "olmo2"]
PARAMS = [family_param(n) for n in FAMILIES]
NEW_TOKENS = 64
VOCAB = 320  # test_transformers' tiny vocabulary; ids 0-2 are pad, bos, eos


def pair(name: str, dtype=torch.float32, batch: int = 2, seq: int = 128):
    """transformers' model and an optimized copy of it (the same weights)."""
    ref = build(name, dtype=dtype).eval()
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
    ref, opt = pair(name, dtype)
    ids, mask = prompts()
    with torch.no_grad():
        expected = ref(ids, attention_mask=mask).logits
        got = opt(ids, attention_mask=mask).logits
    valid = mask.bool()
    scale = expected[valid].abs().max().item()
    tol = dict(atol=1e-5 * scale, rtol=1e-5) if dtype == torch.float32 else dict(atol=5e-2 * scale, rtol=0)
    torch.testing.assert_close(got[valid].float(), expected[valid].float(), **tol)


def test_unsupported_family_is_returned_unchanged():
    model = build("mixtral").eval()
    forward, generate = model.forward, model.generate
    with pytest.warns(UserWarning, match="not supported for inference yet: model type 'mixtral'"):
        assert tigon.optimize_model(model) is model
    assert not hasattr(model, "tigon_inference")
    assert model.forward == forward and model.generate == generate


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
