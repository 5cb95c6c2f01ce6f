#!/usr/bin/env bash
# Score rounds with trained one-sided routers, default pair with the int8 draft, against target,
# SD, LR+SD with a pair student and the training-free target_logprob, on problems held out from
# the routers' training labels (gsm_symbolic templates and HumanEval tasks that DATA never saw):
#   1. train the router (--student router), the draft-only router (the router without the
#      target's scores of the draft step: its score rounds make no prefill call) and a pair
#      student (--student forest) on DATA;
#   2. cross-fit the routers' AUROC by template (every pair judged by a router that never saw
#      its template) beside a one-sided forest, target_logprob and its min form;
#   3. profile the pair with the int8 draft (c1, c2, b(n), the scoring call's prefill);
#   4. latency mode, methods interleaved: target, sd, lr+sd/v=forest, score+sd/v=target_logprob,
#      score+sd/v=router, adaptive/lr+score/v=router (bandit-pooled picks LR, score or SD alone
#      per round, priced from the profile); then target, sd and the draft-only router's rows.
# DATA: a collect dir with rollout labels (bash benchmarks/rollout_labels.sh, or its collects).
# Resumable: rerun it. Each evaluate holds about 12 GiB (chunked prefill, 512 tokens per step):
# on a 24 GiB machine run nothing beside it.
#   [DATA=DIR] [OUT=DIR] bash benchmarks/score_router.sh [PROBLEMS] [MAX_NEW_TOKENS]
set -euo pipefail
export HF_HUB_OFFLINE=1
N=${1:-16}; TOKENS=${2:-512}
LR=${LRTUNE:-.venv/bin/lrtune}; PY=${PYTHON:-.venv/bin/python}
DATA=${DATA:-results/rollout_labels}; OUT=${OUT:-benchmarks/score_rounds}
DROP=draft_target_mean_logprob,draft_target_min_logprob,draft_target_argmax_share
COMMON=(--task gsm_symbolic+humaneval --heldout-from "$DATA" --limit "$N" --mode latency --gamma1 3 --gamma2 4
        --max-new-tokens "$TOKENS" --max-step-tokens 96 --max-model-len 1536 --max-num-batched-tokens 512
        --draft-quantization int8 --controller bandit-pooled --profile "$OUT/profile_int8.json")
"$LR" train verifier --data "$DATA" --student router --out results/router --no-progress
"$LR" train verifier --data "$DATA" --student router --drop-features "$DROP" --out results/router_draft --no-progress
"$LR" train verifier --data "$DATA" --student forest --out results/forest --no-progress
cp results/router/README.md "$OUT/router_card.md"
cp results/router_draft/README.md "$OUT/router_draft_card.md"
cp results/forest/README.md "$OUT/forest_card.md"
"$PY" -m benchmarks.student_crossfit --data "$DATA" --folds 5 --work results/crossfit_router \
    --variants "router;router_draft_only:router:$DROP;forest_one_sided:forest:$("$PY" -c 'from lrtune.verifiers.features import FEATURE_NAMES as F, ONE_SIDED_FEATURES as O; print(",".join(n for n in F if n not in O))');target_logprob;target_logprob_min:target_logprob(min)" \
    --out "$OUT/router_crossfit.json"
"$LR" profile --draft-quantization int8 --max-num-batched-tokens 512 --max-model-len 1536 --prefill-max 256 \
    --out "$OUT/profile_int8.json"
"$LR" evaluate "${COMMON[@]}" \
    --methods "target,sd,lr+sd/v=results/forest,score+sd/v=target_logprob,score+sd/v=results/router,adaptive/lr+score/v=results/router" \
    --out "$OUT/heldout_${N}_${TOKENS}_int8"
"$LR" evaluate "${COMMON[@]}" \
    --methods "target,sd,score+sd/v=results/router_draft,adaptive/score/v=results/router_draft" \
    --out "$OUT/heldout_${N}_${TOKENS}_int8_draftonly"
"$PY" -m benchmarks.score_split "$OUT/heldout_${N}_${TOKENS}_int8"
"$PY" -m benchmarks.score_split "$OUT/heldout_${N}_${TOKENS}_int8_draftonly"
