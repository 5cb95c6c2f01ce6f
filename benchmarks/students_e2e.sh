#!/usr/bin/env bash
# A distilled verifier end to end, default pair, on problems held out from the
# students' training labels (gsm_symbolic templates and HumanEval tasks that DATA never saw):
#   1. throughput mode, N problems (half each task): target, lr+sd with embedding@0.95, with the
#      training-free target_logprob, with the student;
#   2. latency mode, methods interleaved, on the first M of them: adds sd and lr+sd with the
#      teacher-side judge (llm_judge), for the speedups.
# Each report.md holds accuracy with answers finished, accuracy paired against target-only with
# McNemar's exact p, α1 by draft position and the time split. Resumable: rerun it.
# STUDENT may carry its own threshold (DIR@T); NAME names the result folders (NAME_throughput, NAME_latency).
#   [STUDENT=DIR[@T]] [DATA=DIR] [NAME=e2e] bash benchmarks/students_e2e.sh [N] [M] [MAX_NEW_TOKENS]
set -euo pipefail
export HF_HUB_OFFLINE=1
N=${1:-60}; M=${2:-16}; TOKENS=${3:-768}
LR=${LRTUNE:-.venv/bin/lrtune}
DATA=${DATA:-results/rollout_labels}; STUDENT=${STUDENT:-results/students_rollout_headtail/features}
NAME=${NAME:-e2e}
common=(--task gsm_symbolic+humaneval --heldout-from "$DATA" --gamma1 3 --gamma2 4
        --max-new-tokens "$TOKENS" --max-step-tokens 96 --max-model-len 1536 --kv-cache-gib 3)
"$LR" evaluate "${common[@]}" --limit "$N" --mode throughput --max-concurrent 8 \
    --methods "target,lr+sd/v=embedding@0.95,lr+sd/v=target_logprob,lr+sd/v=$STUDENT" \
    --out "benchmarks/distilled_verifiers/${NAME}_throughput"
"$LR" evaluate "${common[@]}" --limit "$M" --mode latency \
    --methods "target,sd,lr+sd/v=embedding@0.95,lr+sd/v=target_logprob,lr+sd/v=$STUDENT,lr+sd/v=llm_judge" \
    --out "benchmarks/distilled_verifiers/${NAME}_latency"
