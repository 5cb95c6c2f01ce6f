#!/usr/bin/env bash
# Early abort and draft-prefix reuse: one interleaved latency run on the default pair,
# rows target (always, the baseline), lr+sd, lr+sd/abort, lr+sd/abort/reuse (γ1 = 3, γ2 = 4), on the
# held-out gsm_symbolic problems of the balanced adaptive run (their ids, read from its records,
# so the two runs decode the same problems). Resumable: rerun it.
#   [NAME=...] [METHODS=...] bash benchmarks/abort_reuse_eval.sh [PROBLEMS] [MAX_NEW_TOKENS]
set -euo pipefail
export HF_HUB_OFFLINE=1
N=${1:-24}; TOKENS=${2:-512}
LR=${LRTUNE:-.venv/bin/lrtune}; PY=${PYTHON:-.venv/bin/python}
NAME=${NAME:-abort_reuse}; OUT=benchmarks/adaptive_depths/eval_$NAME
METHODS=${METHODS:-lr+sd,lr+sd/abort,lr+sd/abort/reuse}
mkdir -p results
IDS=results/adaptive_balanced_ids.txt
"$PY" - "$IDS" <<'PY'
import json, sys
recs = [json.loads(line) for line in open("benchmarks/adaptive_depths/eval_balanced/records.jsonl")]
ids = sorted({r["problem"]: r["index"] for r in recs}.items(), key=lambda kv: kv[1])
open(sys.argv[1], "w").write("".join(i + "\n" for i, _ in ids))
PY
"$LR" evaluate --task gsm_symbolic --task-seed 1 --problem-ids "@$IDS" --limit "$N" --methods "$METHODS" \
    --gamma1 3 --gamma2 4 --max-new-tokens "$TOKENS" --max-step-tokens 96 --max-model-len 1024 \
    --kv-cache-gib 0.5 --profile benchmarks/engine_costs/profile_sd.json --out "$OUT"
"$PY" -m benchmarks.order_effect "$OUT"
"$PY" -m benchmarks.round_split "$OUT"
