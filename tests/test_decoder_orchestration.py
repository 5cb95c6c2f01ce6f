"""Round logic of LookaheadDecoder on a deterministic fake backend (orchestration only).

The real-engine versions of these invariants are in test_vllm_backend.py.
"""

import math
from dataclasses import replace

import pytest

from fake_backend import EOS, FakeBackend, chain
from lrtune.decoder import DecodeConfig, LookaheadDecoder
from lrtune.round_draft import DRAFT_TOP_K
from lrtune.errors import ConfigError
from lrtune.rounds import step_params
from lrtune.verifiers import make_verifier
from lrtune.verifiers.simple import RandomVerifier

PROMPTS = [[5, 7, 9], [11], [3, 4, 5, 6, 7, 8], [20, 21], [33, 12, 19]]
SEEDS = range(6)


def target_only(target, prompt, max_new):
    dec = LookaheadDecoder(target, None, make_verifier("never"), DecodeConfig(method="target", max_new_tokens=max_new))
    return dec.decode(prompt)[0].token_ids


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("method", ["lr", "lr+sd"])
def test_never_verifier_output_equals_target_greedy(seed, method):
    target, draft = FakeBackend(chain(seed)), FakeBackend(chain(seed + 100))
    for prompt in PROMPTS:
        for max_new in (1, 7, 60):
            cfg = DecodeConfig(method=method, gamma1=3, gamma2=2, max_new_tokens=max_new, max_step_tokens=6)
            res, stats = LookaheadDecoder(target, draft, make_verifier("never"), cfg).decode(prompt)
            assert res.token_ids == target_only(target, prompt, max_new)
            assert stats.committed_draft_steps == 0


@pytest.mark.parametrize("seed", SEEDS)
def test_identical_draft_with_exact_verifier_accepts_every_step_and_equals_target(seed):
    target, draft = FakeBackend(chain(seed)), FakeBackend(chain(seed))
    for prompt in PROMPTS:
        cfg = DecodeConfig(method="lr", gamma1=4, max_new_tokens=80, max_step_tokens=8)
        res, stats = LookaheadDecoder(target, draft, make_verifier("exact"), cfg).decode(prompt)
        assert res.token_ids == target_only(target, prompt, 80)
        assert stats.alpha1 in (None, 1.0)
        assert all(a == d for a, d in zip(stats.accepted_by_pos, stats.drafted_by_pos))


@pytest.mark.parametrize("seed", SEEDS)
def test_identical_draft_with_random_verifier_still_equals_target(seed):
    # Whatever is accepted is the target's own step, so any verdict sequence is safe.
    target, draft = FakeBackend(chain(seed)), FakeBackend(chain(seed))
    cfg = DecodeConfig(method="lr", gamma1=3, max_new_tokens=70, max_step_tokens=5)
    dec = LookaheadDecoder(target, draft, RandomVerifier(0.5, seed=seed), cfg)
    for prompt in PROMPTS:
        assert dec.decode(prompt)[0].token_ids == target_only(target, prompt, 70)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("gamma1", [1, 2, 5])
def test_round_commits_accepted_draft_prefix_then_one_target_step(seed, gamma1):
    target, draft = FakeBackend(chain(seed)), FakeBackend(chain(seed + 7))
    rounds = []
    cfg = DecodeConfig(method="lr", gamma1=gamma1, max_new_tokens=120, max_step_tokens=7)
    dec = LookaheadDecoder(target, draft, RandomVerifier(0.6, seed=seed), cfg)
    res, stats = dec.decode([5, 6, 7], on_round=rounds.append)
    rebuilt = []
    for r in rounds:
        assert len(r.drafts) <= gamma1
        assert len(r.targets) in (len(r.drafts), len(r.drafts) + 1)
        j = r.committed_drafts
        assert r.accepted[:j] == [True] * j and (j == len(r.accepted) or not r.accepted[j])
        for d in r.drafts[:j]:
            rebuilt += d.token_ids
        if j < len(r.targets):
            rebuilt += r.targets[j].token_ids
    assert rebuilt[: len(res.token_ids)] == res.token_ids
    assert stats.rounds == len(rounds)
    assert stats.committed_draft_steps == sum(r.committed_drafts for r in rounds)
    assert stats.mean_accepted_steps_per_round == pytest.approx(
        (stats.committed_draft_steps + stats.committed_target_steps) / stats.rounds
    )


