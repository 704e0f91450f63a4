"""Applying a family's patch: class-level (rebinding names in that family's modeling module, so models built
afterwards use Tigon) or instance-level (replacing the submodules of one built model in place, sharing its
parameters, and routing its RoPE and loss through Tigon without touching the module). Nothing outside the family's
modeling module is ever rebound."""

from __future__ import annotations

import functools
import importlib
import logging
import types
import warnings

import torch

from tigon.transformers._causal_lm import make_forward
from tigon.transformers._families import BY_MODEL_TYPE, FAMILIES, Family
from tigon.transformers._functions import with_globals
from tigon.transformers._modules import (
    activation_of,
    experts_forward,
    experts_gate,
    layer_norm_base,
    layer_norm_class,
    mlp_class,
    norm_class,
    pointwise_act,
    rope_functions,
)
from tigon.transformers._residual import fuse_residual_norm
from tigon.transformers.attention import NAME as ATTENTION

log = logging.getLogger("tigon.transformers")
OPTIONS = (
    "rope",
    "rms_norm",
    "swiglu",
    "geglu",
    "cross_entropy",
    "fused_linear_cross_entropy",
    "check_targets",
    "attention",
    "tiled_mlp",
)
_MISSING = object()
_saved: dict[str, dict[tuple, object]] = {}  # family name -> {(owner, attribute): what it was before Tigon}


def _original(family: Family, owner, attr: str):
    value = _saved.get(family.name, {}).get((owner, attr), _MISSING)
    return getattr(owner, attr) if value is _MISSING else value


def _set(family: Family, owner, attr: str, value) -> None:
    _saved.setdefault(family.name, {}).setdefault((owner, attr), vars(owner).get(attr, _MISSING))
    setattr(owner, attr, value)


def revert(family: str | None = None, *, model: torch.nn.Module | None = None) -> None:
    """Undoes the class-level patches of one family (or all): the modeling modules get transformers' own names back.
    Models built while patched keep their Tigon modules; instance-level patches are not undone. With model=, gives
    that model back the attention implementation it had before patch() switched it to Tigon's (its other patched
    modules stay)."""
    if family is not None and family not in FAMILIES:
        raise ValueError(
            f"revert: argument 'family' must be None (every family) or one of {sorted(FAMILIES)}, got {family!r}"
        )
    if model is not None:
        _restore_attention(model)
        if family is None:
            return
    for name in [family] if family else list(_saved):
        for (owner, attr), value in _saved.pop(name, {}).items():
            if value is _MISSING:
                delattr(owner, attr)
            else:
                setattr(owner, attr, value)


def _gated(family: Family, swiglu: bool) -> bool:
    """Whether the MLP option applies: gated MLPs and experts, or a non-gated MLP's activation."""
    return swiglu and (
        family.mlp is not None or family.mlp_act_attr is not None or (family.experts and family.experts_gate)
    )


def apply_class(
    family: Family, rope: bool, rms_norm: bool, swiglu: bool, ce: bool, flce: bool, check_targets: bool = False
) -> list[str]:
    """Rebinds names in the family's modeling module; returns them (module.Name or module.Class.method)."""
    revert(family.name)  # each call states the whole patch: options left off are transformers' again
    mod = importlib.import_module(family.module)
    p = family.prefix
    layer_norm = rms_norm and family.layer_norm is not None
    rms_norm, rope = rms_norm and family.norm is not None, rope and family.rope is not None
    # transformers releases differ in which classes a VLM's modeling module defines (some import Qwen2's)
    if rms_norm and hasattr(mod, family.norm_cls):
        _set(family, mod, family.norm_cls, norm_class(family))
    if layer_norm and family.layer_norm != "LayerNorm":
        _set(family, mod, family.layer_norm, layer_norm_class(family, layer_norm_base(family, mod)))
    elif layer_norm:  # torch.nn.LayerNorm itself: the module's classes convert their own after construction
        for cls in _module_classes(mod):
            _set(family, cls, "__init__", _converting_init(_original(family, cls, "__init__"), family))
    if swiglu and family.mlp and hasattr(mod, family.mlp_cls):
        _set(family, mod, family.mlp_cls, mlp_class(family, _original(family, mod, family.mlp_cls)))
    if swiglu and family.mlp_act_attr and hasattr(mod, family.mlp_cls):
        cls = getattr(mod, family.mlp_cls)
        _set(family, cls, "__init__", _act_swapping_init(_original(family, cls, "__init__"), family))
    experts = getattr(mod, f"{p}Experts", None)  # older transformers may run the family's experts inline
    if swiglu and family.experts and family.experts_gate and hasattr(experts, "_apply_gate"):
        # the whole block fused where the module allows it; the gate still serves transformers' forward elsewhere
        _set(family, experts, "forward", experts_forward(_original(family, experts, "forward")))
        _set(family, experts, "_apply_gate", experts_gate(_original(family, experts, "_apply_gate")))
    if rope:
        for name, fn in rope_functions(family).items():
            if name == family.rope_fn or hasattr(mod, name):  # mRoPE's apply-time merge only where a release has it
                _set(family, mod, name, fn)
    if rms_norm:
        for layer in _decoder_layers(mod):
            fused = fuse_residual_norm(_original(family, layer, "forward"))
            if fused is not None:
                _set(family, layer, "forward", fused)
    if (ce or flce) and family.causal_lm_cls:
        lm = getattr(mod, family.causal_lm_cls)
        _set(family, lm, "forward", make_forward(_original(family, lm, "forward"), family, flce, ce, check_targets))
    return [
        f"{family.module}.{attr if owner is mod else owner.__name__ + '.' + attr}"
        for owner, attr in _saved.get(family.name, {})
    ]


