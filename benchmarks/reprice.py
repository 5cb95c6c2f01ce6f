"""Re-price the rows of a committed ``lrtune evaluate`` run with the current speedup model.

The model's g(γ2) takes the per-token acceptance α2. Until ``SDCounters.stopped`` was
counted, evaluate fed it the accepted/drafted rate, which is lower under the same i.i.d.
model (a pass accepts at most γ2 tokens), so SD and LR+SD rows were predicted too slow.
This script recomputes every row from the run's own ``records.jsonl`` exactly as
``evaluate`` now does (:func:`lrtune.eval.evaluate.predict_rows`: α1, α2, c and step lengths from
the records; b(n) from the run's ``summary.json``; for lr+sd rows the batch cost of rows
decoded with SD, from the summary or ``--sd-profile``, a profile with ``batch_cost_sd``), and
writes, per method, the α2 and the prediction the run's summary holds beside the current
ones, with measured/predicted for both.
Records written before ``sd_stopped`` existed derive it from passes of one length
(:func:`lrtune.backends.base.stopped_passes`). No model runs.

    python -m benchmarks.reprice benchmarks/adaptive_depths/eval_balanced [RUN ...] [--sd-profile P] --out FILE
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def reprice(run: Path, sd_profile: str | None = None) -> dict:
    """Per method of ``run``: old and current α2, predicted speedup and measured/predicted."""
    from lrtune.eval import metrics
    from lrtune.eval.evaluate import parse_methods, predict_rows, sd_curve
    from lrtune.batchcost import read_profile_sd_curve

    cfg = json.loads((run / "config.json").read_text())
    summary = json.loads((run / "summary.json").read_text())
    opts, dec = cfg["options"], cfg["decode"]
    specs = [
        s
        for s in parse_methods(opts["methods"], opts.get("sweep"), dec["gamma1"], dec["gamma2"])
        if s.label in summary["methods"]
    ]
    records = [json.loads(line) for line in (run / "records.jsonl").read_text().splitlines() if line.strip()]
    labels = [s.label for s in specs]
    problems = {r["problem"] for r in records if r["method"] == "target"}
    recs = [r for r in records if r["problem"] in problems]
    rows = metrics.summarize(recs, labels)
    b = {int(n): float(v) for n, v in (summary.get("batch_cost") or {}).items()} or None
    b_sd = sd_curve(summary.get("batch_cost_sd"))
    if sd_profile:
        got = read_profile_sd_curve(sd_profile)
        b_sd = None if got is None else {"gamma2": got[0], "curve": got[1]}
    predict_rows(specs, rows, recs, b, opts.get("mode", "latency") == "latency", cfg["models"]["verifier"], b_sd)
    out = {}
    for s in specs:
        old, new = summary["methods"][s.label], rows[s.label]
        out[s.label] = {
            "speedup_total": new.get("speedup_total"),
            "alpha2_summary": old.get("alpha2"),
            "alpha2": new.get("alpha2"),
            "predicted_summary": old.get("predicted_speedup"),
            "predicted": new.get("predicted_speedup"),
            "measured_over_predicted_summary": old.get("measured_over_predicted"),
            "measured_over_predicted": new.get("measured_over_predicted"),
        }
    return {"run": str(run), "problems": len(problems), "batch_cost_sd": b_sd, "sd_profile": sd_profile, "methods": out}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", help="evaluate output folders (records.jsonl, summary.json, config.json)")
    p.add_argument(
        "--sd-profile", help="an lrtune profile JSON whose batch_cost_sd prices the lr+sd rows' target batches"
    )
    p.add_argument("--out", required=True, help="result JSON")
    args = p.parse_args(argv)
    res = [reprice(Path(r), args.sd_profile) for r in args.runs]
    Path(args.out).write_text(json.dumps(res, indent=1) + "\n")
    f = lambda v: "—" if v is None else f"{v:.3f}"  # noqa: E731
    for r in res:
        print(f"{r['run']} ({r['problems']} problems)")
        for m, v in r["methods"].items():
            print(
                f"  {m}: α2 {f(v['alpha2_summary'])} -> {f(v['alpha2'])}; predicted {f(v['predicted_summary'])} -> "
                f"{f(v['predicted'])}; measured {f(v['speedup_total'])}; measured/predicted "
                f"{f(v['measured_over_predicted_summary'])} -> {f(v['measured_over_predicted'])}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
