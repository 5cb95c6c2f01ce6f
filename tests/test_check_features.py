"""The step-checking features: a step's own arithmetic is checked by parsing (never executing)
its equalities, and the draft's numbers are compared with the target's."""

from __future__ import annotations

import pytest

from lrtune.verifiers.base import StepPair
from lrtune.verifiers.features import (
    CHECK_FEATURES,
    FEATURE_NAMES,
    TEXT_FEATURES,
    arithmetic_errors,
    check_features,
    pair_features,
)


@pytest.mark.parametrize(
    "text",
    [
        r"\( 3 \times 4 = 12 \)",
        "48 / 5 = 9.6",
        r"\[ \frac{48}{2} = 24 \]",
        "So 1,200 + 300 = 1,500 dollars.",
        "x = 3 + 4 = 7",
        "10 / 3 = 3.33",
        "2/3 = 0.666",
        "$12 + $5 = $17$",
        r"\( 2 \times (3 + 4) = 14 \)",
        "Step 1 - compute 5 - 3 = 2.",
        "-3 + 5 = 2",
        r"\( 120 \div 4 = 30 \)",
    ],
)
def test_true_equalities_count_no_error(text):
    assert arithmetic_errors(text) == 0


@pytest.mark.parametrize(
    "text",
    [
        r"\( 3 \times 4 = 13 \)",
        "48 / 5 = 9.5",
        r"\dfrac{48}{2} = 25",
        "So 1,200 + 300 = 1,600 dollars.",
        "x = 3 + 4 = 8",
        "10 / 3 = 3",
        "$12 + $5 = $18$",
    ],
)
def test_false_equalities_count_one_error_each(text):
    assert arithmetic_errors(text) == 1


def test_errors_add_up_over_a_step():
    assert arithmetic_errors(r"\( 120 \div 4 = 31 \) and \( 30 - 5 = 20 \), so 2 + 2 = 4") == 2


@pytest.mark.parametrize(
    "text",
    [
        "20% of 50 = 10",  # a percent sign is not arithmetic
        "total = 5 apples + 3 apples = 9 apples",  # words break an equality
        "7 = 8",
        "x = 9",  # nothing computed
        "2 ** 3 = 9",
        "1/0 = 5",
        "__import__('os') = 1",  # not plain arithmetic: not checked, never run
        "(" * 500 + "1" + ")" * 500 + " + 1 = 3",
        "9" * 5000 + " + 1 = 2",
        r"\boxed{12}",
        "",
    ],
)
def test_what_is_not_plain_arithmetic_is_not_checked(text):
    assert arithmetic_errors(text) == 0


def test_num_precision_is_the_share_of_draft_numbers_the_target_states():
    assert check_features("3 + 4 = 7 then 9", "3 + 4 = 7")[2] == 0.75
    assert check_features("no numbers", "5")[2] == 1.0
    assert check_features("3 * 4 = 13", "3 * 4 = 12") == [1.0, 0.0, 2 / 3]


def test_pair_features_include_the_check_features():
    f = pair_features(StepPair("ctx", r"\( 6 \times 7 = 41 \)", r"\( 6 \times 7 = 42 \)"), 0.9)
    assert set(f) == set(FEATURE_NAMES)
    assert (f["draft_arith_wrong"], f["target_arith_wrong"]) == (1.0, 0.0)


def test_checkpoints_without_a_feature_list_keep_the_original_text_features():
    # the default for checkpoints written before feature lists: new groups must not change it
    assert not set(CHECK_FEATURES) & set(TEXT_FEATURES)
