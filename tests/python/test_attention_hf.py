"""attn_implementation="tigon" against transformers' own attention on tiny random models of every family Tigon
patches: logits and every gradient (fp32 on the CPU at the fp32 tolerance; bf16 on a GPU, held to SDPA's own distance
from fp32), padding masks, packed batches (position_ids, and DataCollatorWithFlattening's cu_seq_lens kwargs) against
per-sequence runs, sliding windows, Gemma 2's softcap, the mask function's choices, the fallback cases (each warns and
still gives transformers' answer), and patch()'s attention option.

Until tigon.ops.flash_attention exists in this checkout, the tests run on a float32 torch stand-in with the same
signature (reference_flash_attention below); once the op is there they run the op itself."""

import copy
import importlib
import logging
import warnings

import pytest
import torch

import tigon
from conftest import needs_cuda
from tolerances import TOL, assert_close

transformers = pytest.importorskip("transformers")
import tigon.transformers as tt  # noqa: E402
from test_transformers import NAMES, PARAMS, VLMS, build, tiny_config, causal_lm_class  # noqa: E402
from tigon.transformers import attention as attn  # noqa: E402
from tigon.transformers._families import FAMILIES  # noqa: E402

SEQ, BATCH = 24, 2


def reference_flash_attention(
    q,
    k,
    v,
    *,
    causal=False,
    scale=None,
    softcap=0.0,
    window=(-1, -1),
    cu_seqlens_q=None,
    cu_seqlens_k=None,
    max_seqlen_q=None,
    max_seqlen_k=None,
    deterministic=True,
    return_lse=False,
):
    """tigon.ops.flash_attention's contract with materialised float32 scores (include/tigon/attention.h)."""
    if cu_seqlens_q is not None:
        outs, lses = [], []
        bq, bk = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
        for b in range(len(bq) - 1):
            o, lse = reference_flash_attention(
                q[None, bq[b] : bq[b + 1]],
                k[None, bk[b] : bk[b + 1]],
                v[None, bk[b] : bk[b + 1]],
                causal=causal,
                scale=scale,
                softcap=softcap,
                window=window,
                return_lse=True,
            )
            outs.append(o[0])
            lses.append(lse[0])
        o = torch.cat(outs)
        return (o, torch.cat(lses, dim=-1)) if return_lse else o
    B, Sq, Hq, D = q.shape
    Sk, Hkv = k.shape[1], k.shape[2]
    scale = D**-0.5 if scale is None else scale
    qf = q.float().transpose(1, 2)
    kf = k.float().transpose(1, 2).repeat_interleave(Hq // Hkv, 1)
    vf = v.float().transpose(1, 2).repeat_interleave(Hq // Hkv, 1)
    s = qf @ kf.transpose(-1, -2) * scale
    if softcap > 0:
        s = softcap * torch.tanh(s / softcap)
    i = torch.arange(Sq, device=q.device)[:, None] + (Sk - Sq)
    j = torch.arange(Sk, device=q.device)[None, :]
    left, right = window
    right = 0 if causal else right
    visible = torch.ones(Sq, Sk, dtype=torch.bool, device=q.device)
    if right >= 0:
        visible &= j <= i + right
    if left >= 0:
        visible &= j >= i - left
    s = s.masked_fill(~visible, float("-inf"))
    lse = torch.logsumexp(s, -1)
    p = torch.exp(s - lse[..., None]).nan_to_num(0.0)
    o = (p @ vf).transpose(1, 2).to(q.dtype).contiguous()
    return (o, lse) if return_lse else o


@pytest.fixture(autouse=True)
def flash_op(monkeypatch):
    """The real op when this checkout has it, else the stand-in; warnings of earlier tests forgotten."""
    if not hasattr(tigon.ops, "flash_attention"):
        monkeypatch.setattr(tigon.ops, "flash_attention", reference_flash_attention, raising=False)
    monkeypatch.setattr(attn, "_warned", set())
    yield tigon.ops.flash_attention


@pytest.fixture
def calls(monkeypatch, flash_op):
    """Counts the calls that reach the op (and whether they were variable length)."""
    seen = {"dense": 0, "varlen": 0}

    def counted(*args, **kwargs):
        seen["varlen" if kwargs.get("cu_seqlens_q") is not None else "dense"] += 1
        return flash_op(*args, **kwargs)

    monkeypatch.setattr(tigon.ops, "flash_attention", counted, raising=False)
    return seen


def reference_impl(config) -> str:
    """SDPA, except where transformers' SDPA refuses (an attention softcap): eager."""
    return "eager" if getattr(config, "attn_logit_softcapping", None) else "sdpa"


def twins(name, dtype=torch.float32, device="cpu", **overrides):
    """(transformers' model on its reference attention, the same weights on "tigon")."""
    torch.manual_seed(0)
    config = tiny_config(name)
    for key, value in overrides.items():
        setattr(config, key, value)
    ref = causal_lm_class(name)(config).to(device=device, dtype=dtype).train()
    ref.set_attn_implementation(reference_impl(config))
    model = copy.deepcopy(ref)
    model.set_attn_implementation("tigon")
    if model.config._attn_implementation != "tigon":
        pytest.skip(f"transformers {transformers.__version__}'s {name} cannot switch its attention implementation")
    return ref, model


def run(model, ids, **kwargs):
    """Logits and every parameter's gradient of sum(logits * fixed weights) over the positions `keep` marks."""
    keep = kwargs.pop("keep", None)
    model.zero_grad(set_to_none=True)
    logits = model(input_ids=ids, **kwargs).logits
    w = torch.linspace(-1, 1, logits.shape[-1], device=logits.device, dtype=logits.dtype)
    picked = logits if keep is None else logits[keep]
    (picked * w).sum().backward()
    return picked.detach(), {n: p.grad for n, p in model.named_parameters() if p.grad is not None}


def compare(got, ref, dtype=torch.float32, spread=None):
    """got against ref at the dtype's tolerance. spread: the same run on transformers' other attention implementation;
    each tensor may then differ from ref by twice as much as transformers' two implementations differ from each other
    as well (a mixer such as Gated DeltaNet amplifies the attention's rounding in a few gradients, differently on each
    CPU's BLAS)."""
    (logits, grads), (ref_logits, ref_grads) = got, ref

    def check(g, r, name, other):
        tol = dict(TOL[dtype])
        if other is not None:
            tol["atol"] += 2 * (other.double() - r.double()).abs().max().item() / max(1.0, r.abs().max().item())
        assert_close(g, r.double(), dtype, name=name, tol=tol)

    check(logits, ref_logits, "logits", spread and spread[0])
    assert grads.keys() == ref_grads.keys()
    for pname, g in grads.items():
        check(g, ref_grads[pname], pname, spread and spread[1][pname])


def tokens(config, batch=BATCH, seq=SEQ, seed=1, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, config.vocab_size, (batch, seq), generator=g).to(device)


# ---- every family, dense batches ------------------------------------------------------------------------------------


# attention Tigon's op does not take, so these run on the fallback (tested with the fallbacks, not here)
FALLS_BACK = {
    "deepseek_v3": "MLA's query and value head dims differ",
    "deepseek_v2": "MLA's query and value head dims differ",
    "gpt_oss": "attention sinks",
    "llama4": "chunked attention's dense 4-D masks",
}


# softmax-attention layers where not every layer has one (tiny configs: 2 layers; Gated DeltaNet and Mllama's cross
# attention without an image are not attention calls)
ATTENTION_LAYERS = {"qwen3_next": 1, "qwen3_5": 1, "qwen3_5_moe": 1, "mllama": 1}


@pytest.mark.parametrize("name", PARAMS)
def test_family_matches_transformers(name, calls):
    if name in FALLS_BACK:
        pytest.skip(f"{name}: {FALLS_BACK[name]}")
    if not hasattr(importlib.import_module(FAMILIES[name].module), "create_causal_mask"):
        pytest.skip(
            f"transformers {transformers.__version__}'s {name} builds dense masks of its own (Tigon falls back)"
        )
    ref, model = twins(name)
    ids = tokens(ref.config)
    try:
        want = run(ref, ids)
    except RuntimeError as e:  # Qwen3-Next's router loss in transformers 5.0 reads the routing weights as logits
        pytest.skip(f"transformers {transformers.__version__}'s own {name} model fails here: {e}")
    spread = None
    if reference_impl(ref.config) == "sdpa":
        other = copy.deepcopy(ref)
        other.set_attn_implementation("eager")
        spread = run(other, ids)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback: every layer runs on Tigon's op
        warnings.simplefilter("ignore", tigon.TigonCPUWarning)  # said once per process, by whichever test is first
        got = run(model, ids)
    assert calls["dense"] == ATTENTION_LAYERS.get(name, ref.config.num_hidden_layers) and calls["varlen"] == 0
    compare(got, want, spread=spread)


def test_sliding_window_mistral(calls):
    """A window shorter than the sequence (Mistral reads it from the config for every layer)."""
    ref, model = twins("mistral", sliding_window=5)
    ids = tokens(ref.config)
    compare(run(model, ids), run(ref, ids))
    unwindowed = twins("mistral")[1]
    assert not torch.allclose(run(unwindowed, ids)[0], run(model, ids)[0])  # the window changed the answer


def test_gemma2_softcap_and_scaling_matter():
    """Gemma 2's attention softcap and query_pre_attn_scalar reach the op: without them the logits differ."""
    ref, model = twins("gemma2")
    ids = tokens(ref.config)
    compare(run(model, ids), run(ref, ids))
    for key, value in (("attn_logit_softcapping", 0.05), ("query_pre_attn_scalar", 3)):
        other = twins("gemma2", **{key: value})[1]
        assert not torch.allclose(run(other, ids)[0], run(model, ids)[0]), key


def test_bidirectional_encoder_layers():
    """is_causal False (a decoder made bidirectional, as embedding models do) with a window of 6 either side."""
    ref, model = twins("llama")
    for m in (ref, model):
        for layer in m.model.layers:
            layer.self_attn.is_causal = False
        m.config.is_causal = False  # transformers then builds bidirectional masks
    ids = tokens(ref.config)
    compare(run(model, ids), run(ref, ids))


def test_torch_compile_fullgraph():
    """The dense path traces whole (padding masks do not: transformers' own mask code branches on the data)."""
    ref, model = twins("gemma2")
    ids = tokens(ref.config)
    eager = run(model, ids)
    try:
        compiled = run(torch.compile(model, backend="aot_eager", fullgraph=True), ids)
    except Exception:  # Tigon's failure only if transformers' own model compiles (older torch may trace neither)
        torch._dynamo.reset()
        try:
            run(torch.compile(ref, backend="aot_eager", fullgraph=True), ids)
        except Exception:  # noqa: BLE001
            pytest.skip(
                f"transformers {transformers.__version__}'s own gemma2 does not compile with torch {torch.__version__}"
            )
        finally:
            torch._dynamo.reset()
        raise
    finally:
        torch._dynamo.reset()
    assert_close(compiled[0], eager[0].double(), torch.float32, name="compiled logits")
    for pname, g in compiled[1].items():
        assert_close(g, eager[1][pname.removeprefix("_orig_mod.")].double(), torch.float32, name=pname)


# ---- padding and packing --------------------------------------------------------------------------------------------


def padded_batch(config):
    ids = tokens(config)
    mask = torch.ones_like(ids)
    mask[0, :5] = 0  # left padding
    mask[1, -7:] = 0  # right padding
    return ids, mask, mask.bool()


@pytest.mark.parametrize("name", ["llama", "gemma2", "gemma3", "qwen3_moe"])
def test_padding_mask(name, calls):
    ref, model = twins(name)
    ids, mask, keep = padded_batch(ref.config)
    compare(run(model, ids, attention_mask=mask, keep=keep), run(ref, ids, attention_mask=mask, keep=keep))
    assert calls["varlen"] == ref.config.num_hidden_layers and calls["dense"] == 0
    # the unpadded run is the same as each sequence alone
    alone = run(model, ids[1:, : SEQ - 7])[0]
    got = run(model, ids, attention_mask=mask)[0][1, : SEQ - 7]
    assert_close(got, alone.double()[0], torch.float32, name="padded row vs alone")


def packed_inputs(config, lengths=(7, 10, 7)):
    seqs = [tokens(config, 1, n, seed=10 + i)[0] for i, n in enumerate(lengths)]
    return seqs, torch.cat(seqs)[None], torch.cat([torch.arange(n) for n in lengths])[None]


@pytest.mark.parametrize("name", ["llama", "mistral", "gemma3"])
def test_packed_position_ids_match_separate_sequences(name, calls):
    overrides = {"sliding_window": 5} if name == "mistral" else {}
    ref, model = twins(name, **overrides)
    model.eval()
    seqs, ids, pos = packed_inputs(ref.config)
    with torch.no_grad():
        packed = model(input_ids=ids, position_ids=pos).logits[0]
        alone = torch.cat([model(input_ids=s[None]).logits[0] for s in seqs])
        sdpa = ref.eval()(input_ids=ids, position_ids=pos, use_cache=False).logits[0]  # with a cache: no packing
    assert calls["varlen"] == ref.config.num_hidden_layers  # once per layer; the cuts were read once per forward
    assert_close(packed, alone.double(), torch.float32, name="packed vs alone")
    assert_close(packed, sdpa.double(), torch.float32, name="packed vs transformers")
    # and the gradients of the packed batch match transformers' on the same packed batch
    ref.train(), model.train()
    compare(run(model, ids, position_ids=pos, use_cache=False), run(ref, ids, position_ids=pos, use_cache=False))


def test_data_collator_with_flattening():
    """DataCollatorWithFlattening's padding-free batch, with the cu_seq_lens / max_length kwargs it can add."""
    ref, model = twins("qwen2")
    seqs, _, _ = packed_inputs(ref.config, (9, 6, 9))
    collate = transformers.DataCollatorWithFlattening(return_flash_attn_kwargs=True, return_position_ids=True)
    batch = collate([{"input_ids": s.tolist()} for s in seqs])
    assert batch["cu_seq_lens_q"].tolist() == [0, 9, 15, 24]
    kwargs = {k: batch[k] for k in ("position_ids", "cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k")}
    with torch.no_grad():
        got = model.eval()(input_ids=batch["input_ids"], **kwargs).logits[0]
        alone = torch.cat([model(input_ids=s[None]).logits[0] for s in seqs])
    assert_close(got, alone.double(), torch.float32, name="flattened vs alone")


def test_packed_rows_in_a_batch_of_two():
    """position_ids restarting inside each of two rows (transformers' masks treat each run as a sequence; they look for
    packing only without a cache, Tigon whenever the positions restart, as transformers' flash path)."""
    ref, model = twins("llama")
    ids = tokens(ref.config)
    pos = torch.stack([torch.cat([torch.arange(10), torch.arange(14)]), torch.cat([torch.arange(4), torch.arange(20)])])
    compare(run(model, ids, position_ids=pos, use_cache=False), run(ref, ids, position_ids=pos, use_cache=False))


def test_generation_with_cache_and_padding():
    """Prefill of a left-padded batch, then decoding with the KV cache: the same tokens as transformers' SDPA."""
    ref, model = twins("mistral", sliding_window=6)
    ids, mask, _ = padded_batch(ref.config)
    ids, mask = ids[:, :12], torch.ones(BATCH, 12, dtype=torch.long)
    mask[0, :3] = 0
    args = dict(attention_mask=mask, max_new_tokens=6, do_sample=False, pad_token_id=0)
    assert torch.equal(model.eval().generate(ids, **args), ref.eval().generate(ids, **args))


# ---- the mask function ------------------------------------------------------------------------------------------------


def test_mask_function_hands_through_padding_only():
    from transformers import masking_utils as mu

    if not hasattr(mu, "remap_positions_for_packed_sequence"):
        pytest.skip("this transformers has no packed-sequence mask remapping")

    pad = torch.ones(2, 6, dtype=torch.bool)
    assert attn.tigon_attention_mask(2, 6, 6, mask_function=mu.causal_mask_function, attention_mask=pad) is None
    pad[0, 0] = False
    window = mu.sliding_window_causal_mask_function(3)
    assert torch.equal(attn.tigon_attention_mask(2, 6, 6, mask_function=window, attention_mask=pad), pad)
    packed = mu.and_masks(
        mu.remap_positions_for_packed_sequence(window, torch.zeros(2, 6, dtype=torch.long)),
        mu.packed_sequence_mask_function(torch.zeros(2, 6, dtype=torch.long)),
    )
    assert attn.tigon_attention_mask(2, 6, 6, mask_function=packed) is None
    # a pattern Tigon does not express: transformers' dense mask, which the attention then falls back on
    images = mu.or_masks(mu.causal_mask_function, mu.blockwise_overlay(torch.zeros(2, 6, dtype=torch.long)))
    for fn, vmap in ((images, False), (mu.causal_mask_function, True)):
        dense = attn.tigon_attention_mask(2, 6, 6, mask_function=fn, attention_mask=pad, use_vmap=vmap)
        assert dense.shape == (2, 1, 6, 6) and dense.dtype == torch.bool


# ---- fallbacks: a warning, and transformers' answer ------------------------------------------------------------------


def test_dense_4d_mask_falls_back(calls):
    ref, model = twins("llama")
    ids = tokens(ref.config)
    dense = torch.rand(BATCH, 1, SEQ, SEQ) > 0.3
    dense |= torch.eye(SEQ, dtype=torch.bool)
    with pytest.warns(UserWarning, match="dense"):
        got = run(model, ids, attention_mask=dense)
    assert calls["dense"] == calls["varlen"] == 0
    compare(got, run(ref, ids, attention_mask=dense))


def test_bidirectional_gemma3_falls_back_to_the_dense_mask():
    """Gemma 3 with use_bidirectional_attention builds its masks with an or_mask_function: dense, so SDPA."""
    if tuple(int(v) for v in torch.__version__.split("+")[0].split(".")[:2]) < (2, 6):
        pytest.skip("transformers builds or_mask_function masks only with torch >= 2.6")
    ref, model = twins("gemma3", use_bidirectional_attention=True, attn_logit_softcapping=None)
    for m in (ref, model):
        for layer in m.model.layers:
            layer.self_attn.is_causal = False
    ids = tokens(ref.config)
    with pytest.warns(UserWarning, match="dense"):
        got = run(model, ids)
    compare(got, run(ref, ids))


def test_dropout_in_training_falls_back(calls):
    _, model = twins("llama", attention_dropout=0.5)
    ids = tokens(model.config)
    with pytest.warns(UserWarning, match="dropout"):
        run(model, ids)
    assert calls["dense"] == 0
    model.eval()  # no dropout in eval: Tigon again, without a warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.simplefilter("ignore", tigon.TigonCPUWarning)
        model(input_ids=ids)
    assert calls["dense"] == model.config.num_hidden_layers


def test_output_attentions_falls_back_to_eager_weights():
    ref, model = twins("gemma2")  # softcapped: the eager fallback
    ids = tokens(ref.config)
    with torch.no_grad(), pytest.warns(UserWarning, match="output_attentions"):
        out = model(input_ids=ids, output_attentions=True)
    with torch.no_grad():
        ref_out = ref(input_ids=ids, output_attentions=True)
    assert len(out.attentions) == ref.config.num_hidden_layers
    for a, r in zip(out.attentions, ref_out.attentions):
        assert_close(a, r.double(), torch.float32, name="attention weights")
    assert_close(out.logits, ref_out.logits.double(), torch.float32, name="logits")


def test_missing_op_falls_back(monkeypatch):
    ref, model = twins("qwen3")
    monkeypatch.delattr(tigon.ops, "flash_attention")
    ids = tokens(ref.config)
    with pytest.warns(UserWarning, match="no flash_attention op"):
        got = run(model, ids)
    compare(got, run(ref, ids))


def test_warns_once_per_reason():
    _, model = twins("llama", attention_dropout=0.5)
    ids = tokens(model.config)
    with pytest.warns(UserWarning) as record:
        run(model, ids)
        run(model, ids)
    assert len([w for w in record if "tigon attention" in str(w.message)]) == 1


# ---- patch(): the attention option --------------------------------------------------------------------------------------


def test_patch_keeps_attention_on_cpu_unless_asked(caplog):
    model = build("llama")
    model.set_attn_implementation("sdpa")
    tt.patch(model)
    assert model.config._attn_implementation == "sdpa" and "attention" not in model.tigon_patched
    with caplog.at_level(logging.INFO, logger="tigon.transformers"):
        tt.patch(model, attention=True)
    assert model.config._attn_implementation == "tigon" and model.tigon_patched["attention"] == 1
    assert "attention (sdpa -> tigon)" in caplog.text
    tt.revert(model=model)
    assert model.config._attn_implementation == "sdpa" and "attention" not in model.tigon_patched


def test_patch_attention_false_and_bad_values():
    model = build("gemma")
    tt.apply_tigon_to_gemma(model=model, attention=False)
    assert model.config._attn_implementation == "eager"
    with pytest.raises(TypeError, match="'attention' must be a bool"):
        tt.patch(model, attention="sdpa")
    with pytest.raises(ValueError, match="attn_implementation=\"tigon\""):
        tt.apply_tigon_to_gemma(attention=True)


def test_auto_class_takes_attention(tmp_path):
    ref = build("mistral")
    ref.save_pretrained(tmp_path)
    model = tt.AutoTigonForCausalLM.from_pretrained(tmp_path, attention=True)
    assert model.config._attn_implementation == "tigon"
    model = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, attn_implementation="tigon")
    assert model.config._attn_implementation == "tigon"


# ---- CUDA: the kernels themselves ---------------------------------------------------------------------------------------

# hidden 256 = 4 query heads of 64 (a head dim the kernels take), 2 key/value heads
GPU_SIZES = dict(hidden_size=256, head_dim=64, query_pre_attn_scalar=64)


def _rel(a, b) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30)).item()


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("name", ["llama", "mistral", "gemma2", "gemma3", "qwen3"])
def test_gpu_matches_transformers(name, dtype):
    """Tigon in bf16/fp16 against transformers' fp32 model: the logits and each gradient at most twice as far (relative
    L2) as transformers' own attention in the same dtype, plus one unit of the dtype's tolerance."""
    overrides = dict(GPU_SIZES, sliding_window=8) if name == "mistral" else GPU_SIZES
    ref32, _ = twins(name, device="cuda", **overrides)
    ref, model = twins(name, dtype=dtype, device="cuda", **overrides)
    ids, mask, keep = padded_batch(ref.config)
    ids, mask, keep = ids.cuda(), mask.cuda(), keep.cuda()
    for kwargs in ({}, dict(attention_mask=mask, keep=keep)):
        exact = run(ref32, ids, **dict(kwargs))
        theirs, mine = run(ref, ids, **dict(kwargs)), run(model, ids, **dict(kwargs))
        unit = TOL[dtype]["rtol"]
        assert _rel(mine[0], exact[0]) <= 2 * _rel(theirs[0], exact[0]) + unit
        for pname, g in mine[1].items():
            assert _rel(g, exact[1][pname]) <= 2 * _rel(theirs[1][pname], exact[1][pname]) + unit, pname


@needs_cuda
def test_gpu_head_dim_without_kernel_falls_back():
    _, model = twins("llama", device="cuda", dtype=torch.bfloat16)  # head dim 16
    with pytest.warns(UserWarning, match="head dim 16"):
        run(model, tokens(model.config, device="cuda"))


@needs_cuda
def test_patch_switches_attention_on_gpu_when_asked():
    model = build("llama", device="cuda", dtype=torch.bfloat16)
    tt.patch(model)  # the default keeps the model's own attention while Tigon's backward trails cuDNN's
    assert model.config._attn_implementation == "eager"
    tt.revert(model=model)
    tt.patch(model, attention=True)
    assert model.config._attn_implementation == "tigon"
    tt.revert(model=model)
    assert model.config._attn_implementation == "eager"


def test_every_family_is_covered():
    assert set(NAMES) | (set(VLMS) & set(FAMILIES)) == set(FAMILIES)  # VLM-only families: test_vlm_language_model