def _act_swapping_init(init, family: Family):
    """__init__ that runs init, then gives the MLP Tigon's module for its activation (Family.mlp_act_attr)."""

    @functools.wraps(init)
    def __init__(self, config, *args, **kwargs):
        init(self, config, *args, **kwargs)
        _swap_act(self, family, config)

    return __init__


def _swap_act(mlp: torch.nn.Module, family: Family, config) -> bool:
    """Sets the non-gated MLP's activation module to Tigon's for the config's activation; False (with a warning)
    where Tigon has no kernel for it, or where the MLP has no such attribute, and the MLP keeps its own."""
    config = getattr(mlp, "config", config)
    new = pointwise_act(config, family)
    if new is None or not hasattr(mlp, family.mlp_act_attr):
        warnings.warn(
            f"tigon: {type(mlp).__name__} with {family.act_attr}={getattr(config, family.act_attr, None)!r} "
            f"has no Tigon kernel; its activation is left as it is",
            stacklevel=4,
        )
        return False
    setattr(mlp, family.mlp_act_attr, new)
    return True


def _module_classes(mod) -> list[type]:
    """The torch modules the modeling module defines."""
    return [
        c
        for c in vars(mod).values()
        if isinstance(c, type) and issubclass(c, torch.nn.Module) and c.__module__ == mod.__name__
    ]


def _converting_init(init, family: Family):
    """__init__ that runs init, then turns the torch.nn.LayerNorm modules it built into the family's Tigon class."""
    cls = layer_norm_class(family, torch.nn.LayerNorm)

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        for m in self.modules():  # per-head norms sit inside a ModuleList
            if type(m) is torch.nn.LayerNorm:
                m.__class__ = cls

    return __init__


def _decoder_layers(mod) -> list[type]:
    """The decoder layer classes the modeling module defines (a VLM's text and vision towers may each have one)."""
    return [
        c
        for name, c in vars(mod).items()
        if isinstance(c, type) and name.endswith("DecoderLayer") and c.__module__ == mod.__name__
    ]


# ---- instance level ---------------------------------------------------------------------------------------------------


def _new_norm(old: torch.nn.Module, cls: type) -> torch.nn.Module:
    eps = getattr(old, "variance_epsilon", None)
    eps = getattr(old, "eps", 1e-6) if eps is None else eps
    weight = getattr(old, "weight", None)
    with torch.device("meta"):  # no memory for a weight that is replaced at once
        new = cls(1, eps=eps, with_scale=False) if weight is None else cls(weight.shape[0], eps=eps)
    if weight is not None:
        new.weight = weight  # the same Parameter: optimizers, tied weights and the state dict see no change
    return new.train(old.training)


def _new_mlp(old: torch.nn.Module, family: Family, config) -> torch.nn.Module | None:
    config = getattr(old, "config", config)
    if activation_of(config, family) is None:
        warnings.warn(
            f"tigon: {type(old).__name__} with {family.act_attr}={getattr(config, family.act_attr, None)!r} "
            f"has no Tigon kernel; left as it is",
            stacklevel=4,
        )
        return None
    with torch.device("meta"):
        # Llama 4's MLP keeps no intermediate_size: its down projection's input width is it
        width = getattr(old, "intermediate_size", None) or getattr(getattr(old, "down_proj", None), "in_features", None)
        new = mlp_class(family, type(old))(config, intermediate_size=width)
    # The very projection modules (LoRA-wrapped ones included) move over: same parameters, same state-dict keys.
    for name in ("gate_up_proj", "down_proj") if family.mlp == "phi3" else ("gate_proj", "up_proj", "down_proj"):
        setattr(new, name, getattr(old, name))
    return new.train(old.training)


