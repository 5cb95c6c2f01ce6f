"""Edge cases of LookaheadDecoder on the fake backend: where a step ends the answer, draft-only
EOS ids, γ1 = 0 step lengths, target-call counts and async LR's inputs."""

from dataclasses import replace

import pytest

from fake_backend import DELIM, EOS, V, FakeBackend, SlowFakeBackend, chain
from lrtune.control import Bounds, ProblemInfo
from lrtune.decoder import DecodeConfig, LookaheadDecoder
from lrtune.errors import ConfigError
from lrtune.verifiers import StepPair, accept, make_verifier

VARIANTS = [
    dict(),
    dict(schedule="abort"),
    dict(schedule="reuse"),
    dict(schedule="reuse+abort"),
    dict(width=2),
    dict(schedule="async"),
]
ONE_BRANCH = [v for v in VARIANTS if "width" not in v]  # branches >= 1 sample their own steps


def target_only(target, prompt, max_new):
    dec = LookaheadDecoder(target, None, make_verifier("never"), DecodeConfig(method="target", max_new_tokens=max_new))
    return dec.decode(prompt)[0].token_ids


def eos_vs_delimiter_tables():
    """Target 5 -> 6 -> DELIM -> 7 -> 8 -> DELIM ...; a draft that writes EOS where the target
    writes the delimiter (after 6), and a target that ends there instead."""
    t = [10] * V
    t[5], t[6], t[DELIM], t[7], t[8], t[10] = 6, DELIM, 7, 8, DELIM, 11
    ends = list(t)
    ends[6] = EOS
    return t, ends


class Recording:
    """Accepts every pair it is asked about and keeps them."""

    name, threshold = "recording", 0.5

    def __init__(self):
        self.seen = []

    def score(self, pairs):
        self.seen += list(pairs)
        return [1.0] * len(pairs)


# ---- D1: a pair where exactly one step ends the answer is rejected unasked -----------------
@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("case", ["draft-ends", "target-ends"])
def test_a_pair_where_only_one_step_ends_the_answer_is_rejected_so_exact_equals_target_greedy(case, variant):
    plain, ends = eos_vs_delimiter_tables()
    t, d = (plain, ends) if case == "draft-ends" else (ends, plain)
    target, draft = FakeBackend(t), FakeBackend(d)
    cfg = DecodeConfig(method="lr", gamma1=2, max_new_tokens=12, max_step_tokens=6, **variant)
    res, _ = LookaheadDecoder(target, draft, make_verifier("exact"), cfg).decode([5])
    ref = target_only(target, [5], 12)
    assert res.token_ids == ref
    assert res.finish == ("eos" if ref[-1] == EOS else "length")


@pytest.mark.parametrize("variant", ONE_BRANCH)
def test_a_pair_whose_steps_end_apart_never_reaches_the_verifier_even_one_that_accepts_all(variant):
    plain, ends = eos_vs_delimiter_tables()
    target, draft = FakeBackend(plain), FakeBackend(ends)
    if variant.get("schedule") == "async":  # a slow target: the draft drafts ahead whatever the machine's load
        target, draft = (
            SlowFakeBackend(plain, "target", max_delay=0.05),
            SlowFakeBackend(ends, "draft", max_delay=0.001),
        )
    v = Recording()
    cfg = DecodeConfig(method="lr", gamma1=2, max_new_tokens=12, max_step_tokens=6, **variant)
    res, stats = LookaheadDecoder(target, draft, v, cfg).decode([5])
    assert res.token_ids == target_only(target, [5], 12)  # the draft's [6, EOS] was never committed
    assert stats.drafted_steps > stats.accepted_steps
    assert not any(p.draft == " w6" and p.target == " w6\n\n" for p in v.seen)


def test_accept_rejects_flagged_pairs_without_asking_the_verifier():
    v = Recording()
    pairs = [StepPair("c", "a", "a"), StepPair("c", "b", "b")]
    assert accept(v, pairs, [True, True]) == ([False, False], [0.0, 0.0]) and v.seen == []
    assert accept(v, pairs, [True, False]) == ([False, True], [0.0, 1.0]) and v.seen == pairs[1:]
    assert accept(v, pairs) == ([True, True], [1.0, 1.0])


def test_a_round_whose_pairs_all_end_apart_counts_no_verifier_call():
    plain, ends = eos_vs_delimiter_tables()
    target, draft = FakeBackend(plain), FakeBackend(ends)
    cfg = DecodeConfig(method="lr", gamma1=1, max_new_tokens=2, max_step_tokens=6)
    _, stats = LookaheadDecoder(target, draft, Recording(), cfg).decode([5])  # one round: [6, EOS] vs [6, DELIM]
    assert stats.rounds == 1 and stats.verifier_calls == 0


