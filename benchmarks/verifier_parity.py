"""Why does a student accept more draft steps in decoding than on its test split? Both inputs side by side.

Reads a checkpoint, the collect data it was trained on (its test split is rebuilt exactly as
``lrtune train verifier`` built it) and an evaluate directory whose records hold the pairs the
student judged while decoding (``--record-pairs``). For both sets of pairs it re-scores every
pair with the checkpoint (decode pairs: their recorded score must come back), then reports the
acceptance overall, on pairs whose steps are the same text (scored 1 without the model) and on
the rest, the score distribution of the rest, the draft position, the context's length in
characters (and whether the student's context view had to cut it), the steps' lengths, and
one real input of each set as the student's tokenizer sees it: token ids and decoded text,
special tokens included.

    python -m benchmarks.verifier_parity --checkpoint results/demo/verifier \\
        --data results/demo/collect --eval results/demo/eval --out benchmarks/calibration/parity.json
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", required=True, help="a verifier checkpoint (lrtune train verifier)")
    p.add_argument("--data", required=True, help="the collect directory it was trained on")
    p.add_argument("--eval", required=True, help="an evaluate directory whose records hold judged pairs")
    p.add_argument(
        "--method", default=None, help="the row to read (default: every row whose verifier is the checkpoint)"
    )
    p.add_argument("--out", required=True, help="JSON file to write")
    return p


def describe(pairs, scores, threshold: float, context_chars: int) -> dict:
    """Acceptance and input statistics of ``pairs`` scored ``scores`` at ``threshold``."""
    from lrtune.verifiers.base import same_step

    same = [same_step(p.draft, p.target) for p in pairs]
    rest = [s for s, m in zip(scores, same) if not m]

    def q(xs, f):
        return statistics.quantiles(xs, n=4)[f] if len(xs) >= 4 else None

    return {
        "pairs": len(pairs),
        "acceptance": sum(s >= threshold for s in scores) / len(scores) if scores else None,
        "same_text_share": sum(same) / len(same) if same else None,
        "acceptance_of_different_steps": sum(s >= threshold for s in rest) / len(rest) if rest else None,
        "different_steps": len(rest),
        "score_of_different_steps": {
            "q1": q(rest, 0),
            "median": statistics.median(rest) if rest else None,
            "q3": q(rest, 2),
            "min": min(rest, default=None),
            "max": max(rest, default=None),
        },
        "context_chars_median": statistics.median(len(p.context) for p in pairs) if pairs else None,
        "context_cut_share": sum(len(p.context.strip()) > context_chars for p in pairs) / len(pairs) if pairs else None,
        "draft_chars_median": statistics.median(len(p.draft) for p in pairs) if pairs else None,
        "target_chars_median": statistics.median(len(p.target) for p in pairs) if pairs else None,
    }


def show_input(v, pair) -> dict:
    """The cross-encoder input of ``pair`` as its tokenizer encodes it (ids and text, specials kept)."""
    from lrtune.verifiers.distilled import encode_cross_encoder

    tok = getattr(v, "tokenizer", None)
    if tok is None:
        return {}
    enc = encode_cross_encoder(
        tok, [pair], v.meta.get("context_chars", 800), v.meta.get("max_length", 256), v.meta.get("context_form", "tail")
    )
    ids = enc["input_ids"][0].tolist()
    return {"input_ids": ids, "text": tok.decode(ids, skip_special_tokens=False), "tokens": len(ids)}


def main(argv=None) -> int:
    args = make_parser().parse_args(argv)
    from lrtune.eval.records import load_records
    from lrtune.train.data import load_pairs, split_examples
    from lrtune.train.students import score_pairs
    from lrtune.verifiers import distilled
    from lrtune.verifiers.pairrecords import pair_from_columns

    v = distilled.load(args.checkpoint)
    meta = v.meta
    tr = meta["training"]
    examples, _ = load_pairs(args.data)
    test = split_examples(examples, tr["val_fraction"], tr["test_fraction"], tr["seed"])["test"]
    test_pairs = [e.pair for e in test]
    test_scores = score_pairs(v, test_pairs)
    recs = load_records(Path(args.eval) / "records.jsonl")
    ckpt = str(Path(args.checkpoint).resolve())
    rows = [
        r
        for r in recs
        if r.get("pairs")
        and (r["method"] == args.method if args.method else str(Path(str(r.get("verifier"))).resolve()) == ckpt)
    ]
    judged = [p for r in rows for p in r["pairs"] if p.get("asked", True)]
    dec_pairs = [pair_from_columns(p) for p in judged]
    again = [v.score([p])[0] for p in dec_pairs]
    drift = max((abs(a - p["score"]) for a, p in zip(again, judged)), default=0.0)
    ctx = meta.get("context_chars", 800)
    res = {
        "checkpoint": args.checkpoint,
        "threshold": v.threshold,
        "calibration": meta.get("calibration"),
        "rows": sorted({r["method"] for r in rows}),
        "rescore_max_abs_diff": drift,
        "test_split": describe(test_pairs, test_scores, v.threshold, ctx),
        "test_split_teacher_acceptance": sum(e.label for e in test) / len(test) if test else None,
        "decoding": describe(dec_pairs, [p["score"] for p in judged], v.threshold, ctx),
        "decoding_by_position": {},
        "inputs": {},
    }
    for k in sorted({p["position"] for p in judged}):
        sel = [p for p in judged if p["position"] == k]
        res["decoding_by_position"][k] = {"pairs": len(sel), "acceptance": sum(p["accepted"] for p in sel) / len(sel)}
    from lrtune.verifiers.base import same_step

    for name, pairs in (("test_split", test_pairs), ("decoding", dec_pairs)):
        diff = [p for p in pairs if not same_step(p.draft, p.target)]
        if diff:
            res["inputs"][name] = show_input(v, max(diff, key=lambda p: len(p.context)))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=1))
    for name in ("test_split", "decoding"):
        d = res[name]
        print(
            f"{name}: {d['pairs']} pairs, accepts {d['acceptance']:.2f}; same text {d['same_text_share']:.2f}; "
            f"different steps accepted {d['acceptance_of_different_steps']}, scores {d['score_of_different_steps']}; "
            f"context median {d['context_chars_median']} chars, cut {d['context_cut_share']:.2f}"
        )
    print(f"re-scored decode pairs differ by at most {drift:.2e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
