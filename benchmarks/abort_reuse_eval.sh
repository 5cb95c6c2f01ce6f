#!/usr/bin/env bash
# Early abort and draft-prefix reuse (issue 22): one interleaved latency run on the default pair,
# rows target (always, the baseline), lr+sd, lr+sd/abort, lr+sd/abort/reuse (γ1 = 3, γ2 = 4), on the
# held-out gsm_symbolic problems of the balanced issue-22 run (their ids, read from its records,
# so the two runs decode the same problems). Resumable: rerun it.
#   [NAME=...] [METHODS=...] bash benchmarks/issue22_abort_reuse.sh [PROBLEMS] [MAX_NEW_TOKENS]
set -euo pipefail
export HF_HUB_OFFLINE=1
N=${1:-24}; TOKENS=${2:-512}
LR=${LRTUNE:-.venv/bin/lrtune}; PY=${PYTHON:-.venv/bin/python}
NAME=${NAME:-issue22_reuse}; OUT=benchmarks/results/eval_$NAME
METHODS=${METHODS:-lr+sd,lr+sd/abort,lr+sd/abort/reuse}
mkdir -p results
IDS=results/issue22_balanced_ids.txt
"$PY" - "$IDS" <<'PY'
import json, sys
recs = [json.loads(line) for line in open("benchmarks/results/eval_issue22_balanced/records.jsonl")]
ids = sorted({r["problem"]: r["index"] for r in recs}.items(), key=lambda kv: kv[1])
open(sys.argv[1], "w").write("".join(i + "\n" for i, _ in ids))
PY
"$LR" evaluate --task gsm_symbolic --task-seed 1 --problem-ids "@$IDS" --limit "$N" --methods "$METHODS" \
    --gamma1 3 --gamma2 4 --max-new-tokens "$TOKENS" --max-step-tokens 96 --max-model-len 1024 \
    --kv-cache-gib 0.5 --profile benchmarks/results/profile_sd.json --out "$OUT"
"$PY" -m benchmarks.order_effect "$OUT"
"$PY" -m benchmarks.round_split "$OUT"