# ---- D2: the answer ends on the target's EOS ids only ---------------------------------------
def draft_only_eos_pair(same_table=False):
    """Target greedy 5 -> 39 -> 6 -> 7 ...; 39 is an EOS id of the draft only."""
    t = chain(3, 0.0, 0.15)
    t[5], t[39], t[6] = 39, 6, 7
    draft = FakeBackend(list(t) if same_table else chain(103, 0.0, 0.15))
    draft.eos_ids = frozenset({EOS, 39})
    return FakeBackend(t), draft


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("max_step_tokens", [1, 6])
def test_a_draft_only_eos_does_not_end_the_answer(variant, max_step_tokens):
    target, draft = draft_only_eos_pair()
    cfg = DecodeConfig(method="lr", gamma1=2, max_new_tokens=12, max_step_tokens=max_step_tokens, **variant)
    res, _ = LookaheadDecoder(target, draft, make_verifier("never"), cfg).decode([4, 5])
    assert res.token_ids == target_only(target, [4, 5], 12)
    assert res.finish == "length"


@pytest.mark.parametrize("variant", VARIANTS)
def test_a_draft_only_eos_ends_the_draft_chain_and_exact_still_equals_target_greedy(variant):
    target, draft = draft_only_eos_pair(same_table=True)
    cfg = DecodeConfig(method="lr", gamma1=3, max_new_tokens=30, max_step_tokens=6, **variant)
    res, _ = LookaheadDecoder(target, draft, make_verifier("exact"), cfg).decode([4, 5])
    assert res.token_ids == target_only(target, [4, 5], 30) and res.finish == "length"
    if "reuse" in variant.get("schedule", ""):  # reuse changes no committed step: the target's step goes on after 39
        plain, _ = LookaheadDecoder(target, draft, make_verifier("exact"), replace(cfg, schedule="sync")).decode([4, 5])
        assert res.steps == plain.steps


def test_after_a_chain_cut_by_a_draft_only_eos_the_bonus_target_step_still_runs():
    target, draft = draft_only_eos_pair(same_table=True)
    cfg = DecodeConfig(method="lr", gamma1=3, max_new_tokens=60, max_step_tokens=5)  # steps 6 7 12 5 39
    rounds = []
    LookaheadDecoder(target, draft, make_verifier("exact"), cfg).decode([4, 39], on_round=rounds.append)
    cut = [r for r in rounds if r.drafts and r.drafts[-1].token_ids[-1] == 39 and all(r.accepted)]
    assert cut and all(len(r.targets) == len(r.drafts) + 1 for r in cut)


# ---- D3: γ1 = 0 rounds commit steps of at most max_step_tokens ------------------------------
@pytest.mark.parametrize("horizon", [None, 9])
def test_a_gamma1_zero_round_commits_steps_of_at_most_max_step_tokens(horizon):
    class SDOnly:
        bounds = Bounds(gamma1_max=2, gamma2_max=4, M=8)

        def choose(self, problem, state):
            return 0, 2

        def horizon(self):
            return horizon

        def update(self, o):
            pass

    target, draft = FakeBackend(chain(0, 0.01, 0.1)), FakeBackend(chain(100))
    cfg = DecodeConfig(method="lr+sd", gamma1=2, gamma2=2, max_new_tokens=40, max_step_tokens=4)
    commits = []
    res, stats = LookaheadDecoder(target, draft, make_verifier("never"), cfg).decode(
        [5, 6], controller=SDOnly(), on_commit=lambda src, ids: commits.append(ids)
    )
    lr, lr_stats = LookaheadDecoder(target, draft, make_verifier("never"), cfg).decode([5, 6])
    assert res.token_ids == lr.token_ids and all(len(ids) <= cfg.max_step_tokens for _, ids in res.steps)
    assert commits == [ids for _, ids in res.steps] and len(commits) == stats.committed_target_steps
    if horizon is None:  # one run to the end, cut into the steps LR would commit (a horizon may cut one)
        assert commits == [ids for _, ids in lr.steps]
        assert stats.committed_target_steps == lr_stats.committed_target_steps


