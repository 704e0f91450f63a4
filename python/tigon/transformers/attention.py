"""Tigon's flash attention as a transformers attention implementation: ``attn_implementation="tigon"``.

Importing tigon.transformers registers "tigon" with transformers' AttentionInterface and its mask-function registry,
so ``from_pretrained(..., attn_implementation="tigon")`` and ``model.set_attn_implementation("tigon")`` work for every
model that dispatches through the interface. What the model asks for maps onto tigon.ops.flash_attention:

- causal or bidirectional from the call's ``is_causal`` (else ``module.is_causal``); the module's ``scaling``;
- ``sliding_window=w`` (Mistral, Qwen 2, Gemma 2/3 sliding layers) as transformers' flash path reads it: a query sees
  the w keys ending at itself (window (w - 1, 0)); bidirectional: w - 1 either side;
- ``softcap`` (Gemma 2's attention logit softcapping); grouped-query attention without repeating k and v;
- a 2-D padding mask: the tokens are unpacked into variable-length sequences (cu_seqlens) and the output padded back,
  as transformers' flash path does (the mask function hands the 2-D mask through; None when nothing is padded);
- padding-free batches: position_ids that restart (DataCollatorWithFlattening), or its cu_seq_lens_q / _k and
  max_length_q / _k keyword arguments, become sequences of their own (under torch.compile only the keyword arguments:
  finding the restarts reads position_ids on the host).

What the op cannot do runs on transformers' SDPA (or, with a softcap or when attention weights are recorded, a plain
eager attention) for that call, with a warning once per reason: a dense 4-D mask (given by the caller, or a mask
pattern beyond causal / sliding window / padding / packing, e.g. image tokens attending both ways), dropout > 0,
output_attentions, attention sinks, head dims or dtypes the CUDA kernels lack (they take bf16/fp16 and head dims 64,
96, 128, 256 on sm_90), a build of Tigon without the op.
"""

from __future__ import annotations

import inspect
import warnings
import weakref

import torch
from transformers import masking_utils as _masking_utils

NAME = "tigon"
CUDA_HEAD_DIMS = (64, 96, 128, 256)
CUDA_DTYPES = (torch.bfloat16, torch.float16)

_warned: set[str] = set()


def _warn_once(reason: str) -> None:
    if reason not in _warned:
        _warned.add(reason)
        warnings.warn(
            f"tigon attention: {reason}; such calls run on SDPA (eager attention with a softcap or attention "
            f"weights) instead",
            stacklevel=4,
        )


def _op():
    import tigon.ops

    return getattr(tigon.ops, "flash_attention", None)


# ---- the mask function ------------------------------------------------------------------------------------------------

# The pieces of transformers.masking_utils a mask function may be built of that Tigon expresses itself: causal or
# bidirectional, a sliding window (read from the attention call's sliding_window), packed sequences (read from
# position_ids). Anything else (or_masks, block-wise image tokens, chunked attention, user functions) needs the dense
# mask.
_EXPRESSIBLE = {
    "causal_mask_function",
    "bidirectional_mask_function",
    "and_masks.<locals>.and_mask",
    "sliding_window_overlay.<locals>.inner_mask",
    "sliding_window_bidirectional_overlay.<locals>.inner_mask",
    "packed_sequence_mask_function.<locals>.inner_mask",
    "remap_positions_for_packed_sequence.<locals>.inner_mask",
}


@torch.compiler.assume_constant_result  # static per mask function; some torch versions cannot trace the closure walk
def _expressible_mask(fn) -> bool:
    return _expressible(fn)


def _expressible(fn, depth: int = 0) -> bool:
    if depth > 8 or getattr(fn, "__module__", None) != "transformers.masking_utils":
        return False
    if getattr(fn, "__qualname__", None) not in _EXPRESSIBLE:
        return False
    for cell in getattr(fn, "__closure__", None) or ():
        value = cell.cell_contents
        parts = value if isinstance(value, tuple) else (value,)
        for part in parts:
            if callable(part) and not isinstance(part, torch.Tensor) and not _expressible(part, depth + 1):
                return False
    return True


