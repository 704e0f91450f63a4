"""The patching API's edges: wrong arguments get a TypeError / ValueError naming them, patch() reports what it
replaced (logging at INFO, model.tigon_patched), check_targets reaches the patched loss, and TigonCallback patches a
transformers.Trainer's model, whose losses under gradient accumulation then match the unpatched Trainer's (CPU, a
tiny random Llama, no downloads)."""

import inspect
import logging

import pytest
import torch

from tolerances import assert_close

transformers = pytest.importorskip("transformers")
import tigon.transformers as tt  # noqa: E402
from test_transformers import build, loss_and_grads, make_batch  # noqa: E402
from tigon.nn import FusedLinearCrossEntropyLoss  # noqa: E402


def test_patch_refuses_an_unknown_option():
    with pytest.raises(TypeError, match="unexpected option 'flash'"):
        tt.patch(build("llama"), flash=True)
    with pytest.raises(TypeError, match="'rope' must be a bool"):
        tt.patch(build("llama"), rope="yes")


def test_apply_refuses_a_model_that_is_not_a_module():
    with pytest.raises(TypeError, match="argument 'model' must be a built model"):
        tt.apply_tigon_to_llama(model="llama")


def test_patch_refuses_what_is_not_a_transformers_model():
    with pytest.raises(TypeError, match="argument 'model' must be a transformers model"):
        tt.patch(torch.nn.Linear(2, 2))


def test_revert_refuses_an_unknown_family():
    with pytest.raises(ValueError, match="argument 'family'.*'nonexistent'"):
        tt.revert("nonexistent")
    tt.revert("llama")  # a known family that is not patched: nothing to do


def test_patch_reports_what_it_replaced(caplog):
    model = build("llama")
    with caplog.at_level(logging.INFO, logger="tigon.transformers"):
        assert tt.patch(model) is model
    n = model.config.num_hidden_layers
    assert model.tigon_patched == {"rms_norm": 2 * n + 1, "mlp": n, "rope": n, "residual_norm": n, "loss": 1}
    assert "LlamaForCausalLM" in caplog.text and f"{n} mlp" in caplog.text


@pytest.mark.parametrize("name,swiglu", [("llama", True), ("llama", False), ("phi3", True)])
def test_tiled_mlp_gives_the_same_loss_and_gradients(name, swiglu):
    ref = tt.patch(build(name), swiglu=swiglu)
    tiled = tt.patch(build(name), swiglu=swiglu, tiled_mlp=3)
    n = tiled.config.num_hidden_layers
    assert tiled.tigon_patched["tiled_mlp"] == n
    ids, labels = make_batch(ref.config)
    out_ref, g_ref = loss_and_grads(ref, ids, labels)
    out, g = loss_and_grads(tiled, ids, labels)
    assert_close(out.loss, out_ref.loss.double(), name="loss")
    assert g.keys() == g_ref.keys()
    for k in g:
        assert_close(g[k], g_ref[k].double(), name=k, tol=dict(atol=1e-5, rtol=1e-4))


def test_tiled_mlp_arguments():
    with pytest.raises(TypeError, match="'tiled_mlp'"):
        tt.patch(build("llama"), tiled_mlp=0)
    with pytest.raises(TypeError, match="'tiled_mlp'"):
        tt.patch(build("llama"), tiled_mlp="yes")
    with pytest.raises(ValueError, match="'tiled_mlp' applies to a built model"):
        tt.apply_tigon_to_llama(tiled_mlp=True)
    assert "tiled_mlp" in tt.patch(build("llama"), tiled_mlp=True).tigon_patched


def test_class_level_patch_returns_the_names_it_rebound(caplog):
    try:
        with caplog.at_level(logging.INFO, logger="tigon.transformers"):
            names = tt.apply_tigon_to_llama()
        module = "transformers.models.llama.modeling_llama"
        assert set(names) == {
            f"{module}.LlamaRMSNorm",
            f"{module}.LlamaMLP",
            f"{module}.apply_rotary_pos_emb",
            f"{module}.LlamaDecoderLayer.forward",
            f"{module}.LlamaForCausalLM.forward",
        }
        assert "LlamaRMSNorm" in caplog.text
    finally:
        tt.revert()


def test_fused_loss_module_names_swapped_arguments():
    hidden, weight = torch.randn(6, 16), torch.randn(40, 16)
    target = torch.randint(0, 40, (6,))
    with pytest.raises(ValueError, match="'lin_weight'.*lm_head.weight, hidden, target"):
        FusedLinearCrossEntropyLoss()(hidden, weight, target)  # torch's order
    FusedLinearCrossEntropyLoss()(weight, hidden, target)


@pytest.mark.parametrize("loss", ["fused", "cross_entropy"])
def test_check_targets_reaches_the_patched_loss(loss):
    model = build("llama")
    flags = dict(fused_linear_cross_entropy=loss == "fused", cross_entropy=loss == "cross_entropy")
    tt.patch(model, check_targets=True, **flags)
    ids, labels = make_batch(model.config)
    model(input_ids=ids, labels=labels).loss.backward()
    labels[1, 5] = model.config.vocab_size + 3
    with pytest.raises(ValueError, match=f"'target'.*= {model.config.vocab_size + 3}"):
        model(input_ids=ids, labels=labels)


