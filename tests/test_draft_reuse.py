"""Draft-prefix reuse (lrtune.reuse): target rows start after the draft tokens the target's
prefill shows it would write itself. Pure functions, then orchestration on the fake backend;
the real-engine versions are in test_hf_backend.py and test_vllm_backend.py."""

from dataclasses import replace

import pytest

from fake_backend import FakeBackend, chain
from lrtune.backends.base import Generation, GenParams
from lrtune.decoder import DecodeConfig, LookaheadDecoder
from lrtune.errors import ConfigError
from lrtune.reuse import joined_step, matched_tokens, row_params, split_scores
from lrtune.verifiers import make_verifier
from test_decoder_orchestration import PROMPTS, SEEDS, ByContent, target_only


def mixed_draft(seed: int, every: int = 4) -> FakeBackend:
    """A draft that follows the target's greedy chain except at every ``every``-th token id."""
    return FakeBackend([o if i % every == 0 else t for i, (t, o) in enumerate(zip(chain(seed), chain(seed + 100)))])


# ---- pure functions ---------------------------------------------------------------------
def test_matched_tokens_is_the_leading_run_of_argmax_tokens_and_stops_at_an_unscored_one():
    assert matched_tokens([(0.0, True), (-0.1, True), (-2.0, False), (0.0, True)]) == 2
    assert matched_tokens([(0.0, True), None, (0.0, True)]) == 1
    assert matched_tokens([]) == 0 and matched_tokens([(-1.0, False)]) == 0


def test_split_scores_cuts_the_chain_per_step_and_pads_missing_scores_with_none():
    s = [(0.0, True)] * 3 + [(-1.0, False)] * 2
    assert split_scores(s, [2, 2, 3]) == [[(0.0, True)] * 2, [(0.0, True), (-1.0, False)], [(-1.0, False), None, None]]


def test_row_params_shrink_the_budget_by_the_reused_tokens():
    assert row_params(GenParams(max_tokens=24), 10).max_tokens == 14


def test_joined_step_recuts_at_a_delimiter_that_spans_the_join():
    vocab = {1: "a", 2: ".", 3: "\n", 4: "b", 5: "c"}
    decode = lambda ids: "".join(vocab[t] for t in ids)  # noqa: E731
    params = GenParams(max_tokens=10)
    out = Generation(token_ids=[3, 4, 5], text="\nbc", finish="length")  # the engine saw no "\n\n" in its own text
    got = joined_step([1, 2, 3], out, params, decode, frozenset())
    assert got.token_ids == [1, 2, 3, 3] and got.finish == "delimiter" and got.text == "a.\n\n"
    plain = joined_step(
        [1, 2], Generation(token_ids=[4, 3, 3], text="b\n\n", finish="delimiter"), params, decode, frozenset()
    )
    assert plain.token_ids == [1, 2, 4, 3, 3] and plain.finish == "delimiter"
    capped = joined_step(
        [1, 2], Generation(token_ids=[4, 5], text="bc", finish="length"), GenParams(max_tokens=3), decode, frozenset()
    )
    assert capped.token_ids == [1, 2, 4] and capped.finish == "length"
    stopped = Generation(token_ids=[], text="", finish="aborted")
    assert joined_step([1], stopped, params, decode, frozenset()) is stopped


# ---- orchestration ----------------------------------------------------------------------
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("verifier", ["never", "exact", "by-content"])
def test_reuse_commits_exactly_what_decoding_without_reuse_commits(seed, verifier):
    target, draft = FakeBackend(chain(seed)), mixed_draft(seed)
    make = (lambda: ByContent()) if verifier == "by-content" else (lambda: make_verifier(verifier))
    for prompt in PROMPTS:
        for method in ("lr", "lr+sd"):
            for early in (False, True):
                base = DecodeConfig(
                    method=method,
                    gamma1=3,
                    gamma2=2,
                    max_new_tokens=60,
                    max_step_tokens=6,
                    schedule="abort" if early else "sync",
                )
                full, fs = LookaheadDecoder(target, draft, make(), base).decode(prompt)
                got, gs = LookaheadDecoder(
                    target, draft, make(), replace(base, schedule="reuse+abort" if early else "reuse")
                ).decode(prompt)
                assert got.token_ids == full.token_ids and got.steps == full.steps
                assert gs.committed_draft_steps == fs.committed_draft_steps and gs.rounds == fs.rounds
                assert gs.target_step_tokens + gs.reused_target_tokens >= fs.target_step_tokens or early
                if verifier == "never":
                    assert got.token_ids == target_only(target, prompt, 60)


