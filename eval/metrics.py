"""Pure summary math for evaluation records (no I/O).

A record is one (problem, method) decode: ``problem``, ``method`` (a label), ``kind``
(target | sd | lr | lr+sd), ``gamma1``, ``gamma2``, ``correct``, ``wall_s``, ``tokens``
and ``stats`` (``DecodeStats.to_dict()``). Speedup of a method on a problem is
``wall(target) / wall(method)`` on that problem, so a summary needs the target-only
record of every problem it uses.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable, Sequence

from lrtune.stats import DecodeStats

Z95 = 1.959963984540054


def wilson_ci(k: int, n: int, z: float = Z95) -> tuple[float, float] | None:
    """Wilson score interval for a proportion k/n (95% by default); None when n = 0."""
    if n == 0:
        return None
    p = k / n
    den = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    lo = 0.0 if k == 0 else max(0.0, centre - half)
    hi = 1.0 if k == n else min(1.0, centre + half)
    return lo, hi


def bootstrap_ci(
    values: Sequence[float],
    stat: Callable[[Sequence[float]], float] = statistics.fmean,
    n_boot: int = 2000,
    seed: int = 0,
    level: float = 0.95,
) -> tuple[float, float] | None:
    """Percentile bootstrap interval of ``stat`` over ``values`` (seeded, reproducible)."""
    if not values:
        return None
    if len(values) == 1:
        return float(values[0]), float(values[0])
    rng = random.Random(seed)
    n = len(values)
    boots = sorted(stat([values[rng.randrange(n)] for _ in range(n)]) for _ in range(n_boot))
    lo = boots[int((1 - level) / 2 * (n_boot - 1))]
    hi = boots[int((1 + level) / 2 * (n_boot - 1))]
    return float(lo), float(hi)


def balanced_order(n: int, i: int) -> list[int]:
    """Run order of ``n`` methods on the ``i``-th problem: a row of a Williams design, so that
    over every ``n`` problems (``2n`` when ``n`` is odd) each method runs at each position
    once and right after every other method once. A plain rotation (A B C, B C A, ...) keeps
    the cyclic order, so one method always follows the same other one and inherits what that
    one leaves behind in the engine and the CPU caches (measured: an SD decode right after an
    identical SD decode ran ~3% faster than the same decode after an LR row).
    Row 0 is 0, 1, n-1, 2, n-2, ...; row i adds i (mod n); for odd n, rows n..2n-1 are
    rows 0..n-1 reversed."""
    if n <= 0:
        return []
    base, lo, hi = [0], 1, n - 1
    while len(base) < n:
        base.append(lo)
        lo += 1
        if len(base) < n:
            base.append(hi)
            hi -= 1
    period = n if n % 2 == 0 else 2 * n
    k = i % period
    row = [(b + k) % n for b in base]
    return row[::-1] if k >= n else row


def answer_counts(records: Sequence[dict]) -> dict[str, int]:
    """Answers ``n``, ``correct`` and ``finished`` (ended by EOS within the token budget, not
    cut off by it) of some records."""
    return {
        "n": len(records),
        "correct": sum(bool(r["correct"]) for r in records),
        "finished": sum(r.get("finish") == "eos" for r in records),
    }


def round_kinds(stats: DecodeStats) -> dict | None:
    """Each round kind's share of the rounds and of the round seconds (lr: the target generated
    its own steps; score: a prefill judged the draft steps; sd: γ1 = 0, no draft steps); None
    for a method without rounds."""
    n = stats.lr_rounds + stats.score_rounds + stats.sd_rounds
    secs = stats.lr_round_s + stats.score_round_s + stats.sd_round_s
    if not n:
        return None
    return {
        k: {
            "rounds": getattr(stats, f"{k}_rounds"),
            "share": getattr(stats, f"{k}_rounds") / n,
            "seconds": getattr(stats, f"{k}_round_s"),
            "time_share": getattr(stats, f"{k}_round_s") / secs if secs else None,
        }
        for k in ("lr", "score", "sd")
    }


def exploration(records: Sequence[dict], wall: float) -> dict:
    """What trying round kinds cost: ``exploration_s``, the sum over problems of
    :attr:`DecodeStats.exploration_s` (each problem's slower-kind rounds against the kind it
    found fastest), and its share of the wall time; None for a method without rounds."""
    per = [DecodeStats.from_dict(r["stats"]).exploration_s for r in records]
    per = [x for x in per if x is not None]
    if not per:
        return {"exploration_s": None, "exploration_share": None}
    total = sum(per)
    return {"exploration_s": total, "exploration_share": total / wall if wall else None}


def rate_guard(records: Sequence[dict]) -> dict | None:
    """The adaptive controller's measured-rate guard over the run (the bandit's
    ``controller_state`` in each record, in problem order): the state after the last problem
    and ``lr_closed_from``, the index of the first problem after which no γ1 > 0 arm could be
    tried (None: LR stayed open; a re-test may open it again, ``guard_retests``); None when no
    record holds a state."""
    states = sorted((r["index"], r["controller_state"]) for r in records if isinstance(r.get("controller_state"), dict))
    if not states:
        return None
    closed = next((i for i, st in states if st.get("lr_open") is False), None)
    return {**states[-1][1], "lr_closed_from": closed}


def summarize_method(records: Sequence[dict], baseline: dict[str, dict] | None) -> dict:
    """Summary of one method's records; ``baseline`` maps problem -> target-only record."""
    counts = answer_counts(records)
    n, k = counts["n"], counts["correct"]
    total = DecodeStats()
    for r in records:
        total = total.merge(DecodeStats.from_dict(r["stats"]))
    wall = sum(r["wall_s"] for r in records)
    row: dict = {
        "n": n,
        "accuracy": k / n if n else None,
        "accuracy_ci95": wilson_ci(k, n),
        "finished": counts["finished"],
        "finish_rate": counts["finished"] / n if n else None,
        "wall_s": wall,
        "tokens": total.generated_tokens,
        "tokens_per_s": total.generated_tokens / wall if wall else None,
        "alpha1": total.alpha1,
        "alpha1_by_pos": total.alpha1_by_pos,
        "alpha2": total.alpha2,
        "mean_accepted_steps_per_round": total.mean_accepted_steps_per_round,
        "mean_accepted_tokens_per_draft": total.mean_accepted_tokens_per_draft,
        "time_split_s": {
            "draft": total.draft_s,
            "target": total.target_s,
            "verify": total.verify_s,
            "other": total.other_s,
        },
        # the target's part split: chain prefills (score rounds, reuse) and the steps it generated
        "target_split_s": {"prefill": total.prefill_s, "steps": max(0.0, total.target_s - total.prefill_s)},
        "round_kinds": round_kinds(total),
        **exploration(records, wall),
        "rate_guard": rate_guard(records),
        "rounds": total.rounds,
        "draft_step_tokens": total.draft_step_tokens,
        "draft_s": total.draft_s,
    }
    ratios = [
        baseline[r["problem"]]["wall_s"] / r["wall_s"]
        for r in records
        if baseline and r["problem"] in baseline and r["wall_s"] > 0
    ]
    if ratios:
        paired = [r for r in records if r["problem"] in baseline]  # Σ baseline / Σ method over the same problems
        base_wall = sum(baseline[r["problem"]]["wall_s"] for r in paired)
        paired_wall = sum(r["wall_s"] for r in paired)
        row.update(
            speedup_total=base_wall / paired_wall if paired_wall else None,
            speedup_mean=statistics.fmean(ratios),
            speedup_mean_ci95=bootstrap_ci(ratios),
            speedup_median=statistics.median(ratios),
            speedup_median_ci95=bootstrap_ci(ratios, statistics.median),
        )
    else:
        row.update(
            speedup_total=None, speedup_mean=None, speedup_mean_ci95=None, speedup_median=None, speedup_median_ci95=None
        )
    return row


