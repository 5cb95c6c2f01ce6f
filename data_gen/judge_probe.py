"""How well does each model-judge form agree with outcome labels, on the production path?

Reads a collected step-pair dataset (``lrtune collect``; best with ``--teacher rollout`` or
``consensus(...)``, whose labels are outcomes), and scores every pair with each judge spec
(default ``llm_judge(context)`` and ``llm_judge(paper)``) exactly as collect and the decoder
do: the pair's recorded ``context``/``draft_step``/``target_step`` (the teacher's inputs),
``make_verifier`` on the target backend, the identical-steps rule. Prints one real judge
prompt as token ids and decoded text (special tokens included), then per spec: AUROC and
agreement against the dataset's labels, acceptance rate, acceptance of identical pairs, and
seconds per pair; writes JSON.

    python -m benchmarks.judge_probe --data results/collect_rollout --out benchmarks/results/judge_probe.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", required=True, help="a collect output directory")
    p.add_argument("--specs", default="llm_judge(context),llm_judge(paper)", help="comma list of judge specs")
    p.add_argument("--limit", type=int, default=0, help="score at most this many pairs (0 = all)")
    p.add_argument("--sample", type=int, default=0,
                   help="score a seeded uniform sample of this many pairs (across problems and positions; 0 = all)")
    p.add_argument("--seed", type=int, default=0, help="seed of --sample")
    p.add_argument("--target", default="default", help="the judge model (default: the default target)")
    p.add_argument("--backend", default="vllm", choices=("vllm", "transformers"))
    p.add_argument("--max-model-len", type=int, default=4096)
    p.add_argument("--kv-cache-gib", type=float, default=1.0)
    p.add_argument("--out", default="benchmarks/results/judge_probe.json")
    return p


def _backend(args):
    from lrtune.models import resolve_model

    path = resolve_model(args.target, "target", progress=True)
    if args.backend == "transformers":
        from lrtune.backends.hf import HFBackend

        return HFBackend(path, name="judge")
    from lrtune.backends.vllm import VLLMBackend, VLLMConfig

    return VLLMBackend(path, VLLMConfig(max_model_len=args.max_model_len, kv_cache_gib=args.kv_cache_gib), name="judge")


def main(args: argparse.Namespace) -> dict:
    from lrtune.dataset import load_tables
    from lrtune.pairstats import auroc
    from lrtune.verifiers import StepPair, make_verifier
    from lrtune.verifiers.base import same_step

    pairs_t, _ = load_tables(Path(args.data))
    rows = pairs_t.to_pylist()
    n_all = len(rows)
    index = list(range(n_all))
    if getattr(args, "sample", 0) and args.sample < n_all:
        import random

        index = sorted(random.Random(getattr(args, "seed", 0)).sample(index, args.sample))
    if args.limit:
        index = index[:args.limit]
    rows = [rows[i] for i in index]
    pairs = [StepPair(r["context"] or "", r["draft_step"], r["target_step"]) for r in rows]
    labels = [bool(r["label"]) for r in rows]
    same = [same_step(p.draft, p.target) for p in pairs]
    backend = _backend(args)
    res: dict = {"data": args.data, "pairs": len(pairs), "dataset_pairs": n_all, "row_index": index,
                 "positives": sum(labels), "identical_pairs": sum(same),
                 "teacher": rows[0]["teacher"] if rows else None, "judge": args.target, "specs": {}}
    for spec in args.specs.split(","):
        ver = make_verifier(spec.strip(), backend=backend)
        sample = next((p for p, s in zip(pairs, same) if not s), None)
        example = None
        if sample is not None:
            ids = ver.prompts([sample])[0]
            example = {"token_ids": ids, "text": backend.decode(ids, skip_special_tokens=False)}
            print(f"--- {spec}: one production prompt, {len(ids)} token ids ---\n{ids}\n{example['text']}\n---",
                  flush=True)
        t0 = time.perf_counter()
        scores = ver.score(pairs)
        secs = time.perf_counter() - t0
        accept = [s >= ver.threshold for s in scores]
        ident = [a for a, s in zip(accept, same) if s]
        res["specs"][spec] = {
            "threshold": ver.threshold, "auroc": auroc(scores, labels),
            "agreement": sum(a == y for a, y in zip(accept, labels)) / len(labels) if labels else None,
            "accept_rate": sum(accept) / len(accept) if accept else None,
            "identical_acceptance": sum(ident) / len(ident) if ident else None,
            "seconds_per_pair": secs / len(pairs) if pairs else None, "example_prompt": example, "scores": scores}
        r = res["specs"][spec]
        print(f"{spec}: AUROC {r['auroc']}, agreement {r['agreement']}, accept rate {r['accept_rate']}, "
              f"accepts identical {r['identical_acceptance']}, {r['seconds_per_pair']} s/pair", flush=True)
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(res, indent=1))  # after every spec: a long probe keeps what it has
    return res


if __name__ == "__main__":
    from benchmarks import parse

    main(parse(make_parser()))
