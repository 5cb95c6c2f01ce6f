#!/usr/bin/env bash
# Outcome labels on the default pair: collect gsm_symbolic + humaneval with the
# rollout teacher, merge, print the agreement statistics and probe both llm_judge forms (and
# target_score) against the rollout labels on the production path; the collect also records the
# target's scores of every draft step, so the summary rates target_logprob too. The model judges
# score a seeded sample of PROBE_SAMPLE pairs (default 400; 0 = all: about 4 s per pair for the
# three specs on 2 CPU cores). Resumable: rerun it.
#   [OUT=DIR] [PROBE_SAMPLE=N] bash benchmarks/rollout_labels.sh [GSM_PROBLEMS] [HUMANEVAL_PROBLEMS]
set -euo pipefail
export HF_HUB_OFFLINE=1
GSM=${1:-32}; HE=${2:-18}; SAMPLE=${PROBE_SAMPLE:-400}
LR=${LRTUNE:-.venv/bin/lrtune}; PY=${PYTHON:-.venv/bin/python}
OUT=${OUT:-benchmarks/teacher_labels/rollout_32}; mkdir -p "$OUT" results
common=(--teacher rollout --verifier exact --rollout-pairs committed --rollout-tokens 512
        --method lr+sd --gamma1 3 --gamma2 4 --max-new-tokens 768 --max-step-tokens 96
        --max-model-len 1536 --kv-cache-gib 3 --max-concurrent 12 --no-target-score-feature)
/usr/bin/time -f "%e s wall" "$LR" collect --task gsm_symbolic --limit "$GSM" --out results/rollout_gsm "${common[@]}"
/usr/bin/time -f "%e s wall" "$LR" collect --task humaneval --limit "$HE" --out results/rollout_humaneval "${common[@]}"
"$LR" collect --merge results/rollout_gsm results/rollout_humaneval --out results/rollout_labels
"$LR" collect --stats results/rollout_labels | tee "$OUT/stats.txt"
cp results/rollout_labels/README.md "$OUT/card.md"
cp results/rollout_labels/collect_config.json "$OUT/collect_config.json"
"$LR" labels judge-probe --data results/rollout_labels --kv-cache-gib 2 --max-model-len 4096 --sample "$SAMPLE" \
    --specs "llm_judge(context),llm_judge(paper),target_score" --out "$OUT/judge_probe.json"
"$PY" -m benchmarks.summarize_labels --data results/rollout_labels --probe "$OUT/judge_probe.json" --out "$OUT"
