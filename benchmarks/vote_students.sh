#!/usr/bin/env bash
# Issue 18: the vote teacher (greedy + K sampled rollouts per branch, modal outcomes compared)
# on a rollout-labelled collect, its noise on meaning-preserving edits beside the greedy
# teacher's, and the students cross-fitted (5 template folds) on the same pairs under both
# teachers. Resumable (vote_labels keeps its votes; MAX_PROBLEMS takes the first problems of
# its seeded order, so a run stopped early is finished by rerunning with the count it reached).
# Run on an idle machine.
#   [K=4] [MAX_PROBLEMS=0 (all)] [NOISE_SAMPLE=80] [SEEDS="0"] [OUT=DIR] bash benchmarks/vote_students.sh [ROLLOUT_DIR]
set -euo pipefail
export HF_HUB_OFFLINE=1
PY=${PYTHON:-.venv/bin/python}; LR=${LRTUNE:-.venv/bin/lrtune}
SRC=${1:-results/rollout_gsm}; K=${K:-4}; OUT=${OUT:-benchmarks/teacher_labels/rollout_vote_gsm}
mkdir -p "$OUT"
/usr/bin/time -f "%e s wall (vote_labels)" "$LR" labels vote --data "$SRC" --samples "$K" \
    --max-problems "${MAX_PROBLEMS:-0}" --out results/vote_labels --greedy-out results/vote_labels_greedy \
    --summary "$OUT/summary.json"
/usr/bin/time -f "%e s wall (label_noise)" "$LR" labels noise --data "$SRC" --sample "${NOISE_SAMPLE:-80}" \
    --samples "$K" --out "$OUT/label_noise.json"
for seed in ${SEEDS:-0}; do
  for lab in vote greedy; do
    data=results/vote_labels; [ "$lab" = greedy ] && data=results/vote_labels_greedy
    "$PY" -m benchmarks.student_crossfit --data "$data" --folds 5 --seed "$seed" --variants "features;forest" \
        --work "results/crossfit_$lab" --out "$OUT/crossfit_${lab}_s$seed.json"
  done
done