def tigon_attention_mask(*args, **kwargs):
    """What transformers' create_*_mask hands the layers under "tigon": None (nothing padded), the 2-D padding mask,
    or, for a pattern Tigon does not express, transformers' dense 4-D boolean mask (those calls fall back). The
    arguments go through unchanged to transformers' own flash or SDPA mask builders, whose signatures differ between
    transformers versions (5.0 takes cache_position where later versions take q_length and q_offset)."""
    mu = _masking_utils  # imported with this module: an import inside a compiled region breaks the graph

    bound = _FLASH_MASK_SIGNATURE.bind_partial(*args, **kwargs).arguments
    mask_function = bound.get("mask_function") or mu.causal_mask_function
    if not kwargs.get("use_vmap", False) and _expressible_mask(mask_function):
        return mu.flash_attention_mask(*args, **kwargs)
    kwargs.update(allow_is_causal_skip=False, allow_is_bidirectional_skip=False)
    return mu.sdpa_mask(*args, **kwargs)


_FLASH_MASK_SIGNATURE = inspect.signature(_masking_utils.flash_attention_mask)


# ---- variable-length plans, computed once per forward (every layer gets the same mask / position_ids tensor) -------


class _OneSlot:
    """Remembers the plan of the last tensor seen (weakly, with its version): the layers of one forward share it, so
    the host synchronisation that reading lengths needs happens once per forward, not once per layer."""

    def __init__(self):
        self.ref, self.version, self.plan = None, None, None

    def get(self, tensor: torch.Tensor, make):
        if torch.compiler.is_compiling():
            return make(tensor)
        if self.ref is not None and self.ref() is tensor and self.version == tensor._version:
            return self.plan
        plan = make(tensor)
        self.ref, self.version, self.plan = weakref.ref(tensor), tensor._version, plan
        return plan


_mask_plans, _position_plans = _OneSlot(), _OneSlot()


def _lengths_plan(mask: torch.Tensor):
    """(indices of the kept tokens in the flattened batch, cu_seqlens int32, longest length) of a (B, S) mask."""
    lengths = mask.sum(-1, dtype=torch.int32)
    indices = torch.nonzero(mask.flatten()).flatten()
    cu = torch.nn.functional.pad(torch.cumsum(lengths, 0, dtype=torch.int32), (1, 0))
    return indices, cu, int(lengths.max())


def _packed_plan(position_ids: torch.Tensor):
    """(cu_seqlens, longest) over the flattened batch where position_ids restart inside a row, else None. A sequence
    starts at each row's first token and wherever a position is not its predecessor's + 1 (transformers' rule for
    packed sequences in its masks)."""
    starts = torch.diff(position_ids, dim=-1, prepend=position_ids[:, :1] - 1) != 1
    starts[:, 0] = True
    if int(starts.sum()) == starts.shape[0]:
        return None
    first = torch.nonzero(starts.flatten()).flatten().to(torch.int32)
    cu = torch.cat([first, first.new_tensor([starts.numel()])])
    return cu, int(cu.diff().max())


# ---- the attention function -------------------------------------------------------------------------------------------


def _cuda_arch_ok(device: torch.device) -> bool:
    return torch.cuda.get_device_capability(device) == (9, 0)


def _recording_attentions() -> bool:
    try:
        from transformers.utils.output_capturing import _active_collector
    except ImportError:
        return False
    collected = _active_collector.get()
    return collected is not None and "attentions" in collected


def _unsupported(module, query, key, value, attention_mask, dropout, kwargs) -> str | None:
    """Why this call cannot run on Tigon, or None."""
    if _op() is None:
        return "this build of tigon has no flash_attention op"
    if attention_mask is not None and attention_mask.dim() != 2:
        return "a dense (4-D) attention mask"
    if dropout and dropout > 0:
        return "attention dropout > 0"
    if kwargs.get("output_attentions") or _recording_attentions():
        return "output_attentions (the attention weights are never formed)"
    if kwargs.get("s_aux") is not None or kwargs.get("position_bias") is not None:
        return "attention sinks / position bias"
    d = query.shape[-1]
    if key.shape[-1] != d or value.shape[-1] != d or query.shape[1] % key.shape[1]:
        return "query, key and value head dims differ, or query heads are not a multiple of key/value heads"
    if query.device.type == "cuda":
        if query.dtype not in CUDA_DTYPES:
            return f"{query.dtype} on CUDA (the kernels take bf16 and fp16)"
        if d not in CUDA_HEAD_DIMS:
            return f"head dim {d} on CUDA (the kernels take {', '.join(map(str, CUDA_HEAD_DIMS))})"
        if not _cuda_arch_ok(query.device):
            return "a GPU other than sm_90 (the kernels are built for Hopper)"
    elif query.device.type != "cpu":
        return f"{query.device.type} tensors"
    return None


