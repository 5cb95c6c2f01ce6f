"""The lossless floor: which rows are lossless, how two lossless decodes are compared
(lrtune.drift), and how evaluate reports what the lossless rows changed."""

from __future__ import annotations

import pytest

from lrtune.drift import Decode, first_difference, pair_drift
from lrtune.eval.methods import parse_method
from lrtune.eval.report import _changed_cell, _floor_sentence


@pytest.mark.parametrize(
    "label,run_verifier,lossless",
    [
        ("sd", "embedding", True),
        ("target", "embedding", False),  # the reference itself
        ("lr+sd", "never", True),
        ("lr/v=never", "embedding", True),
        ("lr+sd", "embedding", False),
        ("lr+sd/v=exact", "never", False),  # its own verifier decides
        ("adaptive", "never", False),  # a controller may pick another verifier's rounds
        ("auto", "never", False),
    ],
)
def test_a_row_is_lossless_when_it_equals_target_only_in_exact_arithmetic(label, run_verifier, lossless):
    assert parse_method(label, 2, 4).lossless(run_verifier) is lossless


def test_first_difference_is_the_first_unequal_token_or_the_shorter_length():
    assert first_difference([1, 2, 3], [1, 2, 3]) is None
    assert first_difference([1, 2, 3], [1, 5, 3]) == 1
    assert first_difference([1, 2], [1, 2, 3]) == 2


def test_pair_drift_counts_identical_decodes_changed_answers_and_flips_in_each_direction():
    a = [Decode((1, 2, 3), "6", True), Decode((1, 2), "4", False), Decode((5, 6, 7, 8), "9", True)]
    b = [Decode((1, 2, 3), "6", True), Decode((1, 3), "5", True), Decode((5, 6, 0, 8), "8", False)]
    d = pair_drift(a, b)
    assert (d.problems, d.identical, d.first_difference_median) == (3, 1, 1.5)
    assert (d.answers_differ, d.right_to_wrong, d.wrong_to_right) == (2, 1, 1)
    assert d.as_dict()["identical_share"] == pytest.approx(1 / 3)
    with pytest.raises(ValueError):
        pair_drift(a, b[:2])


def test_the_report_states_the_floor_from_the_lossless_rows_only():
    sd = {"changed": 2, "problems": 30, "rate": 2 / 30, "ci95": [0.01, 0.22]}
    lossy = {"changed": 5, "problems": 30, "rate": 5 / 30, "ci95": [0.06, 0.35]}
    rows = [{"a": "sd", "lossless": True, "changed": sd}, {"a": "lr+sd", "lossless": False, "changed": lossy}]
    assert _floor_sentence(rows) == " Floor in this run: 2 of 30 answers."
    assert _floor_sentence(rows[1:]) == ""
    assert _changed_cell(sd).startswith("2 of 30 (0.07") and _changed_cell(None) == "—"