@pytest.mark.parametrize("seed", SEEDS)
def test_target_step_j_is_conditioned_on_draft_steps_before_j(seed):
    target, draft = FakeBackend(chain(seed)), FakeBackend(chain(seed + 3))
    cfg = DecodeConfig(method="lr", gamma1=3, max_new_tokens=50, max_step_tokens=6)
    dec = LookaheadDecoder(target, draft, make_verifier("never"), cfg)
    rounds = []
    dec.decode([9, 8, 7], on_round=rounds.append)
    for r in rounds:
        for k, t in enumerate(r.targets):
            ctx = [9, 8, 7]  # only checked in round 0, where the base prefix is the prompt
            if r.index == 0:
                prefix = ctx + [tok for d in r.drafts[:k] for tok in d.token_ids]
                expect = target.generate([prefix], step_params(cfg, 50, 0, 0, 1, gamma2=cfg.sd_gamma2)).outputs[0]
                assert t.token_ids == expect.token_ids


@pytest.mark.parametrize("seed", SEEDS)
def test_budgets_are_never_exceeded(seed):
    target, draft = FakeBackend(chain(seed, eos_rate=0.0)), FakeBackend(chain(seed + 1, eos_rate=0.0))
    cfg = DecodeConfig(method="lr+sd", gamma1=3, gamma2=4, max_new_tokens=37, max_step_tokens=5)
    res, stats = LookaheadDecoder(target, draft, RandomVerifier(0.7, seed=1), cfg).decode([4, 4, 4])
    assert len(res.token_ids) <= 37
    assert all(len(ids) <= 5 for _, ids in res.steps)
    assert all(len(p.seeds or ()) <= 4 for _, p in draft.calls)
    assert all(n == 1 for n, _ in draft.calls)  # one draft step per call, γ1 calls at most per round
    assert draft.calls and all(p.max_tokens <= 5 for _, p in draft.calls)
    assert all(n <= 3 + 1 for n, _ in target.calls)  # γ1 + the bonus step
    assert all(p.num_speculative_tokens == 4 for _, p in target.calls)
    assert all(p.num_speculative_tokens == 0 for _, p in draft.calls)
    assert max(len(stats.drafted_by_pos), 0) <= 3


def test_eos_ends_decoding_and_is_kept():
    table = chain(1, eos_rate=0.3)
    target, draft = FakeBackend(table), FakeBackend(table)
    res, _ = LookaheadDecoder(
        target, draft, make_verifier("exact"), DecodeConfig(method="lr", max_new_tokens=500)
    ).decode([5])
    if EOS in res.token_ids:
        assert res.token_ids[-1] == EOS and res.token_ids.count(EOS) == 1 and res.finish == "eos"


def test_sampling_is_reproducible_with_a_seed_and_varies_across_seeds():
    target, draft = FakeBackend(chain(2, eos_rate=0.0)), FakeBackend(chain(3, eos_rate=0.0))
    outs = {}
    for seed in (0, 0, 1):
        cfg = DecodeConfig(method="lr", temperature=0.8, seed=seed, max_new_tokens=60)
        res, _ = LookaheadDecoder(target, draft, RandomVerifier(0.5, seed=seed), cfg).decode([5, 6])
        outs.setdefault(seed, []).append(res.token_ids)
    assert outs[0][0] == outs[0][1]
    assert outs[0][0] != outs[1][0]


@pytest.mark.parametrize(
    "bad",
    [
        dict(method="lr", gamma1=0),
        dict(method="lr+sd", gamma1=17),
        dict(method="sd", gamma2=0),
        dict(method="lr+sd", gamma2=99),
        dict(max_new_tokens=0),
        dict(method="fast"),
        dict(temperature=-1),
    ],
)
def test_out_of_range_config_raises_config_error(bad):
    with pytest.raises(ConfigError):
        DecodeConfig(**bad).validate()


def test_lr_without_draft_and_empty_prompt_raise_config_error():
    target = FakeBackend(chain(0))
    with pytest.raises(ConfigError):
        LookaheadDecoder(target, None, make_verifier("never"), DecodeConfig(method="lr")).decode([1, 2])
    with pytest.raises(ConfigError):
        LookaheadDecoder(target, target, make_verifier("never"), DecodeConfig(method="lr")).decode([])


@pytest.mark.parametrize("seed", SEEDS)
def test_multi_branch_never_verifier_output_equals_target_greedy(seed):
    target, draft = FakeBackend(chain(seed)), FakeBackend(chain(seed + 100))
    for prompt in PROMPTS:
        cfg = DecodeConfig(method="lr", gamma1=3, width=3, max_new_tokens=50, max_step_tokens=6)
        assert LookaheadDecoder(target, draft, make_verifier("never"), cfg).decode(prompt)[0].token_ids == target_only(
            target, prompt, 50
        )