_VISION = ("visual", "vision_tower", "vision_model", "audio_tower")  # towers that stay transformers'


def apply_instance(
    family: Family,
    model: torch.nn.Module,
    rope: bool,
    rms_norm: bool,
    swiglu: bool,
    ce: bool,
    flce: bool,
    check_targets: bool = False,
) -> dict:
    """Patches one built model in place; returns how many modules of each kind were replaced or rerouted."""
    mod = importlib.import_module(family.module)
    p = family.prefix
    mine = lambda m, name: type(m).__module__ == family.module and type(m).__name__ == name  # noqa: E731
    counts = {"rms_norm": 0, "layer_norm": 0, "mlp": 0, "experts": 0, "rope": 0, "residual_norm": 0, "loss": 0}
    layer_norm = rms_norm and family.layer_norm is not None
    rms_norm, rope = rms_norm and family.norm is not None, rope and family.rope is not None
    norm_cls = norm_class(family) if rms_norm else None
    ln_base = layer_norm_base(family, mod) if layer_norm else None
    # a VLM's vision tower stays transformers' even where it shares a class with the language model
    vision = {id(m) for n, c in model.named_modules() if n.rpartition(".")[2] in _VISION for m in c.modules()}
    for parent in list(model.modules()):
        if id(parent) in vision:
            continue
        for name, child in list(parent.named_children()):
            new = None
            if rms_norm and mine(child, family.norm_cls):
                new, kind = _new_norm(child, norm_cls), "rms_norm"
            elif layer_norm and type(child) is ln_base:  # the same module, its forward Tigon's
                child.__class__ = layer_norm_class(family, ln_base)
                counts["layer_norm"] += 1
            elif swiglu and family.mlp and mine(child, family.mlp_cls):
                new, kind = _new_mlp(child, family, model.config), "mlp"
            elif swiglu and family.mlp_act_attr and mine(child, family.mlp_cls):
                counts["mlp"] += _swap_act(child, family, model.config)  # the same module, its activation Tigon's
            if new is not None:
                setattr(parent, name, new)
                counts[kind] += 1
    for m in model.modules():
        if swiglu and family.experts and family.experts_gate and mine(m, f"{p}Experts") and hasattr(m, "_apply_gate"):
            m._apply_gate = types.MethodType(experts_gate(type(m)._apply_gate), m)
            if "forward" not in vars(m):  # a forward of the instance's own (expert parallelism's wrapper) stays
                m.forward = types.MethodType(experts_forward(type(m).forward), m)
            counts["experts"] += 1
        if rope and mine(m, family.attention_cls):
            forward = with_globals(type(m).forward, **rope_functions(family))
            if forward is None:
                warnings.warn(
                    f"tigon: cannot reroute {type(m).__name__}'s RoPE (its forward is not a plain "
                    f"function); left as it is",
                    stacklevel=3,
                )
                rope = False
                continue
            m.forward = types.MethodType(forward, m)
            counts["rope"] += 1
    if rms_norm:  # the post-attention residual add fused into the norm, where the layer's forward is the plain one
        fused = {layer: fuse_residual_norm(layer.forward) for layer in _decoder_layers(mod)}
        for m in model.modules():
            own = vars(m).get("forward")  # an instance forward other than this patch's stays
            if (
                id(m) in vision
                or fused.get(type(m)) is None
                or getattr(own, "__func__", fused[type(m)]) is not fused[type(m)]
            ):
                continue
            m.forward = types.MethodType(fused[type(m)], m)
            counts["residual_norm"] += 1
    lm = getattr(mod, family.causal_lm_cls or "", None)
    if (ce or flce) and lm is not None and isinstance(model, lm):
        model.forward = types.MethodType(make_forward(type(model).forward, family, flce, ce, check_targets), model)
        counts["loss"] = 1
    return counts


