#!/usr/bin/env bash
# Fused linear + cross entropy at its large shapes, tigon and torch eager side by side (20 reps, about a minute; ALL=1:
# every GPU shape of the benchmark with Liger too, a few minutes), then where one 16384-token pass's time goes.
# RECORD=bench/results/h200.jsonl appends the rows to the results file.
set -uo pipefail
source "$(dirname "$0")/env.sh"
shapes="--shapes 4096x4096x128256,16384x4096x128256 --impls tigon,torch_eager"
[ "${ALL:-0}" = 1 ] && shapes=""
rc=0
python3 -m tigon.bench --no-chart --ops fused_linear_cross_entropy --reps 20 $shapes --out "$OUT/flce" \
  ${RECORD:+--record "$RECORD"} || rc=1
python3 bench/sweeps/profile_fused_linear_cross_entropy.py | tee "$OUT/flce_profile.log" || rc=1
exit $rc
