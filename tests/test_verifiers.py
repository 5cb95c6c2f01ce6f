"""Verifiers on hand-made step pairs."""

import pytest

from lrtune.errors import ConfigError
from lrtune.verifiers import StepPair, accept, make_verifier

SAME = StepPair("ctx", "Tom has 3 + 4 = 7 apples.\n\n", "Tom has  3 + 4 = 7 apples.\n\n")
PARAPHRASE = StepPair("ctx", "So Tom now has 7 apples in total.", "Therefore, Tom has a total of 7 apples.")
UNRELATED = StepPair("ctx", "The train leaves the station at 5 pm.", "Multiply 12 by 4 to get 48 cookies.")


def test_exact_accepts_whitespace_variants_only():
    v = make_verifier("exact")
    assert accept(v, [SAME, PARAPHRASE])[0] == [True, False]


@pytest.mark.parametrize("spec, expected", [("never", False), ("always", True)])
def test_constant_verifiers(spec, expected):
    assert accept(make_verifier(spec), [SAME, PARAPHRASE, UNRELATED])[0] == [expected] * 3


def test_random_verifier_accepts_with_probability_p_and_is_seeded():
    pairs = [StepPair(f"context {i}", SAME.draft, SAME.target) for i in range(4000)]
    verdicts = accept(make_verifier("random(0.3)", seed=1), pairs)[0]
    assert abs(sum(verdicts) / len(verdicts) - 0.3) < 0.03
    assert verdicts == accept(make_verifier("random:0.3", seed=1), pairs)[0]
    assert verdicts != accept(make_verifier("random(0.3)", seed=2), pairs)[0]


def test_random_verifier_draws_are_keyed_by_the_pair_not_by_call_order():
    """The same pair always draws the same score: repeats, batches and order do not matter."""
    v = make_verifier("random(0.5)", seed=7)
    pairs = [StepPair(f"context {i}", "a", "b") for i in range(50)]
    whole = v.score(pairs)
    assert v.score(pairs) == whole  # a second call on the same verifier
    assert [v.score([p])[0] for p in reversed(pairs)] == whole[::-1]  # one at a time, other order
    assert make_verifier("random(0.5)", seed=7).score(pairs[10:20]) == whole[10:20]  # a fresh verifier, a sub-batch


def test_embedding_verifier_scores_paraphrase_above_unrelated():
    v = make_verifier("embedding", threshold=0.8)
    scores = v.score([SAME, PARAPHRASE, UNRELATED])
    assert all(0.0 <= s <= 1.0 for s in scores)
    assert scores[0] > 0.99
    assert scores[1] > 0.8 > scores[2]
    assert accept(v, [PARAPHRASE, UNRELATED])[0] == [True, False]


def test_embedding_default_threshold_is_the_papers_0_95():
    assert make_verifier("embedding").threshold == 0.95


@pytest.mark.parametrize("spec", ["judge", "random(2)", "random(x)", "exact(1)", ""])
def test_bad_verifier_specs_raise_config_error(spec):
    with pytest.raises(ConfigError):
        make_verifier(spec)


@pytest.mark.parametrize(
    "spec,kind,threshold",
    [
        ("embedding@0.9", "embedding", 0.9),
        ("exact@1", "exact", None),
        ("random(0.3)@0.5", "random", 0.5),
    ],
)
def test_a_spec_may_carry_its_threshold_after_an_at_sign(spec, kind, threshold):
    from lrtune.verifiers import split_threshold

    base, thr = split_threshold(spec)
    assert thr == (1.0 if spec == "exact@1" else threshold) and base.startswith(kind)


@pytest.mark.parametrize("spec,message", [("embedding@high", "bad verifier threshold"), ("exact@1.5", "in \\[0, 1\\]")])
def test_a_bad_threshold_suffix_is_a_clear_error(spec, message):
    from lrtune.verifiers import check_verifier_spec

    with pytest.raises(ConfigError, match=message):
        check_verifier_spec(spec)


def test_judge_threshold_suffix_reaches_the_verifier():
    class Stub:
        def encode_prompt(self, p, chat=True):
            return [1]

    v = make_verifier("llm_judge@0.85", backend=Stub())
    assert v.threshold == 0.85 and make_verifier("llm_judge@0.85", backend=Stub(), threshold=0.6).threshold == 0.6


def test_embedding_scores_do_not_depend_on_the_other_pairs_of_the_call():
    """DESIGN §3.7: batched decoding must give every prompt its own tokens, so a pair's
    score must not move with the padding of the pairs it shares a call with."""
    from lrtune.verifiers import StepPair

    v = make_verifier("embedding")
    a = StepPair("", "So the total cost is 3 * 12 = 36 dollars.", "The total cost is 12 * 3 = $36.")
    long = StepPair("", "x " * 200, "y " * 150)
    alone = v.score([a])[0]
    assert v.score([a, long, long])[0] == alone and v.score([long, a])[1] == alone


