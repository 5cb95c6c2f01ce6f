"""benchmarks.student_thresholds: the agreement-maximising threshold; benchmarks.student_crossfit:
folds by template, every pair tested once."""

import pytest

from benchmarks.student_thresholds import best_accuracy_threshold
from tests.test_train_verifier import pair_dir  # noqa: F401 - a fixture
from lrtune.train.calibrate import agreement


def test_best_accuracy_threshold_maximises_agreement_over_every_candidate():
    scores = [0.9, 0.8, 0.7, 0.6, 0.4, 0.3, 0.2]
    labels = [True, True, False, True, True, False, False]
    t = best_accuracy_threshold(scores, labels)
    best = agreement(scores, labels, t)["accuracy"]
    assert t == 0.4 and best == 6 / 7
    assert all(agreement(scores, labels, c)["accuracy"] <= best for c in scores + [1.0, 0.0])


def test_best_accuracy_threshold_may_accept_nothing_when_every_label_rejects():
    scores = [0.9, 0.5, 0.1]
    t = best_accuracy_threshold(scores, [False, False, False])
    assert t > 0.9 and agreement(scores, [False] * 3, t)["accuracy"] == 1.0


def test_best_accuracy_threshold_breaks_ties_toward_fewer_accepts():
    scores, labels = [0.9, 0.8, 0.7, 0.6], [True, False, True, False]
    assert best_accuracy_threshold(scores, labels) == 0.9  # 0.9 and 0.7 both agree on 3 of 4


def test_crossfit_folds_deal_every_template_to_one_fold_and_refuse_too_few():
    import pytest

    from benchmarks.student_crossfit import fold_of

    groups = [f"t{i % 7}" for i in range(40)]
    f = fold_of(groups, 3, 0)
    assert set(f) == set(groups) and set(f.values()) == {0, 1, 2}
    assert fold_of(list(reversed(groups)), 3, 0) == f
    with pytest.raises(ValueError, match="at least"):
        fold_of(["a", "b"], 3, 0)


# six trainings of a benchmark script (25 s): slow; the fold rule above stays in the default run
@pytest.mark.slow
def test_crossfit_tests_every_pair_once_by_a_student_that_never_saw_its_template(tmp_path, pair_dir):  # noqa: F811
    from benchmarks.student_crossfit import main, make_parser
    from lrtune.train.data import load_pairs

    out = tmp_path / "crossfit.json"
    args = make_parser().parse_args(
        [
            "--data",
            str(pair_dir),
            "--folds",
            "3",
            "--variants",
            "features;lr-no-numbers:features:num_jaccard,num_recall,last_num_equal",
            "--work",
            str(tmp_path / "work"),
            "--out",
            str(out),
        ]
    )
    assert main(args) == 0
    import json

    res = json.loads(out.read_text())
    n = len(load_pairs(str(pair_dir))[0])
    assert res["pairs"] == n and [r["variant"] for r in res["results"]] == ["features", "lr-no-numbers"]
    full = res["results"][0]
    assert sum(f["test_pairs"] for f in full["folds"]) == n  # each pair tested once
    for f in full["folds"]:
        assert f["train_pairs"] + f["val_pairs"] + f["test_pairs"] == n
    for rule in ("calibrated", "val_best_accuracy", "test_oracle"):
        r = full[rule]
        assert r["n"] == n and r["agreement_ci95"][0] <= r["agreement"] <= r["agreement_ci95"][1]
    assert full["test_oracle"]["agreement"] >= full["val_best_accuracy"]["agreement"] - 1e-12
    assert full["auroc_pooled"] > 0.9  # the number features separate this synthetic data
