"""CLI: python -m tigon.bench [--ops rms_norm] [--shapes 16384x4096,...] [--dtype bf16] [--quick] [--out DIR]."""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path

import torch

import tigon
from tigon.bench import BENCHMARKS, DEFAULT_OPS, decode, encoder, records, resnet, sweep, train_step
from tigon.bench.report import Context, draw_charts, environment, grouped_notes, print_table, progress, write_jsonl
from tigon.bench.timing import measure_copy_bandwidth

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def _shapes(text: str) -> list[tuple[int, ...]]:
    try:
        return [tuple(int(d) for d in s.lower().split("x")) for s in text.split(",") if s.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"shapes look like 16384x4096,4096x4096; got {text!r}")


def _names(text: str) -> list[str]:
    return [s.strip() for s in text.split(",") if s.strip()]


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m tigon.bench", description=__doc__)
    p.add_argument(
        "--ops",
        type=_names,
        default=list(DEFAULT_OPS),
        help=f"comma-separated ops (default: {','.join(DEFAULT_OPS)}; also: train_step, whole-model "
        f"training steps on a GPU, slow; train_step_fsdp2, train_step_ddp on 2+ GPUs; post_training, DPO and GRPO "
        f"losses from hidden states; decode, generation speed; encoder, BERT-base inference; resnet50, CNN inference)",
    )
    p.add_argument("--impls", type=_names, default=None, help="only these implementations, e.g. tigon,torch_eager")
    p.add_argument("--shapes", type=_shapes, default=None, help="override each op's shapes, e.g. 16384x4096,4096x4096")
    p.add_argument(
        "--configs",
        type=_names,
        default=None,
        help="train_step: only these model configurations, e.g. llama,qwen3 (default: every one; --quick: llama); "
        "decode: these model shapes, e.g. qwen3-30b-a3b (default: llama-3-8b)",
    )
    p.add_argument("--dtype", choices=DTYPES, default="bf16")
    p.add_argument("--device", choices=["cuda", "cpu"], default=None, help="default: cuda when available")
    p.add_argument("--quick", action="store_true", help="fewer reps (20 timed, 3 warm-up on a GPU)")
    p.add_argument("--reps", type=int, default=None, help="timed iterations per measurement (median is reported)")
    p.add_argument("--warmup", type=int, default=None)
    p.add_argument("--out", type=Path, default=Path("bench/out"), help="results.jsonl and charts (default bench/out)")
    p.add_argument(
        "--record",
        type=Path,
        default=None,
        help="also append every row to this results file, e.g. bench/results/h200.jsonl",
    )
    p.add_argument("--no-chart", action="store_true")
    p.add_argument("--cpu-compile", action="store_true", help="also run torch.compile on the CPU (slow to compile)")
    p.add_argument(
        "--sweep",
        action="store_true",
        help="the memory-bound training ops over real models' shapes, Tigon against torch.compile and Liger, with a "
        "summary of where Tigon is behind (tigon/bench/sweep.py; --ops narrows it)",
    )
    p.add_argument(
        "--in-process",
        action="store_true",
        help="run every op in this process (default on a GPU: a process per op, so memory a baseline's failed graph "
        "capture strands, or a CUDA error it leaves behind, cannot starve the ops after it)",
    )
    p.add_argument("--op-process", action="store_true", help=argparse.SUPPRESS)  # one op's process: rows, no tables
    p.add_argument("--copy-gbps", type=float, default=None, help=argparse.SUPPRESS)  # measured once by the parent
    args = p.parse_args(argv)
    if args.sweep:
        explicit = any(a == "--ops" or a.startswith("--ops=") for a in (argv if argv is not None else sys.argv[1:]))
        args.ops = [o for o in args.ops if o in sweep.SHAPES] if explicit else list(sweep.SHAPES)
        args.impls = args.impls or list(sweep.IMPLS)
        if args.shapes:
            p.error("--sweep takes each op's shapes from tigon/bench/sweep.py; leave --shapes out")
    from tigon.inference import configs as decode_configs

    bad = [c for c in args.configs or [] if c not in train_step.CONFIGS and c not in decode_configs.CONFIGS]
    if bad:
        p.error(
            f"unknown --configs {bad}; train_step has {list(train_step.CONFIGS)}, decode {list(decode_configs.CONFIGS)}"
        )
    unknown = [o for o in args.ops if o not in BENCHMARKS]
    if unknown:
        p.error(f"unknown op(s) {unknown}; registered: {list(BENCHMARKS)}")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    t0 = time.perf_counter()
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("--device cuda: torch sees no CUDA device")
    if args.sweep and device.type == "cpu" and args.device != "cpu":
        sys.exit(
            "--sweep measures the CUDA kernels and torch sees no CUDA device (--device cpu runs it anyway, slowly)"
        )
    if device.type == "cpu":
        progress(
            ("no CUDA device" if args.device is None else "--device cpu")
            + f": CPU reference path on small shapes. {tigon.CPU_PATH_NOTE}"
        )
        warnings.filterwarnings("ignore", category=tigon.TigonCPUWarning)  # said once above and in the table
    # GPU: many reps because single kernels are tens of microseconds; CPU: the reference path only needs to work.
    gpu = device.type == "cuda"
    reps, warmup = ((20, 3) if args.quick else (100, 10)) if gpu else ((5, 1) if args.quick else (10, 2))
    reps, warmup = args.reps or reps, args.warmup if args.warmup is not None else warmup

    env = environment(device)
    if not args.op_process:
        progress(
            f"{env['gpu']} | torch {env['torch']} | triton {env['triton']} | liger {env['liger']} | "
            f"tigon {env['tigon']} | git {env['git_sha']}"
        )
    # One stream of its own for the whole run, and every CUDA graph captured on it (timing.capture): the input copies'
    # autograd history is then recorded on the capture stream, so a captured backward never makes another stream wait
    # on the capture, which CUDA refuses for the legacy default stream and which would cost the run its graph numbers.
    with torch.cuda.stream(torch.cuda.Stream(device)) if gpu else contextlib.nullcontext():
        copy_gbps = args.copy_gbps or measure_copy_bandwidth(device)
        if args.copy_gbps is None:
            progress(f"copy bandwidth: {copy_gbps:.1f} GB/s (read + write)")
        ctx = Context(device=device, dtype=DTYPES[args.dtype], reps=reps, warmup=warmup, copy_gbps=copy_gbps, env=env)
        args.out.mkdir(parents=True, exist_ok=True)
        record = _Recorder(None if args.op_process else args.record)
        if gpu and len(args.ops) > 1 and not (args.in_process or args.op_process):
            torch.cuda.empty_cache()  # the copy test's buffers: the ops' processes get the whole GPU
            results, failed = _run_in_processes(args, ctx, record)
        else:
            results, failed = _run_here(args, ctx, record)
    if args.op_process:  # the parent records, charts and prints
        (args.out / "notes.json").write_text(json.dumps(ctx.notes))
        return 1 if failed else 0

    progress(f"wrote {args.out / 'results.jsonl'} ({len(results)} records)")
    if args.record:
        progress(f"appended {record.rows} rows to {args.record}")
    op_rows = [r for r in results if records.whole_model(r["op"]) is None]  # whole-model rows: own tables, no chart
    if not args.no_chart:
        for path in draw_charts(op_rows, args.out):
            progress(f"wrote {path}")
    progress(f"done in {time.perf_counter() - t0:.1f} s")
    if op_rows:
        print_table(op_rows, ctx)  # last, so the tables end stdout (with the notes)
    if args.sweep:
        sweep.print_summary(op_rows)
    train_step.print_table(results)
    decode.print_table(results)
    encoder.print_table(results)
    resnet.print_table(results)
    if not op_rows:
        for n in grouped_notes(ctx.notes):
            print(f"note: {n}")
    return 1 if failed else 0


