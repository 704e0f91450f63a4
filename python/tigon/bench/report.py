"""Results: one dict per (op, impl, shape), written as JSON lines, a fixed-width table and a PNG chart per op.

Every record carries the run's environment (GPU, versions, git sha) so that JSON lines from different runs can be
concatenated and compared later without guessing where each number came from.
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch

__all__ = [
    "Skip",
    "Context",
    "progress",
    "environment",
    "make_result",
    "print_table",
    "write_jsonl",
    "draw_charts",
    "grouped_notes",
]


class Skip(Exception):
    """Raised by an implementation's factory when it cannot run here (not installed, wrong device)."""


def progress(msg: str) -> None:
    # stderr, flushed: progress stays visible while stdout (the table) can be redirected to a file.
    print(msg, file=sys.stderr, flush=True)


@dataclass
class Context:
    """What every op benchmark shares within one run."""

    device: torch.device
    dtype: torch.dtype
    reps: int
    warmup: int
    copy_gbps: float
    env: dict
    stream_reps: int = 10  # replays of the steady-state graph (each holds many calls)
    notes: list = field(default_factory=list)

    def note(self, msg: str) -> None:  # shown live (each distinct text once) and repeated under the table
        rest = msg.partition(": ")[2] or msg
        if all((n.partition(": ")[2] or n) != rest for n in self.notes):
            progress(msg)
        self.notes.append(msg)


def _version(module: str) -> str | None:
    try:
        return __import__(module).__version__
    except Exception:
        return None


def _git_sha() -> str:
    # An explicit TIGON_GIT_SHA wins (a copied checkout's .git can name an older commit than the code it runs, as on
    # the GPU machine), then git in the package's own checkout (the cwd may be anywhere), else "unknown".
    if os.environ.get("TIGON_GIT_SHA"):
        return os.environ["TIGON_GIT_SHA"]
    try:
        here = Path(__file__).resolve().parent
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5
        )
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip()
    except Exception:
        pass
    return "unknown"


