"""What a score round's scoring call costs on vLLM, by the path it takes (default pair, real contexts).

    HF_HUB_OFFLINE=1 .venv/bin/python -m benchmarks.score_call --problems 8 \\
        --out benchmarks/score_rounds/score_call.json

For each problem and each context length in ``--contexts``: the target (its SD engine, γ2 = 4)
writes that many tokens after the prompt, as earlier rounds would (0: the chain follows the
prompt, as ``lrtune profile`` times it); then four chains of the draft's next ``--chain`` tokens (each
starting from another token, so no chain sits in the prefix cache) are prefilled after that
context in four ways, in an order rotated per problem:

* ``spec+scores``: drafter on, prompt log-probabilities of the chain: the call a score round makes;
* ``spec``: drafter on, no scores (the prefill alone);
* ``nospec+scores``: drafter off (its own prefix-cache namespace), scores;
* ``nospec``: drafter off, no scores.

Each call generates one token. Prints and writes (JSON) the seconds of every call, the tokens
the engine found cached, the per-method means, and the seconds per new token in units of one
decoded target token (π as ``lrtune profile`` reports it), by context length.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

WAYS = ("spec+scores", "spec", "nospec+scores", "nospec")


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--problems", type=int, default=8, help="gsm_symbolic problems (one context each)")
    p.add_argument("--task-seed", type=int, default=1)
    p.add_argument("--contexts", default="0,200,400", help="target tokens written before the chain (comma list)")
    p.add_argument("--chain", type=int, default=100, help="draft tokens in each scored chain")
    p.add_argument("--gamma2", type=int, default=4)
    p.add_argument("--draft-quantization", default="none", choices=["none", "int8"])
    p.add_argument("--max-num-batched-tokens", type=int, default=512)
    p.add_argument("--out", required=True, help="JSON file to write")
    return p


def main(args) -> int:
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    from lrtune.decoding import Decoder
    from lrtune.build import encode_prompts
    from lrtune.backends.base import GenParams
    from lrtune.backends.vllm_patches import NO_SPEC_KEY
    from lrtune.machine import machine_info
    from lrtune.tasks import get_task

    dec = Decoder.from_pretrained(
        method="lr+sd",
        verifier="target_logprob",
        gamma1=3,
        gamma2=args.gamma2,
        max_step_tokens=96,
        max_model_len=1536,
        progress=False,
        draft_quantization=args.draft_quantization,
        max_num_batched_tokens=args.max_num_batched_tokens,
    )
    target, draft = dec.decoder.target, dec.decoder.draft
    task = get_task("gsm_symbolic")
    prompts = encode_prompts(
        dec.models, [task.prompt(p) for p in task.load(limit=args.problems, seed=args.task_seed)], progress=False
    )
    llm = target.engine(args.gamma2)

    def call(ids, spec: bool, scores: bool, max_tokens: int = 1):
        sp = SamplingParams(
            temperature=0,
            max_tokens=max_tokens,
            prompt_logprobs=0 if scores else None,
            skip_reading_prefix_cache=False if scores else None,
            extra_args=None if spec else {NO_SPEC_KEY: True},
        )
        prompt = (
            TokensPrompt(prompt_token_ids=list(ids))
            if spec
            else TokensPrompt(prompt_token_ids=list(ids), cache_salt=NO_SPEC_KEY)
        )
        t = time.perf_counter()
        res = llm.generate([prompt], [sp], use_tqdm=False)[0]
        return time.perf_counter() - t, res

    call(prompts[0], True, False, 8)  # warm-up of both paths
    call(prompts[0], False, True, 8)
    t_plain, _ = call(prompts[0], False, False, 32)
    t_token = t_plain / 32
    rows = []
    contexts = [int(x) for x in args.contexts.split(",")]
    for (i, p), ctx in itertools.product(enumerate(prompts), contexts):
        base = list(p)
        if ctx:
            _, res = call(p, True, False, ctx)
            base += list(res.outputs[0].token_ids)
        call(base, True, False)  # the context in both prefix-cache namespaces, as a round finds it
        call(base, False, False)
        order = WAYS[i % 4 :] + WAYS[: i % 4]
        for k, way in enumerate(order):
            first = 11 + 2 * k
            chain = [first] + list(
                draft.generate([base + [first]], GenParams(max_tokens=args.chain - 1, stop_at_delimiter=False))
                .outputs[0]
                .token_ids
            )
            s, r = call(base + chain, spec=way.startswith("spec"), scores=way.endswith("scores"))
            new = len(base) + len(chain) - (r.num_cached_tokens or 0)
            rows.append(
                {
                    "problem": i,
                    "written": ctx,
                    "way": way,
                    "context": len(base),
                    "chain": len(chain),
                    "cached": r.num_cached_tokens,
                    "new_tokens": new,
                    "seconds": s,
                }
            )
            print(f"problem {i} context +{ctx} {way:14s} {s:.3f} s ({new} new tokens)", flush=True)
    by_context = []
    for ctx in contexts:
        mine = [r for r in rows if r["written"] == ctx]
        means = {w: statistics.mean(r["seconds"] for r in mine if r["way"] == w) for w in WAYS}
        by_context.append(
            {
                "written": ctx,
                "mean_context": statistics.mean(r["context"] for r in mine),
                "mean_seconds": means,
                "pi": {
                    w: statistics.mean(r["seconds"] / r["new_tokens"] for r in mine if r["way"] == w) / t_token
                    for w in WAYS
                },
                "spec_scores_over_nospec_scores": means["spec+scores"] / means["nospec+scores"],
            }
        )
        print(f"context +{ctx}: " + ", ".join(f"{w} {v:.3f} s" for w, v in means.items()), flush=True)
    out = {
        "machine": machine_info(),
        "draft_quantization": args.draft_quantization,
        "gamma2": args.gamma2,
        "chain_tokens": args.chain,
        "target_s_per_token": t_token,
        "by_context": by_context,
        "calls": rows,
    }
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.out}")
    dec.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(make_parser().parse_args()))
