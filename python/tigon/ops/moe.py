"""The experts block of a mixture-of-experts layer as torch ops (tigon::moe_experts_fwd / moe_experts_bwd): for each
token t and each of its k choices j with e = ids[t, j], ``out[t] += weights[t, j] * down[e] @ (act(gate) * up)``
where ``gate, up = (gate_up[e] @ x[t]).chunk(2)``; transformers 5's gated <Family>Experts modules in one op.

The routing happens on the device (no host synchronisation), ids outside [0, E) are skipped (expert-parallel
sentinels), and the backward recomputes the intermediates, so the forward saves only its inputs. The ops are
registered with torch.library (fake implementations, so torch.compile(fullgraph=True) traces them); autograd lives
outside them. experts_activation() tells whether a transformers experts module can take this path.
"""

from __future__ import annotations

import ctypes

import torch

from tigon import _lib
from tigon.ops._common import FLOAT_DTYPES, autocast_linear, check_tensor, compiling, rows_ok, scratch

__all__ = ["moe_experts", "experts_activation", "ACTIVATIONS"]

ACTIVATIONS = {"silu": 0, "gelu_tanh": 1, "gelu": 2}  # tigon_glu_activation_t ("gelu": the erf form, as F.gelu)
_INDEX_DTYPES = (torch.int32, torch.int64)


class MoeParams(ctypes.Structure):  # tigon_moe_params
    _fields_ = [("activation", ctypes.c_int32)]


_T = _lib.TENSOR_P
_ws_size = _lib.declare("tigon_moe_workspace_size", [_T, _T, _T, _T, ctypes.c_int32, ctypes.POINTER(ctypes.c_size_t)])
_fwd = _lib.declare("tigon_moe_fwd", [_T] * 6 + [MoeParams, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p])
_bwd = _lib.declare("tigon_moe_bwd", [_T] * 10 + [MoeParams, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p])


# ---- launchers: outputs and workspace from torch's allocator, the C API on torch's current stream -----------------


def _nothing_routed(ids, gate_up) -> bool:
    # No (token, choice) pair or no expert: the result is all zeros, and empty tensors may have no data pointer
    return ids.numel() == 0 or gate_up.numel() == 0


def _aligned_rows(x):
    """x as the CUDA path reads it: the grouped GEMMs load rows with TMA, which needs 16-byte aligned rows (a row
    stride of a multiple of 8 elements, an aligned start); other views are copied. The CPU reads any rows."""
    if x.is_cuda and (x.stride(0) % 8 or x.data_ptr() % 16):
        return x.clone(memory_format=torch.contiguous_format)
    return x


def _fwd_impl(x, ids, weights, gate_up, down, activation: int):
    if _nothing_routed(ids, gate_up):
        return x.new_zeros(x.shape)
    x = _aligned_rows(x)
    out = x.new_empty(x.shape)
    ws, ws_bytes = scratch(_ws_size, x.device, x, ids, gate_up, down, 0)
    arg = _lib.tensor_arg
    _lib.check(
        _fwd(
            arg(x),
            arg(ids),
            arg(weights),
            arg(gate_up),
            arg(down),
            arg(out),
            MoeParams(activation),
            None if ws is None else ws.data_ptr(),
            ws_bytes,
            _lib.stream_of(x),
        )
    )
    return out


def _grads(x, weights, gate_up, down, need_dx, need_dweights, need_dgate_up, need_ddown):
    """(dx, dweights, dgate_up, ddown): the wanted ones full-sized, the others empty (so the op's schema stays
    fixed); the fake implementation builds the same."""
    t, h = x.shape
    return (
        x.new_empty((t, h) if need_dx else (0, h)),
        weights.new_empty(weights.shape if need_dweights else (0,)),
        gate_up.new_empty(gate_up.shape if need_dgate_up else (0,)),
        down.new_empty(down.shape if need_ddown else (0,)),
    )