def summarize(records: Sequence[dict], methods: Sequence[str], baseline_method: str = "target") -> dict[str, dict]:
    """Per-method summaries (in ``methods`` order) from the records of one run."""
    base = {r["problem"]: r for r in records if r["method"] == baseline_method}
    return {m: summarize_method([r for r in records if r["method"] == m], base or None) for m in methods}


def summarize_by_group(
    records: Sequence[dict], methods: Sequence[str], group_of: dict[str, str], baseline_method: str = "target"
) -> dict[str, dict[str, dict]]:
    """Per group (e.g. each task of a task mix), per method: n, accuracy, answers finished,
    α1 and total speedup over ``baseline_method`` on that group's problems. ``group_of``
    maps problem -> group; records of problems it does not name are left out."""
    out: dict[str, dict[str, dict]] = {}
    for g in dict.fromkeys(group_of[r["problem"]] for r in records if r["problem"] in group_of):
        rows = summarize([r for r in records if group_of.get(r["problem"]) == g], methods, baseline_method)
        out[g] = {
            m: {k: row[k] for k in ("n", "accuracy", "finished", "alpha1", "speedup_total")}
            for m, row in rows.items()
            if row["n"]
        }
    return out


def paired_ratio(records: Sequence[dict], a: str, b: str, n_boot: int = 2000, seed: int = 0) -> dict | None:
    """Speedup of method ``a`` over method ``b`` on the problems both decoded:
    R = Σ wall_b / Σ wall_a (the ratio of their total speedups over target-only), with a
    percentile bootstrap interval that resamples whole problems (seeded). None when they
    share no problem."""
    wa = {r["problem"]: r["wall_s"] for r in records if r["method"] == a and r["wall_s"] > 0}
    wb = {r["problem"]: r["wall_s"] for r in records if r["method"] == b and r["wall_s"] > 0}
    common = sorted(set(wa) & set(wb))
    if not common:
        return None
    pairs = [(wa[p], wb[p]) for p in common]

    def ratio_of_sums(ps):
        return sum(y for _, y in ps) / sum(x for x, _ in ps)

    ratio = ratio_of_sums(pairs)
    ci = bootstrap_ci(pairs, ratio_of_sums, n_boot=n_boot, seed=seed) if len(pairs) > 1 else (ratio, ratio)
    return {"a": a, "b": b, "problems": len(common), "ratio": ratio, "ratio_ci95": ci}


