"""Many prompts at once (DESIGN §3.7): ``LookaheadDecoder.decode_many`` gives every prompt
exactly the tokens it gets alone, keeps per-prompt stats exact, and batches the engines.

Orchestration runs on the deterministic fake backend; greedy equality runs on real vLLM
engines and on the transformers backend with the tiny float32 pair.
"""

from __future__ import annotations

import pytest

from fake_backend import FakeBackend, chain
from lrtune.backends.base import SDCounters, split_counters, split_counts
from lrtune.control import Bounds
from lrtune.decoder import DecodeConfig, LookaheadDecoder
from lrtune.errors import ConfigError
from lrtune.slots import Failed
from lrtune.verifiers import make_verifier

PROMPTS = [[5, 7, 9], [11, 4], [20, 21, 22, 23, 24, 25], [8], [30, 31, 6]]


class DepthByProblem:
    """A controller whose depths depend on the problem (γ1 = 1 + id length % 3)."""

    def __init__(self) -> None:
        self.bounds = Bounds(gamma1_min=0, gamma1_max=4, gamma2_min=0, gamma2_max=4, M=16.0)
        self.problem = None
        self.chosen: list[tuple[str, int]] = []

    def choose(self, problem, state):
        self.problem = problem
        g1 = 1 + int(problem.id.rsplit("-", 1)[-1], 16) % 3
        self.chosen.append((problem.id, g1))
        return g1, 2

    def horizon(self):
        return None

    def update(self, outcome):
        assert outcome.gamma1 == 1 + int(self.problem.id.rsplit("-", 1)[-1], 16) % 3


def fake_pair(seed: int = 3):
    """A target and a draft that agrees with it on most tokens (steps are accepted and rejected)."""
    table = chain(seed)
    other = chain(seed + 100)
    return FakeBackend(table, "target"), FakeBackend(
        [o if i % 4 == 0 else t for i, (t, o) in enumerate(zip(table, other))], "draft"
    )


def alone(dec, prompts, cfg, **kw):
    return [dec.decode(p, cfg, **kw) for p in prompts]


@pytest.mark.parametrize("method", ["target", "sd", "lr", "lr+sd"])
@pytest.mark.parametrize("width", [1, 2])
@pytest.mark.parametrize("verifier", ["never", "exact", "random(0.6)"])
def test_every_prompt_gets_the_tokens_it_gets_alone(method, width, verifier):
    target, draft = fake_pair()
    cfg = DecodeConfig(method=method, gamma1=3, gamma2=2, width=width, max_new_tokens=40, max_step_tokens=6)
    ref_dec = LookaheadDecoder(target, draft, make_verifier("never"), cfg)
    ref = alone(ref_dec, PROMPTS, cfg)
    for n in (1, 2, 5):
        dec = LookaheadDecoder(
            target, draft, make_verifier(verifier, seed=0) if verifier != "never" else make_verifier("never"), cfg
        )
        outs, batch = dec.decode_many(PROMPTS, cfg, max_concurrent=n)
        if verifier == "never":  # rejections everywhere: every method equals the target greedy
            assert [o[0].token_ids for o in outs] == [r[0].token_ids for r in ref]
        one, _ = dec.decode_many(PROMPTS, cfg, max_concurrent=1) if verifier != "never" else (None, None)
        if one is not None:  # exact, and random(p) by keyed draws: batched == one at a time, step by step
            assert [o[0].steps for o in outs] == [o[0].steps for o in one]
            assert [o[1].rounds for o in outs] == [o[1].rounds for o in one]
            assert [o[1].accepted_by_pos for o in outs] == [o[1].accepted_by_pos for o in one]
        assert batch.prompts == len(PROMPTS) and batch.max_concurrent == n
        assert batch.generated_tokens == sum(len(o[0].token_ids) for o in outs)


def test_prompts_share_engine_calls_and_finish_at_different_rounds():
    target, draft = fake_pair()
    cfg = DecodeConfig(method="lr", gamma1=2, max_new_tokens=30, max_step_tokens=5)
    dec = LookaheadDecoder(target, draft, make_verifier("never"), cfg)
    done_order = []
    outs, batch = dec.decode_many(PROMPTS, cfg, max_concurrent=3, on_done=lambda i, r: done_order.append(i))
    rounds = [o[1].rounds for o in outs]
    assert len(set(rounds)) > 1, "prompts should finish at different rounds"
    assert sorted(done_order) == list(range(len(PROMPTS)))
    alone_calls = sum(o[1].target_calls for o in outs)
    assert batch.calls["target"] < alone_calls  # rounds of several prompts share one call
    assert max(n for n, _ in target.calls) > cfg.gamma1 + 1  # a call carried rows of several prompts
    assert batch.rows_per_call("target") > 1
    # continuous batching: never more than 3 prompts' rows in one call
    assert all(n <= 3 * (cfg.gamma1 + 1) for n, _ in target.calls)


def test_per_prompt_stats_are_exact_counts_and_shared_time_adds_up():
    target, draft = fake_pair()
    cfg = DecodeConfig(method="lr+sd", gamma1=2, gamma2=3, max_new_tokens=30, max_step_tokens=5)
    dec = LookaheadDecoder(target, draft, make_verifier("exact"), cfg)
    one, _ = dec.decode_many(PROMPTS, cfg, max_concurrent=1)
    many, batch = dec.decode_many(PROMPTS, cfg, max_concurrent=4)
    for (r1, s1), (rn, sn) in zip(one, many):
        assert r1.token_ids == rn.token_ids
        for name in (
            "rounds",
            "drafted_by_pos",
            "accepted_by_pos",
            "committed_draft_steps",
            "committed_target_steps",
            "target_calls",
            "draft_calls",
            "draft_step_tokens",
            "target_step_tokens",
            "generated_tokens",
            "verifier_calls",
        ):
            assert getattr(s1, name) == getattr(sn, name), name
    assert sum(s.committed_draft_steps for _, s in many) > 0
    assert sum(s.drafted_steps - s.accepted_steps for _, s in many) > 0
    # the fake engine reports one SD draft per call: the shares of all prompts sum to the calls made
    assert sum(s.sd_drafts for _, s in many) == batch.calls["target"]


