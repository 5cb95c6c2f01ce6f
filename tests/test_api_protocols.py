"""The Python API's promises (issue: typed results, protocols checked when handed in): the
decoder as a context manager, token-id prompts, batch stats returned with the outputs, and
user objects written to the documented protocols accepted (optional methods defaulted) or
refused in one line before any decode."""

from __future__ import annotations

import pytest

from fake_backend import FakeBackend, chain
from lrtune.api import Decoder, ModelConfig, Outputs, build_controller
from lrtune.control import Bounds, checked_controller
from lrtune.decoder import DecodeConfig, LookaheadDecoder
from lrtune.errors import ConfigError
from lrtune.verifiers import make_verifier


class NoHorizon:
    """A controller written to the protocol before it gained ``horizon``."""

    bounds = Bounds(gamma1_max=3, gamma2_max=0, M=12)

    def __init__(self) -> None:
        self.rounds = 0

    def choose(self, problem, state):
        return (0, 0) if state.round % 2 else (2, 0)

    def update(self, outcome):
        self.rounds += 1


def fake_decoder(**cfg) -> Decoder:
    target, draft = FakeBackend(chain(3), "target"), FakeBackend(chain(4), "draft")
    dec = LookaheadDecoder(
        target, draft, make_verifier("never"), DecodeConfig(method="lr", max_new_tokens=30, max_step_tokens=5, **cfg)
    )
    return Decoder(dec, ModelConfig(max_model_len=4096))


def test_a_controller_without_horizon_runs_and_gamma1_0_rounds_go_to_the_end():
    ctl = NoHorizon()
    target, draft = FakeBackend(chain(3), "target"), FakeBackend(chain(4), "draft")
    cfg = DecodeConfig(method="lr", max_new_tokens=30, max_step_tokens=5)
    plain = LookaheadDecoder(target, draft, make_verifier("never"), DecodeConfig(method="target", max_new_tokens=30))
    res, stats = LookaheadDecoder(target, draft, make_verifier("never"), cfg, controller=ctl).decode([5, 6])
    assert res.token_ids == plain.decode([5, 6])[0].token_ids and ctl.rounds == stats.rounds >= 1
    assert build_controller(NoHorizon(), cfg).horizon() is None


@pytest.mark.parametrize(
    "obj,words",
    [
        (object(), "choose, update, bounds"),
        (
            type("C", (), {"choose": lambda s, p, st: (1, 0), "update": lambda s, o: None, "bounds": (3, 4)})(),
            "bounds (a Bounds)",
        ),
    ],
)
def test_an_object_that_is_no_controller_is_refused_when_handed_in(obj, words):
    with pytest.raises(
        ConfigError, match=r"not a controller: .*lacks " + words.replace("(", r"\(").replace(")", r"\)")
    ):
        checked_controller(obj)
    with pytest.raises(ConfigError, match="not a controller"):
        LookaheadDecoder(
            FakeBackend(chain(1)), None, make_verifier("never"), DecodeConfig(method="target"), controller=obj
        )


def test_a_backend_or_verifier_that_lacks_its_protocol_is_refused_when_handed_in():
    with pytest.raises(ConfigError, match="the draft is not a backend"):
        LookaheadDecoder(FakeBackend(chain(1)), object(), make_verifier("never"), DecodeConfig(method="lr"))
    with pytest.raises(ConfigError, match="not a verifier"):
        LookaheadDecoder(FakeBackend(chain(1)), None, object(), DecodeConfig(method="target"))


def test_generate_returns_outputs_with_their_batch_stats_and_takes_token_id_prompts():
    dec = fake_decoder()
    ids = [5, 7, 9]
    outs = dec.generate([ids, [11, 4]], max_concurrent=2)
    assert isinstance(outs, Outputs) and outs.batch.prompts == 2 and outs.batch is dec.last_batch
    assert outs.batch.generated_tokens == sum(len(o.token_ids) for o in outs)
    one = dec.generate(ids)  # a single prompt of token ids
    assert len(one) == 1 and one[0].token_ids == outs[0].token_ids and one[0].prompt == ids
    with pytest.raises(ConfigError, match="token-id prompt"):
        dec.generate([[5, -1]])


def test_the_decoder_is_a_context_manager_that_closes_its_engines():
    closed = []
    dec = fake_decoder()
    dec.decoder.target.close = lambda: closed.append("target")
    dec.decoder.draft.close = lambda: closed.append("draft")
    with dec as d:
        assert d.generate([[5, 6]])[0].ok
    assert closed == ["target", "draft"]


def test_a_generate_call_that_asks_a_schedule_its_method_cannot_run_is_refused_before_decoding():
    dec = fake_decoder(schedule="abort")
    with pytest.raises(ConfigError, match="--schedule score applies to lr and lr\\+sd only; --method sd has no draft"):
        dec.generate([[5, 6]], method="sd", schedule="score")
    assert dec.last_batch is None  # nothing decoded
    assert dec.generate([[5, 6]], method="target")[0].ok  # the decoder's own schedule is for its LR calls