def _tigon_failed(results: list[dict]) -> bool:
    # A baseline that fails (Liger's softmax refuses rows past 65536) is a FAILED row in the table, not a failed run.
    return any(r.get("error") and r["impl"].startswith("tigon") for r in results)


class _Recorder:
    """Appends each op's rows to the results file as soon as the op ends, so a run stopped part-way (a time limit)
    keeps what it measured."""

    def __init__(self, path: Path | None):
        self.path, self.rows = path, 0

    def __call__(self, results: list[dict]) -> None:
        if self.path is not None and len(results) > self.rows:
            records.append(results[self.rows :], self.path)
        self.rows = len(results)


def _run_here(args, ctx, record=None) -> tuple[list[dict], bool]:
    """Every op of args.ops in this process: (rows, whether a Tigon row or a whole op failed); record(rows) after
    each op when given."""
    record, results, failed = record or _Recorder(None), [], False
    for op in args.ops:
        if args.sweep:
            args.shapes = sweep.SHAPES[op]
        try:
            results += BENCHMARKS[op](args, ctx)
        except Exception as e:  # one broken op must not lose the others' numbers
            traceback.print_exc()
            ctx.note(f"{op}: benchmark failed: {type(e).__name__}: {e}")
            failed = True
        write_jsonl(results, args.out / "results.jsonl")  # after every op: a run stopped part-way keeps it
        record(results)
    return results, failed or _tigon_failed(results)


def _run_in_processes(args, ctx, record=None) -> tuple[list[dict], bool]:
    """Every op of args.ops in a process of its own (python -m tigon.bench --op-process), one after another, with
    this run's settings and copy bandwidth: what one op's baselines leave behind on the GPU dies with its process.
    record(rows) after each op when given."""
    record, results, failed = record or _Recorder(None), [], False
    for op in args.ops:
        with tempfile.TemporaryDirectory(prefix=f"tigon-bench-{op}-") as tmp:
            cmd = [sys.executable, "-m", "tigon.bench", "--op-process", "--ops", op, "--out", tmp]
            cmd += ["--dtype", args.dtype, "--device", ctx.device.type, "--copy-gbps", repr(ctx.copy_gbps)]
            cmd += ["--reps", str(ctx.reps), "--warmup", str(ctx.warmup)]
            cmd += ["--quick"] * args.quick + ["--cpu-compile"] * args.cpu_compile
            if args.impls:
                cmd += ["--impls", ",".join(args.impls)]
            shapes = sweep.SHAPES[op] if args.sweep else args.shapes
            if shapes:
                cmd += ["--shapes", ",".join("x".join(map(str, s)) for s in shapes)]
            if args.configs:
                cmd += ["--configs", ",".join(args.configs)]
            code = subprocess.run(cmd).returncode  # its progress and notes go to this run's stderr as they come
            rows, notes = Path(tmp, "results.jsonl"), Path(tmp, "notes.json")
            # one invocation is one run: its rows share the parent's timestamp, not each process's own
            lines = rows.read_text().splitlines() if rows.exists() else []
            results += [{**json.loads(line), **ctx.env} for line in lines]
            ctx.notes += json.loads(notes.read_text()) if notes.exists() else []
        if code != 0:
            failed = True
            if not notes.exists():
                ctx.note(f"{op}: benchmark process ended with exit code {code}")
        write_jsonl(results, args.out / "results.jsonl")
        record(results)
    return results, failed


if __name__ == "__main__":
    sys.exit(main())