def test_controllers_choose_different_depths_per_prompt_in_one_batch():
    from lrtune.control import ProblemInfo

    target, draft = fake_pair()
    cfg = DecodeConfig(method="lr+sd", gamma1=3, gamma2=2, max_new_tokens=30, max_step_tokens=5)
    problems = [ProblemInfo(id=f"p-{i:x}") for i in range(len(PROMPTS))]
    ctl = DepthByProblem()
    dec = LookaheadDecoder(target, draft, make_verifier("never"), cfg)
    outs, _ = dec.decode_many(PROMPTS, cfg, max_concurrent=5, controller=ctl, problems=problems)
    depths = {}
    for o, p in zip(outs, problems):
        depths[p.id] = len(o[1].drafted_by_pos)
    assert len(set(depths.values())) == 3  # γ1 = 1, 2, 3 side by side
    for p in problems:
        assert depths[p.id] <= 1 + int(p.id[2:], 16) % 3
    ref = alone(LookaheadDecoder(target, draft, make_verifier("never"), cfg), PROMPTS, cfg)
    assert [o[0].token_ids for o in outs] == [r[0].token_ids for r in ref]


def test_a_prompt_too_long_fails_alone_and_the_others_finish():
    target, draft = fake_pair()
    cfg = DecodeConfig(method="lr", gamma1=2, max_new_tokens=20, max_step_tokens=5)
    dec = LookaheadDecoder(target, draft, make_verifier("never"), cfg)
    prompts = [[5, 6], list(range(3, 30)), [], [7, 8, 9]]
    seen = {}
    outs, batch = dec.decode_many(prompts, cfg, max_concurrent=4, max_len=40, on_done=seen.__setitem__)
    assert isinstance(outs[1], Failed) and "max_model_len 40" in outs[1].message
    assert isinstance(outs[2], Failed) and isinstance(outs[2].error, ConfigError) and "empty" in outs[2].message
    assert outs[0][0].token_ids == dec.decode(prompts[0], cfg)[0].token_ids
    assert outs[3][0].token_ids == dec.decode(prompts[3], cfg)[0].token_ids
    assert set(seen) == {0, 1, 2, 3}


def test_async_lr_refuses_more_than_one_prompt_in_flight():
    target, draft = fake_pair()
    cfg = DecodeConfig(method="lr", schedule="async", max_new_tokens=20, max_step_tokens=5)
    dec = LookaheadDecoder(target, draft, make_verifier("never"), cfg)
    with pytest.raises(ConfigError, match="one prompt at a time"):
        dec.decode_many(PROMPTS, cfg, max_concurrent=2)
    outs, _ = dec.decode_many(PROMPTS[:2], cfg, max_concurrent=1)
    assert all(len(o[0].token_ids) > 0 for o in outs)


@pytest.mark.parametrize(
    "total,weights,expect",
    [
        (10, [1, 1], [5, 5]),
        (7, [3, 0, 1], [5, 0, 2]),
        (5, [0, 0], [3, 2]),
        (0, [2, 5], [0, 0]),
        (3, [], []),
    ],
)
def test_split_counts_is_proportional_and_sums_to_the_total(total, weights, expect):
    assert split_counts(total, weights) == expect


def test_split_counters_parts_sum_to_the_call_total():
    total = SDCounters(drafts=9, drafted_tokens=36, accepted_tokens=25, accepted_by_pos=[8, 7, 6, 4])
    parts = split_counters(total, [10, 3, 0, 7])
    assert sum(p.drafts for p in parts) == 9 and sum(p.accepted_tokens for p in parts) == 25
    assert [sum(p.accepted_by_pos[i] for p in parts) for i in range(4)] == [8, 7, 6, 4]
    assert parts[2].drafted_tokens == 0


@pytest.mark.parametrize("method", ["lr", "lr+sd"])
def test_a_seeded_random_verifier_gives_the_same_tokens_twice_and_alone_or_batched(method):
    """Verifier draws are keyed by (seed, pair), as sampling is by (seed, round, position)."""
    target, draft = fake_pair()
    cfg = DecodeConfig(method=method, gamma1=3, gamma2=2, max_new_tokens=40, max_step_tokens=6, seed=5)
    dec = LookaheadDecoder(target, draft, make_verifier("random(0.5)", seed=5), cfg)
    first = [dec.decode(p, cfg)[0].token_ids for p in PROMPTS]
    again = [dec.decode(p, cfg)[0].token_ids for p in PROMPTS]
    fresh = LookaheadDecoder(target, draft, make_verifier("random(0.5)", seed=5), cfg)
    batched, _ = fresh.decode_many(PROMPTS[::-1], cfg, max_concurrent=3)
    assert again == first and [o[0].token_ids for o in batched][::-1] == first
    accepted = [dec.decode(p, cfg)[1].committed_draft_steps for p in PROMPTS]
    assert sum(accepted) > 0  # the draws did accept some steps (and, with 0.5, reject others)
