"""Where do lossless decodes part on the real default pair? (the lossless issue's drift table)

Decodes gsm_symbolic problems with every method that is equal to target-only greedy in exact
arithmetic: ``target`` (batched, and alone for the first ``--alone`` problems), ``sd``,
``lr`` and ``lr+sd`` with the ``never`` verifier (every draft step rejected, so the text is
the target's own), under one ``--numerics`` mode. For each pair of methods: problems whose
tokens are identical, the median first difference, answers that differ, correctness flips in
each direction, and, against target-only, the gap between the top two logprobs at the first
difference (the near tie that flipped). Also each method's tokens/s and answers finished.
Resumable: methods already in ``--out`` with the same settings are kept.

    python -m benchmarks.lossless --numerics fast --out benchmarks/lossless/avx2_fast.json
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path

METHODS = ("target", "sd", "lr", "lr+sd")
PAIRS = (
    ("target/alone", "target"),
    ("target", "sd"),
    ("target", "lr"),
    ("target", "lr+sd"),
    ("sd", "lr+sd"),
)


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--numerics", choices=("fast", "exact"), default="fast")
    p.add_argument("--methods", default=",".join(METHODS), help="comma list of target, sd, lr, lr+sd")
    p.add_argument("--problems", type=int, default=30, help="gsm_symbolic problems (task seed --seed)")
    p.add_argument("--start", type=int, default=0, help="index of the first problem")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--alone", type=int, default=4, help="problems also decoded alone with target")
    p.add_argument("--concurrent", type=int, default=8, help="prompts in flight for target and sd")
    p.add_argument("--lr-concurrent", type=int, default=4, help="prompts in flight for lr and lr+sd")
    p.add_argument("--gamma1", type=int, default=2)
    p.add_argument("--gamma2", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument("--max-step-tokens", type=int, default=96)
    p.add_argument("--out", default="benchmarks/lossless/fast.json")
    return p


def _decode(dec, prompts, cfg, concurrent: int) -> dict:
    t0 = time.perf_counter()
    outs, batch = dec.decoder.decode_many(prompts, cfg, max_concurrent=concurrent)
    wall = time.perf_counter() - t0
    results = [o.result for o in outs]
    return {
        "wall_s": wall,
        "tokens_per_s": sum(len(r.token_ids) for r in results) / wall,
        "token_ids": [list(r.token_ids) for r in results],
        "texts": [r.text for r in results],
        "finished": [r.finish == "eos" for r in results],
    }


def _top2_gap(dec, prompt: list[int], prefix: list[int], gamma2: int) -> float | None:
    """logprob(top 1) − logprob(top 2) of the target's next token after ``prompt + prefix``."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    from lrtune.backends.vllm_patches import NO_SPEC_KEY

    llm = dec.decoder.target.engine(gamma2)
    params = SamplingParams(max_tokens=1, temperature=0.0, logprobs=2, extra_args={NO_SPEC_KEY: True})
    out = llm.generate([TokensPrompt(prompt_token_ids=prompt + prefix)], params, use_tqdm=False)[0].outputs[0]
    top = sorted((lp.logprob for lp in out.logprobs[0].values()), reverse=True)
    return top[0] - top[1] if len(top) >= 2 else None


def _settings(args: argparse.Namespace) -> dict:
    """The settings every stored decode depends on (a rerun with other --methods or --alone keeps it).

    Problems in flight are kept per method (``concurrent`` in its record): a method stored at
    another concurrency is decoded again, the others are kept.
    """
    per_run = ("out", "config", "methods", "alone", "concurrent", "lr_concurrent")
    return {k: v for k, v in vars(args).items() if k not in per_run}


