"""The false-accept budget with a guarantee (train/calibrate.risk_controlled_threshold): the
threshold's false-accept rate is ≤ ε with probability ≥ 1 − δ over the calibration draw."""

from __future__ import annotations

import math
import random

import pytest

from lrtune.train.calibrate import (
    calibrate_threshold,
    false_accept_bound,
    rejected_pairs_needed,
    risk_controlled_threshold,
    uncertified_warning,
)


def test_clopper_pearson_bound_is_the_beta_quantile_and_one_for_no_evidence():
    # k = 0: the bound solves (1 - p)^n = 1 - confidence
    assert false_accept_bound(0, 45, 0.9) == pytest.approx(1 - 0.1 ** (1 / 45))
    assert false_accept_bound(3, 3, 0.9) == 1.0 and false_accept_bound(0, 0, 0.9) == 1.0
    assert false_accept_bound(2, 100, 0.9) < false_accept_bound(3, 100, 0.9) < false_accept_bound(3, 50, 0.9)


def test_rejected_pairs_needed_is_the_smallest_n_whose_zero_count_bound_is_within_the_budget():
    n = rejected_pairs_needed(0.05, 0.9)
    assert n == 45  # log 0.1 / log 0.95 = 44.9
    assert false_accept_bound(0, n, 0.9) <= 0.05 < false_accept_bound(0, n - 1, 0.9)
    assert rejected_pairs_needed(0.0, 0.9) is None


def test_too_few_rejected_pairs_certify_nothing_and_accept_only_identical_steps():
    scores = [0.99, 0.95, 0.7, 0.2, 0.1]
    c = risk_controlled_threshold(scores, [True, True, True, False, False], 0.05, 0.9)
    assert c["threshold"] == 1.0 and c["certified"] is False
    assert "needs at least 45" in uncertified_warning(c)


def test_the_threshold_sits_just_above_the_first_rejected_score_the_bound_cannot_absorb():
    rng = random.Random(0)
    neg = [rng.random() * 0.8 for _ in range(200)]
    pos = [0.5 + rng.random() * 0.5 for _ in range(100)]
    c = risk_controlled_threshold(neg + pos, [False] * 200 + [True] * 100, 0.05, 0.9)
    assert c["certified"] and c["false_accept_bound"] <= 0.05
    ranked = sorted(neg, reverse=True)
    k = c["false_accepts"]
    assert ranked[k - 1] >= c["threshold"] > ranked[k]  # k pass, the (k+1)-th does not
    # one more false accept would break the bound
    assert false_accept_bound(k + 1, 200, 0.9) > 0.05
    assert c["threshold"] == math.nextafter(ranked[k], math.inf)


def test_the_bound_holds_in_at_least_confidence_of_calibration_draws_where_the_empirical_cap_does_not():
    """Negatives' scores ~ U(0, 1): FAR(t) = 1 − t exactly. Over many calibration draws, the
    bound's threshold exceeds ε in ≤ δ of them; the empirical rule ("far") in about half."""
    rng = random.Random(1)
    eps, conf, draws = 0.1, 0.9, 400
    over_bound = over_far = 0
    for _ in range(draws):
        neg = [rng.random() for _ in range(60)]
        pos = [rng.random() ** 0.2 for _ in range(40)]
        labels = [False] * 60 + [True] * 40
        t = risk_controlled_threshold(neg + pos, labels, eps, conf)["threshold"]
        over_bound += (1 - t) > eps
        over_far += (1 - calibrate_threshold(neg + pos, labels, eps)["threshold"]) > eps
    # δ = 0.10; 3 binomial standard errors of slack over 400 draws
    assert over_bound / draws <= 0.10 + 3 * math.sqrt(0.1 * 0.9 / draws)
    assert over_far / draws > 0.3


def test_more_permissive_budgets_never_lower_acceptance():
    rng = random.Random(2)
    scores = [rng.random() for _ in range(300)]
    labels = [s + rng.gauss(0, 0.3) > 0.5 for s in scores]
    acc = [risk_controlled_threshold(scores, labels, eps, 0.9)["val_acceptance"] for eps in (0.01, 0.05, 0.1, 0.3)]
    assert acc == sorted(acc)


@pytest.mark.parametrize("eps,conf", [(-0.1, 0.9), (1.5, 0.9), (0.05, 0.0), (0.05, 1.0)])
def test_out_of_range_budgets_are_refused(eps, conf):
    with pytest.raises(ValueError):
        risk_controlled_threshold([0.5], [False], eps, conf)


