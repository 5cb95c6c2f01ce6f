"""The Python API's one boundary: a bad argument to a public entry point, or a bad value
returned by a user's object (a verifier's scores or threshold, a controller's choice), is one
exception naming it (a ``ValueError`` or ``TypeError`` that is also an ``LrtuneError``), raised
where it enters, and the decoder keeps working afterwards."""

import math

import pytest

from lrtune import Decoder
from lrtune.control import Bounds, checked_choice
from lrtune.errors import ConfigError, ConfigTypeError, LrtuneError
from lrtune.verifiers.base import accept, checked_scores, checked_threshold
from tiny_models import get_tiny_pair, sample_questions


@pytest.fixture(scope="module")
def dec():
    pair = get_tiny_pair()
    with Decoder.from_pretrained(
        target=str(pair.target),
        draft=str(pair.draft),
        method="lr",
        verifier="exact",
        gamma1=2,
        max_step_tokens=16,
        backend="transformers",
        dtype="float32",
        progress=False,
    ) as d:
        yield d


class Scores:
    name = "custom"

    def __init__(self, value, threshold=0.5):
        self.value, self.threshold = value, threshold

    def score(self, pairs):
        return [self.value] * len(pairs)


class Picks:
    bounds = Bounds()

    def __init__(self, choice):
        self.choice = choice

    def choose(self, problem, state):
        return self.choice

    def update(self, outcome):
        pass


@pytest.mark.parametrize(
    "call,kind,words",
    [
        (lambda d, q: d.generate([]), ValueError, "prompts: an empty list"),
        (lambda d, q: d.generate(None), TypeError, "prompts: a text, a list of token ids"),
        (lambda d, q: d.generate([q, None]), TypeError, "prompts[1]: a text or a list of token ids, got NoneType"),
        (lambda d, q: d.generate(q, max_concurrent="2"), TypeError, "max_concurrent: an integer"),
        (lambda d, q: d.generate(q, max_concurrent=True), TypeError, "max_concurrent: an integer"),
        (lambda d, q: d.generate(q, on_step="x"), TypeError, "on_step: a function"),
        (lambda d, q: d.generate(q, chat="yes"), TypeError, "chat: True or False"),
        (lambda d, q: d.generate(q, gamma3=2), ValueError, "unknown decode option(s): gamma3"),
        (lambda d, q: d.generate([[1, 2, -5]]), ValueError, "token-id prompt"),
        (lambda d, q: d.decoder.decode_many([d.encode(q)], max_concurrent="2"), TypeError, "max_concurrent"),
        (lambda d, q: d.encode(5), TypeError, "prompt: a text or a list of token ids, got int"),
        (lambda d, q: d.generate(q, method="sd", gamma1=7), ValueError, "--gamma1 7: --method sd runs no LR rounds"),
    ],
)
def test_a_bad_argument_is_one_exception_naming_it_and_the_decoder_still_works(dec, call, kind, words):
    q = sample_questions(1)[0]
    with pytest.raises(kind) as e:
        call(dec, q)
    assert isinstance(e.value, LrtuneError) and words in str(e.value) and "\n" not in str(e.value)
    assert dec.generate(q, max_new_tokens=8)[0].token_ids  # nothing half-done


def test_from_pretrained_refuses_a_string_for_a_switch_before_any_model_loads():
    with pytest.raises(ConfigTypeError, match="progress: True or False, got 'yes'"):
        Decoder.from_pretrained(target="/nonexistent", draft="/nonexistent", backend="transformers", progress="yes")


def test_from_pretrained_names_an_unknown_option_before_any_model_loads():
    with pytest.raises(ConfigTypeError, match="has no option 'gamma3'"):
        Decoder.from_pretrained(target="/nonexistent", draft="/nonexistent", backend="transformers", gamma3=2)


@pytest.mark.parametrize("value", [math.nan, math.inf, -0.1, 5.0, "0.9", True, None])
def test_a_verifier_score_that_is_not_a_number_in_0_1_is_refused_where_it_enters(value):
    with pytest.raises(ConfigError, match="verifier 'custom' returned the score"):
        checked_scores(Scores(value), [value], 1)


def test_a_verifier_must_return_one_score_per_pair_and_a_finite_threshold():
    with pytest.raises(ConfigError, match="returned 2 scores for 1 pairs"):
        checked_scores(Scores(0.5), [0.5, 0.5], 1)
    with pytest.raises(ConfigError, match="not one score per pair"):
        checked_scores(Scores(0.5), 0.5, 1)
    for bad in ("0.5", math.nan, None, True):
        with pytest.raises(ConfigError, match="has threshold"):
            checked_threshold(Scores(0.5, threshold=bad))
    import numpy as np

    assert checked_scores(Scores(0.5), [np.float32(0.25), 1], 2) == [0.25, 1.0]  # numbers of any kind


def test_a_nan_scoring_verifier_stops_the_decode_instead_of_rejecting_every_step(dec):
    q = dec.encode(sample_questions(1)[0])
    with pytest.raises(ConfigError, match="verifier 'custom' returned the score nan"):
        dec.decoder.decode_many([q], verifier=Scores(math.nan), max_len=1024)
    ok, scores = accept(Scores(1.0), [object()], [False])
    assert ok == [True] and scores == [1.0]


@pytest.mark.parametrize(
    "choice,words",
    [
        ((1.5, 2), "integers"),
        ((True, 2), "integers"),
        (("2", 2), "integers"),
        (3, "expected (γ1, γ2)"),
        ((1, 2, 3), "expected (γ1, γ2)"),
    ],
)
def test_a_controller_choice_that_is_not_two_integers_is_refused_naming_the_controller(choice, words):
    with pytest.raises(ConfigError) as e:
        checked_choice(Picks(choice), choice)
    assert "controller Picks.choose returned" in str(e.value) and words in str(e.value)
    assert checked_choice(Picks((2, 3)), (2, 3)) == (2, 3)


def test_a_controller_returning_a_float_depth_fails_the_prompt_with_that_line():
    pair = get_tiny_pair()
    with Decoder.from_pretrained(
        target=str(pair.target),
        draft=str(pair.draft),
        method="lr",
        verifier="exact",
        backend="transformers",
        dtype="float32",
        progress=False,
        controller=Picks((1.5, 2)),
    ) as d:
        with pytest.raises(ConfigError, match=r"controller Picks.choose returned \(1.5, 2\)"):
            d.generate(sample_questions(1)[0], max_new_tokens=16)


def test_a_closed_decoder_refuses_to_generate_in_one_line():
    from lrtune import Decoder
    from lrtune.errors import ConfigError
    from lrtune.toymodels import get_tiny_pair

    pair = get_tiny_pair()
    kw = dict(backend="transformers", device="cpu", max_model_len=512, progress=False, verifier="exact")
    dec = Decoder.from_pretrained(str(pair.target), str(pair.draft), method="sd", **kw)
    dec.close()
    with pytest.raises(ConfigError, match="this Decoder is closed"):
        dec.generate(["1 + 1 ="], max_new_tokens=4)
