"""lrtune labels noise (lrtune.data_gen.label_noise): meaning-preserving edits, the recorded prefix rebuilt
exactly, flip rates."""

from __future__ import annotations

import pytest

from lrtune.data_gen.label_noise import edit_step, flip_rates, prefix_sha, rebuild_prefix


def test_space_edit_adds_one_space_before_the_closing_blank_line_only():
    assert edit_step("So 3 + 4 = 7.\n\n", "space") == "So 3 + 4 = 7. \n\n"
    assert edit_step("The answer is \\boxed{7}", "space") is None  # no closing blank line
    assert edit_step("done \n\n", "space") is None  # already there


def test_bold_edit_drops_markdown_bold_and_skips_steps_without_it():
    assert edit_step("1. **Find the total:** 3 + 4 = 7\n\n", "bold") == "1. Find the total: 3 + 4 = 7\n\n"
    assert edit_step("3 + 4 = 7\n\n", "bold") is None


def test_unknown_edit_is_refused():
    with pytest.raises(ValueError, match="unknown edit"):
        edit_step("x\n\n", "synonym")


class _Tok:
    """Characters as ids (100 + ord), a special token 1 that decoding may skip."""

    def encode(self, text, add_special_tokens=False):
        return [100 + ord(c) for c in text]


class _Target:
    tokenizer = _Tok()

    def decode(self, ids, skip_special_tokens=False):
        return "".join(chr(i - 100) for i in ids if not (skip_special_tokens and i == 1))


def test_rebuilt_prefix_must_hash_to_the_recorded_one():
    prompt = [1, 100 + ord("Q"), 1]
    real = prompt + [100 + ord(c) for c in "step one\n\n"]
    row = {"prefix_text": "Qstep one\n\n", "prefix_sha": prefix_sha(real)}
    assert rebuild_prefix(row, prompt, _Target()) == real
    assert rebuild_prefix(dict(row, prefix_sha=prefix_sha(real[:-1])), prompt, _Target()) is None
    assert rebuild_prefix(dict(row, prefix_text="Xstep"), prompt, _Target()) is None  # prompt text not a prefix


def test_a_later_positions_prefix_adds_the_drafts_earlier_steps_of_its_round():
    prompt = [1, 100 + ord("Q"), 1]
    real = prompt + [100 + ord(c) for c in "ab\n\n" + "d1\n\n" + "d2\n\n"]
    row = {"prefix_text": "Qab\n\n", "prefix_sha": prefix_sha(real)}
    assert rebuild_prefix(row, prompt, _Target(), ("d1\n\n", "d2\n\n")) == real
    assert rebuild_prefix(row, prompt, _Target(), ("d1\n\n",)) is None  # a step missing: not the recorded prefix


def test_flip_rate_is_the_share_of_null_edit_pairs_the_teacher_rejects_per_edit():
    rows = [{"edit": "space", "problem": f"p{i % 3}", "accept": i % 4 != 0} for i in range(12)] + [
        {"edit": "bold", "problem": "p0", "accept": True}
    ]
    out = flip_rates(rows, seed=0)
    assert out["space"]["pairs"] == 12 and out["space"]["flip_rate"] == 3 / 12 and out["space"]["problems"] == 3
    lo, hi = out["space"]["flip_rate_ci95"]
    assert lo <= 0.25 <= hi
    assert out["bold"]["flip_rate"] == 0.0