def _tile_mlps(family: Family, model: torch.nn.Module, shards: int | None) -> int:
    """Runs each dense MLP of the model (Tigon's or transformers' own) through tigon.nn.tiled_mlp; returns how many.
    An MLP with dropout (LoRA's lora_dropout) is left untiled with a warning: backward recomputes, so it must be
    deterministic."""
    from tigon.nn.swiglu import LlamaMLP, Phi3MLP
    from tigon.nn.tiled_mlp import tiled_mlp

    n = 0
    for m in model.modules():
        ours = isinstance(m, (LlamaMLP, Phi3MLP))
        theirs = family.mlp_cls and type(m).__module__ == family.module and type(m).__name__ == family.mlp_cls
        if not (ours or theirs):
            continue
        if any(isinstance(d, torch.nn.Dropout) and d.p > 0 for d in m.modules()):
            warnings.warn(f"tigon: {type(m).__name__} has dropout: left untiled (backward recomputes it)", stacklevel=4)
            continue
        plain = types.MethodType(type(m).forward, m)
        m.forward = lambda x, _f=plain, _m=m: tiled_mlp(_f, x, list(_m.parameters()), shards)
        n += 1
    return n


# ---- the public entry points ----------------------------------------------------------------------------------------


def apply(
    name: str,
    rope: bool = True,
    rms_norm: bool = True,
    swiglu: bool = True,
    cross_entropy: bool = False,
    fused_linear_cross_entropy: bool = True,
    model: torch.nn.Module | None = None,
    geglu: bool | None = None,
    check_targets: bool = False,
    attention: bool | None = None,
    tiled_mlp: bool | int = False,
):
    """apply_tigon_to_<name>: class level without model (returns the names rebound), else instance level (returns
    model, with what was replaced in model.tigon_patched). tiled_mlp (instance level): True or a shard count runs
    every MLP over row shards recomputed in backward (tigon.nn.tiled_mlp), for long contexts' activation memory."""
    entry = f"apply_tigon_to_{name}"
    flags = dict(
        rope=rope,
        rms_norm=rms_norm,
        swiglu=swiglu,
        cross_entropy=cross_entropy,
        fused_linear_cross_entropy=fused_linear_cross_entropy,
        check_targets=check_targets,
    )
    for arg, value in list(flags.items()) + [
        (k, v) for k, v in (("geglu", geglu), ("attention", attention)) if v is not None
    ]:
        if not isinstance(value, bool):
            raise TypeError(f"{entry}: argument '{arg}' must be a bool, got {value!r}")
    if not isinstance(tiled_mlp, bool) and (not isinstance(tiled_mlp, int) or tiled_mlp < 1):
        raise TypeError(f"{entry}: argument 'tiled_mlp' must be a bool or a shard count >= 1, got {tiled_mlp!r}")
    if tiled_mlp and model is None:
        raise ValueError(f"{entry}: argument 'tiled_mlp' applies to a built model (model=...)")
    if attention and model is None:
        raise ValueError(
            f"{entry}: argument 'attention' applies to a built model (model=...); for models built after the class-"
            f"level patch pass attn_implementation=\"tigon\" to from_pretrained / from_config"
        )
    if model is not None and not isinstance(model, torch.nn.Module):
        raise TypeError(
            f"{entry}: argument 'model' must be a built model (a torch.nn.Module) or None for the class-"
            f"level patch, got {type(model).__name__} {model!r}"
        )
    family = FAMILIES[name]
    gated = _gated(family, swiglu if geglu is None else geglu)
    if model is None:
        names = apply_class(family, rope, rms_norm, gated, cross_entropy, fused_linear_cross_entropy, check_targets)
        log.info("tigon: %s rebound %s", entry, ", ".join(names) or "nothing")
        return names
    base = unwrap(model)
    counts = apply_instance(
        family, base, rope, rms_norm, gated, cross_entropy, fused_linear_cross_entropy, check_targets
    )
    if tiled_mlp:
        counts["tiled_mlp"] = _tile_mlps(family, base, None if tiled_mlp is True else tiled_mlp)
    before = _switch_attention(base, attention)
    if not any(counts.values()) and (rope or rms_norm or gated or cross_entropy or fused_linear_cross_entropy):
        warnings.warn(
            f"tigon: found no modules of transformers' {family.module} in this model (remote code, or "
            f"another family?); nothing was patched",
            stacklevel=3,
        )
    replaced = {kind: n for kind, n in counts.items() if n}
    if before is not None:
        replaced["attention"] = 1
    base.tigon_patched = replaced  # on the transformers model: wrappers (PEFT, DDP) pass attribute reads to it
    log.info(
        "tigon: %s replaced in %s: %s",
        entry,
        type(base).__name__,
        ", ".join(
            f"attention ({before} -> {ATTENTION})" if kind == "attention" else f"{n} {kind}"
            for kind, n in replaced.items()
        )
        or "nothing",
    )
    return model