def main(args: argparse.Namespace) -> dict:
    from lrtune.decodeconfig import DecodeConfig
    from lrtune.decoding import Decoder
    from lrtune.drift import Decode, first_difference, pair_drift
    from lrtune.machine import machine_info
    from lrtune.modelconfig import ModelConfig
    from lrtune.runfiles import write_atomic
    from lrtune.tasks import get_task

    methods = [m for m in args.methods.split(",") if m]
    unknown = sorted(set(methods) - set(METHODS))
    if unknown or "target" not in methods:
        raise SystemExit(f"lossless: error: --methods takes {', '.join(METHODS)} and needs target (got {args.methods})")
    out = Path(args.out)
    res = json.loads(out.read_text()) if out.is_file() else {}
    if res.get("settings") != _settings(args):
        res = {"settings": _settings(args), "methods": {}}
    res["machine"] = machine_info()
    task = get_task("gsm_symbolic")
    probs = task.load(limit=args.start + args.problems, seed=args.seed)[args.start :]
    base = DecodeConfig(
        method="lr+sd",
        gamma1=args.gamma1,
        gamma2=args.gamma2,
        max_new_tokens=args.max_new_tokens,
        max_step_tokens=args.max_step_tokens,
    )
    models = ModelConfig(verifier="never", numerics=args.numerics, max_model_len=1024)
    loaded: list = []

    def engines():  # started on first need: a rerun that only summarises stored decodes loads nothing
        if not loaded:
            loaded.append(Decoder.from_configs(models, base, load_all_methods=True))
            loaded[0].start_engines(base)
        return loaded[0]

    runs = [(m, m, args.lr_concurrent if "lr" in m else args.concurrent, len(probs)) for m in methods]
    if args.alone:
        runs.append(("target/alone", "target", 1, args.alone))
    for name, method, concurrent, n in runs:
        stored = res["methods"].get(name, {})
        if len(stored.get("token_ids", ())) == n and stored.get("concurrent") == concurrent:
            continue
        dec = engines()
        prompts = [dec.encode(task.prompt(p)) for p in probs[:n]]
        r = _decode(dec, prompts, replace(base, method=method), concurrent)
        r["answers"] = [list(task.check(p, t)) for p, t in zip(probs, r["texts"])]
        r["concurrent"] = concurrent
        res["methods"][name] = r
        print(f"{name}: {r['tokens_per_s']:.2f} tokens/s, {sum(r['finished'])}/{n} finished", flush=True)
        out.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(out, json.dumps(res, indent=1))

    def decodes(name: str, n: int) -> list[Decode]:
        m = res["methods"][name]
        return [Decode(tuple(t), a[0], bool(a[1])) for t, a in list(zip(m["token_ids"], m["answers"]))[:n]]

    res["pairs"] = {}
    for a, b in PAIRS:
        if a not in res["methods"] or b not in res["methods"]:
            continue
        n = min(len(res["methods"][a]["token_ids"]), len(res["methods"][b]["token_ids"]))
        drift = pair_drift(decodes(a, n), decodes(b, n)).as_dict()
        if a == "target":
            gaps = []
            for i, (x, y) in enumerate(zip(res["methods"][a]["token_ids"], res["methods"][b]["token_ids"])):
                d = first_difference(x, y)
                if d is not None and d < min(len(x), len(y)):
                    dec = engines()
                    gaps.append(_top2_gap(dec, dec.encode(task.prompt(probs[i])), x[:d], args.gamma2))
            drift["top2_gap_at_first_difference"] = gaps
        res["pairs"][f"{a} vs {b}"] = drift
        print(
            f"{a} vs {b}: {drift['identical']}/{n} identical, first difference (median) "
            f"{drift['first_difference_median']}, answers differ {drift['answers_differ']}, flips "
            f"right->wrong {drift['right_to_wrong']} wrong->right {drift['wrong_to_right']}",
            flush=True,
        )
    res["accuracy"] = {
        name: {
            "correct": sum(bool(a[1]) for a in m["answers"]),
            "finished": sum(m["finished"]),
            "problems": len(m["answers"]),
        }
        for name, m in res["methods"].items()
    }
    write_atomic(out, json.dumps(res, indent=1))
    return res


if __name__ == "__main__":
    from benchmarks import parse

    main(parse(make_parser()))
