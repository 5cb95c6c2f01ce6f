"""llm_judge / target_score: answer parsing, probability scores, batching (stub backend)."""

import math

import pytest

from lrtune.backends.base import GenBatch, Generation
from lrtune.errors import ConfigError
from lrtune.verifiers import StepPair, accept, make_verifier
from lrtune.verifiers.judge import judge_score, parse_judge_answer, parse_rating, rating_score

VOCAB = {1: "aligned", 2: "un", 3: " Al", 4: "The", 5: "7", 6: "9", 7: " 3", 8: "[", 9: "mis", 10: "ign"}


def decode(ids, skip_special_tokens=False):
    return "".join(VOCAB.get(i, "?") for i in ids)


@pytest.mark.parametrize(
    "text,verdict",
    [
        ("", None),
        ("Aligned.", True),
        ("[unaligned]", False),
        ("**aligned**", True),
        ("ALIGNED", True),
        ("not aligned", False),
        ("The steps are misaligned.", False),
        ("Unaligned: the numbers differ", False),
        ("yes", None),
        ("alignment", None),
        ("aligned, not unaligned", True),
    ],
)
def test_judge_answer_parsing_on_odd_outputs(text, verdict):
    assert parse_judge_answer(text) is verdict


def test_judge_score_is_the_aligned_share_of_first_token_mass():
    top = {1: math.log(0.6), 3: math.log(0.1), 2: math.log(0.2), 4: math.log(0.1)}
    assert judge_score(top, decode, "aligned") == pytest.approx(0.7 / 0.9)
    assert judge_score({9: math.log(0.5), 1: math.log(0.5)}, decode, "") == pytest.approx(0.5)


def test_judge_score_falls_back_to_the_text_when_no_answer_token_is_likely():
    top = {4: math.log(0.9), 8: math.log(0.1)}
    assert judge_score(top, decode, "The answer: aligned") == 1.0
    assert judge_score(top, decode, "The answer: unaligned") == 0.0
    assert judge_score(None, decode, "no idea") == 0.0


def test_rating_score_is_the_expected_digit_over_nine():
    assert rating_score({5: math.log(0.5), 6: math.log(0.5), 4: math.log(0.1)}, decode, "") == pytest.approx(8 / 9)
    assert rating_score({4: 0.0}, decode, "I rate it 6/9") == pytest.approx(6 / 9)
    assert rating_score(None, decode, "great step") == 0.0
    assert parse_rating("score: 8") == 8 and parse_rating("none") is None


class StubJudgeModel:
    """Answers 'aligned' when the two steps in the prompt are equal (orchestration only)."""

    def __init__(self):
        self.calls = []

    def encode_prompt(self, prompt, *, chat=True):
        return [ord(c) for c in prompt]

    def decode(self, ids, skip_special_tokens=False):
        return decode(ids)

    def generate(self, prefixes, params):
        self.calls.append((len(prefixes), params))
        outs = []
        for p in prefixes:
            text = "".join(chr(i) for i in p)
            if "Step A" in text:
                a = text.split("Step A:")[1].split("Step B:")[0]
                b = text.split("Step B:")[1].split("Do Step A")[0]
                tok = 1 if a.strip() == b.strip() else 2
                top = {1: math.log(0.9), 2: math.log(0.1)} if tok == 1 else {1: math.log(0.2), 2: math.log(0.8)}
            else:
                tok, top = 5, {5: math.log(0.5), 6: math.log(0.5)}
            outs.append(Generation(token_ids=[tok], text=decode([tok]), finish="length", top_logprobs=[top]))
        return GenBatch(outputs=outs, seconds=0.0)

    def close(self):
        pass


def test_llm_judge_scores_a_round_in_one_batched_call():
    model = StubJudgeModel()
    ver = make_verifier("llm_judge", backend=model)
    pairs = [
        StepPair("ctx", "x = 3", "x = 3"),
        StepPair("ctx", "x = 4", "x = 3"),
        StepPair("ctx", "y", "z"),
        StepPair("ctx", "Y\n", " y"),
    ]
    verdicts, scores = accept(ver, pairs)
    assert verdicts == [True, False, False, True]
    assert scores == pytest.approx([1.0, 0.2, 0.2, 1.0])  # identical steps never reach the model
    assert len(model.calls) == 1 and model.calls[0][0] == 2 and model.calls[0][1].top_logprobs > 0
    assert ver.threshold == 0.92


def test_judge_default_thresholds_are_the_context_forms_calibrated_one_and_the_paper_forms_argmax():
    """The context judge's default is its threshold calibrated against the outcome labels of the
    committed 100-problem dataset (FAR <= 0.05), to two decimals; the paper form keeps 0.5."""
    import json
    from pathlib import Path

    summary = Path(__file__).resolve().parents[1] / "benchmarks/teacher_labels/rollout_100/summary.json"
    cal = json.loads(summary.read_text())["calibrated"]["llm_judge(context)"]
    assert cal["max_false_accept"] == 0.05
    assert make_verifier("llm_judge", backend=StubJudgeModel()).threshold == pytest.approx(cal["threshold"], abs=0.005)
    assert make_verifier("llm_judge(context)", backend=StubJudgeModel()).threshold == 0.92
    assert make_verifier("llm_judge(paper)", backend=StubJudgeModel()).threshold == 0.5
    assert make_verifier("llm_judge@0.7", backend=StubJudgeModel()).threshold == 0.7


