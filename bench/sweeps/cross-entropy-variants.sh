#!/usr/bin/env bash
# Cross entropy row-kernel arrangements side by side in one process (bf16 8192 x 128256, gradient over the logits):
# single call, steady state on fresh logits, and the loss-only read. docs/performance/cross-entropy.md has the results.
#   bash bench/sweeps/cross-entropy-variants.sh [variant ...]     e.g. cluster cluster7 classic
#   SHAPES="8192x151936:cluster cluster7;4096x65536:cluster" for other vocabularies
set -uo pipefail
source "$(dirname "$0")/env.sh"
rc=0
python3 bench/sweeps/profile_cross_entropy.py --steady "$@" | tee "$OUT/ce_variants.log" || rc=1
IFS=';' read -ra groups <<<"${SHAPES:-}"
for g in "${groups[@]}"; do
  echo "-- ${g%%:*}"
  python3 bench/sweeps/profile_cross_entropy.py --shape "${g%%:*}" ${g#*:} || rc=1
done | tee -a "$OUT/ce_variants.log"
echo "-- loss only" | tee -a "$OUT/ce_variants.log"
python3 bench/sweeps/profile_cross_entropy.py --loss-only cluster classic | tee -a "$OUT/ce_variants.log" || rc=1
exit $rc