def test_draft_scores_carry_the_drafts_own_mean_logprob_and_top_k_entropy():
    import math

    from lrtune.backends.base import Generation
    from lrtune.verifiers.base import DraftScores, topk_entropy

    assert topk_entropy({1: math.log(0.5), 2: math.log(0.5)}) == pytest.approx(math.log(2))
    assert topk_entropy({1: 0.0}) == 0.0
    g = Generation(
        token_ids=[1, 2],
        text="ab",
        finish="length",
        logprobs=[-0.1, -0.3],
        top_logprobs=[{1: 0.0}, {2: math.log(0.5), 3: math.log(0.5)}],
    )
    s = DraftScores.of([(-1.0, True)], g)
    assert s.draft_logprob == pytest.approx(-0.2) and s.draft_entropy == pytest.approx(math.log(2) / 2)
    plain = DraftScores.of([(-1.0, True)], Generation(token_ids=[1], text="a", finish="length"))
    assert plain.draft_logprob is None and plain.draft_entropy is None


def test_draft_scores_summarise_the_scored_tokens_and_are_none_when_none_were_scored():
    from lrtune.verifiers.base import DraftScores

    s = DraftScores.of([None, (-0.5, True), (-1.5, False), (-1.0, True), None])
    assert (s.mean_logprob, s.min_logprob, s.argmax_share, s.tokens) == (-1.0, -1.5, pytest.approx(2 / 3), 3)
    assert DraftScores.of([None, None]) is None and DraftScores.of(None) is None


def test_target_logprob_scores_the_geometric_mean_token_probability():
    import math

    from lrtune.verifiers.base import DraftScores, wants_draft_scores

    v = make_verifier("target_logprob@0.4")
    assert v.threshold == 0.4 and wants_draft_scores(v) and not wants_draft_scores(make_verifier("exact"))
    likely = StepPair("c", "x = 2", "y = 3", DraftScores(-0.2, -0.6, 1.0, 4))
    same = StepPair("c", "So x = 2", "so  x = 2")  # identical up to whitespace and case: 1 without scores
    unscored = StepPair("c", "x = 2", "y = 3")
    verdicts, scores = accept(v, [likely, same, unscored])
    assert scores == [pytest.approx(math.exp(-0.2)), 1.0, 0.0] and verdicts == [True, True, False]
    assert make_verifier("target_logprob").threshold == 0.5


def test_target_logprob_min_scores_the_least_likely_token_that_a_mean_hides():
    """One token the target disagrees with (a changed number) in an otherwise likely step: the
    mean form accepts the step, the min form rejects it."""
    import math

    from lrtune.verifiers.base import DraftScores
    from lrtune.errors import ConfigError

    one_bad_token = StepPair("c", "105 + 55 = 160", "", DraftScores(-0.19, -5.39, 0.94, 68))
    mean, low = make_verifier("target_logprob"), make_verifier("target_logprob(min)")
    assert (low.name, low.threshold, mean.name) == ("target_logprob(min)", 0.05, "target_logprob")
    assert accept(mean, [one_bad_token]) == ([True], [pytest.approx(math.exp(-0.19))])
    assert accept(low, [one_bad_token]) == ([False], [pytest.approx(math.exp(-5.39))])
    assert low.one_sided and low.uses_draft_scores
    with pytest.raises(ConfigError, match="target_logprob form"):
        make_verifier("target_logprob(max)")


@pytest.mark.parametrize(
    "spec",
    [
        "exact",
        "never",
        "always",
        "random",
        "random(0.3)",
        "random:0.25@0.6",
        "embedding@0.9",
        "llm_judge",
        "llm_judge(paper)@0.85",
        "target_score",
        "target_logprob@0.4",
        "target_logprob(min)@0.1",
    ],
)
def test_a_verifier_spec_prints_a_spec_that_parses_back_to_the_same_one(spec):
    from lrtune.verifiers import VerifierSpec

    parsed = VerifierSpec.parse(spec)
    assert VerifierSpec.parse(str(parsed)) == parsed


def test_a_checkpoint_path_is_never_read_as_options(tmp_path):
    import json

    from lrtune.verifiers import VerifierSpec
    from lrtune.verifiers import distilled

    d = tmp_path / "random(0.5)" / "ckpt"  # a path that looks like a spec
    d.mkdir(parents=True)
    (d / distilled.META).write_text(json.dumps({"format": distilled.FORMAT}))
    parsed = VerifierSpec.parse(f"{d}@0.3")
    assert parsed.kind == "checkpoint" and parsed.path == str(d) and parsed.threshold == 0.3
    assert VerifierSpec.parse(str(parsed)) == parsed
