"""Threshold calibration and agreement metrics of a student against its teacher (pure).

Against the teacher's labels y and the student's scores s, a threshold t accepts s ≥ t:
    false-accept rate FAR(t) = #(s ≥ t, y = 0) / #(y = 0)     (teacher-rejected steps let through)
    false-reject rate FRR(t) = #(s < t, y = 1) / #(y = 1)
    acceptance       A(t)   = #(s ≥ t) / n
Calibration picks the t that maximises A(t) subject to a cap on FAR(t):
    rule "bound" (the default, :func:`risk_controlled_threshold`): FAR(t) ≤ ε with probability
        ≥ 1 − δ over the draw of the calibration pairs (a distribution-free guarantee);
    rule "far" (:func:`calibrate_threshold`): the empirical FAR on the calibration pairs ≤ ε
        (no guarantee: with few teacher-rejected pairs it says little).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated, Literal

from annotated_types import Interval

from lrtune.schema import STRICT, Checked, Fraction


@dataclass
class Budget(Checked):
    """A guarantee's two numbers, shared by every command that sets a threshold by one
    (``lrtune train verifier``'s calibration, ``lrtune calibrate``)."""

    __pydantic_config__ = STRICT

    max_false_accept: Fraction = field(
        default=0.05,
        metadata={"help": "ε: the false-accept budget, the share of teacher-rejected steps the verifier may accept"},
    )
    confidence: Annotated[float, Interval(gt=0, lt=1)] = field(
        default=0.9,
        metadata={
            "help": "1-δ: the probability that the budget holds (false-accept rate <= ε; with --max-accuracy-loss Δ, "
            "share of changed answers <= Δ)"
        },
    )
    calibration_unit: Literal["template", "pair"] = field(
        default="template",
        metadata={
            "help": "the unit of evidence of the false-accept bound: template (pairs of one template are alike, so "
            "each "
            "template counts once; needs as many templates with a rejected pair as the bound needs units) | pair "
            "(every pair counts; exact only for exchangeable pairs, optimistic for pairs that come in templates)"
        },
    )


def confusion(scores: Sequence[float], labels: Sequence[bool], threshold: float) -> dict[str, int]:
    """True/false accepts and rejects at ``threshold``."""
    c = {"tp": 0, "fp": 0, "tn": 0, "fn": 0}
    for s, y in zip(scores, labels):
        acc = s >= threshold
        c["tp" if acc and y else "fp" if acc else "fn" if y else "tn"] += 1
    return c


def _ratio(a: int, b: int) -> float | None:
    return a / b if b else None


def agreement(scores: Sequence[float], labels: Sequence[bool], threshold: float) -> dict:
    """Accuracy, F1, AUROC, FAR, FRR and acceptance of the student vs the teacher."""
    from lrtune.pairstats import auroc

    c = confusion(scores, labels, threshold)
    n = len(scores)
    precision = _ratio(c["tp"], c["tp"] + c["fp"])
    recall = _ratio(c["tp"], c["tp"] + c["fn"])
    f1 = (2 * precision * recall / (precision + recall)) if precision and recall else 0.0
    return {
        "n": n,
        "accuracy": _ratio(c["tp"] + c["tn"], n),
        "f1": f1,
        "auroc": auroc(scores, labels),
        "false_accept_rate": _ratio(c["fp"], c["fp"] + c["tn"]),
        "false_reject_rate": _ratio(c["fn"], c["fn"] + c["tp"]),
        "acceptance": _ratio(c["tp"] + c["fp"], n),
        "teacher_acceptance": _ratio(c["tp"] + c["fn"], n),
        "threshold": threshold,
        **c,
    }


def calibrate_threshold(scores: Sequence[float], labels: Sequence[bool], max_false_accept: float) -> dict:
    """The lowest threshold (highest acceptance) with FAR ≤ ``max_false_accept`` on these
    pairs. Candidates are the distinct scores (and 1 + ε, which accepts nothing). With no
    teacher-rejected pair every threshold has FAR 0: the lowest score is chosen."""
    if not 0.0 <= max_false_accept <= 1.0:
        raise ValueError(f"max_false_accept must be in [0, 1], got {max_false_accept}")
    pairs = sorted(((float(s), bool(y)) for s, y in zip(scores, labels) if not math.isnan(s)), reverse=True)
    if not pairs:
        raise ValueError("no scores to calibrate on")
    n_neg = sum(1 for _, y in pairs if not y)
    best = min(1.0, pairs[0][0] + 1e-9) if n_neg else pairs[-1][0]
    best_far = 0.0
    fp = 0
    i = 0
    while i < len(pairs):  # lower the threshold one distinct score at a time
        t = pairs[i][0]
        while i < len(pairs) and pairs[i][0] == t:
            fp += not pairs[i][1]
            i += 1
        far = fp / n_neg if n_neg else 0.0
        if far > max_false_accept:
            break
        best, best_far = t, far
    best = min(max(best, 0.0), 1.0)
    return {
        "threshold": best,
        "max_false_accept": max_false_accept,
        "val_false_accept_rate": best_far,
        "val_acceptance": sum(1 for s, _ in pairs if s >= best) / len(pairs),
        "val_rejected": n_neg,
        "method": "max acceptance s.t. FAR <= max",
    }


def best_agreement_threshold(scores: Sequence[float], labels: Sequence[bool]) -> float:
    """The candidate threshold (a distinct score, or just above all) with the highest
    agreement ``mean(1[score >= t] == label)``; ties go to the highest threshold (fewer accepts)."""
    clean = [(float(s), bool(y)) for s, y in zip(scores, labels) if not math.isnan(s)]
    if not clean:
        raise ValueError("no scores to calibrate on")
    cands = sorted({s for s, _ in clean}) + [max(s for s, _ in clean) + 1e-9]

    def agreed(t: float) -> int:
        return sum((s >= t) == y for s, y in clean)

    return max(cands, key=lambda t: (agreed(t), t))


def agreement_threshold(scores: Sequence[float], labels: Sequence[bool]) -> dict:
    """:func:`best_agreement_threshold` on these pairs, described like :func:`calibrate_threshold`."""
    t = min(max(best_agreement_threshold(scores, labels), 0.0), 1.0)  # a checkpoint's threshold lies in [0, 1]
    a = agreement(scores, labels, t)
    return {
        "threshold": t,
        "max_false_accept": None,
        "val_false_accept_rate": a["false_accept_rate"],
        "val_acceptance": a["acceptance"],
        "val_agreement": a["accuracy"],
        "val_rejected": a["fp"] + a["tn"],
        "method": "max agreement",
    }


def coarse_cap_warning(n_rejected: int, max_false_accept: float) -> str | None:
    """A warning when a FAR cap is coarser than the calibration pairs can express: with n
    teacher-rejected pairs the cap allows ⌊n·cap⌋ false accepts, and at 0 the threshold must
    sit above every rejected pair's score (one outlier then sets it). None when ≥ 1 is allowed."""
    if n_rejected <= 0 or math.floor(n_rejected * max_false_accept + 1e-9) >= 1:
        return None
    return (
        f"validation holds {n_rejected} teacher-rejected pairs: a false-accept cap of {max_false_accept:g} allows "
        "none of them, so the threshold sits above every rejected pair's score; raise --max-false-accept "
        f"to at least {1 / n_rejected:.3f} or collect more rejected pairs"
    )


def cross_fitted(
    scores: Sequence[float],
    labels: Sequence[bool],
    groups: Sequence[str],
    max_false_accept: float,
    folds: int = 2,
    seed: int = 0,
) -> dict:
    """Calibration judged on pairs it never saw: groups (templates or problems) are shuffled
    with ``seed`` and dealt into ``folds`` folds; each fold is decided at the threshold
    :func:`calibrate_threshold` picks on the other folds, and the pooled decisions give the
    held-out FAR, acceptance and agreement. ``threshold`` is the one fitted on every pair
    (what a default would be set to)."""
    import random

    keys = sorted(set(groups))
    if len(keys) < folds or folds < 2:
        raise ValueError(f"need at least {max(2, folds)} groups for {folds}-fold calibration, got {len(keys)}")
    random.Random(seed).shuffle(keys)
    fold_of = {g: i % folds for i, g in enumerate(keys)}
    held_scores: list[float] = []
    held_labels: list[bool] = []
    fold_thresholds = []
    for f in range(folds):
        fit = [i for i, g in enumerate(groups) if fold_of[g] != f]
        test = [i for i, g in enumerate(groups) if fold_of[g] == f]
        t = calibrate_threshold([scores[i] for i in fit], [labels[i] for i in fit], max_false_accept)["threshold"]
        fold_thresholds.append(t)
        # decide the held-out fold at its own threshold: shift its scores so one global cut (0) applies
        held_scores += [scores[i] - t for i in test]
        held_labels += [bool(labels[i]) for i in test]
    held = agreement(held_scores, held_labels, 0.0)
    return {
        "threshold": calibrate_threshold(scores, labels, max_false_accept)["threshold"],
        "max_false_accept": max_false_accept,
        "folds": folds,
        "fold_thresholds": fold_thresholds,
        "heldout_false_accept_rate": held["false_accept_rate"],
        "heldout_acceptance": held["acceptance"],
        "heldout_agreement": held["accuracy"],
        "heldout_n": held["n"],
    }


# ---- a false-accept budget with a guarantee ------------------------------------------------
def false_accept_bound(k: int, n: int, confidence: float) -> float:
    """Clopper–Pearson upper confidence bound on a rate seen k times in n trials: the p with
    P(Bin(n, p) ≤ k) = 1 − confidence, i.e. the ``confidence`` quantile of Beta(k+1, n−k)
    (1.0 when k ≥ n or n = 0). With probability ≥ ``confidence`` the true rate is below it."""
    if n <= 0 or k >= n:
        return 1.0
    from scipy.stats import beta

    return float(beta.ppf(confidence, k + 1, n - k))


def rejected_pairs_needed(max_false_accept: float, confidence: float) -> int | None:
    """The fewest teacher-rejected calibration pairs that can certify FAR ≤ ε at all: with
    none of n let through, the bound is 1 − δ^(1/n) ≤ ε iff n ≥ log δ / log(1 − ε) (None for
    ε = 0, which no finite sample certifies)."""
    if max_false_accept <= 0:
        return None
    if max_false_accept >= 1:
        return 0
    return math.ceil(math.log(1 - confidence) / math.log(1 - max_false_accept) - 1e-12)


def risk_controlled_threshold(
    scores: Sequence[float], labels: Sequence[bool], max_false_accept: float, confidence: float = 0.9
) -> dict:
    """The most permissive threshold whose false-accept rate is ≤ ε = ``max_false_accept`` with
    probability ≥ 1 − δ = ``confidence`` over the calibration pairs (Learn then Test,
    Angelopoulos et al. 2021, arXiv 2110.01052, with an exact binomial test).

    Thresholds are tested from strict to permissive (fixed-sequence testing); a threshold t
    that lets k of the n teacher-rejected pairs through rejects the null "FAR(t) > ε" when
    P(Bin(n, ε) ≤ k) ≤ δ, i.e. when the Clopper–Pearson bound :func:`false_accept_bound` is
    ≤ ε. The tests are monotone in t, so the sequence stops at k* = max{k : P(Bin(n, ε) ≤ k) ≤ δ}
    and the threshold sits just above the (k*+1)-th highest rejected score x: t = next float
    after x. For exchangeable pairs FAR(t) ~ Beta(k*+1, n−k*), so P(FAR(t) > ε) ≤ δ exactly.

    When even k = 0 fails (n < :func:`rejected_pairs_needed`) nothing is certified: the threshold
    is 1.0, which accepts only steps scored 1 (steps identical to the target's), and
    ``certified`` is False. The pairs must be exchangeable with those the verifier will meet:
    calibrate on templates the verifier never trained on."""
    if not 0.0 <= max_false_accept <= 1.0:
        raise ValueError(f"max_false_accept must be in [0, 1], got {max_false_accept}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    clean = [(float(s), bool(y)) for s, y in zip(scores, labels) if not math.isnan(s)]
    if not clean:
        raise ValueError("no scores to calibrate on")
    neg = sorted((s for s, y in clean if not y), reverse=True)
    n = len(neg)
    from scipy.stats import binom

    delta = 1.0 - confidence
    k_star = -1  # the most rejected pairs that may pass; -1: not even none is certified
    while k_star + 1 < n and binom.cdf(k_star + 1, n, max_false_accept) <= delta:
        k_star += 1
    # k* of the n rejected pairs may pass: the threshold sits just above the (k*+1)-th highest
    t = 1.0 if k_star < 0 else min(1.0, math.nextafter(neg[k_star], math.inf))
    k = sum(1 for s in neg if s >= t)
    bound = false_accept_bound(k, n, confidence)
    return {
        "threshold": t,
        "method": "false-accept bound (LTT, Clopper-Pearson)",
        "max_false_accept": max_false_accept,
        "confidence": confidence,
        "certified": bound <= max_false_accept + 1e-12,
        "false_accept_bound": bound,
        "calibration_pairs": len(clean),
        "val_rejected": n,
        "false_accepts": k,
        "val_false_accept_rate": k / n if n else None,
        "val_acceptance": sum(1 for s, _ in clean if s >= t) / len(clean),
        "rejected_pairs_needed": rejected_pairs_needed(max_false_accept, confidence),
    }


# ---- the same budget when pairs come in clusters (templates) ---------------------------------
def _h1(a: float, b: float) -> float:
    """Bernoulli relative entropy KL(a ‖ b) (0·log 0 = 0)."""
    out = 0.0
    if a > 0:
        out += a * math.log(a / b)
    if a < 1:
        out += (1 - a) * math.log((1 - a) / (1 - b))
    return out


def hoeffding_bentkus_pvalue(risk_hat: float, m: int, eps: float) -> float:
    """p-value of the null "mean loss > ε" from the mean ``risk_hat`` of m independent losses in
    [0, 1] (Bates et al. 2021, arXiv 2101.02703, §3.1; used by Learn then Test):
        p = min( exp(−m · h1(min(R̂, ε), ε)),  e · P(Bin(m, ε) ≤ ⌈m R̂⌉) ),
    h1 the Bernoulli relative entropy. 1.0 without evidence (m = 0) or at ε ≥ 1."""
    if m <= 0 or eps >= 1:
        return 1.0
    if eps <= 0:
        return 1.0 if risk_hat > 0 else 0.0 if m else 1.0
    from scipy.stats import binom

    hoeffding = math.exp(-m * _h1(min(risk_hat, eps), eps))
    bentkus = math.e * float(binom.cdf(math.ceil(m * risk_hat - 1e-12), m, eps))
    return min(1.0, hoeffding, bentkus)


def hoeffding_bentkus_bound(risk_hat: float, m: int, confidence: float) -> float:
    """Upper confidence bound on a mean loss from its mean over m units: the smallest ε whose
    null :func:`hoeffding_bentkus_pvalue` rejects at δ = 1 − ``confidence`` (bisection; 1.0 when none)."""
    delta = 1.0 - confidence
    if hoeffding_bentkus_pvalue(risk_hat, m, 1.0 - 1e-12) > delta:
        return 1.0
    lo, hi = min(max(risk_hat, 0.0), 1.0), 1.0 - 1e-12
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if hoeffding_bentkus_pvalue(risk_hat, m, mid) <= delta else (mid, hi)
    return hi


def units_needed(max_false_accept: float, confidence: float) -> int | None:
    """The fewest independent units (templates with a rejected pair) that can certify a mean
    false-accept rate ≤ ε at all: at R̂ = 0 the Hoeffding–Bentkus p-value is (1 − ε)^m, so
    m ≥ log δ / log(1 − ε), the same count :func:`rejected_pairs_needed` gives pairs."""
    return rejected_pairs_needed(max_false_accept, confidence)


def template_controlled_threshold(
    scores: Sequence[float],
    labels: Sequence[bool],
    groups: Sequence[str],
    max_false_accept: float,
    confidence: float = 0.9,
) -> dict:
    """:func:`risk_controlled_threshold` when pairs come in clusters: the unit of evidence is the
    template, not the pair. Pairs of one template are alike (a template's rejected steps tend to
    pass or fail together), so a binomial test over pairs counts more independent evidence than
    the data holds (measured: ``benchmarks/calibration``).

    Each of the m templates with a teacher-rejected pair has loss L_j(t) = k_j(t) / n_j (the share
    of its n_j rejected pairs that threshold t lets through), and the risk is their mean
    R(t) = E_j[L_j(t)], the false-accept rate on a template drawn like the calibration ones.
    Thresholds are tested from strict to permissive (fixed-sequence testing, Learn then Test)
    with :func:`hoeffding_bentkus_pvalue`, stopping at the first p > δ; P(R(t) > ε) ≤ δ for
    templates exchangeable with the calibration ones. With fewer than :func:`units_needed`
    templates nothing is certified: threshold 1.0 (identical steps only)."""
    clean, by_template = _rejected_by_template(scores, labels, groups, max_false_accept, confidence)
    m = len(by_template)
    t = _walk_templates(by_template, max_false_accept, 1.0 - confidence)
    r = _template_risk(by_template, t)
    bound = hoeffding_bentkus_bound(r, m, confidence)
    neg = [s for v in by_template.values() for s in v]
    k = sum(s >= t for s in neg)
    return {
        "threshold": t,
        "method": "false-accept bound over templates (LTT, Hoeffding-Bentkus)",
        "unit": "template",
        "max_false_accept": max_false_accept,
        "confidence": confidence,
        "certified": bound <= max_false_accept + 1e-12,
        "false_accept_bound": bound,
        "calibration_pairs": len(clean),
        "calibration_templates": len({g for _, _, g in clean}),
        "val_rejected": len(neg),
        "rejected_templates": m,
        "false_accepts": k,
        "val_false_accept_rate": r if m else None,
        "val_pair_false_accept_rate": k / len(neg) if neg else None,
        "val_acceptance": sum(1 for s, _, _ in clean if s >= t) / len(clean),
        "rejected_pairs_needed": units_needed(max_false_accept, confidence),
    }


def _rejected_by_template(
    scores: Sequence[float], labels: Sequence[bool], groups: Sequence[str], max_false_accept: float, confidence: float
) -> tuple[list[tuple[float, bool, str]], dict[str, list[float]]]:
    """(the scored pairs as (score, label, template), the scores of teacher-rejected pairs by
    template); ValueError for a budget out of range, unmatched groups or no score."""
    if not 0.0 <= max_false_accept <= 1.0:
        raise ValueError(f"max_false_accept must be in [0, 1], got {max_false_accept}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if len(groups) != len(scores):
        raise ValueError(f"groups: {len(groups)} given for {len(scores)} scores")
    clean = [(float(s), bool(y), str(g)) for s, y, g in zip(scores, labels, groups) if not math.isnan(s)]
    if not clean:
        raise ValueError("no scores to calibrate on")
    by_template: dict[str, list[float]] = {}
    for s, y, g in clean:
        if not y:
            by_template.setdefault(g, []).append(s)
    return clean, by_template


def _template_risk(by_template: dict[str, list[float]], t: float) -> float:
    """R(t): the mean over templates of the share of their rejected pairs that threshold ``t`` accepts."""
    m = len(by_template)
    return sum(sum(s >= t for s in v) / len(v) for v in by_template.values()) / m if m else 0.0


def _walk_templates(by_template: dict[str, list[float]], max_false_accept: float, delta: float) -> float:
    """The most permissive threshold of the fixed-sequence walk (strict to permissive, each
    rejected score a step) whose Hoeffding-Bentkus p-value stays ≤ ``delta``; 1.0 when none."""
    m = len(by_template)
    t = 1.0
    for x in sorted({s for v in by_template.values() for s in v}, reverse=True):
        cand = min(1.0, math.nextafter(x, math.inf))  # just above x: the rejected pairs above x pass
        if hoeffding_bentkus_pvalue(_template_risk(by_template, cand), m, max_false_accept) > delta:
            break
        t = cand
    return t


CALIBRATION_UNITS = ("template", "pair")


def bound_threshold(
    scores: Sequence[float], labels: Sequence[bool], groups: Sequence[str] | None, budget: Budget
) -> dict:
    """The threshold rule ``bound`` at ``budget``: over templates (:func:`template_controlled_threshold`,
    ``budget.calibration_unit == "template"``) or over single pairs (:func:`risk_controlled_threshold`)."""
    if budget.calibration_unit == "template":
        if groups is None:
            raise ValueError("calibration over templates needs each pair's template")
        return template_controlled_threshold(scores, labels, groups, budget.max_false_accept, budget.confidence)
    return {**risk_controlled_threshold(scores, labels, budget.max_false_accept, budget.confidence), "unit": "pair"}


def evidence_words(calib: dict) -> str:
    """What a bound's calibration rested on: "94 teacher-rejected pairs in 16 templates" or "94 … pairs"."""
    head = f"{calib['val_rejected']} teacher-rejected pairs"
    return head + (f" in {calib['rejected_templates']} templates" if calib.get("unit") == "template" else "")


def needed_words(calib: dict) -> str:
    """What a bound needs to certify anything: "45 templates with a rejected pair" or "45 rejected pairs"."""
    n = calib["rejected_pairs_needed"]
    return f"{n} templates with a rejected pair" if calib.get("unit") == "template" else f"{n} rejected pairs"


def uncertified_warning(calib: dict) -> str | None:
    """One line when a bound (:func:`bound_threshold`) certified no threshold below 1.0."""
    if calib.get("certified", True):
        return None
    return (
        f"{evidence_words(calib)} cannot certify a false-accept rate <= {calib['max_false_accept']:g} at "
        f"{calib['confidence']:.0%} confidence (that needs at least {needed_words(calib)}): threshold 1.0 "
        "accepts only steps identical to the target's"
    )
