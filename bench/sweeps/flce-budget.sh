#!/usr/bin/env bash
# Fused linear + cross entropy's time and peak memory against its logits budget, Liger beside it (a few minutes):
# the measurement the default budget is chosen from (bench/sweeps/flce_budget.py).
set -uo pipefail
source "$(dirname "$0")/env.sh"
python3 bench/sweeps/flce_budget.py "$@" | tee "$OUT/flce_budget.log"
