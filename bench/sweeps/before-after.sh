#!/usr/bin/env bash
# Before / after on one GPU in one run: the quick op benchmark (Tigon only) and the quick whole-model train step for
# another tree of this project (BEFORE, e.g. `git worktree add /tmp/before <commit>`) and for this one, interleaved so
# that a drift of the machine shows in both, then a table of every op's steady time and the train step side by side.
# Host time per call (profile_host.py) for both, too. Each side runs its own tree's benchmark code: when the harness
# itself changed between the two trees, a difference can come from it rather than from the kernels (compare SASS). Builds BEFORE if it has no build/libtigon.so; this tree's
# library comes from build/ (scripts/gpu-check builds it).
#
#   BEFORE=/path/to/old/tree bash bench/sweeps/before-after.sh   (results under $OUT/before-after/; ROUNDS=2 op runs each)
set -uo pipefail
cd "$(dirname "$0")/../.."
BEFORE=$(cd "${BEFORE:?set BEFORE to the other tree}" && pwd)
DIR=${OUT:-/tmp/tigon-before-after}/before-after
mkdir -p "$DIR"
if [ ! -f "$BEFORE/build/libtigon.so" ]; then
  (cmake -S "$BEFORE" -B "$BEFORE/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTIGON_BUILD_TESTS=OFF \
    -DTIGON_BUILD_EXAMPLES=OFF && cmake --build "$BEFORE/build" -j "$(nproc)") >"$DIR/build-before.log" 2>&1 \
    || { tail -n 20 "$DIR/build-before.log"; exit 1; }
fi
run() {  # run NAME TREE ARGS...: the benchmark of TREE's package and library
  local name=$1 tree=$2; shift 2
  PYTHONPATH="$tree/python:${PYTHONPATH:-}" TIGON_LIBRARY="$tree/build/libtigon.so" \
    python3 -m tigon.bench --no-chart --out "$DIR/$name" "$@" >"$DIR/$name.log" 2>&1 || echo "$name: exit $?"
}
for round in $(seq "${ROUNDS:-2}"); do
  run "ops-before-$round" "$BEFORE" --quick --impls tigon
  run "ops-after-$round" "$PWD" --quick --impls tigon
done
run train-before "$BEFORE" --ops train_step --quick --impls tigon
run train-after "$PWD" --ops train_step --quick --impls tigon,hf
for side in before after; do
  tree=$BEFORE; [ $side = after ] && tree=$PWD
  PYTHONPATH="$tree/python:${PYTHONPATH:-}" TIGON_LIBRARY="$tree/build/libtigon.so" \
    python3 bench/sweeps/profile_host.py >"$DIR/host-$side.log" 2>&1
  echo "host per call, $side: $(grep -E '^(tigon|liger|torch_eager)' "$DIR/host-$side.log" | tr '\n' ';')"
done
python3 bench/sweeps/compare_runs.py "$DIR"
