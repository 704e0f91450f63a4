"""The results file (bench/results/h200.jsonl): one JSON object per line, appended, never rewritten.

Every row carries where and when it was measured (git_sha, timestamp, gpu, torch, triton, transformers, liger, tigon)
and what: op, shape, dtype, impl, the times (fwd_ms, full_ms: eager calls; fwd_dev_ms, full_dev_ms: steady-state
device time; step_ms, tokens_per_s for whole-model train steps) and the memory (peak_mib, or peak_gib for train
steps). One benchmark invocation shares one timestamp, so (git_sha, timestamp) names a run; the baselines of a row
(torch eager, torch.compile, Liger) are the rows of the same run, op and shape. Runs on an H100, where no H200 was at
hand, name it in gpu; the report reads one GPU's rows (--gpu, default H200).
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

ENV_KEYS = ("git_sha", "timestamp", "gpu", "torch", "triton", "transformers", "liger", "tigon")
ROW_KEYS = ("op", "shape", "dtype", "impl")
IMPLS = ("tigon", "torch_eager", "torch_compile", "liger")
VARIANT_FAMILIES = ("linear_act", "distill")  # ops benchmarked per variant: one row each in a brief table
WHOLE_MODEL = (
    "train_step",
    "decode",
    "encoder",
    "resnet50",
)  # whole-model benchmarks: tables of their own, not the op table


def normalize(record: dict) -> dict:
    """The row as the file stores it: the environment and identity keys first (None where not measured)."""
    row = {k: record.get(k) for k in ENV_KEYS + ROW_KEYS}
    if row["shape"] is None and "batch" in record:  # whole-model train steps: batch x sequence length
        row["shape"] = [record["batch"], record["seq"]]
    row.update((k, v) for k, v in record.items() if k not in row)
    return row


def append(results: list[dict], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        for r in results:
            f.write(json.dumps(normalize(r)) + "\n")


def read(path: Path) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def runs(rows: list[dict]) -> dict[tuple, list[dict]]:
    """The rows grouped by run, (timestamp, git_sha), oldest first; failed rows left out."""
    out: dict[tuple, list[dict]] = {}
    for r in sorted((r for r in rows if not r.get("error")), key=lambda r: r["timestamp"]):
        out.setdefault((r["timestamp"], r["git_sha"]), []).append(r)
    return out


def whole_model(op: str) -> str | None:
    """Which whole-model benchmark a row's op belongs to (train_step and its distributed forms; decode and encoder,
    by exact name), or None for an op (decode_attention is an op)."""
    if op.startswith("train_step"):
        return "train_step"
    return op if op in WHOLE_MODEL else None


def _join_split_runs(picked: list[list[dict]]) -> list[list[dict]]:
    """Consecutive runs of one commit that measured disjoint (op, implementation) pairs are one benchmark split across
    machine calls (the quick benchmark outgrew one): joined, so its table is whole."""
    out: list[list[dict]] = []
    for run in picked:
        if out and out[-1][0]["git_sha"] == run[0]["git_sha"]:
            if not {(r["op"], r["impl"]) for r in out[-1]} & {(r["op"], r["impl"]) for r in run}:
                out[-1] = out[-1] + run
                continue
        out.append(run)
    return out


def newest_run(rows: list[dict], train_steps: bool = False) -> list[dict]:
    """The newest of the runs that measured the most (op, implementation) pairs (a full op table with its baselines,
    not a run of one op's extra shapes or of Tigon alone); with train_steps, the newest run of each whole-model step
    benchmark."""
    kind = "train_step" if train_steps else None
    picked = [[r for r in run if whole_model(r["op"]) == kind] for run in runs(rows).values()]
    picked = [run for run in picked if run]
    if not train_steps:
        picked = _join_split_runs(picked)
    if train_steps:
        newest = {run[0]["op"]: run for run in picked}  # later runs replace earlier ones
        return [r for run in newest.values() for r in run]
    most = max((len({(r["op"], r["impl"]) for r in run}) for run in picked), default=0)
    return next((run for run in reversed(picked) if len({(r["op"], r["impl"]) for r in run}) == most), [])


def with_remeasured(run: list[dict], rows: list[dict]) -> list[dict]:
    """run with each (op, shape) taken from the newest later run that measured it again with the same implementations
    or more, on the same GPU and dtype (an op re-measured beside its baselines after its kernels changed); a later
    run of Tigon alone, or of fewer baselines, does not replace a row."""
    if not run:
        return run
    key = lambda r: (r["op"], tuple(r["shape"]))  # noqa: E731
    current: dict[tuple, list[dict]] = {}
    for r in run:
        current.setdefault(key(r), []).append(r)
    for later in runs(rows).values():  # oldest first: the newest re-measurement wins
        if later[0]["timestamp"] <= run[0]["timestamp"]:
            continue
        again: dict[tuple, list[dict]] = {}
        for r in later:
            if key(r) in current and (r["gpu"], r["dtype"]) == (run[0]["gpu"], current[key(r)][0]["dtype"]):
                again.setdefault(key(r), []).append(r)
        for k, rs in again.items():
            if {r["impl"] for r in rs} >= {r["impl"] for r in current[k]}:
                current[k] = rs
    return [r for rs in current.values() for r in rs]


def _ms(r: dict | None) -> tuple[float | None, bool]:
    """Steady-state device ms of a full pass, else the eager call's (flagged: not graph-capturable); inference ops
    (no backward, full_ms None) are compared by their forward the same way."""
    if r is None:
        return None, False
    phase = "full" if r.get("full_ms") is not None or r.get("full_dev_ms") is not None else "fwd"
    if r.get(f"{phase}_dev_ms") is not None:
        return r[f"{phase}_dev_ms"], False
    return r.get(f"{phase}_ms"), True


def _ratio(base: dict | None, tigon: dict) -> str:
    (b, b_eager), (t, t_eager) = _ms(base), _ms(tigon)
    if b is None or t is None:
        return "-"
    if b_eager and not t_eager:  # an eager-only baseline is compared with tigon's eager call
        t = tigon["full_ms"] if tigon.get("full_ms") is not None else tigon["fwd_ms"]
    return f"{b / t:.2f}×" + ("*" if b_eager else "")


def _caption(r: dict, what: str) -> str:
    versions = ", ".join(f"{k} {r[k]}" for k in ("torch", "triton", "transformers", "liger") if r.get(k))
    return f"{what}: {r['gpu']}, {r['dtype']}, git {r['git_sha']}, {r['timestamp'][:10]} ({versions})."


def _family(op: str) -> str:
    """linear_act_relu -> linear_act: the variants of one op the benchmark lists as ops of their own."""
    return next((f for f in VARIANT_FAMILIES if op.startswith(f + "_")), op)


def _inference(r: dict) -> bool:
    return r.get("full_ms") is None and r.get("full_dev_ms") is None


def ops_markdown(rows: list[dict], brief: bool = False, part: str | None = None) -> str:
    """The op table: tigon's device ms per op and shape, and each baseline's time over tigon's (same run); brief keeps
    each op family's first shape and variant, part ("training" / "inference") the ops with / without a backward (the
    README shows the brief training table, docs/inference.md the inference one)."""
    base = newest_run(rows)
    run = with_remeasured(base, rows)
    if part is not None:
        no_bwd = {r["op"] for r in run if r["impl"] == "tigon" and _inference(r)}
        run = [r for r in run if (r["op"] in no_bwd) == (part == "inference")]
    if brief:
        first = {_family(r["op"]): (r["op"], tuple(r["shape"])) for r in reversed(run)}
        run = [r for r in run if (r["op"], tuple(r["shape"])) == first[_family(r["op"])]]
    if not run:
        return "(no op rows in the results file)"
    by = {(r["op"], tuple(r["shape"]), r["impl"]): r for r in run}
    # ops re-measured after the full run (the caption's commit): each row names its commit
    commits = len({r["git_sha"] for r in run} | {base[0]["git_sha"]}) > 1
    out = [
        "| op | shape | tigon fwd / full ms | vs torch eager | vs torch.compile | vs Liger | tigon peak MiB |"
        + (" git |" if commits else ""),
        "|---|---|---|---|---|---|---|" + ("---|" if commits else ""),
    ]
    for (op, shape, impl), t in by.items():
        if impl != "tigon":
            continue
        fwd = t.get("fwd_dev_ms") or t.get("fwd_ms")
        full = t.get("full_dev_ms") or t.get("full_ms")  # None for inference ops (no backward)
        cells = [op, "×".join(map(str, shape)), f"{fwd:.4f} / " + ("-" if full is None else f"{full:.4f}")]
        cells += [_ratio(by.get((op, shape, b)), t) for b in IMPLS[1:]]
        cells.append(f"{t['peak_mib']:.0f}" if t.get("peak_mib") is not None else "-")
        cells += [t["git_sha"]] if commits else []
        out.append("| " + " | ".join(cells) + " |")
    timed = (
        "steady-state device ms (CUDA graph of back-to-back calls on fresh inputs)"
        if any(r.get("full_dev_ms") is not None or r.get("fwd_dev_ms") is not None for r in run)
        else "eager ms per call (no GPU: no device time)"
    )
    inference = any(_inference(r) for r in run)
    out += [
        "",
        textwrap.fill(
            f"{_caption(base[0], 'Measured')}"
            + (" Rows naming another commit were measured again later, beside the same baselines." if commits else "")
            + f" Times are {timed}"
            + ("" if part == "inference" else "; full = forward + backward")
            + ". vs X = "
            "X's full time / tigon's (above 1: tigon is faster). \\* not graph-capturable: eager "
            "calls compared." + (" Inference ops (full -) are compared by their forward." if inference else ""),
            width=118,
            break_on_hyphens=False,
        ),
    ]
    return "\n".join(out)


def train_step_markdown(rows: list[dict]) -> str:
    run = newest_run(rows, train_steps=True)
    if not run:
        return "(no train step rows in the results file)"
    out = [
        "| op | model | AdamW | tokens | impl | step ms | tokens/s | peak GiB | vs transformers |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    key = lambda r: (r["op"], r["model"], r.get("optimizer") or "foreach")  # noqa: E731 (older rows: foreach)
    for r in run:
        base = next((b for b in run if key(b) == key(r) and b["impl"] == "hf"), None)
        speed = f"{r['tokens_per_s'] / base['tokens_per_s']:.2f}×" if base else "-"
        tokens = f"{r['batch']} × {r['seq']}" + (" packed" if r.get("packed") else "")
        out.append(
            f"| {r['op']} | {r['model']} | {key(r)[2]} | {tokens} | {r['impl']} | {r['step_ms']:.1f} | "
            f"{r['tokens_per_s']:,.0f} | {r['peak_gib']:.2f} | {speed} |"
        )
    out.append("")
    by_run: dict[tuple, list[dict]] = {}
    for r in run:
        by_run.setdefault((r["timestamp"], r["git_sha"]), []).append(r)
    for rs in by_run.values():
        out.append(_caption(rs[0], ", ".join(dict.fromkeys(r["op"] for r in rs))))
    out.append(
        "Random weights, bf16, tokens per GPU as shown (packed: documents of mixed lengths in one row), activation "
        "checkpointing; attention: SDPA, except tigon_attention's (Tigon's own)."
    )
    return "\n".join(out)
