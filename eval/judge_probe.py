"""How well does a model verifier discriminate? A synthetic-pair benchmark.

The target writes solutions to a few ``gsm_symbolic`` problems; each of its steps s gives
pairs (context, draft, target=s): the same step (label 1), the step with its last number
changed, the next step, and a step of another problem (label 0). The verifier scores every
pair; the script prints and writes AUROC and the mean score per kind.

    python -m eval.judge_probe --verifier llm_judge --problems 3 --out results/judge_probe.json
    python -m eval.judge_probe --verifier llm_judge --zero-shot     # the paper's prompt alone
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import time
from pathlib import Path


def synthetic_pairs(solutions: list[tuple[str, list[str]]], seed: int = 0, per_solution: int = 3):
    """(pairs, labels, kinds) from (question, steps) solutions (see module docstring)."""
    from lrtune.verifiers.base import StepPair

    rng = random.Random(seed)

    def changed_number(s: str) -> str | None:
        nums = list(re.finditer(r"\d+", s))
        if not nums:
            return None
        m = nums[-1]
        return s[:m.start()] + str(int(m.group()) + rng.randint(2, 9)) + s[m.end():]

    pairs, labels, kinds = [], [], []
    for i, (q, steps) in enumerate(solutions):
        other = solutions[(i + 1) % len(solutions)][1]
        for k, s in enumerate(steps[:per_solution]):
            ctx = q + "\n\n" + "\n\n".join(steps[:k])
            cands = [(s, 1, "same"), (changed_number(s), 0, "number"),
                     (steps[k + 1] if k + 1 < len(steps) else None, 0, "next"),
                     (other[min(k, len(other) - 1)] if other else None, 0, "other")]
            for d, y, kind in cands:
                if d is not None and (y == 1 or d != s):
                    pairs.append(StepPair(ctx, d, s))
                    labels.append(y)
                    kinds.append(kind)
    return pairs, labels, kinds


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--verifier", default="llm_judge")
    p.add_argument("--problems", type=int, default=3)
    p.add_argument("--task-seed", type=int, default=11)
    p.add_argument("--max-new-tokens", type=int, default=160)
    p.add_argument("--zero-shot", action="store_true", help="llm_judge without the worked examples")
    p.add_argument("--target", default="default")
    p.add_argument("--out", default="results/judge_probe.json")
    args = p.parse_args(argv)

    from data_gen.stats import auroc
    from lrtune.backends.base import GenParams
    from lrtune.backends.hf import HFBackend
    from lrtune.models import resolve_model
    from lrtune.tasks import gsm_symbolic
    from lrtune.verifiers import make_verifier

    be = HFBackend(resolve_model(args.target, "target", progress=True))
    probs = gsm_symbolic.load(limit=args.problems, seed=args.task_seed)
    t0 = time.perf_counter()
    outs = be.generate([be.encode_prompt(gsm_symbolic.prompt(q)) for q in probs],
                       GenParams(max_tokens=args.max_new_tokens, stop_at_delimiter=False, temperature=0.0)).outputs
    gen_s = time.perf_counter() - t0
    sols = [(gsm_symbolic.prompt(q), [s for s in o.text.split("\n\n") if s.strip()]) for q, o in zip(probs, outs)]
    pairs, labels, kinds = synthetic_pairs(sols)
    ver = make_verifier(args.verifier, backend=be)
    if args.zero_shot and hasattr(ver, "prompts"):
        ver.prompts = super(type(ver), ver).prompts  # the base class's single-turn prompt
    t0 = time.perf_counter()
    scores = []
    for i in range(0, len(pairs), 8):
        scores += ver.score(pairs[i:i + 8])
    score_s = time.perf_counter() - t0
    by_kind = {k: sum(s for s, kk in zip(scores, kinds) if kk == k) / kinds.count(k) for k in sorted(set(kinds))}
    res = {"verifier": args.verifier, "zero_shot": args.zero_shot, "pairs": len(pairs), "auroc": auroc(scores, labels),
           "mean_score_by_kind": by_kind, "seconds_per_pair": score_s / max(1, len(pairs)), "generation_s": gen_s,
           "scores": scores, "labels": labels, "kinds": kinds}
    print(f"{args.verifier}{' (zero-shot)' if args.zero_shot else ''}: AUROC {res['auroc']:.3f} on {len(pairs)} pairs; "
          + ", ".join(f"{k} {v:.3f}" for k, v in by_kind.items()) + f"; {res['seconds_per_pair']:.2f} s/pair")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
