#!/usr/bin/env bash
# The 50-problem llm_judge collect (benchmarks/teacher_labels/llmjudge_50: 50 gsm_symbolic problems,
# llm_judge@0.85 teacher, lr+sd γ1 = 3, γ2 = 4, 256 new tokens, one problem at a time, decode
# wall 8189 s) rerun with N problems in flight. Same options as its collect_config.json
# but --max-concurrent. Resumable: rerun it.
#   bash benchmarks/collect_batched.sh [MAX_CONCURRENT]
set -euo pipefail
export HF_HUB_OFFLINE=1
N=${1:-8}
LR=${LRTUNE:-.venv/bin/lrtune}
OUT=benchmarks/teacher_labels/llmjudge_50_batched; mkdir -p "$OUT" results
start=$(date +%s)
"$LR" collect --task gsm_symbolic --limit 50 --teacher llm_judge --teacher-threshold 0.85 \
    --method lr+sd --gamma1 3 --gamma2 4 --max-new-tokens 256 --max-step-tokens 96 \
    --max-model-len 2048 --kv-cache-gib 0.75 --verifier embedding --max-concurrent "$N" \
    --out results/collect_batched
end=$(date +%s)
"$LR" collect --stats results/collect_batched | tee "$OUT/stats.txt"
cp results/collect_batched/README.md "$OUT/card.md"
cp results/collect_batched/collect_config.json "$OUT/collect_config.json"
printf '{"max_concurrent": %s, "collect_wall_s": %s, "baseline": "benchmarks/teacher_labels/llmjudge_50 (one at a time): decode wall 8189 s"}\n' \
    "$N" "$((end - start))" > "$OUT/wall_time.json"
cat "$OUT/wall_time.json"
"${PYTHON:-.venv/bin/python}" -m benchmarks.collect_wall --data results/collect_batched \
    --wall "$OUT/wall_time.json" --out "$OUT/summary.json"
