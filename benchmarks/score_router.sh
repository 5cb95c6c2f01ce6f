#!/usr/bin/env bash
# Score rounds with a trained one-sided router, default pair, against target, SD, LR+SD with a
# pair student and the training-free target_logprob, on problems held out from the router's
# training labels (gsm_symbolic templates and HumanEval tasks that DATA never saw):
#   1. train the router (--student router) and a pair student (--student forest) on DATA;
#   2. cross-fit both routers' AUROC by template (every pair judged by a router that never saw
#      its template) beside target_logprob and its min form seen as score rounds see a pair;
#   3. latency mode, methods interleaved: target, sd, lr+sd/v=forest, score+sd/v=target_logprob,
#      score+sd/v=router, adaptive/score/v=router (the bandit picks score rounds or SD alone per
#      round, priced from PROFILE).
# DATA: a collect dir with rollout labels (bash benchmarks/rollout_labels.sh, or its collects).
# Resumable: rerun it. The evaluate holds about 20 GiB on the default pair with 1 GiB of KV cache
# per engine: on a 24 GiB machine run nothing beside it (the committed run was OOM-killed in the
# adaptive row at 16 problems and summarised at 12, whose decodes were all done: rerun with N=12).
#   [DATA=DIR] [PROFILE=FILE] [OUT=DIR] bash benchmarks/score_router.sh [PROBLEMS] [MAX_NEW_TOKENS]
set -euo pipefail
export HF_HUB_OFFLINE=1
N=${1:-16}; TOKENS=${2:-512}
LR=${LRTUNE:-.venv/bin/lrtune}; PY=${PYTHON:-.venv/bin/python}
DATA=${DATA:-results/rollout_labels}; PROFILE=${PROFILE:-benchmarks/demo/default/profile.json}
OUT=${OUT:-benchmarks/score_rounds}
"$LR" train verifier --data "$DATA" --student router --out results/router --no-progress
"$LR" train verifier --data "$DATA" --student forest --out results/forest --no-progress
cp results/router/README.md "$OUT/router_card.md"
cp results/forest/README.md "$OUT/forest_card.md"
"$PY" -m benchmarks.student_crossfit --data "$DATA" --folds 5 --work results/crossfit_router \
    --variants "router;forest_one_sided:forest:$("$PY" -c 'from lrtune.verifiers.features import FEATURE_NAMES as F, ONE_SIDED_FEATURES as O; print(",".join(n for n in F if n not in O))');target_logprob;target_logprob_min:target_logprob(min)" \
    --out "$OUT/router_crossfit.json"
"$LR" evaluate --task gsm_symbolic+humaneval --heldout-from "$DATA" --limit "$N" --mode latency \
    --gamma1 3 --gamma2 4 --max-new-tokens "$TOKENS" --max-step-tokens 96 --max-model-len 1536 \
    --controller bandit --profile "$PROFILE" \
    --methods "target,sd,lr+sd/v=results/forest,score+sd/v=target_logprob,score+sd/v=results/router,adaptive/score/v=results/router" \
    --out "$OUT/heldout_${N}_${TOKENS}"
