"""The table before-after.sh prints: per op and shape, Tigon's steady-state fwd / full device ms in each run of each
side (the median over the rounds) and after / before; then the train step's ms and peak memory."""

import json
import statistics
import sys
from pathlib import Path


def rows(path: Path):
    f = path / "results.jsonl"
    return [json.loads(line) for line in f.open()] if f.exists() else []


def main(d: Path) -> None:
    times = {}  # (op, shape) -> side -> [(fwd, full)]
    for run in sorted(d.glob("ops-*-*")):
        side = run.name.split("-")[1]
        for r in rows(run):
            if r.get("impl") == "tigon" and not r.get("error"):
                key = (r["op"], "x".join(map(str, r["shape"])))
                fwd, full = r.get("fwd_dev_ms") or r.get("fwd_ms"), r.get("full_dev_ms") or r.get("full_ms")
                times.setdefault(key, {}).setdefault(side, []).append((fwd, full))
    print(f"{'op':28} {'shape':18} {'before fwd/full ms':>22} {'after fwd/full ms':>22} {'after/before':>14}")
    for (op, shape), sides in times.items():
        med = {
            s: [
                statistics.median(v[i] for v in sides[s] if v[i] is not None)
                if any(v[i] is not None for v in sides[s])
                else None
                for i in (0, 1)
            ]
            for s in sides
        }
        b, a = med.get("before", [None, None]), med.get("after", [None, None])
        fmt = lambda p: " / ".join("-" if x is None else f"{x:.4f}" for x in p)  # noqa: E731
        ratio = " / ".join("-" if x is None or y is None else f"{y / x:.3f}" for x, y in zip(b, a))
        print(f"{op:28} {shape:18} {fmt(b):>22} {fmt(a):>22} {ratio:>14}")
    steps = {}  # (side, impl) -> [ms per round]
    for run in sorted(d.glob("train-*")):
        side = run.name.split("-")[1]
        for r in rows(run):
            if r.get("error"):
                continue
            steps.setdefault((side, r["impl"]), []).append(r["step_ms"])
            print(
                f"train step {run.name:16} {r.get('impl'):6} {r.get('model')}: {r.get('step_ms', 0):.1f} ms, "
                f"{r.get('tokens_per_s', 0):,.0f} tok/s, peak fwd+bwd {r.get('peak_fwd_bwd_gib', 0):.2f} GiB, "
                f"peak {r.get('peak_gib', 0):.2f} GiB"
            )
    for (side, impl), ms in sorted(steps.items()):
        print(f"train step {side:6} {impl:6}: median {statistics.median(ms):.1f} ms over {len(ms)} runs ({ms})")
    b, a = steps.get(("before", "tigon")), steps.get(("after", "tigon"))
    if b and a:
        print(f"train step tigon after / before: {statistics.median(a) / statistics.median(b):.3f}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
