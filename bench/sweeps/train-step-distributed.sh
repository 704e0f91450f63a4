#!/usr/bin/env bash
# Whole-model training steps on every visible GPU (2 or more), one process each over NCCL, under FSDP2 and DDP:
# transformers' model against the patched one. FULL=1: all three model configurations (a few minutes); default: Llama.
# RECORD=bench/results/h200.jsonl appends the rows to the results file.
set -uo pipefail
source "$(dirname "$0")/env.sh"
[ "$(nvidia-smi -L 2>/dev/null | wc -l)" -ge 2 ] || { echo "needs 2 or more GPUs" >&2; exit 1; }
python3 -m tigon.bench --ops train_step_fsdp2,train_step_ddp $([ "${FULL:-0}" = 1 ] || echo --quick) \
  --out "$OUT/train_step_distributed" ${RECORD:+--record "$RECORD"}
