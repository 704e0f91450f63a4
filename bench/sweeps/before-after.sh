#!/usr/bin/env bash
# Before / after on one GPU in one run: the quick op benchmark (Tigon only) and the quick whole-model train step for
# another tree of this project (BEFORE, e.g. `git worktree add /tmp/before <commit>`) and for this one, interleaved so
# that a drift of the machine shows in both, then a table of every op's steady time and the train step side by side.
# Host time per call (profile_host.py) for both, too. Both sides run this tree's benchmark code (BEFORE's package with
# this tree's tigon/bench laid over it), so only the library and its Python ops differ; BEFORE must offer the public
# ops the benchmark calls. Builds BEFORE if it has no build/libtigon.so; this tree's library comes from build/
# (scripts/gpu-check builds it).
#
#   BEFORE=/path/to/old/tree BEFORE_SHA=<its commit> bash bench/sweeps/before-after.sh
#   results under $OUT/before-after/; ROUNDS=2 op runs, TRAIN_ROUNDS=1 train-step runs and HOST_ROUNDS=1 host-time
#   runs per side; OPS=all quick ops; ARGS: more benchmark arguments (e.g. "--shapes 1024x4096,16384x4096")
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
# BEFORE's package with this tree's benchmark code: one harness for both sides.
rm -rf "$DIR/before-python" && cp -r "$BEFORE/python" "$DIR/before-python"
rm -rf "$DIR/before-python/tigon/bench" && cp -r python/tigon/bench "$DIR/before-python/tigon/bench"
run() {  # run NAME PYTHON_DIR TREE ARGS...: the benchmark over that package and TREE's library
  local name=$1 pkg=$2 tree=$3 sha=${TIGON_GIT_SHA:-}; shift 3
  [ "$tree" = "$BEFORE" ] && sha=${BEFORE_SHA:-before}  # the rows say which commit they measured
  PYTHONPATH="$pkg:${PYTHONPATH:-}" TIGON_LIBRARY="$tree/build/libtigon.so" TIGON_GIT_SHA=$sha \
    python3 -m tigon.bench --no-chart --out "$DIR/$name" "$@" >"$DIR/$name.log" 2>&1 || echo "$name: exit $?"
}
ops=()
[ -n "${OPS:-}" ] && ops=(--ops "$OPS")
for round in $(seq "${ROUNDS:-2}"); do
  run "ops-before-$round" "$DIR/before-python" "$BEFORE" --quick --impls tigon "${ops[@]}" ${ARGS:-}
  run "ops-after-$round" "$PWD/python" "$PWD" --quick --impls tigon "${ops[@]}" ${ARGS:-}
done
for round in $(seq "${TRAIN_ROUNDS:-1}"); do
  run "train-before-$round" "$DIR/before-python" "$BEFORE" --ops train_step --quick --impls tigon
  hf=; [ "$round" = 1 ] && hf=,hf  # Hugging Face's own step once, for the ratio
  run "train-after-$round" "$PWD/python" "$PWD" --ops train_step --quick --impls "tigon$hf"
done
for round in $(seq "${HOST_ROUNDS:-1}"); do
  for side in before after; do
    tree=$BEFORE; [ $side = after ] && tree=$PWD
    PYTHONPATH="$tree/python:${PYTHONPATH:-}" TIGON_LIBRARY="$tree/build/libtigon.so" \
      python3 bench/sweeps/profile_host.py --no-profile >"$DIR/host-$side-$round.log" 2>&1
    echo "host per call, $side: $(grep -E '^(tigon|liger|torch_eager)' "$DIR/host-$side-$round.log" | tr '\n' ';')"
  done
done
python3 bench/sweeps/compare_runs.py "$DIR"
