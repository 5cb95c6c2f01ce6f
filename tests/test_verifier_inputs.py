"""What verifiers and teachers see (DESIGN §3.6), on both real backends with the tiny pair.

The tiny tokenizer's chat template wraps turns in special tokens (``<|user|>``,
``<|assistant|>``) and answers end in ``<|endoftext|>``: none of them may reach a verifier.
The context is the problem statement (always whole) and the tail of the solution exactly
as the target saw it at that position, accepted drafts included.
"""

from __future__ import annotations

import threading
import time

import pytest

from lrtune.async_lr import _ENGINE_LOCK as ENGINE_LOCK
from lrtune.control import ProblemInfo
from lrtune.decoder import DecodeConfig, LookaheadDecoder
from lrtune.verifiers import StepPair
from lrtune.verifiers.base import verifier_context
from tiny_models import SPECIAL_TOKENS, get_tiny_pair, sample_questions


class Recording:
    """Accepts the first position of every round (so drafts get committed) and keeps every
    pair it was asked about."""

    name = "recording"
    threshold = 0.5

    def __init__(self) -> None:
        self.pairs: list[StepPair] = []

    def score(self, pairs):
        self.pairs += pairs
        return [1.0 if i == 0 else 0.0 for i in range(len(pairs))]


@pytest.fixture(scope="module", params=["transformers", "vllm"])
def backends(request):
    pair = get_tiny_pair()
    if request.param == "transformers":
        from lrtune.backends.hf import HFBackend

        draft = HFBackend(str(pair.draft), name="draft")
        return HFBackend(str(pair.target), name="target", spec=draft), draft
    pytest.importorskip("vllm")
    from lrtune.backends.vllm import VLLMBackend, VLLMConfig

    cfg = dict(dtype="float32", max_model_len=1024, seed=0, kv_cache_gib=0.25)
    return (
        VLLMBackend(str(pair.target), VLLMConfig(spec_model=str(pair.draft), **cfg), name="target"),
        VLLMBackend(str(pair.draft), VLLMConfig(**cfg), name="draft"),
    )


def decode_recording(target, draft, question: str, context_tokens: int = 256, problem: bool = True):
    ver = Recording()
    rounds = []
    cfg = DecodeConfig(method="lr", gamma1=3, max_new_tokens=96, max_step_tokens=16, context_tokens=context_tokens)
    ids = target.encode_prompt(question)
    info = ProblemInfo(id="q", text=question, prompt_tokens=len(ids)) if problem else None
    res, _ = LookaheadDecoder(target, draft, ver, cfg).decode(ids, on_round=rounds.append, problem=info)
    return ver, rounds, res, ids


def test_no_chat_markup_or_special_token_reaches_the_verifier(backends):
    target, draft = backends
    question = sample_questions(1, seed=3)[0]
    ver, rounds, res, ids = decode_recording(target, draft, question)
    assert any(t in target.decode(ids) for t in SPECIAL_TOKENS)  # the production prompt does carry markup
    assert ver.pairs
    for p in ver.pairs:
        for text in (p.context, p.draft, p.target):
            assert not any(t in text for t in SPECIAL_TOKENS), text
    # without a ProblemInfo the problem is the prompt's text, markup removed
    ver2, *_ = decode_recording(target, draft, question, problem=False)
    assert all(question in p.context and not any(t in p.context for t in SPECIAL_TOKENS) for p in ver2.pairs)


def test_context_is_the_problem_and_the_solution_as_the_target_saw_it_at_each_position(backends):
    target, draft = backends
    question = sample_questions(1, seed=4)[0]
    ver, rounds, res, _ = decode_recording(target, draft, question)
    clean = lambda ids: target.decode(ids, skip_special_tokens=True)  # noqa: E731
    committed: list[int] = []
    checked = 0
    for r in rounds:
        for k, p in enumerate(r.pairs[0]):
            seen = committed + [t for d in r.drafts[:k] for t in d.token_ids]
            assert p.context == verifier_context(question, clean(seen[-256:]))
            assert p.context.startswith(question)
            checked += k > 0
        committed += [t for d in r.drafts[: r.committed_drafts] for t in d.token_ids]
        if r.committed_drafts < len(r.targets):
            committed += r.targets[r.committed_drafts].token_ids
    assert checked > 0, "no round drafted two positions"
    assert ver.pairs == [p for r in rounds for p in r.pairs[0]]  # the records hold exactly what was judged
    assert committed[: len(res.token_ids)] == res.token_ids


def test_the_problem_is_never_dropped_from_a_short_context(backends):
    target, draft = backends
    question = sample_questions(1, seed=5)[0]
    ver, *_ = decode_recording(target, draft, question, context_tokens=4)
    assert all(p.context.startswith(question) and len(p.context) < len(question) + 80 for p in ver.pairs)
    ver0, *_ = decode_recording(target, draft, question, context_tokens=0)
    assert all(p.context == question for p in ver0.pairs)


class DraftFirst:
    """Async LR's engines, the target's first call held back (outside the engine lock) until
    the draft has returned a step, so a draft step always exists when s1 is ready and the
    verifier is asked: a hand-off, not a timing race (a CPU under load lost the race)."""

    def __init__(self, target, draft) -> None:
        self.drafted = threading.Event()
        self.target, self.draft = _Gated(target, self.drafted, wait=True), _Gated(draft, self.drafted, wait=False)


class _Gated:
    concurrent_safe = True  # takes the engine lock itself, after its wait

    def __init__(self, backend, drafted: threading.Event, wait: bool) -> None:
        self.backend, self.drafted, self.wait, self.calls = backend, drafted, wait, 0

    def __getattr__(self, name):
        return getattr(self.backend, name)

    def generate(self, *args, **kwargs):
        if self.wait and self.calls == 0:
            assert self.drafted.wait(timeout=120), "the draft never returned a step"
            time.sleep(0.2)  # lets the draft worker hand its step to the decoder first
        self.calls += 1
        with ENGINE_LOCK:  # vLLM engines in one process never run at once
            out = self.backend.generate(*args, **kwargs)
        if not self.wait:
            self.drafted.set()
        return out


def test_async_lr_shows_the_verifier_the_same_clean_context_as_sync_lr(backends):
    gate = DraftFirst(*backends)
    target, draft = gate.target, gate.draft
    question = sample_questions(1, seed=6)[0]
    ver = Recording()
    commits: list[list[int]] = []
    cfg = DecodeConfig(method="lr", gamma1=3, max_new_tokens=64, max_step_tokens=16, schedule="async")
    ids = target.encode_prompt(question)
    info = ProblemInfo(id="q", text=question, prompt_tokens=len(ids))
    LookaheadDecoder(target, draft, ver, cfg).decode(ids, on_commit=lambda _s, t: commits.append(t), problem=info)
    assert ver.pairs
    clean = lambda t: target.decode(t, skip_special_tokens=True)  # noqa: E731
    prefixes = [[t for c in commits[:n] for t in c] for n in range(len(commits) + 1)]
    for p in ver.pairs:  # async LR judges position 1 after the committed prefix P
        assert not any(t in x for t in SPECIAL_TOKENS for x in (p.context, p.draft, p.target))
        assert any(p.context == verifier_context(question, clean(pre[-256:])) for pre in prefixes), p.context
