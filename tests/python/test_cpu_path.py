"""The CPU path says what it is: one warning per process, and the CPU benchmark table shows it, without the CUDA-only
columns, aligned, each skip note once."""

import torch

import tigon
from run_python import run_python
from tigon.bench.report import Context, make_result, print_table

_TWICE = """
import warnings, torch, tigon
warnings.simplefilter("always")  # the flag, not the warnings registry, must keep it to one
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    x, w = torch.randn(4, 8), torch.ones(8)
    for _ in range(3):
        tigon.ops.rms_norm(x, w, 1e-6)
        tigon.ops.swiglu(x, x)
print(sum(issubclass(s.category, tigon.TigonCPUWarning) for s in seen))
"""


def test_cpu_warning_once_per_process():
    assert run_python(_TWICE).strip() == "1"
    assert "float64" in tigon.CPU_PATH_NOTE and "not for speed" in tigon.CPU_PATH_NOTE


def _ctx():
    env = {
        "gpu": "cpu",
        "torch": torch.__version__,
        "triton": None,
        "liger": None,
        "tigon": "t",
        "git_sha": "g",
        "timestamp": "now",
    }
    return Context(device=torch.device("cpu"), dtype=torch.bfloat16, reps=3, warmup=1, copy_gbps=5.0, env=env)


def test_cpu_table(capsys):
    ctx = _ctx()
    nbytes = {"fwd": 1e6, "bwd": 1e6, "full": 2e6}
    rows = [
        make_result(ctx, op, impl, shape, nbytes, fwd_ms=1.5, bwd_ms=2.25, full_ms=3.75, err_y=1e-3)
        for op, shape in (("rms_norm", (256, 1024)), ("fused_linear_cross_entropy", (64, 256, 1000)))
        for impl in ("tigon", "torch_eager")
    ]
    for op in ("rms_norm", "fused_linear_cross_entropy"):
        ctx.note(f"{op}: liger skipped: not importable")
    ctx.note("rms_norm: shape 3 skipped: expected rows x hidden")
    print_table(rows, ctx)
    out = capsys.readouterr().out
    assert tigon.CPU_PATH_NOTE in out
    for cuda_only in ("graph f/F ms", "dev f/F ms", "d.%copy", "peak MiB", "CUDA graph", "CUDA events"):
        assert cuda_only not in out
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("op "))
    table = [line for line in lines[header + 2 :] if line and not line.startswith("note:")]
    assert len(table) == 4 and len({len(line) for line in table + [lines[header]]}) == 1, "columns not aligned"
    notes = [line for line in lines if line.startswith("note:")]
    assert notes == [
        "note: rms_norm, fused_linear_cross_entropy: liger skipped: not importable",
        "note: rms_norm: shape 3 skipped: expected rows x hidden",
    ]