def paired_comparisons(records: Sequence[dict], labels: Sequence[str]) -> list[dict]:
    """The comparisons a run's targets are stated in, where both rows exist: every adaptive /
    oracle row against best-fixed and sd, every ``/abort`` row against the same row without
    it, and best-fixed against sd (the same work twice when best-fixed is (0, γ2): the
    timing noise between identical decodes)."""
    have = set(labels)
    wanted = [
        (c, ref) for c in labels if c.split("/")[0] in ("adaptive", "oracle", "auto") for ref in ("best-fixed", "sd")
    ]
    wanted += [(lab, lab.replace("/abort", "")) for lab in labels if "/abort" in lab]
    wanted.append(("best-fixed", "sd"))
    out = []
    for a, b in wanted:
        if a in have and b in have and a != b:
            r = paired_ratio(records, a, b)
            if r is not None:
                out.append(r)
    return out


def mcnemar_p(only_a: int, only_b: int) -> float:
    """Two-sided exact McNemar p-value of a paired comparison with ``only_a`` problems solved by
    A alone and ``only_b`` by B alone: P of a split at least that uneven under
    Binomial(only_a + only_b, ½) (scipy's ``binomtest``); 1.0 when no problem differs."""
    from scipy.stats import binomtest

    n = only_a + only_b
    return 1.0 if n == 0 else float(binomtest(only_a, n, 0.5).pvalue)