def test_multi_branch_budget_and_branches_really_differ_when_sampling():
    target, draft = FakeBackend(chain(1)), FakeBackend(chain(101))
    rounds = []
    cfg = DecodeConfig(method="lr", gamma1=3, width=2, temperature=0.9, seed=4, max_new_tokens=60, max_step_tokens=6)
    LookaheadDecoder(target, draft, make_verifier("random(0.5)", seed=1), cfg).decode([5, 7, 9], on_round=rounds.append)
    differ = 0
    for r in rounds:
        assert len(r.branches) == 2 and all(len(b) <= 3 for b in r.branches)
        assert r.drafts is r.branches[r.branch]
        assert len(r.branch_scores[0]) == len(r.branches[0])
        a, b = ([d.token_ids for d in br] for br in r.branches)
        differ += a != b
    assert differ >= len(rounds) // 2


def test_multi_branch_at_temperature_zero_keeps_branch_zero_greedy_and_samples_the_others():
    target, draft = FakeBackend(chain(2)), FakeBackend(chain(102))
    rounds = []
    cfg = DecodeConfig(method="lr", gamma1=2, width=3, max_new_tokens=40, max_step_tokens=6)
    LookaheadDecoder(target, draft, make_verifier("never"), cfg).decode([5, 7, 9], on_round=rounds.append)
    greedy = [[p for p in rows if p.temperature == 0] for rows in draft.row_params]
    sampled = [[p for p in rows if p.temperature > 0] for rows in draft.row_params]
    assert any(greedy) and any(sampled)
    assert all(len(g) == 1 for g in greedy)  # branch 0 alone is greedy, in every draft call
    assert all(
        all(p.seeds is not None for p in ps) and len({p.seeds[0] for p in ps}) == len(ps) for ps in sampled
    )  # distinct seeds


def test_multi_branch_picks_the_branch_with_the_longest_accepted_prefix():
    target = FakeBackend(chain(3))
    rounds = []
    cfg = DecodeConfig(method="lr", gamma1=3, width=2, max_new_tokens=40, max_step_tokens=6)
    # branch 0 drafts with the target itself (greedy, always equal); branch 1 samples.
    LookaheadDecoder(target, target, make_verifier("exact"), cfg).decode([5, 7, 9], on_round=rounds.append)
    from lrtune.stats import leading_accepts

    assert rounds
    for r in rounds:
        lead = [leading_accepts(v) for v in r.branch_accepted]
        assert r.committed_drafts == lead[r.branch] == max(lead)
        assert r.branch_accepted[0] == [True] * len(r.branches[0])  # the target drafting for itself


def test_width_out_of_range_is_a_config_error():
    with pytest.raises(ConfigError, match="width"):
        DecodeConfig(method="lr", width=0).validate()


class ByContent:
    """A deterministic verifier whose verdict depends on the pair only (never on call order)."""

    name = "by-content"
    threshold = 0.5

    def score(self, pairs):
        import zlib

        return [
            1.0 if p.draft == p.target else (zlib.crc32((p.draft + "|" + p.target).encode()) % 100) / 99 for p in pairs
        ]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("verifier", ["never", "exact", "by-content"])
def test_early_abort_commits_exactly_what_the_full_round_commits(seed, verifier):
    target = FakeBackend(chain(seed))
    draft = FakeBackend([o if i % 4 == 0 else t for i, (t, o) in enumerate(zip(chain(seed), chain(seed + 100)))])
    make = (lambda: ByContent()) if verifier == "by-content" else (lambda: make_verifier(verifier))
    for prompt in PROMPTS:
        for method in ("lr", "lr+sd"):
            base = DecodeConfig(method=method, gamma1=3, gamma2=2, max_new_tokens=60, max_step_tokens=6)
            full, fs = LookaheadDecoder(target, draft, make(), base).decode(prompt)
            rounds = []
            early, es = LookaheadDecoder(target, draft, make(), replace(base, schedule="abort")).decode(
                prompt, on_round=rounds.append
            )
            assert early.token_ids == full.token_ids and early.steps == full.steps
            assert es.committed_draft_steps == fs.committed_draft_steps and es.rounds == fs.rounds
            for r in rounds:  # judged: the leading positions up to the first stopped row
                assert len(r.accepted) <= len(r.drafts)
                stopped = [k for k, t in enumerate(r.targets) if t.finish == "aborted"]
                assert all(k > r.accepted.index(False) for k in stopped) if stopped else True
                assert r.committed_drafts == next((k for k, ok in enumerate(r.accepted) if not ok), len(r.accepted))