def _window(sliding_window: int | None, causal: bool) -> tuple[int, int]:
    if not sliding_window or sliding_window <= 0:
        return (-1, -1)
    return (sliding_window - 1, 0 if causal else sliding_window - 1)


def tigon_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    sliding_window: int | None = None,
    softcap: float | None = None,
    is_causal: bool | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature: query (B, Hq, Sq, D), key and value (B, Hkv, Sk, D); returns the
    output as (B, Sq, Hq, D) and no weights."""
    causal = bool(is_causal if is_causal is not None else getattr(module, "is_causal", True))
    reason = _unsupported(module, query, key, value, attention_mask, dropout, kwargs)
    if reason is not None:
        _warn_once(reason)
        return fallback_attention(
            query, key, value, attention_mask, dropout, scaling, sliding_window, softcap, causal, module, kwargs
        )
    flash = _op()
    opts = dict(causal=causal, scale=scaling, softcap=float(softcap or 0.0), window=_window(sliding_window, causal))
    B, Hq, Sq, D = query.shape
    q, k, v = query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2)  # (B, S, H, D) views, no copies

    if attention_mask is not None:
        return _padded(flash, q, k, v, attention_mask.bool(), opts), None

    cu_q, cu_k = kwargs.get("cu_seq_lens_q"), kwargs.get("cu_seq_lens_k")
    if cu_q is not None and cu_k is not None and B == 1:
        max_q, max_k = int(kwargs["max_length_q"]), int(kwargs["max_length_k"])
        plan = (cu_q.to(torch.int32), cu_k.to(torch.int32), max_q, max_k)
    else:
        plan = None
        position_ids = kwargs.get("position_ids")
        # Reading where positions restart needs the host; under torch.compile that is not done (pass the collator's
        # cu_seq_lens / max_length kwargs there), as transformers' own masks assume no packing when traced either.
        compiling = torch.compiler.is_compiling()
        if not compiling and position_ids is not None and Sq == key.shape[2] > 1 and position_ids.shape[-1] == Sq:
            # one row of positions may be broadcast over the batch: each row gets its cuts
            packed = _position_plans.get(position_ids, lambda p: _packed_plan(p.expand(B, -1)))
            if packed is not None:
                plan = (packed[0], packed[0], packed[1], packed[1])
    if plan is None:
        return flash(q, k, v, **opts), None
    cu_q, cu_k, max_q, max_k = plan
    out = flash(
        q.reshape(-1, Hq, D),
        k.reshape(-1, k.shape[2], D),
        v.reshape(-1, v.shape[2], D),
        cu_seqlens_q=cu_q,
        cu_seqlens_k=cu_k,
        max_seqlen_q=max_q,
        max_seqlen_k=max_k,
        **opts,
    )
    return out.view(B, Sq, Hq, D), None


def _padded(flash, q, k, v, mask, opts) -> torch.Tensor:
    """The padded batch as variable-length sequences: keys where mask (B, Sk) is set; queries the same tokens when
    Sq == Sk, one per sequence when decoding, else the mask's last Sq columns (left padding, as transformers)."""
    B, Sq, Hq, D = q.shape
    if k.shape[1] > mask.shape[1]:  # a static cache longer than the mask: the rest is unwritten
        k, v = k[:, : mask.shape[1]], v[:, : mask.shape[1]]
    Sk = k.shape[1]
    idx_k, cu_k, max_k = _mask_plans.get(mask, _lengths_plan)
    if Sq == Sk:
        idx_q, cu_q, max_q = idx_k, cu_k, max_k
    elif Sq == 1:
        idx_q = torch.arange(B, device=q.device)
        cu_q, max_q = torch.arange(B + 1, dtype=torch.int32, device=q.device), 1
    else:
        idx_q, cu_q, max_q = _lengths_plan(mask[:, -Sq:])

    def gather(x, idx, S):  # (B, S, H, D) strided -> (T, H, D), without copying the whole batch first
        return x[idx // S, idx % S]

    out = flash(
        gather(q, idx_q, Sq),
        gather(k, idx_k, Sk),
        gather(v, idx_k, Sk),
        cu_seqlens_q=cu_q,
        cu_seqlens_k=cu_k,
        max_seqlen_q=max_q,
        max_seqlen_k=max_k,
        **opts,
    )
    full = out.new_zeros(B * Sq, Hq, D)
    full[idx_q] = out  # padded query rows stay 0, as transformers' flash path leaves them
    return full.view(B, Sq, Hq, D)


# ---- the fallback -----------------------------------------------------------------------------------------------------


def dense_mask(query, key, attention_mask, sliding_window, causal, position_ids) -> torch.Tensor | None:
    """The (B or 1, 1, Sq, Sk) boolean mask of what tigon_attention_forward would compute: causal and window aligned
    bottom-right, padding, packed sequences. None when every key is visible."""
    Sq, Sk = query.shape[2], key.shape[2]
    dev = query.device
    i = torch.arange(Sq, device=dev)[:, None] + (Sk - Sq)
    j = torch.arange(Sk, device=dev)[None, :]
    left, right = _window(sliding_window, causal)
    right = 0 if causal else right
    mask = None

    def both(a, b):
        return b if a is None else a & b

    if right >= 0:
        mask = both(mask, j <= i + right)
    if left >= 0:
        mask = both(mask, j >= i - left)
    mask = None if mask is None else mask[None, None]
    if attention_mask is not None:  # 2-D padding over the keys
        pad = attention_mask.bool()[:, -Sk:] if attention_mask.shape[1] >= Sk else attention_mask.bool()
        mask = both(mask, pad[:, None, None, :])
    elif position_ids is not None and Sq == Sk and Sq > 1 and position_ids.shape[-1] == Sq:
        pos = position_ids.expand(query.shape[0], -1)
        seq = (torch.diff(pos, dim=-1, prepend=pos[:, :1] - 1) != 1).cumsum(-1)
        mask = both(mask, (seq[:, :, None] == seq[:, None, :])[:, None])
    return mask


def fallback_attention(
    query, key, value, attention_mask, dropout, scaling, sliding_window, softcap, causal, module, kw
):
    """The same attention without Tigon's op: SDPA where it can (no softcap, no weights wanted), else eager."""
    if attention_mask is not None and attention_mask.dim() == 4:
        mask = attention_mask
    else:
        if attention_mask is not None and key.shape[2] > attention_mask.shape[1]:
            key, value = key[:, :, : attention_mask.shape[1]], value[:, :, : attention_mask.shape[1]]
        mask = dense_mask(query, key, attention_mask, sliding_window, causal, kw.get("position_ids"))
    # A row with no visible key gives 0 (Tigon's rule), not SDPA's NaN or eager's uniform average.
    empty = None if mask is None or mask.dtype != torch.bool else ~mask.any(-1, keepdim=True)
    want_weights = bool(kw.get("output_attentions")) or _recording_attentions()
    if softcap or want_weights:
        out, weights = _eager(query, key, value, mask, dropout, scaling, softcap)
    else:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        out, weights = sdpa_attention_forward(
            module, query, key, value, mask, dropout=dropout, scaling=scaling, is_causal=False
        )
    if empty is not None:
        out = out.masked_fill(
            empty.transpose(1, 2), 0
        )  # empty: (B, 1, Sq, 1) -> (B, Sq, 1, 1) like out's (B, Sq, H, D)
    return out, weights


def _eager(query, key, value, mask, dropout, scaling, softcap):
    n_rep = query.shape[1] // key.shape[1]
    key, value = key.repeat_interleave(n_rep, 1), value.repeat_interleave(n_rep, 1)
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    scores = torch.matmul(query, key.transpose(-1, -2)) * scale
    if softcap:
        scores = softcap * torch.tanh(scores / softcap)
    if mask is not None:
        low = torch.finfo(scores.dtype).min
        scores = scores.masked_fill(~mask, low) if mask.dtype == torch.bool else scores + mask
    weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    if dropout:
        weights = torch.nn.functional.dropout(weights, p=dropout, training=True)
    return torch.matmul(weights, value).transpose(1, 2).contiguous(), weights


# ---- registration ---------------------------------------------------------------------------------------------------


def register() -> None:
    """Registers "tigon" with transformers (idempotent; done when tigon.transformers is imported)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(NAME, tigon_attention_forward)
    AttentionMaskInterface.register(NAME, tigon_attention_mask)


def available(device: torch.device) -> bool:
    """Whether Tigon's op can serve models on this device at all (the op exists; on CUDA, the GPU is sm_90)."""
    if _op() is None:
        return False
    return device.type == "cpu" or (device.type == "cuda" and _cuda_arch_ok(device))
