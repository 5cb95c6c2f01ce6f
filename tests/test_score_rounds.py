"""Score rounds (--schedule score, lrtune.score_round): draft steps judged one-sided from one
prefill of the chain, then the target's own step after the accepted prefix."""

from __future__ import annotations

import pytest

from fake_backend import FakeBackend, chain
from lrtune.decoder import DecodeConfig, LookaheadDecoder
from lrtune.errors import ConfigError
from lrtune.verifiers import make_verifier

PROMPTS = [[5, 7, 9], [11, 4], [20, 21, 22, 23]]


def target_only(target, prompt, n):
    return (
        LookaheadDecoder(target, None, make_verifier("never"), DecodeConfig(method="target", max_new_tokens=n))
        .decode(prompt)[0]
        .token_ids
    )


class RejectAllReadingScores:
    """Rejects every draft step, reading the prefill's scores of it (as target_logprob or a router does)."""

    name, threshold, one_sided, uses_draft_scores = "reject-all", 0.5, True, True

    def score(self, pairs):
        assert all(p.draft_scores is not None for p in pairs)
        return [0.0 for _ in pairs]


@pytest.mark.parametrize("method", ["lr", "lr+sd"])
@pytest.mark.parametrize("reads_scores", [True, False])
def test_reject_all_gives_the_target_greedy_output_with_a_prefill_only_for_a_verifier_that_reads_it(
    method, reads_scores
):
    target, draft = FakeBackend(chain(3)), FakeBackend(chain(8))
    cfg = DecodeConfig(method=method, gamma1=3, gamma2=2, max_new_tokens=40, max_step_tokens=6, schedule="score")
    verifier = RejectAllReadingScores() if reads_scores else make_verifier("never")
    for p in PROMPTS:
        ref = target_only(target, p, 40)
        target.calls.clear()
        target.row_params.clear()
        rounds = []
        res, stats = LookaheadDecoder(target, draft, verifier, cfg).decode(p, on_round=rounds.append)
        assert res.token_ids == ref
        assert stats.committed_draft_steps == 0 and stats.rounds == len(rounds) >= 2
        scoring = [q for call in target.row_params for q in call if q.score_from is not None]
        # a prefill and a step per round; a verifier that reads no target score (a draft-only
        # router) needs no prefill: one call per round, the target's own step
        assert len(target.calls) == stats.target_calls == (2 if reads_scores else 1) * stats.rounds
        assert len(scoring) == (stats.rounds if reads_scores else 0) and all(q.max_tokens == 1 for q in scoring)
        steps = [q for call in target.row_params for q in call if q.score_from is None]
        assert all(q.num_speculative_tokens == (2 if method == "lr+sd" else 0) for q in steps)  # SD in the step
        assert all(r.targets and len(r.targets) == 1 for r in rounds)  # one target step per round: the bonus


def test_an_identical_draft_accepted_throughout_still_equals_the_target():
    target = FakeBackend(chain(3))
    cfg = DecodeConfig(method="lr", gamma1=3, max_new_tokens=40, max_step_tokens=6, schedule="score")
    for p in PROMPTS:
        rounds = []
        res, stats = LookaheadDecoder(target, target, make_verifier("always"), cfg).decode(p, on_round=rounds.append)
        assert res.token_ids == target_only(target, p, 40)
        assert stats.committed_draft_steps > 0 and stats.alpha1 == 1.0


def test_the_one_sided_verifier_sees_the_prefill_scores_and_no_target_step():
    seen = []

    class Spy:
        name, threshold, one_sided, uses_draft_scores = "spy", 0.5, True, True

        def score(self, pairs):
            seen.extend(pairs)
            return [1.0 if p.draft_scores is not None and p.draft_scores.mean_logprob > -3 else 0.0 for p in pairs]

    target, draft = FakeBackend(chain(3)), FakeBackend(chain(3))
    cfg = DecodeConfig(method="lr", gamma1=2, max_new_tokens=30, max_step_tokens=5, schedule="score")
    LookaheadDecoder(target, draft, Spy(), cfg).decode(PROMPTS[0])
    assert seen and all(p.target == "" and p.draft_scores is not None for p in seen)


def test_target_logprob_runs_score_rounds_and_batched_equals_alone():
    target, draft = FakeBackend(chain(3)), FakeBackend([t if i % 5 else (t + 1) % 50 for i, t in enumerate(chain(3))])
    cfg = DecodeConfig(method="lr", gamma1=3, max_new_tokens=40, max_step_tokens=6, schedule="score")
    dec = LookaheadDecoder(target, draft, make_verifier("target_logprob"), cfg)
    alone = [dec.decode(p)[0].token_ids for p in PROMPTS]
    outs, batch = dec.decode_many(PROMPTS, cfg, max_concurrent=3)
    assert [o.result.token_ids for o in outs] == alone and batch.prompts == 3


@pytest.mark.parametrize("spec", ["exact", "embedding"])
def test_a_verifier_that_compares_two_steps_is_refused_for_score_rounds(spec):
    target, draft = FakeBackend(chain(3)), FakeBackend(chain(4))
    cfg = DecodeConfig(method="lr", gamma1=2, max_new_tokens=20, schedule="score")
    with pytest.raises(ConfigError, match="one-sided|judges draft steps without a target step"):
        LookaheadDecoder(target, draft, make_verifier(spec), cfg).decode(PROMPTS[0])


def test_score_rounds_run_one_branch():
    with pytest.raises(ConfigError, match="one branch"):
        DecodeConfig(method="lr", schedule="score", width=2).validate()


