"""AutoTigonForCausalLM: transformers' AutoModelForCausalLM, then tigon.transformers.patch on the model it built."""

from __future__ import annotations

from tigon.transformers._patch import OPTIONS


class AutoTigonForCausalLM:
    """``AutoTigonForCausalLM.from_pretrained(name, **kwargs)`` loads as AutoModelForCausalLM does and patches the
    loaded model (instance level: nothing process-wide changes). Tigon's options (rope=, rms_norm=, swiglu=/geglu=,
    cross_entropy=, fused_linear_cross_entropy=, check_targets=, attention=) are taken out of kwargs; the rest go to
    transformers. A model type Tigon does not support loads unpatched, with a warning."""

    def __init__(self, *args, **kwargs):
        raise EnvironmentError("AutoTigonForCausalLM is built with from_pretrained() or from_config()")

    @staticmethod
    def _split(kwargs: dict) -> dict:
        return {k: kwargs.pop(k) for k in OPTIONS if k in kwargs}

    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        from transformers import AutoModelForCausalLM

        from tigon.transformers._patch import patch

        options = cls._split(kwargs)
        return patch(AutoModelForCausalLM.from_pretrained(*args, **kwargs), **options)

    @classmethod
    def from_config(cls, config, **kwargs):
        from transformers import AutoModelForCausalLM

        from tigon.transformers._patch import patch

        options = cls._split(kwargs)
        return patch(AutoModelForCausalLM.from_config(config, **kwargs), **options)
