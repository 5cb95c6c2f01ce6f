"""Where do batched and one-at-a-time greedy outputs part on the real default pair?

Decodes the given gsm_symbolic problems with LR+SD (γ1 = 2, γ2 = 4) and the ``never``
verifier (every draft rejected, so the output is the target's own greedy text and no
verifier decision is involved) once alone and once batched with ``--others`` other problems
in flight, then with ``target`` (plain decoding, one engine call) the same way, and reports
for each problem the first token position where the two differ (None: identical). Writes JSON.

    python -m benchmarks.batch_invariance --problems 7,8 --others 3 \
        --out benchmarks/batched_decoding/batch_invariance.json
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

from lrtune.drift import first_difference


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--problems", default="7,8", help="indices of gsm_symbolic problems (task seed 0)")
    p.add_argument("--others", type=int, default=3, help="other problems in flight with each one")
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument("--kv-cache-gib", type=float, default=2.0)
    p.add_argument("--out", default="benchmarks/batched_decoding/batch_invariance.json")
    return p


def main(args: argparse.Namespace) -> dict:
    from lrtune.decoding import Decoder
    from lrtune.modelconfig import ModelConfig
    from lrtune.decoder import DecodeConfig
    from lrtune.tasks import get_task

    idx = [int(x) for x in args.problems.split(",")]
    task = get_task("gsm_symbolic")
    probs = task.load(limit=max(idx) + args.others + 1, seed=0)
    base = DecodeConfig(method="lr+sd", gamma1=2, gamma2=4, max_new_tokens=args.max_new_tokens, max_step_tokens=96)
    dec = Decoder.from_configs(
        ModelConfig(verifier="never", kv_cache_gib=args.kv_cache_gib, max_model_len=1024), base, load_all_methods=True
    )
    dec.start_engines(base)
    res: dict = {"settings": vars(args), "problems": {}}
    for method in ("lr+sd", "target"):
        cfg = replace(base, method=method)
        for i in idx:
            others = [j for j in range(len(probs)) if j not in idx][: args.others]
            prompts = [dec.encode(task.prompt(probs[j])) for j in [i, *others]]
            alone = dec.decoder.decode(prompts[0], cfg)[0].token_ids
            outs, _ = dec.decoder.decode_many(prompts, cfg, max_concurrent=len(prompts))
            together = outs[0][0].token_ids
            d = first_difference(alone, together)
            res["problems"][f"{method}:{probs[i].id}"] = {
                "first_difference": d,
                "tokens_alone": len(alone),
                "tokens_batched": len(together),
            }
            print(method, probs[i].id, "first difference at", d, "of", len(alone), flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=1))
    return res


if __name__ == "__main__":
    from benchmarks import parse

    main(parse(make_parser()))
