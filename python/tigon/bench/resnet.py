"""CNN inference speed: ResNet-50 (random weights; torchvision's model when torchvision is installed, else the same
architecture defined here) at batch 64, 224 x 224, channels-last, in the run's dtype, on

- eager: the model as it comes (cuDNN convolutions, then batch norm, add and ReLU as separate kernels);
- tigon: tigon.optimize_model (batch norms folded, bias + shortcut + ReLU in the convolutions' epilogues);
- compile: torch.compile(model) with the default mode.

Every row runs one forward under torch.no_grad(); ms is the median latency of one call, images_per_s the batch over
it, setup_s what the row pays once, max_diff the largest difference of the logits from eager's relative to eager's
largest magnitude. On the CPU a small ResNet runs in seconds (compile only with --cpu-compile). Not in the default op
list: python -m tigon.bench --ops resnet50 [--quick].
"""

from __future__ import annotations

import copy
import time

import torch
from torch import nn

from tigon.bench.decode import guarded_row, print_rows
from tigon.bench.report import Skip, progress
from tigon.bench.timing import synchronize, time_ms

OP = "resnet50"
GPU_SHAPE = ("resnet-50", 224, (64,))  # model, image size, batch sizes
CPU_SHAPE = ("resnet-tiny", 32, (2,))


# ---- torchvision's ResNet layout (class and attribute names, forward), for machines without torchvision -------------


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, cin: int, width: int, stride: int = 1) -> None:
        super().__init__()
        cout = width * self.expansion
        self.conv1, self.bn1 = nn.Conv2d(cin, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width)
        self.conv2, self.bn2 = nn.Conv2d(width, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = _downsample(cin, cout, stride)

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(out)) + identity)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin: int, width: int, stride: int = 1) -> None:
        super().__init__()
        cout = width * self.expansion
        self.conv1, self.bn1 = nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width)
        self.conv2, self.bn2 = nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width)
        self.conv3, self.bn3 = nn.Conv2d(width, cout, 1, bias=False), nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = _downsample(cin, cout, stride)

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        return self.relu(self.bn3(self.conv3(out)) + identity)


def _downsample(cin: int, cout: int, stride: int):
    if stride == 1 and cin == cout:
        return None
    return nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))


class ResNet(nn.Module):
    def __init__(self, block, layers: list[int], width: int = 64, classes: int = 1000) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 7, 2, 3, bias=False)
        self.bn1, self.relu, self.maxpool = nn.BatchNorm2d(width), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1)
        cin, stages = width, []
        for i, n in enumerate(layers):
            w = width * 2**i
            blocks = [block(cin, w, 1 if i == 0 else 2)] + [block(w * block.expansion, w) for _ in range(n - 1)]
            cin = w * block.expansion
            stages.append(nn.Sequential(*blocks))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool, self.fc = nn.AdaptiveAvgPool2d(1), nn.Linear(cin, classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def build(name: str, dtype: torch.dtype, device: torch.device) -> nn.Module:
    """The named model with random weights and batch norm statistics away from (0, 1), eval mode, channels-last."""
    torch.manual_seed(0)
    if name == "resnet-50":
        try:
            import torchvision

            model = torchvision.models.resnet50()
        except ImportError:
            model = ResNet(Bottleneck, [3, 4, 6, 3])
    else:
        model = ResNet(BasicBlock, [1, 1, 1, 1], width=8, classes=10)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.2, 0.2)
            m.running_var.uniform_(0.5, 1.5)
    return model.to(device=device, dtype=dtype, memory_format=torch.channels_last).eval()


# ---- implementations: make(model, ctx, args) -> the model to call -------------------------------------------------


def _tigon(model, ctx, args):
    import tigon

    return tigon.optimize_model(model)


def _compiled(model, ctx, args):
    if ctx.device.type != "cuda" and not args.cpu_compile:
        raise Skip("torch.compile on the CPU is slow to compile: --cpu-compile runs it")
    return torch.compile(model)


IMPLS = {"eager": lambda model, ctx, args: model, "tigon": _tigon, "compile": _compiled}  # eager first: the reference


def run(args, ctx) -> list[dict]:
    gpu = ctx.device.type == "cuda"
    name, size, batches = GPU_SHAPE if gpu else CPU_SHAPE
    dtype = ctx.dtype if gpu else torch.float32
    base = build(name, dtype, ctx.device)
    results = []
    for batch in batches:
        gen = torch.Generator(device=ctx.device).manual_seed(batch)
        x = torch.randn(batch, 3, size, size, generator=gen, device=ctx.device).to(dtype)
        x = x.contiguous(memory_format=torch.channels_last)
        reference = None
        for impl, make in IMPLS.items():
            if args.impls and impl not in args.impls:
                continue
            model = copy.deepcopy(base)

            def measure():
                nonlocal reference
                with torch.no_grad():
                    t0 = time.perf_counter()
                    call = make(model, ctx, args)
                    out = call(x).float()
                    synchronize(ctx.device)
                    setup = time.perf_counter() - t0
                    reps, warmup = (ctx.reps, ctx.warmup) if gpu else (3, 1)
                    ms = time_ms(lambda: call(x), ctx.device, reps=reps, warmup=warmup, flush=False)
                reference = out if impl == "eager" else reference
                diff = ((out - reference).abs().max() / reference.abs().max()).item()
                progress(f"{OP} {name} batch {batch} {impl}: {ms:.2f} ms, {batch / (ms * 1e-3):.0f} images/s")
                return _record(
                    ctx,
                    name,
                    dtype,
                    impl,
                    batch,
                    size,
                    ms=ms,
                    images_per_s=batch / (ms * 1e-3),
                    setup_s=max(0.0, setup - ms * 1e-3),
                    max_diff=diff,
                )

            failed = lambda error: _record(ctx, name, dtype, impl, batch, size, error=error)  # noqa: E731
            rec = guarded_row(OP, impl, model, ctx, measure, failed)
            results += [rec] if rec is not None else []
    return results


def _record(ctx, name, dtype, impl, batch, size, **fields) -> dict:
    return {
        "op": OP,
        "model": name,
        "impl": impl,
        "shape": [batch, size],
        "batch": batch,
        "dtype": str(dtype).replace("torch.", ""),
        "ms": None,
        "images_per_s": None,
        "error": None,
        **fields,
        **ctx.env,
    }


def print_table(results: list[dict]) -> None:
    rows = [r for r in results if r["op"] == OP]
    if not rows:
        return
    cols = [("batch", 5), ("impl", 8), ("ms", 9), ("images/s", 9), ("x eager", 7), ("setup s", 8), ("max diff", 9)]
    print_rows(
        rows,
        f"forward, no_grad, {rows[0]['shape'][1]}x{rows[0]['shape'][1]} channels-last",
        cols,
        lambda r: str(r["batch"]),
        lambda r, base: [
            f"{r['ms']:.2f}",
            f"{r['images_per_s']:.0f}",
            f"{base['ms'] / r['ms']:.2f}" if base else "-",
            f"{r['setup_s']:.1f}",
            "-" if r.get("max_diff") is None else f"{r['max_diff']:.1e}",
        ],
        base="eager",
    )