def test_patched_loss_chunks_with_the_model_budget_and_weight_dtype_dw(monkeypatch):
    """The patched loss takes the model plan (smaller chunks, dW in the weight's dtype); forced to many chunks by a
    tiny budget it still matches the unpatched model."""
    import tigon.transformers._causal_lm as causal_lm

    seen = {}
    original = causal_lm.fused_linear_cross_entropy

    def spy(*args, **kwargs):
        seen.update(kwargs)
        return original(*args, **kwargs)

    monkeypatch.setattr(causal_lm, "fused_linear_cross_entropy", spy)
    monkeypatch.setattr(causal_lm, "MODEL_MEMORY_BUDGET", 4 * 2 * 256)  # 4 tokens of a 256-word vocabulary
    reference = build("llama")
    model = build("llama")
    ids, labels = make_batch(model.config)
    want_out, want = loss_and_grads(reference, ids, labels)
    tt.patch(model)
    try:
        got_out, got = loss_and_grads(model, ids, labels)
    finally:
        tt.revert()
    assert seen["dw_accumulation"] == "weight" and seen["memory_budget"] == 4 * 2 * 256
    assert_close(got_out.loss, want_out.loss, torch.float32, name="loss")
    for name, w in want.items():
        assert_close(got[name], w, torch.float32, name=name)


# ---- the Trainer switch -------------------------------------------------------------------------------------------


class _Rows(torch.utils.data.Dataset):
    def __init__(self, config, n=8):
        self.rows = []
        for i in range(n):
            ids, labels = make_batch(config, seed=10 + i)
            labels[:, : i % 5] = -100  # different token counts per row: num_items_in_batch matters
            self.rows.append(dict(input_ids=ids[0], labels=labels[0]))

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        return self.rows[i]


def _train(tmp_path, callbacks):
    model = build("llama")
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=2,
        gradient_accumulation_steps=2,
        max_steps=3,
        learning_rate=1e-3,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        seed=0,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    trainer = transformers.Trainer(model=model, args=args, train_dataset=_Rows(model.config), callbacks=callbacks)
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return model, torch.tensor(losses, dtype=torch.float64)


def test_trainer_callback_matches_the_unpatched_trainer(tmp_path):
    pytest.importorskip("accelerate", reason="transformers.Trainer needs accelerate (pip install '.[test]')")
    ref_model, ref = _train(tmp_path / "ref", [])
    model, got = _train(tmp_path / "tigon", [tt.TigonCallback()])
    assert model.tigon_patched["loss"] == 1 and type(model.model.norm).__name__.startswith("Tigon")
    assert len(got) == 3
    assert_close(got.float(), ref, name="Trainer losses")
    # AdamW divides by sqrt(v): where a gradient is near zero, fp32 differences in it move the step by a fraction of
    # the learning rate (1e-3), so parameters are held to a tenth of it rather than to fp32 rounding
    for (name, p), p_ref in zip(model.named_parameters(), ref_model.parameters()):
        torch.testing.assert_close(
            p.detach().double(), p_ref.detach().double(), atol=1e-4, rtol=1e-4, msg=lambda m, name=name: f"{name}: {m}"
        )


def test_trainer_callback_refuses_an_unknown_option():
    with pytest.raises(TypeError, match="unexpected option 'flash'"):
        tt.TigonCallback(flash=True)


def test_residual_add_fuses_into_plain_pre_norm_layers_only(monkeypatch):
    from tigon.transformers import _residual

    calls = []
    fused = _residual.add_rms_norm
    monkeypatch.setattr(_residual, "add_rms_norm", lambda *a: calls.append(1) or fused(*a))
    llama, sandwich = tt.patch(build("llama")), tt.patch(build("gemma3"))
    n = llama.config.num_hidden_layers
    assert llama.tigon_patched["residual_norm"] == n and "residual_norm" not in sandwich.tigon_patched
    tt.patch(llama)  # patching again finds its own forwards
    assert llama.tigon_patched["residual_norm"] == n
    ids, labels = make_batch(llama.config)
    loss_and_grads(llama, ids, labels)
    assert len(calls) == n
    # a hook on the norm sees its input: that layer adds and normalises as transformers wrote it
    seen = []
    llama.model.layers[0].post_attention_layernorm.register_forward_hook(lambda m, args, out: seen.append(args))
    calls.clear()
    llama(input_ids=ids, labels=labels)
    assert len(calls) == n - 1 and len(seen) == 1


def test_fuse_residual_norm_leaves_other_forwards_alone():
    from tigon.transformers._residual import fuse_residual_norm

    def post_norm(self, hidden_states):
        residual = hidden_states
        hidden_states = self.post_attention_layernorm(self.self_attn(hidden_states))
        return residual + hidden_states

    assert fuse_residual_norm(post_norm) is None
    assert fuse_residual_norm(len) is None  # no Python source


def test_rewritten_forwards_run_in_unnamed_copies_of_their_globals():
    # torch.compile before 2.12 reads a global of a function whose globals name a module from that module itself: a
    # name only the copy has would be missing there, and a replaced one would have its original value
    from transformers.models.llama import modeling_llama

    from tigon.transformers._functions import with_globals
    from tigon.transformers._residual import fuse_residual_norm

    original = modeling_llama.LlamaDecoderLayer.forward
    marker = object()
    for copy in (fuse_residual_norm(original), with_globals(original, apply_rotary_pos_emb=marker)):
        inner = inspect.unwrap(copy)
        assert "__name__" not in inner.__globals__ and inner.__globals__ is not vars(modeling_llama)
        assert inner.__globals__["nn"] is modeling_llama.nn  # the module's names, as they were when copied
        assert copy.__module__ == inner.__module__ == original.__module__
    assert inspect.unwrap(copy).__globals__["apply_rotary_pos_emb"] is marker
