#!/usr/bin/env bash
# Students distilled from the outcome (rollout) labels of benchmarks/rollout_labels.sh:
# features (logistic regression on text, embedding, the target's likelihood of the draft step and
# the draft's own confidence, and whether the context is code), forest (a random forest on the
# same features), cross-encoder (MiniLM + LoRA) and lm-judge (0.5B draft + LoRA,
# TRL SFT), each split by template (no gsm_symbolic template or HumanEval task in two splits),
# calibrated on validation, rated on test against the rollout labels beside the embedding, exact
# and target_logprob verifiers. Model cards and metadata go to benchmarks/distilled_verifiers/rollout_tail/.
# Resumable: rerun it (a finished student is skipped; an interrupted one resumes its last epoch).
# lm-judge on 2 CPU cores costs about 6.5 s per training pair (2 epochs): LMJ_MAX_PAIRS=N subsamples
# its training split to N pairs (seeded). The cross-encoder and lm-judge read 800 characters of
# context (problem start + latest steps) in at most MAX_LENGTH (384) tokens. NAME: result folder
# (default students_rollout; the first run there read the context's last 400 characters only).
#   [LMJ_MAX_PAIRS=N] [NAME=...] [MAX_LENGTH=N] bash benchmarks/students_rollout.sh [DATA] [STUDENTS]
set -euo pipefail
export HF_HUB_OFFLINE=1
DATA=${1:-results/rollout_labels}; STUDENTS=${2:-features forest cross-encoder lm-judge}
LR=${LRTUNE:-.venv/bin/lrtune}
NAME=${NAME:-rollout_tail}; OUT=benchmarks/distilled_verifiers/$NAME; MAX_LENGTH=${MAX_LENGTH:-384}
for s in $STUDENTS; do
  extra=()
  case $s in features|forest) ;; *) extra=(--max-length "$MAX_LENGTH") ;; esac
  [ "$s" = lm-judge ] && extra+=(--epochs 2 --patience 1 --batch-size 8 --latency-pairs 8
                                 ${LMJ_MAX_PAIRS:+--max-train-pairs "$LMJ_MAX_PAIRS"})
  /usr/bin/time -f "$s: %e s wall" "$LR" train verifier --data "$DATA" --student "$s" \
      --out "results/$NAME/$s" "${extra[@]}"
  mkdir -p "$OUT/$s"
  for f in README.md lrtune_verifier.json train_config.json; do
    if [ -f "results/$NAME/$s/$f" ]; then cp "results/$NAME/$s/$f" "$OUT/$s/"; fi
  done
done