def environment(device: torch.device) -> dict:
    import tigon

    return {
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "triton": _version("triton"),
        "liger": _version("liger_kernel") or _liger_dist_version(),
        "transformers": _dist_version("transformers"),
        "tigon": tigon.version(),
        "git_sha": _git_sha(),
        "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def _dist_version(name: str) -> str | None:
    try:  # the installed distribution's version, without importing it (transformers takes seconds to import)
        import importlib.metadata

        return importlib.metadata.version(name)
    except Exception:
        return None


def _liger_dist_version() -> str | None:
    try:  # liger_kernel has no __version__ in some releases; the installed distribution knows it
        import importlib.metadata
        import liger_kernel  # noqa: F401  (only report a version when it actually imports)

        return importlib.metadata.version("liger-kernel")
    except Exception:
        return None


def make_result(
    ctx: Context,
    op: str,
    impl: str,
    shape,
    nbytes: dict,
    fwd_ms=None,
    bwd_ms=None,
    full_ms=None,
    peak_mib=None,
    error=None,
    **extra,
) -> dict:
    """One record. nbytes = the op's byte model {"fwd", "bwd", "full"}: bytes that must move through memory."""

    def gbps(phase, ms):
        return None if ms is None else nbytes[phase] / (ms * 1e-3) / 1e9

    def pct(v):
        return None if v is None else 100.0 * v / ctx.copy_gbps

    fwd_gbps, bwd_gbps, full_gbps = gbps("fwd", fwd_ms), gbps("bwd", bwd_ms), gbps("full", full_ms)
    for kind in ("graph", "dev"):  # device time from CUDA-graph replay (one call; steady state), when measured
        for key in ("fwd", "full"):
            ms = extra.get(f"{key}_{kind}_ms")
            extra[f"{key}_{kind}_gbps"] = gbps(key, ms)
            extra[f"pct_copy_{key}_{kind}"] = pct(gbps(key, ms))
    return {
        "op": op,
        "impl": impl,
        "shape": [int(s) for s in shape],
        "dtype": str(ctx.dtype).replace("torch.", ""),
        "fwd_ms": fwd_ms,
        "bwd_ms": bwd_ms,
        "full_ms": full_ms,
        "peak_mib": peak_mib,
        "fwd_gbps": fwd_gbps,
        "bwd_gbps": bwd_gbps,
        "full_gbps": full_gbps,
        "copy_gbps": ctx.copy_gbps,
        "pct_copy_fwd": pct(fwd_gbps),
        "pct_copy_full": pct(full_gbps),
        "reps": ctx.reps,
        "warmup": ctx.warmup,
        **extra,
        "error": error,
        **ctx.env,
    }


# ---- table ------------------------------------------------------------------------------------------------------------

# (header, CUDA only): graph/dev timings and peak memory need CUDA graphs and the CUDA allocator.
_COLS = [
    ("op", False),
    ("shape", False),
    ("impl", False),
    ("fwd ms", False),
    ("bwd ms", False),
    ("full ms", False),
    ("fwd GB/s", False),
    ("full GB/s", False),
    ("%copy f/F", False),
    ("graph f/F ms", True),
    ("dev f/F ms", True),
    ("d.%copy", True),
    ("peak MiB", True),
    ("x eager", False),
    ("max err y/dx/dw", False),
]
_GPU_NOTE = (
    "graph = one call replayed from a CUDA graph after an L2 flush (launch overhead out, event overhead in); "
    "dev = steady-state device time per call: a CUDA graph of many back-to-back calls on input copies rotated "
    "past L2, a fresh copy per call for ops that write over their inputs (what a GPU-bound training step "
    "sees; d.%copy is its share of the copy bandwidth); "
)


def _f(v, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def _row(r: dict, eager_full: float | None) -> dict:
    head = {"op": r["op"], "shape": "x".join(map(str, r["shape"])), "impl": r["impl"]}
    if r.get("error"):
        return {**head, "error": f"FAILED: {r['error']}"[:120]}
    mine = r["full_ms"] if r["full_ms"] is not None else r["fwd_ms"]  # inference ops: the forward
    speedup = eager_full / mine if eager_full and mine else None
    errs = "/".join(_f(r.get(k), ".1e") for k in ("err_y", "err_dx", "err_dw"))
    return {
        **head,
        "fwd ms": _f(r["fwd_ms"], ".4f"),
        "bwd ms": _f(r["bwd_ms"], ".4f"),
        "full ms": _f(r["full_ms"], ".4f"),
        "fwd GB/s": _f(r["fwd_gbps"], ".1f"),
        "full GB/s": _f(r["full_gbps"], ".1f"),
        "%copy f/F": f"{_f(r['pct_copy_fwd'], '.0f')}/{_f(r['pct_copy_full'], '.0f')}",
        "graph f/F ms": f"{_f(r.get('fwd_graph_ms'), '.4f')}/{_f(r.get('full_graph_ms'), '.4f')}",
        "dev f/F ms": f"{_f(r.get('fwd_dev_ms'), '.4f')}/{_f(r.get('full_dev_ms'), '.4f')}",
        "d.%copy": f"{_f(r.get('pct_copy_fwd_dev'), '.0f')}/{_f(r.get('pct_copy_full_dev'), '.0f')}",
        "peak MiB": _f(r["peak_mib"], ".1f"),
        "x eager": _f(speedup, ".2f"),
        "max err y/dx/dw": errs,
    }


def grouped_notes(notes: list[str]) -> list[str]:
    """Each note once: notes that differ only in their "<op>: " prefix (the same skip for every op) become one line
    naming the ops."""
    groups: dict[str, list[str]] = {}
    for n in notes:
        label, sep, rest = n.partition(": ")
        if not sep:
            label, rest = "", n
        labels = groups.setdefault(rest, [])
        if label not in labels:
            labels.append(label)
    return [f"{', '.join(l for l in labels if l)}: {rest}" if any(labels) else rest for rest, labels in groups.items()]


def print_table(results: list[dict], ctx: Context) -> None:
    env, gpu = ctx.env, ctx.device.type == "cuda"
    from tigon import CPU_PATH_NOTE

    print(
        f"\n{env['gpu']} | {str(ctx.dtype).replace('torch.', '')} | copy bandwidth {ctx.copy_gbps:.1f} GB/s "
        f"(read+write) | torch {env['torch']} | tigon {env['tigon']} | git {env['git_sha']} | "
        f"median of {ctx.reps} reps"
    )
    if not gpu:
        print(f"CPU: {CPU_PATH_NOTE}; these numbers say that it runs, not how fast Tigon is")
    print(
        "full = forward + backward; "
        + (
            "eager calls timed with CUDA events (Python and launch overhead included); " + _GPU_NOTE
            if gpu
            else "timed with perf_counter; "
        )
        + "GB/s from each op's byte model (the bytes that must move, in python/tigon/bench/<op>.py); "
        "x eager = torch_eager full ms / full ms (forward for inference ops); max err of the output and gradients vs torch_eager in float32"
    )
    names = [n for n, cuda_only in _COLS if gpu or not cuda_only]
    rows, prev = [], None
    for r in results:
        key = (r["op"], tuple(r["shape"]))
        if prev is not None and key != prev:
            rows.append(None)  # blank line between shapes keeps the impls of one shape together
        prev = key
        eager = next(
            (
                e["full_ms"] if e["full_ms"] is not None else e["fwd_ms"]
                for e in results
                if (e["op"], tuple(e["shape"])) == key and e["impl"] == "torch_eager" and not e.get("error")
            ),
            None,
        )
        rows.append(_row(r, eager))
    widths = [max([len(n)] + [len(r[n]) for r in rows if r and n in r]) for n in names]

    def line(cells):  # text columns (op, shape, impl) to the left, numbers to the right
        return "  ".join(c.rjust(w) if i > 2 else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    print(line(names))
    print("-" * (sum(widths) + 2 * (len(widths) - 1)))
    for r in rows:
        if r is None:
            print()
        elif "error" in r:
            print(line([r["op"], r["shape"], r["impl"]]) + "  " + r["error"])
        else:
            print(line([r[n] for n in names]))
    for n in grouped_notes(ctx.notes):
        print(f"note: {n}")
    sys.stdout.flush()


# ---- files ------------------------------------------------------------------------------------------------------------


def write_jsonl(results: list[dict], path: Path) -> None:
    with open(path, "w") as f:  # one file per run; collect runs by concatenating files
        for r in results:
            f.write(json.dumps(r) + "\n")


def draw_charts(results: list[dict], out: Path) -> list[Path]:
    """One PNG per op: grouped bars (one group per shape, one bar per impl) of fwd ms, full ms and full % of copy."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # no display needed
        import matplotlib.pyplot as plt
    except ImportError:
        progress("matplotlib not importable: no chart (pip install matplotlib)")
        return []
    paths = []
    for op in dict.fromkeys(r["op"] for r in results):
        rows = [r for r in results if r["op"] == op and not r.get("error")]
        if not rows:
            continue
        shapes = list(dict.fromkeys("x".join(map(str, r["shape"])) for r in rows))
        impls = list(dict.fromkeys(r["impl"] for r in rows))
        panels = [
            ("fwd_ms", "forward (ms, lower is better)"),
            ("full_ms", "forward + backward (ms, lower is better)"),
            ("full_graph_ms", "forward + backward, CUDA graph replay (ms)"),
            ("pct_copy_full", "forward + backward: % of copy bandwidth"),
        ]
        # CUDA-only panels (graph replay) only where some row has them: a CPU run would draw an empty panel.
        panels = [p for p in panels if any(r.get(p[0]) is not None for r in rows)]
        fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4.5), squeeze=False)
        axes = axes[0]
        width = 0.8 / len(impls)
        for ax, (key, title) in zip(axes, panels):
            for i, impl in enumerate(impls):
                vals = [
                    next((r.get(key) for r in rows if r["impl"] == impl and "x".join(map(str, r["shape"])) == s), 0)
                    or 0
                    for s in shapes
                ]
                pos = [j + (i - (len(impls) - 1) / 2) * width for j in range(len(shapes))]
                bars = ax.bar(pos, vals, width, label=impl)
                ax.bar_label(bars, fmt="%.3g", fontsize=7)
            ax.set_xticks(range(len(shapes)), shapes)
            ax.set_title(title, fontsize=10)
        axes[0].legend(fontsize=8)
        r0 = rows[0]
        fig.suptitle(f"{op} | {r0['gpu']} | {r0['dtype']} | tigon {r0['tigon']} | git {r0['git_sha']}", fontsize=11)
        fig.tight_layout()
        path = out / f"{op}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


# ---- the results file -------------------------------------------------------------------------------------------------


def main(argv=None) -> int:
    """python -m tigon.bench.report --markdown [--brief] [--training | --inference | --train-step] [--file F] [--gpu G]"""
    import argparse

    from tigon.bench import records

    p = argparse.ArgumentParser(prog="python -m tigon.bench.report", description=records.__doc__)
    p.add_argument(
        "--markdown",
        action="store_true",
        help="print the op table as markdown (the README's): the newest full run, each op as last measured beside its baselines",
    )
    p.add_argument("--train-step", action="store_true", help="the whole-model train step table instead of the ops'")
    p.add_argument("--brief", action="store_true", help="one shape per op, the first the benchmark lists")
    part = p.add_mutually_exclusive_group()
    part.add_argument("--training", action="store_true", help="only the ops with a backward (the README's table)")
    part.add_argument("--inference", action="store_true", help="only the inference ops (forward only)")
    p.add_argument("--file", type=Path, default=Path("bench/results/h200.jsonl"))
    p.add_argument("--gpu", default="H200", help="only the rows of GPUs whose name holds this (default: H200)")
    args = p.parse_args(argv)
    if not args.markdown:
        p.error("nothing to do: pass --markdown")
    if not args.file.is_file():
        p.error(f"--file {args.file}: no such file (run from the repository root, or name the file)")
    rows = [r for r in records.read(args.file) if args.gpu in (r.get("gpu") or "")]
    part = "training" if args.training else "inference" if args.inference else None
    print(records.train_step_markdown(rows) if args.train_step else records.ops_markdown(rows, args.brief, part))
    return 0


if __name__ == "__main__":
    sys.exit(main())
