"""Checks of the tiny draft/target pair used by the decoder tests."""

from __future__ import annotations

import json
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

try:
    from tests.tiny_models import (
        DELIMITER,
        EOS_TOKEN,
        build_tiny_pair,
        cache_key,
        chat_prompt,
        get_tiny_pair,
        sample_questions,
    )
except ImportError:  # tests/ collected as rootdir-less modules
    from tiny_models import (
        DELIMITER,
        EOS_TOKEN,
        build_tiny_pair,
        cache_key,
        chat_prompt,
        get_tiny_pair,
        sample_questions,
    )


@pytest.fixture(scope="module")
def pair():
    return get_tiny_pair()


@pytest.fixture(scope="module")
def tok(pair):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(pair.target)


def test_pair_is_cached(pair):
    for d in (pair.target, pair.draft, pair.other_vocab):
        assert (d / "config.json").is_file()
        assert (d / "model.safetensors").is_file()
        assert (d / "tokenizer.json").is_file()
        assert (d / "generation_config.json").is_file()
    assert pair.root.name == cache_key()
    files = sorted(f for f in pair.root.rglob("*") if f.is_file())
    before = [f.stat().st_mtime_ns for f in files]
    again = build_tiny_pair(pair.root.parent)
    assert [f.stat().st_mtime_ns for f in files] == before, "the cached pair was rebuilt"
    assert again == pair
    assert cache_key(target_steps=1) != cache_key()
    assert cache_key(dtype="bfloat16") != cache_key()


def test_configs(pair, tok):
    info = pair.info
    cfg = json.loads((pair.target / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLM"]
    assert (cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"], cfg["head_dim"]) == (
        128,
        2,
        2,
        64,
    )
    assert cfg["tie_word_embeddings"] is False
    assert cfg["vocab_size"] == len(tok) == info["vocab_size"]
    assert cfg["eos_token_id"] == tok.eos_token_id == tok.pad_token_id == info["eos_token_id"]
    assert tok.eos_token == EOS_TOKEN
    gen = json.loads((pair.target / "generation_config.json").read_text())
    assert gen["eos_token_id"] == tok.eos_token_id


def test_target_and_draft_share_tokenizer(pair):
    from transformers import AutoTokenizer

    assert (pair.target / "tokenizer.json").read_bytes() == (pair.draft / "tokenizer.json").read_bytes()
    t, d = AutoTokenizer.from_pretrained(pair.target), AutoTokenizer.from_pretrained(pair.draft)
    assert t.get_vocab() == d.get_vocab()
    cfg_t = json.loads((pair.target / "config.json").read_text())
    cfg_d = json.loads((pair.draft / "config.json").read_text())
    assert cfg_t["vocab_size"] == cfg_d["vocab_size"]


def test_other_vocab_differs(pair, tok):
    from transformers import AutoTokenizer

    other = AutoTokenizer.from_pretrained(pair.other_vocab)
    cfg = json.loads((pair.other_vocab / "config.json").read_text())
    assert len(other) != len(tok)
    assert cfg["vocab_size"] == len(other) == pair.info["other_vocab_size"]
    assert other.get_vocab() != tok.get_vocab()


def test_delimiter_tokens(pair, tok):
    ids = tok.encode(DELIMITER, add_special_tokens=False)
    assert len(ids) == 1 and ids[0] == pair.info["delimiter_token_id"]
    merged = {
        tok.decode([i]): i for i in range(len(tok)) if DELIMITER in tok.decode([i]) and tok.decode([i]) != DELIMITER
    }
    assert ".\n\n" in merged, sorted(merged)
    assert merged == pair.info["merged_delimiter_tokens"]
    # in context, a sentence end and the delimiter merge into one token
    step_ids = tok.encode("Tom has 3 apples.\n\nHe buys 2 more.", add_special_tokens=False)
    assert merged[".\n\n"] in step_ids


def test_chat_template(tok):
    text = tok.apply_chat_template([{"role": "user", "content": "Hi?"}], tokenize=False, add_generation_prompt=True)
    assert text == chat_prompt("Hi?")


def test_target_greedy_generation_has_steps(pair, tok):
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(pair.target, dtype=torch.float32)
    prompt = tok(chat_prompt(sample_questions(1)[0]), return_tensors="pt")["input_ids"]
    out = model.generate(prompt, max_new_tokens=200, do_sample=False)[0, prompt.shape[1] :].tolist()
    text = tok.decode(out, skip_special_tokens=True)
    assert text.count(DELIMITER) >= 2, text
    delim_ids = {pair.info["delimiter_token_id"], *pair.info["merged_delimiter_tokens"].values()}
    assert sum(t in delim_ids for t in out) >= 2


def test_draft_agrees_often_but_not_always(pair, tok):
    """Teacher-forced greedy agreement of draft with target on the target's own output."""
    import torch
    from transformers import AutoModelForCausalLM

    target = AutoModelForCausalLM.from_pretrained(pair.target, dtype=torch.float32)
    draft = AutoModelForCausalLM.from_pretrained(pair.draft, dtype=torch.float32)
    prompt = tok(chat_prompt(sample_questions(2)[1]), return_tensors="pt")["input_ids"]
    seq = target.generate(prompt, max_new_tokens=120, do_sample=False)
    with torch.no_grad():
        t_next = target(seq).logits[0, prompt.shape[1] - 1 : -1].argmax(-1)
        d_next = draft(seq).logits[0, prompt.shape[1] - 1 : -1].argmax(-1)
    agree = (t_next == d_next).float().mean().item()
    assert 0.5 < agree < 1.0, agree