def _bwd_impl(dout, x, ids, weights, gate_up, down, activation: int, need_dx, need_dweights, need_dgate_up, need_ddown):
    need = (need_dx, need_dweights, need_dgate_up, need_ddown)
    grads = _grads(x, weights, gate_up, down, *need)
    if _nothing_routed(ids, gate_up):  # nothing contributed: every gradient is zero
        return tuple(g.zero_() for g in grads)
    x, dout = _aligned_rows(x), _aligned_rows(dout)
    ws, ws_bytes = scratch(_ws_size, x.device, x, ids, gate_up, down, 1)
    arg = _lib.tensor_arg
    _lib.check(
        _bwd(
            arg(x),
            arg(ids),
            arg(weights),
            arg(gate_up),
            arg(down),
            arg(dout),
            *(arg(g) if n else None for g, n in zip(grads, need)),  # NULL: a gradient nobody wants
            MoeParams(activation),
            None if ws is None else ws.data_ptr(),
            ws_bytes,
            _lib.stream_of(x),
        )
    )
    return grads


# ---- torch.library registration ----------------------------------------------------------------------------------

_LIB = torch.library.Library("tigon", "FRAGMENT")
_LIB.define(
    "moe_experts_fwd(Tensor x, Tensor ids, Tensor weights, Tensor gate_up_weight, Tensor down_weight, "
    "int activation) -> Tensor"
)
_LIB.define(
    "moe_experts_bwd(Tensor dout, Tensor x, Tensor ids, Tensor weights, Tensor gate_up_weight, Tensor down_weight, "
    "int activation, bool need_dx, bool need_dweights, bool need_dgate_up, bool need_ddown) "
    "-> (Tensor, Tensor, Tensor, Tensor)"
)
for _key in ("CPU", "CUDA"):
    _LIB.impl("moe_experts_fwd", _fwd_impl, _key)
    _LIB.impl("moe_experts_bwd", _bwd_impl, _key)


@torch.library.register_fake("tigon::moe_experts_fwd")
def _fwd_fake(x, ids, weights, gate_up_weight, down_weight, activation):
    return x.new_empty(x.shape)


@torch.library.register_fake("tigon::moe_experts_bwd")
def _bwd_fake(
    dout, x, ids, weights, gate_up_weight, down_weight, activation, need_dx, need_dweights, need_dgate_up, need_ddown
):
    return _grads(x, weights, gate_up_weight, down_weight, need_dx, need_dweights, need_dgate_up, need_ddown)


# ---- autograd -------------------------------------------------------------------------------------------------------


def _run(name: str, impl, *args):
    return getattr(torch.ops.tigon, name)(*args) if compiling() else impl(*args)


class _MoeExperts(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, ids, weights, gate_up, down, activation):
        out = _run("moe_experts_fwd", _fwd_impl, x, ids, weights, gate_up, down, activation)
        ctx.save_for_backward(x, ids, weights, gate_up, down)  # the op recomputes gate_up's and the gate's outputs
        ctx.activation = activation
        return out

    @staticmethod
    def backward(ctx, dout):
        need_dx, _, need_dweights, need_dgate_up, need_ddown, _ = ctx.needs_input_grad
        need = (need_dx, need_dweights, need_dgate_up, need_ddown)
        if not any(need):
            return (None,) * 6
        x, ids, weights, gate_up, down = ctx.saved_tensors
        # the kernels read real rows in x's dtype: a sum()'s gradient is a stride-0 expansion
        dout = dout.to(x.dtype).contiguous()
        dx, dweights, dgate_up, ddown = _run(
            "moe_experts_bwd", _bwd_impl, dout, x, ids, weights, gate_up, down, ctx.activation, *need
        )
        return (
            dx if need_dx else None,
            None,
            dweights if need_dweights else None,
            dgate_up if need_dgate_up else None,
            ddown if need_ddown else None,
            None,
        )


# ---- public functions -------------------------------------------------------------------------------------------------