# ---- D4: target_calls counts the calls a prompt had rows in ----------------------------------
@pytest.mark.parametrize("verifier", ["never", "exact"])
@pytest.mark.parametrize("early_abort", [False, True])
@pytest.mark.parametrize("same_draft", [False, True])
def test_target_calls_count_only_calls_that_carried_a_row_of_the_prompt(verifier, early_abort, same_draft):
    for seed in range(4):
        target = FakeBackend(chain(seed))
        draft = FakeBackend(chain(seed) if same_draft else chain(seed + 100))
        cfg = DecodeConfig(
            method="lr",
            gamma1=3,
            max_new_tokens=30,
            max_step_tokens=4,
            schedule="reuse+abort" if early_abort else "reuse",
        )
        _, stats = LookaheadDecoder(target, draft, make_verifier(verifier), cfg).decode([5, 6, 7])
        assert stats.target_calls == len(target.calls)


def test_a_prompt_without_rows_in_a_batched_target_call_is_not_billed_for_it():
    target, same = FakeBackend(chain(3)), FakeBackend(chain(3))
    cfg = DecodeConfig(
        method="lr", gamma1=3, max_new_tokens=40, max_step_tokens=6, schedule="reuse+abort"
    )  # never + identical draft: every row is reused or cut by a rejection
    dec = LookaheadDecoder(target, same, make_verifier("never"), cfg)
    results, batch = dec.decode_many([[3, 4, 5], [6, 7]], cfg, max_concurrent=2)
    assert all(st.target_calls <= batch.calls["target"] for _, st in results)
    assert max(st.target_calls for _, st in results) == len(target.calls)


# ---- D5: async LR keeps the problem statement and refuses what it cannot do ------------------
class Contexts:
    name, threshold = "contexts", 0.5

    def __init__(self):
        self.problems = set()

    def score(self, pairs):
        self.problems |= {p.context.split("\n\n")[0] for p in pairs}
        return [0.0] * len(pairs)


class _LateTarget(SlowFakeBackend):
    """A target whose steps end 50 ms after the draft's: every s1 meets a drafted ŝ1 (so each
    prompt is verified at least once, whatever the thread scheduling)."""

    def generate(self, prefixes, params, max_concurrent=None, on_done=None):
        import time

        time.sleep(0.05)
        return super().generate(prefixes, params, on_done=on_done)


def test_async_decode_many_shows_the_verifier_the_problem_statement():
    v = Contexts()
    cfg = DecodeConfig(method="lr", gamma1=2, max_new_tokens=10, max_step_tokens=4, schedule="async")
    dec = LookaheadDecoder(_LateTarget(chain(3), max_delay=0.0), SlowFakeBackend(chain(4), max_delay=0.0), v, cfg)
    results, _ = dec.decode_many(
        [[5, 6], [7]], cfg, problems=[ProblemInfo(id="a", text="PROBLEM A"), ProblemInfo(id="b", text="PROBLEM B")]
    )
    assert all(isinstance(r, tuple) for r in results)
    assert v.problems == {"PROBLEM A", "PROBLEM B"}


def test_async_lr_refuses_round_records_and_a_controller():
    class Fixed:
        bounds = Bounds(gamma1_max=2, gamma2_max=4, M=8)

        def choose(self, problem, state):
            return 2, 0

    cfg = DecodeConfig(method="lr", gamma1=2, max_new_tokens=10, max_step_tokens=4, schedule="async")
    dec = LookaheadDecoder(FakeBackend(chain(3)), FakeBackend(chain(4)), make_verifier("never"), cfg)
    with pytest.raises(ConfigError, match="async LR keeps no round records"):
        dec.decode_many([[5, 6]], cfg, on_round=lambda i, r: None)
    with pytest.raises(ConfigError, match="async LR keeps no round records"):
        dec.decode([5, 6], cfg, on_round=lambda r: None)
    with pytest.raises(ConfigError, match="async LR keeps fixed depths"):
        dec.decode_many([[5, 6]], cfg, controller=Fixed())


def test_collect_refuses_async_lr_before_loading_any_model(tmp_path):
    pytest.importorskip("pyarrow")
    from lrtune.data_gen.collect import CollectConfig, CollectOptions, run  # noqa: F401
    from lrtune.api import ModelConfig

    opts = CollectOptions(task="custom", data=str(tmp_path / "none.jsonl"), out=str(tmp_path / "o"), progress=False)
    cfg = CollectConfig(
        options=opts,
        models=ModelConfig(target=str(tmp_path / "no-target"), draft=str(tmp_path / "no-draft")),
        decode=DecodeConfig(method="lr", schedule="async"),
    )
    with pytest.raises(ConfigError, match="--schedule sync") as e:
        run(cfg)
    assert "\n" not in str(e.value)
    assert not (tmp_path / "o").exists()
