"""The Trainer switch: what ``TrainingArguments(use_liger_kernel=True)`` does for Liger-Kernel, for Tigon, without
changing transformers.

    trainer = Trainer(model=model, args=args, ..., callbacks=[tigon.transformers.TigonCallback()])

or, equivalently, one line before the Trainer is built: ``model = tigon.transformers.patch(model)``.
"""

from __future__ import annotations

from transformers.trainer_callback import TrainerCallback

from tigon.transformers._patch import OPTIONS, patch


class TigonCallback(TrainerCallback):
    """Patches the Trainer's model in place (tigon.transformers.patch, with these options) when the Trainer is built,
    before its optimizer exists: the same parameters, so checkpoints and the optimizer see no change. The patched
    loss keeps transformers' gradient-accumulation semantics (num_items_in_batch)."""

    def __init__(self, **options) -> None:
        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:
            raise TypeError(f"TigonCallback: unexpected option {unknown[0]!r} (options: {', '.join(OPTIONS)})")
        self.options = options

    def on_init_end(self, args, state, control, model=None, **kwargs):
        if model is None:
            raise ValueError("TigonCallback: the Trainer passed no model; build it with model=...")
        patch(model, **self.options)
        return control
