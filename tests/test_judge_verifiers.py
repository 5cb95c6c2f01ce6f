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


@pytest.mark.parametrize("text,verdict", [
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
])
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
    pairs = [StepPair("ctx", "x = 3", "x = 3"), StepPair("ctx", "x = 4", "x = 3"), StepPair("ctx", "y", "y")]
    verdicts, scores = accept(ver, pairs)
    assert verdicts == [True, False, True]
    assert scores == pytest.approx([0.9, 0.2, 0.9])
    assert len(model.calls) == 1 and model.calls[0][0] == 3 and model.calls[0][1].top_logprobs > 0
    assert ver.threshold == 0.5


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
        def encode_messages(self, messages):
            self.messages = messages
            return self.encode_prompt(messages[-1]["content"])

    model = ChatStub()
    ver = make_verifier("llm_judge", backend=model)
    assert ver.score([StepPair("ctx", "x = 3", "x = 3")]) == pytest.approx([0.9])
    roles = [m["role"] for m in model.messages]
    assert roles == ["user", "assistant"] * len(FEW_SHOT) + ["user"]
    assert {m["content"] for m in model.messages if m["role"] == "assistant"} == {"aligned", "unaligned"}
    assert "x = 3" in model.messages[-1]["content"]


def test_judge_probe_pairs_have_one_positive_per_step_and_distinct_negatives():
    from eval.judge_probe import synthetic_pairs

    sols = [("Q1", ["a = 2 + 3 = 5", "b = 5 * 4 = 20", "\\boxed{20}"]), ("Q2", ["c = 7 - 1 = 6", "d = 6"])]
    pairs, labels, kinds = synthetic_pairs(sols)
    assert kinds.count("same") == 5 and labels.count(1) == 5
    for p, y, k in zip(pairs, labels, kinds):
        assert (p.draft == p.target) == (y == 1)
        if k == "number":
            assert p.draft != p.target and p.draft.split()[:-1] == p.target.split()[:-1]


def test_llm_judge_drops_worked_examples_that_do_not_fit_the_engine_context():
    from types import SimpleNamespace

    class SmallChat(StubJudgeModel):
        config = SimpleNamespace(max_model_len=1200)

        def encode_messages(self, messages):
            self.turns = len(messages)
            return [ord(c) for m in messages for c in m["content"]]

    model = SmallChat()
    make_verifier("llm_judge", backend=model).score([StepPair("ctx", "x = 3", "x = 3")])
    assert 1 <= model.turns < 9  # fewer than the four examples (8 turns) + question, but it still asks