def test_early_abort_stops_the_rows_after_a_rejection():
    target, draft = FakeBackend(chain(2)), FakeBackend(chain(102))
    cfg = DecodeConfig(method="lr", gamma1=4, max_new_tokens=60, max_step_tokens=6, schedule="abort")
    res, stats = LookaheadDecoder(target, draft, make_verifier("never"), cfg).decode([5, 7, 9])
    assert res.token_ids == target_only(target, [5, 7, 9], 60)
    assert any(target.aborted_rows) and all(0 not in rows for rows in target.aborted_rows)
    assert stats.drafted_steps < stats.rounds * 4  # positions after a rejection get no verdict
    assert stats.aborted_target_rows == sum(len(rows) for rows in target.aborted_rows) > 0


def test_early_abort_needs_sync_lr_one_branch_and_a_verifier_off_the_target_engine():
    with pytest.raises(ConfigError, match="one branch"):
        DecodeConfig(method="lr", width=2, schedule="abort").validate()
    target, draft = FakeBackend(chain(1)), FakeBackend(chain(5))

    class OnTarget(ByContent):
        backend = target

    cfg = DecodeConfig(method="lr", gamma1=2, max_new_tokens=30, max_step_tokens=6, schedule="abort")
    with pytest.raises(ConfigError, match="target's own engine"):
        LookaheadDecoder(target, draft, OnTarget(), cfg).decode([5, 7])


def test_scored_rounds_ask_the_row_of_position_k_plus_1_to_score_draft_step_k():
    """Row k + 1 prefills draft step k: it (and only it) scores that step, from where the step
    starts; the pair at k carries those scores; rows of position 0 score nothing."""
    target, draft = FakeBackend(chain(2)), FakeBackend(chain(2))  # the draft proposes the target's greedy tokens
    cfg = DecodeConfig(method="lr", gamma1=3, max_new_tokens=40, max_step_tokens=6)
    rounds = []
    LookaheadDecoder(target, draft, make_verifier("target_logprob"), cfg).decode(PROMPTS[0], on_round=rounds.append)
    scored_calls = [rows for rows in target.row_params if any(r.score_from is not None for r in rows)]
    assert scored_calls
    for rows in scored_calls:
        assert rows[0].score_from is None and all(r.score_from is not None for r in rows[1:])
    followed = [(r.pairs[0][k], d) for r in rounds for k, d in enumerate(r.drafts) if k + 1 < len(r.targets)]
    assert followed
    for pair, d in followed:  # the fake scores its own greedy token 0 nats: a greedy draft scores exactly that
        assert pair.draft_scores.tokens == len(d.token_ids)
        assert pair.draft_scores.mean_logprob == 0.0 and pair.draft_scores.argmax_share == 1.0
        # and the draft's own confidence, from the top-k logprobs its scored steps return
        assert pair.draft_scores.draft_logprob == pytest.approx(math.log(0.8))
        assert pair.draft_scores.draft_entropy == pytest.approx(-(0.8 * math.log(0.8) + 0.2 * math.log(0.2)))
    assert all(r.top_logprobs == DRAFT_TOP_K for rows in draft.row_params for r in rows)


def test_unscored_configs_ask_no_row_to_score():
    target, draft = FakeBackend(chain(2)), FakeBackend(chain(3))
    cfg = DecodeConfig(method="lr", gamma1=3, max_new_tokens=30, max_step_tokens=6)
    LookaheadDecoder(target, draft, make_verifier("exact"), cfg).decode(PROMPTS[0])
    assert all(r.score_from is None for rows in target.row_params for r in rows)
    assert all(r.top_logprobs == 0 for rows in draft.row_params for r in rows)


def test_a_verifier_that_reads_draft_scores_refuses_early_abort_and_async_lr():
    target, draft = FakeBackend(chain(2)), FakeBackend(chain(3))
    v = make_verifier("target_logprob")
    with pytest.raises(ConfigError, match="--schedule sync"):
        LookaheadDecoder(target, draft, v, DecodeConfig(method="lr", gamma1=2, schedule="abort")).decode(PROMPTS[0])
    with pytest.raises(ConfigError, match="--schedule sync"):
        LookaheadDecoder(target, draft, v, DecodeConfig(method="lr", gamma1=2, schedule="async")).decode(PROMPTS[0])
    with pytest.raises(ConfigError, match="--schedule sync"):
        DecodeConfig(method="lr", schedule="async", record="draft_scores").validate()
