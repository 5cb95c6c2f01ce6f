"""Does the method that ran just before a decode change its time? (the adaptive vs
best-fixed gap.)

Reads an evaluate run's ``records.jsonl`` (in the order the decodes ran) and takes the
problems on which the rows in ``--same`` did identical work (the same tokens, the same SD
drafts, no LR round): there any time difference is the machine's, not the method's. For each
such decode it divides its wall time by the mean of the identical decodes of that problem and
groups the ratios by the kind of decode that ran right before it (``target``, ``lr`` for any
LR row, ``sd`` for a row of identical SD work, ``first`` when it opened the problem). Also
writes the paired comparisons of ``lrtune.eval.metrics.paired_comparisons`` (A over B with a 95%
bootstrap interval over problems). Writes ``order_effect.json`` beside the records.

    python -m benchmarks.order_effect benchmarks/adaptive_depths/eval_512
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path


def predecessor_ratios(records: list[dict], same: list[str]) -> dict[str, list[float]]:
    """Wall time / mean wall time of the identical decodes, grouped by the kind of the decode
    that ran right before (records in run order)."""
    by: dict[str, dict[str, dict]] = {}
    seq: dict[str, list[str]] = {}
    for r in records:
        by.setdefault(r["problem"], {})[r["method"]] = r
        seq.setdefault(r["problem"], []).append(r["method"])
    out: dict[str, list[float]] = {}
    for p, rows in by.items():
        if not all(m in rows for m in same):
            continue
        work = {
            (rows[m]["tokens"], (rows[m]["stats"] or {}).get("sd_drafts"), (rows[m]["stats"] or {}).get("draft_calls"))
            for m in same
        }
        if len(work) != 1 or next(iter(work))[2]:  # not identical work, or an LR round ran
            continue
        mean = statistics.fmean(rows[m]["wall_s"] for m in same)
        order = seq[p]
        for m in same:
            i = order.index(m)
            prev = "first" if i == 0 else order[i - 1]
            kind = "first" if prev == "first" else "sd" if prev in same else "lr" if prev.startswith("lr") else prev
            out.setdefault(kind, []).append(rows[m]["wall_s"] / mean)
    return out


def main(argv: list[str] | None = None) -> int:
    from lrtune.eval.metrics import paired_comparisons

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run", help="an evaluate output folder (holds records.jsonl)")
    p.add_argument(
        "--same", default="sd,adaptive,best-fixed", help="rows whose identical decodes are compared (comma list)"
    )
    args = p.parse_args(argv)
    run = Path(args.run)
    records = [json.loads(line) for line in (run / "records.jsonl").read_text().splitlines() if line.strip()]
    labels = list(dict.fromkeys(r["method"] for r in records))
    ratios = predecessor_ratios(records, [m for m in args.same.split(",") if m])
    res = {
        "run": str(run),
        "same_work_rows": args.same,
        "by_predecessor": {k: {"decodes": len(v), "mean_ratio": statistics.fmean(v)} for k, v in ratios.items()},
        "paired": paired_comparisons(records, labels),
    }
    (run / "order_effect.json").write_text(json.dumps(res, indent=1) + "\n")
    for k, v in res["by_predecessor"].items():
        print(f"after {k}: {v['decodes']} decodes, wall / mean of the identical decodes {v['mean_ratio']:.3f}")
    for c in res["paired"]:
        lo, hi = c["ratio_ci95"]
        print(f"{c['a']} over {c['b']}: {c['ratio']:.3f} [{lo:.3f}, {hi:.3f}] on {c['problems']} problems")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
