"""Train/serve parity of a verifier: the share of draft steps it accepts while decoding beside
the share it accepted on its checkpoint's test split, each with a 95% interval, and a flag
when the intervals do not overlap (the verifier does not do in decoding what it promised);
and, for a checkpoint with an accuracy budget (``lrtune calibrate --max-accuracy-loss Δ``),
the share of answers that differ from target-only against Δ.

Decode-time acceptance A_dec = Σ accepted / Σ asked over the pairs a row's verifier was asked
(``pairs`` of evaluate's records; pairs rejected unasked because one step ends the answer are
left out), interval by a bootstrap over problems. Test-split acceptance A_test from the
checkpoint's metadata, its interval a bootstrap over test problems where the checkpoint
recorded one (``acceptance_ci95``), else Wilson's.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from lrtune.eval.metrics import wilson_ci
from lrtune.pairstats import bootstrap_interval


def decode_acceptance(records: Sequence[dict], seed: int = 0) -> dict | None:
    """A_dec of the records' asked pairs with its bootstrap interval over problems; None
    when no record holds a judged pair."""
    flat = [(r["problem"], bool(p["accepted"])) for r in records for p in r.get("pairs") or () if p.get("asked", True)]
    if not flat:
        return None
    groups = [g for g, _ in flat]

    def rate(rows: list[int]) -> float | None:
        return sum(flat[i][1] for i in rows) / len(rows) if rows else None

    lo, hi = bootstrap_interval(rate, groups, seed=seed)
    return {
        "acceptance": rate(list(range(len(flat)))),
        "ci95": [lo, hi],
        "pairs": len(flat),
        "problems": len(set(groups)),
    }


def checkpoint_meta(verifier: str | None) -> dict | None:
    """The metadata of a checkpoint verifier; None for a training-free verifier or an
    unreadable checkpoint."""
    if not verifier or not Path(verifier).expanduser().is_dir():
        return None
    from lrtune.errors import ConfigError
    from lrtune.verifiers.distilled import read_meta

    try:
        return read_meta(verifier)
    except ConfigError:
        return None


def promised_acceptance(meta: dict | None) -> dict | None:
    """A_test of a checkpoint (``meta``: its metadata) with an interval and how its threshold
    was set; None without a test split."""
    test = ((meta or {}).get("metrics") or {}).get("test") or {}
    a, n = test.get("acceptance"), test.get("n")
    if not isinstance(a, (int, float)) or not isinstance(n, int) or n <= 0:
        return None
    ci = test.get("acceptance_ci95") or list(wilson_ci(round(a * n), n) or (None, None))
    calib = meta.get("calibration") or {}
    return {
        "acceptance": float(a),
        "ci95": ci,
        "pairs": n,
        "teacher_acceptance": test.get("teacher_acceptance"),
        "false_accept_rate": test.get("false_accept_rate"),
        "threshold_rule": calib.get("method"),
        "max_false_accept": calib.get("max_false_accept"),
        "confidence": calib.get("confidence"),
        "certified": calib.get("certified"),
    }


def changed_answers(records: Sequence[dict], label: str, baseline: str = "target") -> dict | None:
    """Share of problems whose answer under ``label`` differs from ``baseline``'s, with its
    two-sided 95% Clopper–Pearson interval; None without paired problems."""
    from scipy.stats import beta

    base = {r["problem"]: r.get("answer") for r in records if r["method"] == baseline}
    pairs = [
        (r["problem"], r.get("answer") != base[r["problem"]])
        for r in records
        if r["method"] == label and r["problem"] in base
    ]
    if not pairs:
        return None
    n, k = len(pairs), sum(c for _, c in pairs)
    lo = 0.0 if k == 0 else float(beta.ppf(0.025, k, n - k + 1))
    hi = 1.0 if k == n else float(beta.ppf(0.975, k + 1, n - k))
    return {"changed": k, "problems": n, "rate": k / n, "ci95": [lo, hi]}


def promised_accuracy(meta: dict | None) -> dict | None:
    """A checkpoint's certified accuracy budget (``lrtune calibrate --max-accuracy-loss``), or None."""
    b = (meta or {}).get("accuracy_budget")
    if not isinstance(b, dict) or not b.get("certified"):
        return None
    return {
        "max_accuracy_loss": b.get("max_accuracy_loss"),
        "confidence": b.get("confidence"),
        "threshold": b.get("threshold"),
        "problems": b.get("problems"),
    }


def overlap(a: Sequence[float | None], b: Sequence[float | None]) -> bool | None:
    """True when intervals ``a`` and ``b`` share a point; None when either is unknown."""
    if None in (*a, *b):
        return None
    return a[0] <= b[1] and b[0] <= a[1]


def parity(records: Sequence[dict], labels: Sequence[str], verifier_of: dict[str, str | None]) -> dict[str, dict]:
    """Per method label whose records hold judged pairs: ``decode`` (A_dec), ``test_split``
    (A_test of its checkpoint, or None) and ``gap`` (True when their intervals do not overlap)."""
    out = {}
    for lab in labels:
        dec = decode_acceptance([r for r in records if r["method"] == lab])
        if dec is None:
            continue
        meta = checkpoint_meta(verifier_of.get(lab))
        promised = promised_acceptance(meta)
        ov = overlap(dec["ci95"], promised["ci95"]) if promised else None
        budget = promised_accuracy(meta)
        changed = changed_answers(records, lab)
        if budget and changed:
            budget = {**budget, "measured": changed, "held": changed["rate"] <= budget["max_accuracy_loss"]}
        out[lab] = {
            "verifier": verifier_of.get(lab),
            "decode": dec,
            "test_split": promised,
            "gap": None if ov is None else not ov,
            "accuracy_budget": budget,
        }
    return out


def alarming(row: dict) -> bool:
    """True when a row breaks a promise: a parity gap, or an accuracy budget not held."""
    b = row.get("accuracy_budget") or {}
    return bool(row["gap"]) or b.get("held") is False


def parity_lines(rows: dict[str, dict]) -> list[str]:
    """One plain line per row: decode-time beside test-split acceptance, and the flag."""

    def ci(c) -> str:
        return "" if not c or None in c else f" [{c[0]:.2f}, {c[1]:.2f}]"

    lines = []
    for lab, r in rows.items():
        d, t = r["decode"], r["test_split"]
        line = f"{lab}: accepts {d['acceptance']:.2f}{ci(d['ci95'])} of {d['pairs']} pairs in decoding"
        if t:
            line += f", {t['acceptance']:.2f}{ci(t['ci95'])} of {t['pairs']} on its test split"
            line += " — GAP beyond the intervals" if r["gap"] else ""
        lines.append(line)
        b = r.get("accuracy_budget")
        if b and b.get("measured"):
            m = b["measured"]
            lines.append(
                f"{lab}: promised <= {b['max_accuracy_loss']:g} changed answers at {b['confidence']:g}: "
                f"measured {m['rate']:.2f}{ci(m['ci95'])} ({m['changed']} of {m['problems']}) — "
                + ("held" if b["held"] else "NOT held")
            )
    return lines
