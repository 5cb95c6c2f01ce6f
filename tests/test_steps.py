"""Step segmentation rules (lrtune.steps), property-based over a toy vocabulary."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lrtune.steps import first_step_end, split_steps

VOCAB = {0: "<eos>", 1: "\n", 2: "\n\n", 3: ".\n\n", 4: "a", 5: " b", 6: ".", 7: "\n\nSo", 8: "x\n", 9: "é"}
EOS = 0


def decode(ids):
    return "".join(VOCAB[i] for i in ids)


ids_strategy = st.lists(st.integers(min_value=0, max_value=9), max_size=60)


@settings(max_examples=300, deadline=None)
@given(ids=ids_strategy, limit=st.one_of(st.none(), st.integers(min_value=1, max_value=12)))
def test_steps_concatenate_to_the_generated_ids(ids, limit):
    steps = split_steps(ids, decode, eos_ids={EOS}, max_step_tokens=limit)
    assert [t for s in steps for t in s] == ids
    assert all(steps)


@settings(max_examples=300, deadline=None)
@given(ids=ids_strategy, limit=st.one_of(st.none(), st.integers(min_value=1, max_value=12)))
def test_every_step_but_the_last_ends_at_delimiter_eos_or_limit(ids, limit):
    steps = split_steps(ids, decode, eos_ids={EOS}, max_step_tokens=limit)
    for s in steps[:-1]:
        ends = "\n\n" in decode(s) or s[-1] == EOS or (limit is not None and len(s) == limit)
        assert ends


@settings(max_examples=300, deadline=None)
@given(ids=ids_strategy)
def test_a_step_ends_at_the_first_token_completing_the_delimiter(ids):
    for s in split_steps(ids, decode, eos_ids={EOS}):
        # no proper prefix of a step already contains the delimiter or an EOS
        for k in range(1, len(s)):
            assert "\n\n" not in decode(s[:k]) and EOS not in s[:k]
        assert len(s) <= 60


@pytest.mark.parametrize(
    "ids, expected",
    [
        ([4, 2, 5], [[4, 2], [5]]),  # delimiter as its own token
        ([4, 3, 5], [[4, 3], [5]]),  # merged into ".\n\n"
        ([4, 1, 1, 5], [[4, 1, 1], [5]]),  # split over two "\n" tokens
        ([8, 1, 5], [[8, 1], [5]]),  # "x\n" + "\n"
        ([4, 7, 5, 2], [[4, 7], [5, 2]]),  # delimiter inside a bigger token ("\n\nSo")
        ([4, 0, 5], [[4, 0], [5]]),  # EOS ends a step
        ([4, 5, 4, 5, 4], [[4, 5], [4, 5], [4]]),  # token limit 2
    ],
)
def test_segmentation_table(ids, expected):
    limit = 2 if expected == [[4, 5], [4, 5], [4]] else None
    assert split_steps(ids, decode, eos_ids={EOS}, max_step_tokens=limit) == expected


def test_first_step_end_reports_the_reason():
    assert first_step_end([4, 3, 5], decode) == (2, "delimiter")
    assert first_step_end([4, 0], decode, eos_ids={0}) == (2, "eos")
    assert first_step_end([4, 5, 4], decode, max_step_tokens=2) == (2, "limit")
    assert first_step_end([4, 5], decode) == (2, "open")


def test_non_ascii_delimiter_is_found_across_tokens():
    assert first_step_end([4, 9, 5], decode, delimiter="aé") == (2, "delimiter")
