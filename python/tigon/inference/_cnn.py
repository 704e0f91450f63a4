"""CNN inference (optimize_model on a model without a Hugging Face config): every Conv2d with the BatchNorm2d and ReLU
that follow it becomes one tigon.nn.Conv2d (the batch norm folded into its weight and bias, the ReLU into its
epilogue), and a ResNet block (torchvision's BasicBlock / Bottleneck layout) also takes its shortcut add into its last
convolution's epilogue. On a GPU the model's forward of one tensor under torch.no_grad() (or inference mode) then
replays a CUDA graph per input shape: a ResNet-50 forward is some 170 kernel launches, which eager Python issues
slower than a GPU runs them. The replaced modules and forward are kept, so tigon.inference.revert puts them back."""

from __future__ import annotations

import functools
import logging

import torch
from torch import nn

from tigon.inference._graphs import CallGraphs
from tigon.nn.conv2d import Conv2d

log = logging.getLogger("tigon.inference")

# torchvision's residual blocks: the convolution / batch norm pairs in order, and the forward they implement
_BLOCKS = {
    "BasicBlock": ("conv1", "bn1", "conv2", "bn2"),
    "Bottleneck": ("conv1", "bn1", "conv2", "bn2", "conv3", "bn3"),
}


def _is_bn(m) -> bool:
    return type(m) is nn.BatchNorm2d and m.track_running_stats and m.running_mean is not None


class ResidualBlock(nn.Module):
    """A ResNet block on fused convolutions: relu(conv) for all but the last, whose epilogue adds the shortcut (the
    block's input, or its downsample's fused convolution) and applies the ReLU."""

    def __init__(self, convs: list[Conv2d], downsample: nn.Module | None) -> None:
        super().__init__()
        self.convs = nn.ModuleList(convs)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = self.downsample(x) if self.downsample is not None else x
        out = x
        for conv in self.convs[:-1]:
            out = conv(out)
        return self.convs[-1](out, shortcut)


def _fuse_block(block) -> ResidualBlock | None:
    names = _BLOCKS.get(type(block).__name__)
    if (
        names is None
        or not all(hasattr(block, n) for n in names)
        or not isinstance(getattr(block, "relu", None), nn.ReLU)
    ):
        return None
    pairs = [(getattr(block, names[i]), getattr(block, names[i + 1])) for i in range(0, len(names), 2)]
    if not all(type(c) is nn.Conv2d and _is_bn(b) for c, b in pairs):
        return None
    down = getattr(block, "downsample", None)
    if down is not None:
        if not (isinstance(down, nn.Sequential) and len(down) == 2 and type(down[0]) is nn.Conv2d and _is_bn(down[1])):
            return None
        down = Conv2d.fold(down[0], down[1])
    convs = [Conv2d.fold(c, b, "relu") for c, b in pairs]
    return ResidualBlock(convs, down).train(block.training)


def _fuse_sequential(seq: nn.Sequential) -> int:
    """Conv2d [BatchNorm2d] [ReLU] runs inside seq become one Conv2d each, the slots after it nn.Identity (indices
    and the other children stay where they were). Returns how many convolutions were fused."""
    keys = list(seq._modules)
    fused = i = 0
    while i < len(keys):
        conv = seq._modules[keys[i]]
        if type(conv) is not nn.Conv2d:
            i += 1
            continue
        j = i + 1
        bn = seq._modules[keys[j]] if j < len(keys) and _is_bn(seq._modules[keys[j]]) else None
        j += bn is not None
        relu = j < len(keys) and type(seq._modules[keys[j]]) is nn.ReLU
        seq._modules[keys[i]] = Conv2d.fold(conv, bn, "relu" if relu else None)
        for k in range(i + 1, j + relu):
            seq._modules[keys[k]] = nn.Identity()
        fused += 1
        i = j + relu
    return fused


def _fuse(module: nn.Module, saved: list, counts: list) -> None:
    """Fuses module's children (a residual block replaced whole, any other child recursed into), then module itself
    when it is a Sequential; records the children dict of every module it changes in saved."""
    children = dict(module._modules)
    changed = False
    for name, child in children.items():
        block = _fuse_block(child) if child is not None else None
        if block is not None:
            module._modules[name] = block
            counts[0] += 1
            changed = True
        elif child is not None:
            _fuse(child, saved, counts)
    if isinstance(module, nn.Sequential):
        n = _fuse_sequential(module)
        counts[1] += n
        changed |= n > 0
    if changed:
        saved.append((module, {"_modules": children}))


def _graphable(model: nn.Module, args: tuple, kwargs: dict) -> bool:
    """Whether this call can replay a graph: one CUDA tensor, no gradients (a graph's outputs have no autograd
    history), eval mode, and not inside someone else's capture or torch.compile's tracing."""
    if kwargs or len(args) != 1 or not isinstance(args[0], torch.Tensor) or args[0].device.type != "cuda":
        return False
    if torch.is_grad_enabled() or model.training or torch.compiler.is_compiling():
        return False
    return not torch.cuda.is_current_stream_capturing()


def _graph_forward(model: nn.Module, graphs: CallGraphs, original):
    @functools.wraps(original)
    def forward(*args, **kwargs):
        return graphs(args[0]) if _graphable(model, args, kwargs) else original(*args, **kwargs)

    return forward


def optimize_cnn(model: nn.Module, dtype: torch.dtype | None, saved_marker) -> CallGraphs:
    """Fuses model's convolutions in place (model is put in eval mode first: the batch norms' running statistics are
    what gets folded) and reroutes its forward through CUDA graphs; returns the graphs, the replaced children and
    forward kept for revert (saved_marker: a forward the instance did not have of its own)."""
    model.eval()
    if dtype is not None:
        model.to(dtype)
    saved, counts = [], [0, 0]
    _fuse(model, saved, counts)
    graphs = CallGraphs(model.forward, [*model.parameters(), *model.buffers()])
    saved.append((model, {"forward": model.__dict__.get("forward", saved_marker)}))
    model.forward = _graph_forward(model, graphs, model.forward)
    model._tigon_inference_saved = saved
    log.info("tigon.inference: %s: %d residual blocks and %d other convolutions fused", type(model).__name__, *counts)
    return graphs