def test_rows_start_after_the_matched_tokens_and_generate_fewer_tokens():
    target, draft = FakeBackend(chain(4)), mixed_draft(4)
    cfg = DecodeConfig(method="lr", gamma1=3, max_new_tokens=80, max_step_tokens=8, schedule="reuse")
    rounds = []
    res, stats = LookaheadDecoder(target, draft, make_verifier("exact"), cfg).decode(PROMPTS[0], on_round=rounds.append)
    assert stats.reused_target_tokens > 0
    prefills = [rows for rows in target.row_params if rows and rows[0].score_from is not None]
    assert len(prefills) == sum(bool(r.drafts) for r in rounds)  # one prefill row per round that drafted
    assert all(len(rows) == 1 and rows[0].max_tokens == 1 for rows in prefills)
    shrunk = [r for rows in target.row_params for r in rows if r.score_from is None and r.max_tokens < 8]
    assert shrunk  # some rows continue a step after reused tokens, with what is left of its budget
    plain, ps = LookaheadDecoder(target, draft, make_verifier("exact"), replace(cfg, schedule="sync")).decode(
        PROMPTS[0]
    )
    assert res.token_ids == plain.token_ids and stats.target_step_tokens < ps.target_step_tokens


def test_a_draft_step_the_target_writes_token_for_token_needs_no_target_row():
    target, draft = FakeBackend(chain(3)), FakeBackend(chain(3))  # the draft is the target
    cfg = DecodeConfig(method="lr", gamma1=3, max_new_tokens=60, max_step_tokens=6, schedule="reuse")
    rounds = []
    res, stats = LookaheadDecoder(target, draft, make_verifier("exact"), cfg).decode(PROMPTS[2], on_round=rounds.append)
    assert res.token_ids == target_only(target, PROMPTS[2], 60)
    assert stats.alpha1 == 1.0
    step_calls = [rows for rows in target.row_params if rows and rows[0].score_from is None]
    assert all(len(rows) == 1 for rows in step_calls)  # only the bonus row runs
    assert stats.reused_target_tokens == sum(len(d.token_ids) for r in rounds for d in r.drafts)


def test_early_abort_with_reuse_lets_a_verifier_read_the_prefill_scores():
    target, draft = FakeBackend(chain(2)), mixed_draft(2)
    v = make_verifier("target_logprob")
    base = DecodeConfig(method="lr", gamma1=3, max_new_tokens=50, max_step_tokens=6)
    rounds = []
    got, _ = LookaheadDecoder(target, draft, v, replace(base, schedule="reuse+abort")).decode(
        PROMPTS[0], on_round=rounds.append
    )
    full, _ = LookaheadDecoder(target, draft, v, base).decode(PROMPTS[0])
    assert got.token_ids == full.token_ids
    judged = [p for r in rounds for p in r.pairs[0]]
    assert judged and all(p.draft_scores is not None for p in judged)


@pytest.mark.parametrize(
    "bad,words", [(dict(temperature=0.7), "reuse"), (dict(width=2), "one branch"), (dict(record="logprobs"), "reuse")]
)
def test_reuse_refuses_sampling_branches_and_logprobs(bad, words):
    with pytest.raises(ConfigError, match=words):
        DecodeConfig(method="lr", schedule="reuse", **bad).validate()


def test_async_and_reuse_cannot_be_spelled_together():
    """One schedule per run: the old switches that named two are refused where they meet."""
    from lrtune.decodeconfig import schedule_of

    with pytest.raises(ConfigError, match="pick one --schedule"):
        schedule_of(async_lr=True, reuse_drafts=True)
    with pytest.raises(ConfigError, match="--schedule"):
        DecodeConfig(method="lr", schedule="async+reuse").validate()