def _check_args(x, ids, weights, gate_up_weight, down_weight, activation) -> int:
    """Python types, dtypes and the shapes the fake implementations build outputs from (so a bad one fails when
    torch.compile traces); CUDA's size rules are the C API's to refuse, naming the argument. Returns the
    activation's code."""
    op = "moe_experts"
    tensors = (("ids", ids), ("weights", weights), ("gate_up_weight", gate_up_weight), ("down_weight", down_weight))
    for name, t in (("x", x), *tensors):
        check_tensor(op, name, t)
    if not isinstance(activation, str) or activation not in ACTIVATIONS:
        raise ValueError(f"{op}: argument 'activation' must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
    if x.dim() != 2 or x.shape[1] == 0:
        raise ValueError(f"{op}: argument 'x' must be [T, H] with H > 0, got shape {tuple(x.shape)}")
    if x.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{op}: argument 'x' must be float32, float16 or bfloat16, got {x.dtype}")
    if ids.dtype not in _INDEX_DTYPES:
        raise TypeError(f"{op}: argument 'ids' must be int32 or int64, got {ids.dtype}")
    if ids.dim() != 2 or ids.shape[0] != x.shape[0]:
        raise ValueError(
            f"{op}: argument 'ids' must be [T, k] with T = {x.shape[0]} (x's rows), got shape {tuple(ids.shape)}"
        )
    if weights.shape != ids.shape:
        raise ValueError(
            f"{op}: argument 'weights' must have ids' shape {tuple(ids.shape)}, got {tuple(weights.shape)}"
        )
    if not weights.is_floating_point():
        raise TypeError(f"{op}: argument 'weights' must be a floating-point tensor, got {weights.dtype}")
    h = x.shape[1]
    gu = gate_up_weight.shape
    if gate_up_weight.dim() != 3 or gu[2] != h or gu[1] == 0 or gu[1] % 2:
        raise ValueError(
            f"{op}: argument 'gate_up_weight' must be [E, 2I, H] with I > 0 and H = {h} (x's last dimension), "
            f"got shape {tuple(gu)}"
        )
    want = (gu[0], h, gu[1] // 2)
    if tuple(down_weight.shape) != want:
        raise ValueError(
            f"{op}: argument 'down_weight' must be [E, H, I] = {want} (gate_up_weight's E, x's H, half its 2I), "
            f"got shape {tuple(down_weight.shape)}"
        )
    for name, t in (("gate_up_weight", gate_up_weight), ("down_weight", down_weight)):
        if t.dtype != x.dtype:
            raise TypeError(f"{op}: argument '{name}' must have x's dtype {x.dtype}, got {t.dtype}")
    for name, t in tensors:
        if t.device != x.device:
            raise ValueError(f"{op}: argument '{name}' is on {t.device} but x is on {x.device}")
    return ACTIVATIONS[activation]


def moe_experts(
    x: torch.Tensor,
    ids: torch.Tensor,
    weights: torch.Tensor,
    gate_up_weight: torch.Tensor,
    down_weight: torch.Tensor,
    activation: str = "silu",
) -> torch.Tensor:
    """The gated experts of a mixture-of-experts layer, as transformers' <Family>Experts(x, ids, weights) compute it.

    x [T, H]; ids [T, k] (int32 or int64) the experts each token chose, weights [T, k] their routing weights;
    gate_up_weight [E, 2I, H] (gate rows first, then up) and down_weight [E, H, I], in x's dtype (fp32, fp16 or
    bf16; CUDA: fp16 or bf16, H and I multiples of 8). activation: "silu" (SwiGLU experts), "gelu_tanh" or "gelu"
    (the erf form). Returns [T, H] in x's dtype: the sum over j of weights[t, j] times expert ids[t, j]'s output.
    An id outside [0, E) contributes nothing and gets no gradient (an expert held by another rank).

    weights may be fp32 or x's dtype (another float dtype is taken as fp32). Under torch.autocast, x and the expert
    weights are first cast to the autocast dtype as F.linear casts them (fp32 parameters keep fp32 gradients).
    Gradients for x, weights and both expert weights (an expert no token chose gets zeros). x's rows may have any
    stride; the other tensors are made contiguous.
    """
    x, gate_up_weight, down_weight = autocast_linear(x, gate_up_weight, down_weight)
    act = _check_args(x, ids, weights, gate_up_weight, down_weight, activation)
    if weights.dtype not in (torch.float32, x.dtype):  # e.g. bf16 routing weights beside fp16 experts under autocast
        weights = weights.float()
    if not rows_ok(x):
        x = x.contiguous()
    ids, weights = ids.contiguous(), weights.contiguous()
    gate_up_weight, down_weight = gate_up_weight.contiguous(), down_weight.contiguous()
    return _MoeExperts.apply(x, ids, weights, gate_up_weight, down_weight, act)


# ---- which transformers experts modules take this path ---------------------------------------------------------------

# type(module.act_fn).__name__ -> activation: transformers' ACT2FN classes (and torch's) whose math is one of ours
_ACT_FN = {
    "SiLU": "silu",  # nn.SiLU ("swish")
    "SiLUActivation": "silu",
    "GELUActivation": "gelu",  # F.gelu, or its erf formula in Python
    "GELUTanh": "gelu_tanh",  # also PytorchGELUTanh, an alias
    "NewGELUActivation": "gelu_tanh",
    "FastGELUActivation": "gelu_tanh",  # the tanh formula with sqrt(2/pi) to 10 digits
}


def _act_name(act_fn) -> str | None:
    name = type(act_fn).__name__
    if name == "GELU" and isinstance(act_fn, torch.nn.GELU):
        return {"none": "gelu", "tanh": "gelu_tanh"}.get(act_fn.approximate)
    return _ACT_FN.get(name)


def _default_gate(module) -> bool:
    """Whether the module's gate is transformers' default act(gate) * up over [gate; up] halves (Tigon's
    experts_gate wrapping it counts too): a family that overrides _apply_gate (GPT-OSS's clamped, interleaved gate)
    computes something else. Read by name, so that transformers need not be imported."""
    fn = getattr(module, "_apply_gate", None)
    fn = getattr(fn, "__func__", fn)
    fn = getattr(fn, "_tigon_original", fn)
    return getattr(fn, "__name__", None) == "_default_apply_gate" and getattr(fn, "__module__", "").startswith(
        "transformers."
    )


def _plain_tensor(t) -> bool:
    # a DTensor (tensor or expert parallelism) or a quantized subclass holds something else than the full weight
    return isinstance(t, torch.Tensor) and type(t) in (torch.Tensor, torch.nn.Parameter)


def experts_activation(module: torch.nn.Module) -> str | None:
    """The activation name moe_experts() takes for a transformers experts module that it computes exactly, else None.

    Only the plain layout qualifies: 3-D gate_up_proj [E, 2I, H] (gate half first) and down_proj [E, H, I] of one
    float dtype, no biases, not transposed, concatenated gate/up, transformers' default gate, no post-expert norm, an
    act_fn that is SiLU or a GELU (tanh or erf), and no expert parallelism (sharded or DTensor weights, or a
    num_experts other than the weights' E). On CUDA also H and I multiples of 8 and fp16/bf16 weights (or any float
    weights under fp16/bf16 autocast)."""
    gate_up, down = getattr(module, "gate_up_proj", None), getattr(module, "down_proj", None)
    if not (_plain_tensor(gate_up) and _plain_tensor(down)) or gate_up.dim() != 3 or down.dim() != 3:
        return None
    e, two_i, h = gate_up.shape
    if tuple(down.shape) != (e, h, two_i // 2) or two_i % 2 or two_i == 0 or h == 0:
        return None
    if gate_up.dtype not in FLOAT_DTYPES or down.dtype != gate_up.dtype or down.device != gate_up.device:
        return None
    if getattr(module, "gate_up_proj_bias", None) is not None or getattr(module, "down_proj_bias", None) is not None:
        return None
    # use_experts_implementation's flags; a module without them must still have the default gate (below)
    flags = ("has_bias", "is_transposed", "has_post_expert_norm", "_is_expert_parallel")
    if any(getattr(module, f, False) for f in flags) or not getattr(module, "is_concatenated", True):
        return None
    if not getattr(module, "has_gate", True) or not _default_gate(module):
        return None
    if getattr(module, "num_experts", e) != e:  # expert parallelism: a local count beside global ids
        return None
    act = _act_name(getattr(module, "act_fn", None))
    if act is None:
        return None
    device = gate_up.device.type
    if device == "cuda":
        i = two_i // 2
        half = (torch.float16, torch.bfloat16)
        dtype = torch.get_autocast_dtype("cuda") if torch.is_autocast_enabled("cuda") else gate_up.dtype
        if h % 8 or i % 8 or dtype not in half:
            return None
    elif device != "cpu":
        return None
    return act