def test_the_validity_benchmark_rates_both_rules_over_template_splits(tmp_path):
    import json

    from benchmarks.false_accept_validity import main
    from tests.test_train_verifier import _synthetic_rows, write_pairs

    data = write_pairs(tmp_path / "pairs", _synthetic_rows(40, seed=3))
    out = tmp_path / "validity.json"
    assert (
        main(
            [
                "--data",
                str(data),
                "--verifiers",
                "exact;embedding",
                "--splits",
                "30",
                "--max-false-accept",
                "0.2",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    got = json.loads(out.read_text())
    assert got["splits"] == 30 and set(got["verifiers"]) == {"exact", "embedding"}
    for v in got["verifiers"].values():
        assert set(v) == {"bound", "far"} and 0.0 <= v["bound"]["share_far_over_eps"] <= 1.0
        # the bound's thresholds are never more permissive than the empirical rule's
        assert v["bound"]["test_acceptance_mean"] <= v["far"]["test_acceptance_mean"] + 1e-12


def test_hoeffding_bentkus_pvalue_is_the_smaller_of_its_two_bounds_and_needs_as_many_templates_as_pairs():
    from scipy.stats import binom

    from lrtune.train.calibrate import hoeffding_bentkus_bound, hoeffding_bentkus_pvalue, units_needed

    # R̂ = 0: Hoeffding gives (1 - ε)^m, Bentkus e·(1 - ε)^m
    assert hoeffding_bentkus_pvalue(0.0, 20, 0.1) == pytest.approx(0.9**20)
    r, m, eps = 0.08, 30, 0.2
    h1 = r * math.log(r / eps) + (1 - r) * math.log((1 - r) / (1 - eps))
    assert hoeffding_bentkus_pvalue(r, m, eps) == pytest.approx(min(math.exp(-m * h1), math.e * binom.cdf(3, m, eps)))
    m = units_needed(0.05, 0.9)
    assert m == rejected_pairs_needed(0.05, 0.9) == 45
    assert hoeffding_bentkus_bound(0.0, m, 0.9) <= 0.05 < hoeffding_bentkus_bound(0.0, m - 1, 0.9)
    assert hoeffding_bentkus_pvalue(0.0, 0, 0.1) == 1.0


def _clustered(templates: int, per_template: int, rng: random.Random):
    """Rejected pairs in templates whose pairs score alike (one score per template, tiny jitter),
    plus accepted pairs scored high."""
    scores, labels, groups = [], [], []
    for j in range(templates):
        base = rng.random()
        for _ in range(per_template):
            scores.append(min(1.0, max(0.0, base + rng.gauss(0, 0.005))))
            labels.append(False)
            groups.append(f"t{j}")
        scores.append(0.9 + 0.1 * rng.random())
        labels.append(True)
        groups.append(f"t{j}")
    return scores, labels, groups


def test_many_alike_pairs_of_few_templates_certify_nothing_over_templates_though_they_would_over_pairs():
    from lrtune.train.calibrate import template_controlled_threshold

    s, y, g = _clustered(templates=10, per_template=20, rng=random.Random(3))  # 200 rejected pairs, 10 templates
    assert risk_controlled_threshold(s, y, 0.05, 0.9)["certified"]  # the pair-level test counts 200 units
    c = template_controlled_threshold(s, y, g, 0.05, 0.9)
    assert not c["certified"] and c["threshold"] == 1.0 and c["rejected_templates"] == 10
    assert "45 templates with a rejected pair" in uncertified_warning(c)


def test_the_template_bound_holds_in_confidence_of_clustered_draws_where_the_pair_bound_does_not():
    """Each template's rejected pairs share one score ~ U(0, 1), so a threshold t lets through
    templates whose score is ≥ t: the template-averaged false-accept rate is 1 − t exactly.
    Over many draws of 60 such templates, the template bound exceeds ε in ≤ δ of them; the
    pair bound, which counts each template's 8 alike pairs as 8 units, beyond δ."""
    from lrtune.train.calibrate import template_controlled_threshold

    rng = random.Random(4)
    eps, conf, draws = 0.1, 0.9, 300
    over_template = over_pair = 0
    for _ in range(draws):
        s, y, g = _clustered(templates=60, per_template=8, rng=rng)
        over_template += (1 - template_controlled_threshold(s, y, g, eps, conf)["threshold"]) > eps + 0.01
        over_pair += (1 - risk_controlled_threshold(s, y, eps, conf)["threshold"]) > eps + 0.01
    slack = 3 * math.sqrt(0.1 * 0.9 / draws)  # 3 binomial standard errors at δ = 0.10
    assert over_template / draws <= 0.10 + slack < over_pair / draws


def test_a_template_bound_needs_each_pairs_template():
    from lrtune.train.calibrate import template_controlled_threshold

    with pytest.raises(ValueError, match="groups"):
        template_controlled_threshold([0.1, 0.2], [False, True], ["a"], 0.1, 0.9)
