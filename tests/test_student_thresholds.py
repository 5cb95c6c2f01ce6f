"""benchmarks.student_thresholds: the agreement-maximising threshold."""

from benchmarks.student_thresholds import best_accuracy_threshold
from train.calibrate import agreement


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
