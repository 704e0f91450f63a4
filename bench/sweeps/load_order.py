"""Finds the memory-bound kernels whose global loads the compiler serialised, from their SASS (no GPU needed):

- a load after a store inside one loop trip: the compiler cannot tell the output from the input, so the load waits
  for the store to issue (one memory round trip per store: add_rms_norm's h, RoPE's heads, the embedding rows);
- two loads far apart with nothing between them that needs the first: ptxas placed the second one late (behind
  GELU's tanhf/erff), so each costs its own round trip.

Loads from L1-resident parameters (a norm's weight) show up too; read the kernel before changing it.

    python3 bench/sweeps/load_order.py [build/libtigon.so] [--match rope] [--gap 128]
"""

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys

MEMORY = ("LDG", "STG")
FENCES = ("BAR", "EXIT", "SHFL", "BRA")  # a reduction or a branch back (a loop's next trip) ends a stretch


def cuobjdump() -> str:
    found = shutil.which("cuobjdump")
    if found:
        return found
    for root in (os.environ.get("CUDA_HOME", ""), "/usr/local/cuda"):
        path = os.path.join(root, "bin", "cuobjdump")
        if root and os.path.exists(path):
            return path
    sys.exit("cuobjdump not found: put the CUDA toolkit's bin on PATH or set CUDA_HOME")


def kernels(sass: str):
    """(kernel name, [(offset, opcode, branch target or None)]) for the memory, barrier and branch instructions of
    every kernel."""
    name, ops = None, []
    for line in sass.splitlines():
        m = re.match(r"\s+Function : (\S+)", line)
        if m:
            if name:
                yield name, ops
            name, ops = m.group(1), []
            continue
        m = re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)\s*(0x[0-9a-f]+)?", line)
        if m and name and m.group(2).startswith(MEMORY + FENCES):
            target = int(m.group(3), 16) if m.group(3) else None
            ops.append((int(m.group(1), 16), m.group(2), target))
    if name:
        yield name, ops


def findings(ops, gap_instructions: int):
    """Counts of loads after stores and of late loads in one kernel's instruction list."""
    after_store = late = 0
    stored = False
    last_load = None
    for offset, op, target in ops:
        if op.startswith("STG"):
            stored, last_load = True, None
        elif op.startswith("LDG"):
            after_store += stored
            if last_load is not None and (offset - last_load) // 16 > gap_instructions:
                late += 1
            last_load = offset
        elif op.startswith("BRA") and target is not None and target > offset:
            last_load = None  # a forward branch (a bounds check) stays in the stretch; a load behind it may be late
        else:  # a branch back, a barrier, a shuffle or an exit: a new stretch
            stored, last_load = False, None
    return after_store, late


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("library", nargs="?", default="build/libtigon.so")
    ap.add_argument("--match", default="", help="only kernels whose mangled name contains this")
    ap.add_argument("--gap", type=int, default=128, help="instructions between two loads that count as late")
    args = ap.parse_args()
    sass = subprocess.run([cuobjdump(), "-sass", args.library], capture_output=True, text=True, check=True).stdout
    per_family = collections.defaultdict(lambda: [0, 0, 0])
    for name, ops in kernels(sass):
        if args.match not in name:
            continue
        after_store, late = findings(ops, args.gap)
        if after_store or late:
            family = re.sub(r"I\w*$", "", re.sub(r"^_ZN5tigon", "", name))[:90]
            f = per_family[family]
            f[0], f[1], f[2] = f[0] + 1, f[1] + after_store, f[2] + late
    print(f"{'kernels':>7} {'load after store':>16} {'late load':>9}  family (mangled)")
    for family, (n, after_store, late) in sorted(per_family.items(), key=lambda kv: -kv[1][1] - kv[1][2]):
        print(f"{n:>7} {after_store:>16} {late:>9}  {family}")


if __name__ == "__main__":
    main()
