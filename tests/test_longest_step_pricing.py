"""benchmarks.longest_step_pricing: step lengths come from the target's own answers, cut as the decoder cuts them."""

from __future__ import annotations

from benchmarks.longest_step_pricing import target_step_lengths
from tiny_models import get_tiny_pair


def test_step_lengths_are_the_target_answers_steps_capped_like_the_decoder():
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(get_tiny_pair().target))
    text = "We add 3 and 4.\n\nThat gives 7.\n\nAnswer: 7"
    records = [{"kind": "target", "text": text}, {"kind": "lr", "text": text}, {"kind": "target", "text": ""}]
    lengths = target_step_lengths(records, tok, "\n\n", max_step_tokens=1000)
    assert len(lengths) == 3 and sum(lengths) == len(tok.encode(text, add_special_tokens=False))
    capped = target_step_lengths(records, tok, "\n\n", max_step_tokens=2)
    assert max(capped) == 2 and sum(capped) == sum(lengths)
