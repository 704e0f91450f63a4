"""tigon.losses inside TRL's trainers: DPOTrainer and GRPOTrainer train a tiny random Llama (built from a config, with
a word-level tokenizer made here: nothing downloaded) for 3 and 2 steps, once as TRL ships them and once as
tigon.losses.trl_trainers' subclasses (same seed, same data, same starting weights). The loss of every step matches
TRL's own to fp32 rounding (atol 1e-5 on losses of order 1, rtol 1e-4), and so do the trained weights. CPU, fp32.
Skips when trl is not installed (it is not on the transformers 5.0 floor)."""

import pytest
import torch

trl = pytest.importorskip(
    "trl", reason="trl is not importable: TRL trainer integration not tested", exc_type=ImportError
)
transformers = pytest.importorskip("transformers")
datasets = pytest.importorskip("datasets", reason="datasets (a trl dependency) is not importable", exc_type=ImportError)
from tokenizers import Tokenizer, models, pre_tokenizers  # noqa: E402

from tigon.losses.trl_trainers import TigonDPOTrainer, TigonGRPOTrainer  # noqa: E402

WORDS = "the a cat dog sat ran on under mat log red blue big small and it is was".split()
SPECIAL = ["<pad>", "<eos>", "<unk>"]
LOSS_TOL = dict(atol=1e-5, rtol=1e-4)  # both sides fp32 on the same tokens; different summation orders only
PARAM_TOL = dict(atol=1e-5, rtol=1e-4)  # a few AdamW steps of lr 1e-3 from the same start


def tiny_model_dir(tmp_path) -> str:
    """A random 2-layer Llama and its tokenizer, saved where TRL can load them (and its reference copy) by path."""
    vocab = {w: i for i, w in enumerate(SPECIAL + WORDS)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>"
    )
    config = transformers.LlamaConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        tie_word_embeddings=False,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=None,
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config)
    path = str(tmp_path / "tiny-llama")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def common_args(tmp_path, name):
    return dict(
        output_dir=str(tmp_path / name),
        learning_rate=1e-3,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        bf16=False,  # TRL defaults to bf16 autocast, on the CPU too: fp32 here, to compare to fp32 rounding
        seed=0,
        dataloader_num_workers=0,
        model_init_kwargs={"dtype": torch.float32, "attn_implementation": "eager"},
    )


def recording(trainer_cls):
    """trainer_cls recording each step's loss (the value it backpropagates) at full precision."""

    class Recording(trainer_cls):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.step_losses = []

        def compute_loss(self, model, inputs, *args, **kwargs):
            loss = super().compute_loss(model, inputs, *args, **kwargs)
            self.step_losses.append((loss[0] if isinstance(loss, tuple) else loss).item())
            return loss

    return Recording


def train(trainer_cls, path, **kwargs):
    trainer = recording(trainer_cls)(model=path, processing_class=None, **kwargs)
    trainer.train()
    params = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    return torch.tensor(trainer.step_losses, dtype=torch.float64), params


def check_same(ours, theirs, steps):
    (got, got_params), (want, want_params) = ours, theirs
    assert len(got) == len(want) == steps
    assert want.abs().max() > 0
    torch.testing.assert_close(got, want, **LOSS_TOL)
    for name, p in got_params.items():
        torch.testing.assert_close(p, want_params[name], **PARAM_TOL, msg=lambda m, n=name: f"{n}: {m}")


def test_dpo_trainer_steps_match_trl(tmp_path):
    path = tiny_model_dir(tmp_path)
    rows = [
        ("the cat sat on", " the mat", " a log"),
        ("a dog ran under", " the big log", " it"),
        ("the red cat is", " small", " blue and big"),
        ("it was a", " dog and a cat", " mat"),
        ("a big dog sat", " on the mat", " under it"),
        ("the small cat ran", " on a log", " and sat"),
    ]
    data = datasets.Dataset.from_dict({k: [r[i] for r in rows] for i, k in enumerate(("prompt", "chosen", "rejected"))})
    runs = {}
    for cls in (trl.DPOTrainer, TigonDPOTrainer):
        args = trl.DPOConfig(
            **common_args(tmp_path, cls.__name__), per_device_train_batch_size=2, max_steps=3, beta=0.5
        )
        runs[cls] = train(cls, path, args=args, train_dataset=data)
    check_same(runs[TigonDPOTrainer], runs[trl.DPOTrainer], steps=3)


def word_count_reward(completions, **kwargs):
    """Deterministic and varied across a group's samples: rewards long completions, penalises 'the'."""
    return [float(len(c.split())) - 2.0 * c.split().count("the") for c in completions]


@pytest.mark.parametrize("loss_type", ["grpo", "dapo"])
def test_grpo_trainer_steps_match_trl(tmp_path, loss_type):
    path = tiny_model_dir(tmp_path)
    prompts = ["the cat", "a dog", "it was", "the red", "a big cat", "the mat is", "it ran", "a small dog"]
    data = datasets.Dataset.from_dict({"prompt": prompts})
    runs = {}
    for cls in (trl.GRPOTrainer, TigonGRPOTrainer):
        args = trl.GRPOConfig(
            **common_args(tmp_path, cls.__name__ + loss_type),
            per_device_train_batch_size=4,
            num_generations=4,
            max_completion_length=5,
            max_steps=2,
            beta=0.04,  # the KL term to a reference model (loaded from the same path) included
            loss_type=loss_type,
            use_vllm=False,
        )
        runs[cls] = train(cls, path, args=args, train_dataset=data, reward_funcs=word_count_reward)
    check_same(runs[TigonGRPOTrainer], runs[trl.GRPOTrainer], steps=2)


def test_unsupported_options_are_refused(tmp_path):
    path = tiny_model_dir(tmp_path)
    data = datasets.Dataset.from_dict({"prompt": ["the cat"], "chosen": ["sat"], "rejected": ["ran"]})
    args = trl.DPOConfig(**common_args(tmp_path, "refused"), max_steps=1, loss_type=["sigmoid", "sft"])
    with pytest.raises(ValueError, match="TigonDPOTrainer: loss_type"):
        TigonDPOTrainer(model=path, args=args, train_dataset=data)
