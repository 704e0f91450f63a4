"""CNN inference: tigon.nn.Conv2d (its fold of a batch norm, the kernel or torch's path by what the call needs) and
optimize_model on a small ResNet laid out like torchvision's (BasicBlock / Bottleneck, a Sequential stem): outputs match
the unfused model in eval mode, and revert puts every replaced module back."""

import pytest
import torch
from torch import nn

import tigon
from tigon.bench.resnet import BasicBlock, Bottleneck  # torchvision's layout
from conftest import DEVICES, needs_cuda
from tolerances import assert_close


def small_resnet():
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, 1, 1, bias=False),  # 3 input channels: the kernel refuses, torch's path runs it
        nn.BatchNorm2d(16),
        nn.ReLU(inplace=True),
        nn.Sequential(BasicBlock(16, 16), BasicBlock(16, 32, stride=2)),
        nn.Sequential(Bottleneck(32, 8), Bottleneck(32, 16, stride=2)),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(64, 10),
    )
    for m in model.modules():  # running statistics away from (0, 1), so that folding them matters
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.3, 0.3)
    return model.eval()


@pytest.mark.parametrize("device", DEVICES)
def test_optimize_model_fuses_a_resnet_and_revert_restores_it(device):
    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    model = small_resnet().to(device)
    x = torch.randn(2, 3, 20, 20, device=device)
    with torch.no_grad():
        want = model.double()(x.double())
        model.to(dtype)
        before = [type(m) for m in model.modules()]
        tigon.optimize_model(model)
        got = model(x.to(dtype).contiguous(memory_format=torch.channels_last))
    kinds = [type(m).__name__ for m in model.modules()]
    assert kinds.count("ResidualBlock") == 4 and kinds.count("Conv2d") == 13 and "BatchNorm2d" not in kinds
    assert_close(got, want, dtype=dtype, name="logits", scale=max(1.0, want.abs().max().item()) * 4)
    tigon.inference.revert(model)
    assert [type(m) for m in model.modules()] == before


@needs_cuda
def test_optimized_cnn_replays_a_cuda_graph_per_input_shape():
    model = small_resnet().cuda()
    xs = [torch.randn(b, 3, 20, 20, device="cuda").contiguous(memory_format=torch.channels_last) for b in (2, 2, 3)]
    with torch.no_grad():
        wants = [model.double()(x.double()) for x in xs]
        model.to(torch.bfloat16)
        tigon.optimize_model(model)
        graphs = model.tigon_inference
        gots = [model(x.bfloat16()) for x in xs]  # a capture, a replay with other values, a second capture
        assert len(graphs.graphs) == 2 and graphs.failed is None
        for i, (got, want) in enumerate(zip(gots, wants)):  # outputs are copies: later replays leave them as they were
            assert_close(got, want, dtype=torch.bfloat16, name=f"logits {i}", scale=want.abs().max().item() * 4)
        model.half()  # the weights move: the graphs are captured again over the new ones
        got = model(xs[0].half())
        assert_close(got, wants[0], dtype=torch.float16, name="fp16 logits", scale=wants[0].abs().max().item() * 4)
        assert len(graphs.graphs) == 1
    got = model(xs[0].half())  # gradients on: the eager forward (a graph's outputs have no autograd history)
    assert len(graphs.graphs) == 1
    assert_close(got.detach(), wants[0], dtype=torch.float16, name="eager", scale=wants[0].abs().max().item() * 4)
    tigon.inference.revert(model)
    assert "forward" not in model.__dict__ and "tigon_inference" not in model.__dict__


@pytest.mark.parametrize("device", DEVICES)
def test_fold_matches_conv_batch_norm_relu(device):
    torch.manual_seed(1)
    conv, bn = nn.Conv2d(16, 24, 3, padding=1).to(device), nn.BatchNorm2d(24).to(device)
    bn.running_mean.uniform_(-1, 1)
    bn.running_var.uniform_(0.5, 2)
    bn.eval()
    x = torch.randn(2, 16, 9, 9, device=device)
    fused = tigon.nn.Conv2d.fold(conv, bn, "relu")
    with torch.no_grad():
        want = torch.relu(bn.double()(conv.double()(x.double())))
        assert_close(fused(x), want, name="fp32 fold")
        if device == "cuda":
            got = fused.to(torch.bfloat16)(x.to(torch.bfloat16))
            assert_close(got, want, dtype=torch.bfloat16, name="bf16 kernel")


def test_module_takes_torchs_path_where_the_kernel_does_not():
    torch.manual_seed(2)
    m = tigon.nn.Conv2d(8, 8, 3, padding=1, activation="relu")
    x = torch.randn(1, 8, 6, 6, requires_grad=True)
    y = m(x, residual=torch.ones(1, 8, 6, 6))  # a gradient is wanted: torch's path, and it trains
    y.sum().backward()
    assert x.grad is not None and m.weight.grad is not None
    want = torch.relu(torch.nn.functional.conv2d(x.detach(), m.weight.detach(), m.bias.detach(), padding=1) + 1)
    torch.testing.assert_close(y.detach(), want)
    grouped = tigon.nn.Conv2d(8, 8, 3, padding="same", groups=2)  # groups and string padding: torch's
    with torch.no_grad():
        torch.testing.assert_close(
            grouped(x), nn.functional.conv2d(x, grouped.weight, grouped.bias, padding="same", groups=2)
        )
    with pytest.raises(ValueError, match="argument 'activation'"):
        tigon.nn.Conv2d(8, 8, 3, activation="gelu")


@needs_cuda
def test_module_runs_the_kernel_on_cuda():
    m = tigon.nn.Conv2d(64, 64, 3, padding=1, activation="relu").cuda().to(torch.bfloat16)
    x = torch.randn(2, 64, 14, 14, device="cuda", dtype=torch.bfloat16).contiguous(memory_format=torch.channels_last)
    with torch.no_grad():
        y = m(x)
        want = torch.relu(nn.functional.conv2d(x.double(), m.weight.double(), m.bias.double(), padding=1))
    assert y.is_contiguous(memory_format=torch.channels_last)
    assert_close(y, want, name="y")


@needs_cuda
def test_module_at_the_edge_of_the_kernels_geometry_matches_torch():
    m = (
        tigon.nn.Conv2d(8, 8, 3, padding=120, dilation=60).cuda().to(torch.bfloat16)
    )  # the kernel, or torch where it refuses
    x = torch.randn(1, 8, 6, 6, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        y = m(x)
        want = nn.functional.conv2d(x.double(), m.weight.double(), m.bias.double(), padding=120, dilation=60)
    assert_close(y, want, name="y")