@pytest.mark.parametrize("spec", ["llm_judge", "llm_judge(paper)", "target_score"])
def test_identical_steps_are_accepted_without_a_model_call(spec):
    """DESIGN §3.6: same text up to whitespace and case scores 1 and costs no call."""
    model = StubJudgeModel()
    ver = make_verifier(spec, backend=model)
    pairs = [StepPair("c", "So x = 12.\n\n", "so  X = 12."), StepPair("c", "a\tb", "A B")]
    assert ver.score(pairs) == [1.0, 1.0] and model.calls == [] and ver.calls == 0
    assert accept(ver, pairs)[0] == [True, True]


def test_paper_form_judge_sees_only_the_two_steps_and_answers_after_a_bracket():
    from lrtune.verifiers.judge import PAPER_PREFILL

    class ChatStub(StubJudgeModel):
        def encode_messages(self, messages, *, prefill=""):
            self.messages, self.prefill = messages, prefill
            return self.encode_prompt(messages[-1]["content"] + prefill)

    model = ChatStub()
    ver = make_verifier("llm_judge(paper)@0.6", backend=model)
    assert ver.form == "paper" and ver.threshold == 0.6
    ver.score([StepPair("THE CONTEXT", "x = 4", "x = 3")])
    assert len(model.messages) == 1 and model.messages[0]["role"] == "user"
    text = model.messages[0]["content"]
    assert "THE CONTEXT" not in text and "x = 4" in text and "x = 3" in text
    assert "[aligned]" in text and "[unaligned]" in text and model.prefill == PAPER_PREFILL == "["


@pytest.mark.parametrize(
    "spec,match",
    [
        ("llm_judge(fancy)", "form must be one of"),
        ("exact(3)", "takes no argument"),
        ("random(2)", "probability in"),
        ("random(x)", "needs a probability"),
    ],
)
def test_bad_verifier_arguments_are_refused_before_any_model_loads(spec, match):
    from lrtune.verifiers import check_verifier_spec

    with pytest.raises(ConfigError, match=match):
        check_verifier_spec(spec)


def test_target_score_uses_the_rating_and_its_threshold():
    ver = make_verifier("target_score", backend=StubJudgeModel())
    assert ver.threshold == pytest.approx(7 / 9)
    assert ver.score([StepPair("c", "d", "t")]) == pytest.approx([8 / 9])
    assert make_verifier("target_score", backend=StubJudgeModel(), threshold=0.95).threshold == 0.95


def test_model_verifiers_need_a_backend():
    with pytest.raises(ConfigError, match="needs a model"):
        make_verifier("llm_judge")


def test_llm_judge_asks_after_the_worked_examples_on_chat_backends():
    from lrtune.verifiers.judge import FEW_SHOT

    class ChatStub(StubJudgeModel):
        def encode_messages(self, messages, *, prefill=""):
            self.messages = messages
            return self.encode_prompt(messages[-1]["content"])

    model = ChatStub()
    ver = make_verifier("llm_judge", backend=model)
    assert ver.score([StepPair("ctx", "x = 4", "x = 3")]) == pytest.approx([0.2])
    roles = [m["role"] for m in model.messages]
    assert roles == ["user", "assistant"] * len(FEW_SHOT) + ["user"]
    assert {m["content"] for m in model.messages if m["role"] == "assistant"} == {"aligned", "unaligned"}
    assert "x = 3" in model.messages[-1]["content"]


def test_llm_judge_drops_worked_examples_that_do_not_fit_the_engine_context():
    from types import SimpleNamespace

    class SmallChat(StubJudgeModel):
        config = SimpleNamespace(max_model_len=1200)

        def encode_messages(self, messages, *, prefill=""):
            self.turns = len(messages)
            return [ord(c) for m in messages for c in m["content"]]

    model = SmallChat()
    make_verifier("llm_judge", backend=model).score([StepPair("ctx", "x = 4", "x = 3")])
    assert 1 <= model.turns < 9  # fewer than the four examples (8 turns) + question, but it still asks


@pytest.mark.parametrize("spec", ["llm_judge", "llm_judge@0.85", "llm_judge(paper)@0.5", "target_score@0.7"])
def test_the_judge_model_judges_whatever_the_spec_carries_a_threshold_or_a_form(spec, monkeypatch):
    from lrtune import api

    monkeypatch.setattr("lrtune.models.resolve_model", lambda name, role, **kw: f"/models/{name}")
    models = api.ModelConfig(verifier=spec, judge_model="X")
    assert api.judge_path(models, None, progress=False) == "/models/X"
    assert api.judge_path(api.ModelConfig(verifier="embedding@0.9", judge_model="X"), None, progress=False) is None
