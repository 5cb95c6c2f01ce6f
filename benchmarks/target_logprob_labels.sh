#!/usr/bin/env bash
# The training-free target_logprob verifier against outcome (rollout) labels on the default
# pair (issues 17/18): a rollout-teacher collect, which also records the target's scores of
# every draft step (draft_target_* columns), then its agreement statistics and AUROC with
# bootstrap intervals. Resumable: rerun it.
#   bash benchmarks/target_logprob_labels.sh [GSM_PROBLEMS] [HUMANEVAL_PROBLEMS]
set -euo pipefail
export HF_HUB_OFFLINE=1
GSM=${1:-8}; HE=${2:-0}
LR=${LRTUNE:-.venv/bin/lrtune}; PY=${PYTHON:-.venv/bin/python}
OUT=benchmarks/results/target_logprob_labels; mkdir -p "$OUT" results
common=(--teacher rollout --verifier exact --rollout-pairs committed --rollout-tokens 512
        --method lr+sd --gamma1 3 --gamma2 4 --max-new-tokens 768 --max-step-tokens 96
        --max-model-len 1536 --kv-cache-gib 3 --max-concurrent 12 --no-target-score-feature)
dirs=()
"$LR" collect --task gsm_symbolic --limit "$GSM" --out results/tlp_gsm "${common[@]}"; dirs+=(results/tlp_gsm)
if [ "$HE" -gt 0 ]; then
  "$LR" collect --task humaneval --limit "$HE" --out results/tlp_humaneval "${common[@]}"; dirs+=(results/tlp_humaneval)
fi
"$LR" collect --merge "${dirs[@]}" --out results/tlp_labels
"$LR" collect --stats results/tlp_labels | tee "$OUT/stats.txt"
cp results/tlp_labels/README.md "$OUT/card.md"
"$PY" -m benchmarks.summarize_labels --data results/tlp_labels --out "$OUT"
