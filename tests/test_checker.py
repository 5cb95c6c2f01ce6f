"""The math answer checker and answer extraction, on tables of hard cases."""

import pytest

from lrtune.tasks.base import extract_answer, last_boxed
from lrtune.tasks.checker import math_equal, normalize_number
from lrtune.tasks.math_files import gold_answer

EQUAL = [
    ("18", "18"),
    ("1,000", "1000"),
    ("1,000,000", "1000000"),
    ("-3", "-3.0"),
    ("-12", "-12"),
    ("0.5", "\\frac{1}{2}"),
    ("\\frac{7}{2}", "3.5"),
    ("7/2", "\\frac72"),
    ("\\dfrac{14}{3}", "\\frac{14}{3}"),
    ("-\\frac{1}{2}", "-0.5"),
    ("18 \\text{ dollars}", "18"),
    ("$18", "18"),
    ("\\$18.00", "18"),
    ("25\\%", "25"),
    ("12 cm", "12"),
    ("90^\\circ", "90"),
    ("42.", "42"),
    ("\\sqrt{2}", "\\sqrt 2"),
    ("2\\sqrt{2}", "\\sqrt{8}"),
    ("(3,\\frac{\\pi}{2})", "\\left(3, \\frac{\\pi}{2}\\right)"),
    ("x^2+1", "1+x^2"),
    ("\\text{(C)}", "C"),
    ("[1,2]", "[1, 2]"),
    ("10", "\\boxed{10}"),
    ("\\pi", "\\pi"),
    ("3", "3.000"),
]
DIFFERENT = [
    ("5", "6"),
    ("0.333", "1/3"),
    ("3.14", "\\pi"),
    ("-5", "5"),
    ("1,001", "1000"),
    ("", "5"),
    (None, "5"),
    ("\\frac{1}{3}", "0.3"),
    ("x+1", "x-1"),
]


@pytest.mark.parametrize("pred,gold", EQUAL)
def test_equal_answers_match(pred, gold):
    assert math_equal(pred, gold)


@pytest.mark.parametrize("pred,gold", DIFFERENT)
def test_different_answers_do_not_match(pred, gold):
    assert not math_equal(pred, gold)


def test_checker_table_has_at_least_thirty_cases():
    assert len(EQUAL) + len(DIFFERENT) >= 30


@pytest.mark.parametrize(
    "text,answer",
    [
        ("so the answer is \\boxed{\\frac{1}{\\sqrt{2}}} done", "\\frac{1}{\\sqrt{2}}"),
        ("\\boxed{1} then \\boxed{\\{2, 3\\}}", "\\{2, 3\\}"),
        ("\\boxed{a_{1}+b^{2}}", "a_{1}+b^{2}"),
        ("She pays 3 + 4 = 7.\n#### 7", "7"),
        ("#### 1,250\n\nextra text", "1,250"),
        ("The total is 12 apples and 3 pears, so 15", "15"),
        ("The result is -4.5 degrees", "-4.5"),
        ("no digits here", None),
    ],
)
def test_extract_answer_takes_boxed_then_hashes_then_last_number(text, answer):
    assert extract_answer(text) == answer


def test_last_boxed_handles_unbalanced_braces():
    assert last_boxed("\\boxed{12") is None
    assert last_boxed("\\boxed {5}") == "5"


@pytest.mark.parametrize(
    "raw,gold",
    [
        ("Natalia sold 48/2 = 24 clips in May.\n#### 72", "72"),
        ("We get $\\boxed{\\frac{14}{3}}$.", "\\frac{14}{3}"),
        ("204", "204"),
    ],
)
def test_gold_answer_is_read_from_hashes_or_boxed(raw, gold):
    assert gold_answer(raw) == gold


def test_normalize_number_rejects_expressions():
    assert normalize_number("x+1") is None and normalize_number("2\\sqrt{2}") is None
    assert normalize_number("\\frac{3}{0}") is None