def paired_accuracy(records: Sequence[dict], a: str, b: str = "target") -> dict | None:
    """Accuracy of method ``a`` against ``b`` on the problems both decoded: both accuracies,
    their difference (a − b), the discordant counts and the exact McNemar p-value; None when
    they share no problem."""
    ca = {r["problem"]: bool(r["correct"]) for r in records if r["method"] == a}
    cb = {r["problem"]: bool(r["correct"]) for r in records if r["method"] == b}
    common = sorted(set(ca) & set(cb))
    if not common:
        return None
    only_a = sum(ca[p] and not cb[p] for p in common)
    only_b = sum(cb[p] and not ca[p] for p in common)
    acc_a, acc_b = (sum(c[p] for p in common) / len(common) for c in (ca, cb))
    return {
        "a": a,
        "b": b,
        "problems": len(common),
        "accuracy_a": acc_a,
        "accuracy_b": acc_b,
        "difference": acc_a - acc_b,
        "only_a": only_a,
        "only_b": only_b,
        "mcnemar_p": mcnemar_p(only_a, only_b),
    }


def measured_c(summary: dict[str, dict], records: Sequence[dict], baseline_method: str = "target") -> float | None:
    """c = draft seconds per drafted token / target-only seconds per generated token."""
    base = summary.get(baseline_method)
    if not base or not base["tokens"]:
        return None
    t_tok = base["wall_s"] / base["tokens"]
    drafts = [s for s in summary.values() if s["draft_step_tokens"]]
    d_tok = sum(s["draft_s"] for s in drafts) / max(1, sum(s["draft_step_tokens"] for s in drafts)) if drafts else None
    return d_tok / t_tok if d_tok and t_tok else None


def committed_step_tokens(records: Sequence[dict]) -> list[int]:
    """Token lengths of every step the LR records committed (their ``step_tokens``): the
    step-length sample that prices a batch by its longest step."""
    return [n for r in records for n in (r.get("step_tokens") or []) if n > 0]


def prefill_ratio(records: list[dict], label: str) -> float | None:
    """Score rounds: the chain prefills' seconds over the target steps' seconds of a method's
    records (``stats.prefill_s`` is part of ``stats.target_s``); None without both."""
    pre = sum(float(r["stats"].get("prefill_s") or 0.0) for r in records if r["method"] == label)
    tgt = sum(float(r["stats"].get("target_s") or 0.0) for r in records if r["method"] == label)
    return pre / (tgt - pre) if pre > 0 and tgt > pre else None


def predicted_speedup(
    kind: str,
    gamma1: int,
    gamma2: int,
    alpha1: float | None,
    alpha2: float | None,
    c: float | None,
    batch_cost: Sequence[float] | Callable[[int], float] | None = None,
    async_lr: bool = False,
    prefill_ratio: float | None = None,
) -> float | None:
    """The speedup model's prediction from the run's measured α and c, priced by
    :meth:`lrtune.pricing.Pricing.speedup` (the one place a round is priced) with c1 = c2 = c;
    ``batch_cost`` a b(n) list or callable (evaluate passes b(n) priced by the longest of n
    steps); ``async_lr``: pipelined LR, the async model (lookahead limit γ1; it takes no b(n));
    ``prefill_ratio`` (score rounds): a round's prefill time over its target-step time, measured,
    so P = ratio/g(γ2) in T. None where a needed α or c is missing."""
    from lrtune.pricing import Pricing
    from lrtune.speedup import g
    from lrtune.speedup_async import h_async

    if c is None:
        return None
    if kind == "target":
        return 1.0
    if kind == "sd":
        return g(alpha2, c, gamma2) if alpha2 is not None else None
    if kind not in ("lr", "lr+sd") or alpha1 is None or (kind == "lr+sd" and alpha2 is None):
        return None
    g2, a2 = (gamma2, alpha2) if kind == "lr+sd" else (0, 0.0)
    if prefill_ratio is not None:
        steps = prefill_ratio / (g(a2, c, g2) if g2 else 1.0)
        return Pricing(c1=c, c2=c, prefill_steps=steps).speedup("score", gamma1, g2, alpha1, a2)
    if async_lr:
        return h_async(gamma1, g2, alpha1, c, a2, c)
    return Pricing(c1=c, c2=c, batch_cost=batch_cost).speedup("lr", gamma1, g2, alpha1, a2)