# ---- attention: a setting of the model, switched where transformers allows it at runtime --------------------------


def _device_of(model) -> torch.device:
    p = next(iter(model.parameters()), None)
    return p.device if p is not None else torch.device("cpu")


def _set_attention(model, name: str) -> None:
    if hasattr(model, "set_attn_implementation"):
        model.set_attn_implementation(name)
    else:
        model.config._attn_implementation = name


def _switch_attention(model, attention: bool | None) -> str | None:
    """Puts the model on Tigon's attention when attention=True (anywhere, the CPU reference too). None, the default,
    keeps the model's own for now: Tigon's backward does not yet match SDPA's cuDNN path (docs/performance/attention.md),
    and a patch must not make training slower. Returns the implementation it replaced, or None."""
    from tigon.transformers import attention as attn

    current = getattr(model.config, "_attn_implementation", None)
    if attention is not True or current == ATTENTION:
        return None
    if attn._op() is None:
        warnings.warn("tigon: this build of tigon has no flash_attention op; attention left as it is", stacklevel=4)
        return None
    _set_attention(model, ATTENTION)
    if model.config._attn_implementation != ATTENTION:
        warnings.warn(
            f"tigon: {type(model).__name__} cannot switch its attention implementation at runtime; left on {current!r}",
            stacklevel=4,
        )
        return None
    model._tigon_attention_before = current
    return current


def _restore_attention(model) -> None:
    base = unwrap(model)
    before = getattr(base, "_tigon_attention_before", None)
    if before is None:
        return
    _set_attention(base, before)
    del base._tigon_attention_before
    patched = getattr(base, "tigon_patched", None)
    if isinstance(patched, dict):
        patched.pop("attention", None)
    log.info("tigon: %s attention back to %s", type(base).__name__, before)


def unwrap(model):
    """The transformers model inside PEFT (get_base_model(), .base_model.model), torch.compile (_orig_mod) and
    DDP-style (.module) wrappers."""
    from transformers import PreTrainedModel

    seen = set()
    while not isinstance(model, PreTrainedModel) and id(model) not in seen:
        seen.add(id(model))
        if hasattr(model, "get_base_model"):
            model = model.get_base_model()
        elif hasattr(getattr(model, "base_model", None), "model"):
            model = model.base_model.model
        elif hasattr(model, "_orig_mod"):
            model = model._orig_mod
        elif isinstance(getattr(model, "module", None), torch.nn.Module):
            model = model.module
    return model


def patch(model, **options):
    """Instance-level patch of a built model, its family read from model.config.model_type (PEFT and other wrappers
    are looked through); options as apply_tigon_to_<family>'s (rope, rms_norm, swiglu, geglu, cross_entropy,
    fused_linear_cross_entropy, check_targets, attention, tiled_mlp). An unsupported model type warns and returns the model
    untouched.
    Returns model; what was replaced ({kind: count}) is logged at INFO on the "tigon.transformers" logger and kept in
    model.tigon_patched."""
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise TypeError(f"patch: unexpected option {unknown[0]!r} (options: {', '.join(OPTIONS)})")
    from transformers import PreTrainedModel

    base = unwrap(model)
    if not isinstance(base, PreTrainedModel):
        raise TypeError(
            f"patch: argument 'model' must be a transformers model (a PreTrainedModel, or a PEFT / DDP / "
            f"torch.compile wrapper of one), got {type(model).__name__}"
        )
    config = getattr(base, "config", None)
    model_type = getattr(config, "model_type", None)
    family = BY_MODEL_TYPE.get(model_type)
    if family is None and hasattr(config, "get_text_config"):
        # a VLM whose language model is a supported family (LLaVA, PaliGemma, InternVL, Idefics3, SmolVLM, ...): its
        # modules are patched; the vision tower is another family's and the loss stays transformers'
        family = BY_MODEL_TYPE.get(getattr(config.get_text_config(), "model_type", None))
    if family is None:
        warnings.warn(
            f"tigon.transformers.patch: model type {model_type!r} is not supported (supported: "
            f"{sorted(BY_MODEL_TYPE)}); returning the model unpatched",
            stacklevel=2,
        )
        return model
    apply(family.name, model=base, **options)
    return model
