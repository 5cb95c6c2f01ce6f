#!/usr/bin/env bash
# Adaptive decoding and early abort, one interleaved evaluate run on the default pair:
# target, sd (γ2 = 4), lr+sd, lr+sd with early abort, adaptive (the learned controller), best
# fixed; gsm_symbolic problems whose templates the controller's training collect never saw.
# The controller is trained first on a collect dir (default: the 50-problem judge batched rerun).
# Resumable: rerun it.
#   bash benchmarks/adaptive_eval.sh [PROBLEMS] [MAX_NEW_TOKENS] [COLLECT_DIR]
# Environment: PROFILE (lrtune profile JSON), NAME (result folder suffix), METHODS.
set -euo pipefail
export HF_HUB_OFFLINE=1
N=${1:-4}; TOKENS=${2:-384}; DATA=${3:-results/collect_batched}
LR=${LRTUNE:-.venv/bin/lrtune}
PROFILE=${PROFILE:-benchmarks/engine_costs/profile_default.json}; NAME=${NAME:-384}
METHODS=${METHODS:-target,sd,lr+sd,lr+sd/abort,adaptive,best-fixed}
OUT=benchmarks/adaptive_depths/eval_$NAME; CTL=results/controller_$NAME
"$LR" train controller --data "$DATA" --profile "$PROFILE" --out "$CTL"
mkdir -p "benchmarks/adaptive_depths/controller_$NAME"
cp "$CTL"/README.md "$CTL"/lrtune_controller.json "benchmarks/adaptive_depths/controller_$NAME/"
"$LR" evaluate --task gsm_symbolic --task-seed 1 --heldout-from "$DATA" --limit "$N" \
    --methods "$METHODS" --controller "$CTL" \
    --gamma1 3 --gamma2 4 --max-new-tokens "$TOKENS" --max-step-tokens 96 --max-model-len 1024 \
    --kv-cache-gib 0.5 --profile "$PROFILE" --out "$OUT"