class _Alternating:
    """A controller that runs lr, score and SD-only (γ1 = 0, one step) rounds in turn."""

    def __init__(self):
        from lrtune.control import Bounds

        self.bounds, self.round_kinds, self.t, self.seen = Bounds(), ("lr", "score"), 0, []

    def choose(self, problem, state):
        self.t += 1
        return (0, 2) if self.t % 3 == 0 else (3, 2)

    def round_kind(self):
        return "lr" if self.t % 3 == 1 else "score"

    def horizon(self):
        return 6

    def update(self, outcome):
        self.seen.append(outcome.kind)


@pytest.mark.parametrize("spec", ["never", "target_logprob"])
def test_a_controller_picking_the_round_kind_per_round_keeps_the_target_greedy_output_and_counts_each_kind(spec):
    target, draft = FakeBackend(chain(3)), FakeBackend([t if i % 5 else (t + 1) % 50 for i, t in enumerate(chain(3))])
    cfg = DecodeConfig(method="lr+sd", gamma1=3, gamma2=2, max_new_tokens=60, max_step_tokens=6)
    dec = LookaheadDecoder(target, draft, make_verifier(spec), cfg)
    for p in PROMPTS:
        ctl = _Alternating()
        target.row_params.clear()
        res, stats = dec.decode(p, controller=ctl)
        if spec == "never":
            assert res.token_ids == target_only(target, p, 60)
        assert stats.rounds == stats.lr_rounds + stats.score_rounds + stats.sd_rounds
        assert stats.lr_rounds and stats.score_rounds and stats.sd_rounds and len(set(ctl.seen)) == 3
        prefills = [q for call in target.row_params for q in call if q.score_from is not None and q.max_tokens == 1]
        # score rounds prefill their chain when the verifier reads the prefill; lr rounds never do
        assert len(prefills) == (stats.score_rounds if spec == "target_logprob" else 0)
    ctl = _Alternating()  # batched with per-slot kinds equals each prompt alone
    outs, _ = dec.decode_many(PROMPTS, cfg, max_concurrent=3, controller=ctl)
    assert [o.result.token_ids for o in outs] == [
        dec.decode(p, controller=_Alternating())[0].token_ids for p in PROMPTS
    ]


def test_a_controller_that_may_pick_score_rounds_needs_a_one_sided_verifier():
    target, draft = FakeBackend(chain(3)), FakeBackend(chain(4))
    dec = LookaheadDecoder(
        target, draft, make_verifier("exact"), DecodeConfig(method="lr", gamma1=2, max_new_tokens=20)
    )
    with pytest.raises(ConfigError, match="judges draft steps without a target step"):
        dec.decode(PROMPTS[0], controller=_Alternating())


def test_a_round_kind_other_than_lr_or_score_is_refused():
    class Bad(_Alternating):
        def round_kind(self):
            return "tree"

    target, draft = FakeBackend(chain(3)), FakeBackend(chain(4))
    dec = LookaheadDecoder(
        target, draft, make_verifier("never"), DecodeConfig(method="lr", gamma1=2, max_new_tokens=20)
    )
    with pytest.raises(ConfigError, match="round kind 'tree'"):
        dec.decode(PROMPTS[0], controller=Bad())


@pytest.mark.parametrize("schedule", ["sync", "score"])
def test_draft_stop_ends_a_chain_after_a_step_the_draft_doubts_and_keeps_the_target_greedy_output(schedule):
    """The fake draft gives each of its tokens log 0.8 = −0.22 nats: a threshold above that
    doubts every step (chains of one step), one below it none."""
    target, draft = FakeBackend(chain(3)), FakeBackend(chain(8))
    for stop, longest in ((-0.1, 1), (-1.0, 3)):
        cfg = DecodeConfig(
            method="lr", gamma1=3, max_new_tokens=40, max_step_tokens=6, schedule=schedule, draft_stop=stop
        )
        for p in PROMPTS:
            rounds = []
            res, stats = LookaheadDecoder(target, draft, make_verifier("never"), cfg).decode(p, on_round=rounds.append)
            assert res.token_ids == target_only(target, p, 40)
            assert max(len(r.drafts) for r in rounds) == longest
            assert (stats.draft_stops > 0) == (longest == 1)


def test_draft_stop_is_refused_for_async_rounds():
    with pytest.raises(ConfigError, match="--draft-stop"):
        DecodeConfig(method="lr", schedule="async", draft_stop=-1.0).validate()


def test_a_verifier_reading_the_drafts_own_confidence_only_gets_no_prefill_and_sees_it():
    seen = []

    class DraftOnly:
        name, threshold, one_sided, uses_draft_scores, uses_target_scores = "draft-only", 0.5, True, True, False

        def score(self, pairs):
            seen.extend(pairs)
            return [1.0 for _ in pairs]

    target, draft = FakeBackend(chain(3)), FakeBackend(chain(3))
    cfg = DecodeConfig(method="lr", gamma1=2, max_new_tokens=30, max_step_tokens=5, schedule="score")
    res, stats = LookaheadDecoder(target, draft, DraftOnly(), cfg).decode(PROMPTS[0])
    assert res.token_ids == target_only(target, PROMPTS[0], 30)  # the draft is the target: accepting keeps it
    assert not [q for call in target.row_params for q in call if q.score_from is not None]  # no prefill
    assert seen and all(
        p.target == ""
        and p.draft_scores is not None
        and p.draft_scores.mean_logprob is None
        and p.draft_scores.draft_logprob is not None
        for p in seen
    )
