"""Model-based verifiers: an LLM judge and the target's own score of a draft step.

Both run on any :class:`~lrtune.backends.base.Backend` (by default the target's), score
all pairs of a round in one batched call, and read the score from the probabilities of
the first answer token (top-k logprobs), falling back to parsing the answer text.

* ``llm_judge`` (the paper's semantic judge) in two forms:

  - ``llm_judge(context)`` (default): the model sees the problem and the solution so far,
    the target's step and the draft's step, and answers *aligned* or *unaligned*. On
    backends with a chat template the question follows four worked examples (two
    aligned, two not) as earlier chat turns, a fixed prefix that prefix caching computes
    once.
  - ``llm_judge(paper)``: the official implementation's form: only the two steps, no
    context; *[aligned]* when they mean the same and reach the same results, *[unaligned]*
    when they differ or it cannot tell; the assistant turn is prefilled with ``[`` and the
    verdict is its next token.

  score = P(aligned) / (P(aligned) + P(unaligned)) over the first answer token.
* ``target_score`` (SpecReason style): the model rates the draft step 0–9 for
  correctness and usefulness after the context, without seeing the target's step.
  score = E[rating] / 9 under the first-token distribution over the digits.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from lrtune.backends.base import GenParams
from lrtune.verifiers.base import StepPair, score_pairs

TOP_K = 20
ANSWER_TOKENS = 4

JUDGE_PROMPT = """You compare two candidate next steps of a step-by-step solution.

Problem and solution so far:
<context>
{context}
</context>

Step A:
<step>
{target}
</step>

Step B:
<step>
{draft}
</step>

Do Step A and Step B make the same reasoning move and reach the same intermediate results \
(numbers, expressions, conclusions), even if worded differently? Answer with one word: aligned or unaligned."""

# The paper form (the official code's rules, in lrtune's words): two steps, no context.
PAPER_PROMPT = """Decide whether two reasoning steps, s1 and s2, say the same thing. Judge the meaning, \
not the wording: compare their main idea, their logic and every calculation and result.

Answer [aligned] if they mean the same and reach the same calculation results. Answer [unaligned] if \
their meaning or any result differs, and also when you cannot tell.

Give only the verdict, [aligned] or [unaligned].

s1:
<s1>
{target}
</s1>

s2:
<s2>
{draft}
</s2>"""
PAPER_PREFILL = "["

SCORE_PROMPT = """Here is a problem, the solution so far, and a proposed next step.

Problem and solution so far:
<context>
{context}
</context>

Proposed next step:
<step>
{draft}
</step>

Rate the proposed next step from 0 (wrong or useless) to 9 (correct and exactly what should come next). \
Answer with a single digit."""

# (context, step A = target, step B = draft, answer): the judge's worked examples.
FEW_SHOT = (
    (
        "Tom has 3 boxes with 12 apples each. He eats 5 apples. How many are left?",
        "Tom starts with 3 x 12 = 36 apples.",
        "First, the total number of apples is 12 * 3 = 36.",
        "aligned",
    ),
    (
        "Tom has 3 boxes with 12 apples each. He eats 5 apples. How many are left?\n\nTom starts with 36 apples.",
        "He has 36 - 5 = 31 apples left.",
        "After eating 5, he has 36 - 5 = 30 apples.",
        "unaligned",
    ),
    (
        "A shop sells pens for $2 each. Ana buys 4 pens and a $3 notebook. What does she pay?",
        "The pens cost 4 * 2 = $8.",
        "Ana pays for the notebook: $3.",
        "unaligned",
    ),
    (
        "A shop sells pens for $2 each. Ana buys 4 pens and a $3 notebook. What does she pay?\n\nThe pens cost $8.",
        "In total she pays 8 + 3 = $11, so the answer is \\boxed{11}.",
        "Adding the notebook, the total is $8 + $3 = $11. The answer is \\boxed{11}.",
        "aligned",
    ),
)


def few_shot_messages(template: str, context: str, draft: str, target: str, shots: int = len(FEW_SHOT)) -> list[dict]:
    """The chat of the judge: the first ``shots`` worked examples as earlier turns, then the question."""
    msgs: list[dict] = []
    for c, a, b, ans in FEW_SHOT[:shots]:
        msgs += [
            {"role": "user", "content": template.format(context=c, target=a, draft=b)},
            {"role": "assistant", "content": ans},
        ]
    msgs.append({"role": "user", "content": template.format(context=context, draft=draft, target=target)})
    return msgs


_VERDICT = re.compile(r"\b(unaligned|not\s+aligned|misaligned|aligned)\b")


def parse_judge_answer(text: str) -> bool | None:
    """The judge's verdict from its answer text; None when it gave none.

    The first of *aligned* / *unaligned* (also "not aligned", "misaligned") counts, in any
    case, with any punctuation or brackets around it.
    """
    m = _VERDICT.search(text.lower())
    if m is None:
        return None
    return m.group(1) == "aligned"


def parse_rating(text: str) -> int | None:
    """The first digit 0–9 of a rating answer; None when there is none."""
    m = re.search(r"\d", text)
    return int(m.group(0)) if m else None


def _token_class(text: str) -> str | None:
    """Which answer a first token starts: "aligned", "unaligned", or None."""
    t = re.sub(r"[^a-z]", "", text.lower())
    if len(t) < 2:
        return None
    if "unaligned".startswith(t) or t.startswith(("unalign", "notalign", "misalign")) or t in ("not", "mis"):
        return "unaligned"
    if "aligned".startswith(t) or t.startswith("align"):
        return "aligned"
    return None


def judge_score(top: dict[int, float] | None, decode, text: str) -> float:
    """P(aligned) / (P(aligned) + P(unaligned)) from the first position's top-k logprobs;
    the parsed ``text`` verdict (1/0) when neither answer is in the top-k; 0 when none."""
    mass = {"aligned": 0.0, "unaligned": 0.0}
    for tok, lp in (top or {}).items():
        cls = _token_class(decode([tok]))
        if cls is not None:
            mass[cls] += math.exp(lp)
    total = mass["aligned"] + mass["unaligned"]
    if total > 0:
        return mass["aligned"] / total
    verdict = parse_judge_answer(text)
    return 1.0 if verdict else 0.0


def rating_score(top: dict[int, float] | None, decode, text: str) -> float:
    """E[rating]/9 over the digit tokens of the first position's top-k; the parsed digit/9
    when no digit is in the top-k; 0 when there is no rating."""
    num = den = 0.0
    for tok, lp in (top or {}).items():
        t = decode([tok]).strip()
        if len(t) == 1 and t.isdigit():
            p = math.exp(lp)
            num += p * int(t)
            den += p
    if den > 0:
        return num / den / 9.0
    r = parse_rating(text)
    return r / 9.0 if r is not None else 0.0


class _ModelVerifier:
    """Shared batching: one prompt per pair, one ``generate`` call per ``score``; a subclass
    names its prompt ``template`` and the ``read`` that turns an answer into a score."""

    name = "model"
    template = ""
    read = staticmethod(judge_score)  # (first-token top-k logprobs, decode, text) -> score

    def __init__(self, backend, threshold: float) -> None:
        self.backend = backend
        self.threshold = threshold
        self.calls = 0

    def prompts(self, pairs: Sequence[StepPair]) -> list[list[int]]:
        return [
            self.backend.encode_prompt(
                self.template.format(context=p.context.strip(), draft=p.draft.strip(), target=p.target.strip())
            )
            for p in pairs
        ]

    def score(self, pairs: Sequence[StepPair]) -> list[float]:
        return score_pairs(pairs, self._model_score)

    def _model_score(self, pairs: Sequence[StepPair]) -> list[float]:
        self.calls += 1
        params = GenParams(max_tokens=ANSWER_TOKENS, stop_at_delimiter=False, temperature=0.0, top_logprobs=TOP_K)
        outs = self.backend.generate(self.prompts(pairs), params).outputs
        return [self.read(o.top_logprobs[0] if o.top_logprobs else None, self._decode, o.text) for o in outs]

    def _decode(self, ids):
        return self.backend.decode(ids, skip_special_tokens=True)


JUDGE_FORMS = ("context", "paper")


class LLMJudgeVerifier(_ModelVerifier):
    """The paper's semantic judge (see module docstring); default thresholds
    :data:`DEFAULT_THRESHOLDS` (context 0.92, paper 0.5). ``form``: ``context`` (default) or ``paper``."""

    name = "llm_judge"
    template = JUDGE_PROMPT
    read = staticmethod(judge_score)

    def __init__(self, backend, threshold: float, form: str = "context") -> None:
        if form not in JUDGE_FORMS:
            raise ValueError(f"llm_judge form must be one of {JUDGE_FORMS}, got {form!r}")
        super().__init__(backend, threshold)
        self.form = form

    def prompts(self, pairs: Sequence[StepPair]) -> list[list[int]]:
        encode = getattr(self.backend, "encode_messages", None)
        if self.form == "paper":
            return [paper_prompt(self.backend, p) for p in pairs]
        if encode is None:  # a backend without chat support: the zero-shot prompt
            return super().prompts(pairs)
        limit = getattr(getattr(self.backend, "config", None), "max_model_len", None)
        out = []
        for p in pairs:
            # as many worked examples as the engine's context holds (all four normally)
            for shots in range(len(FEW_SHOT), -1, -1):
                ids = encode(
                    few_shot_messages(self.template, p.context.strip(), p.draft.strip(), p.target.strip(), shots)
                )
                if limit is None or len(ids) + ANSWER_TOKENS <= limit:
                    break
            out.append(ids)
        return out


def paper_prompt(backend, pair: StepPair) -> list[int]:
    """Token ids of the paper-form judge prompt: the two steps in one user turn (chat
    template when the backend has one), then the assistant's answer opened with ``[``."""
    text = PAPER_PROMPT.format(target=pair.target.strip(), draft=pair.draft.strip())
    encode = getattr(backend, "encode_messages", None)
    if encode is not None:
        return encode([{"role": "user", "content": text}], prefill=PAPER_PREFILL)
    return backend.encode_prompt(text + "\n\nVerdict: " + PAPER_PREFILL, chat=False)


class TargetScoreVerifier(_ModelVerifier):
    """The model's 0–9 rating of the draft step, divided by 9; default threshold 7/9."""

    name = "target_score"
    template = SCORE_PROMPT
    read = staticmethod(rating_score)


# Default thresholds. The context judge's scores sit high (at 0.5 it accepts 99.8% of the probed pairs of the
# 100-problem rollout-labelled dataset), so its default is the threshold calibrated there against the
# outcome labels: the highest acceptance with false-accept rate <= 0.05 (0.923; its two held-out folds
# 0.928 and 0.909; benchmarks/teacher_labels/rollout_100/summary.json, "calibrated"). The paper form keeps
# the official rule (the verdict token's argmax: 0.5); target_score keeps SpecReason's 7 of 9.
DEFAULT_THRESHOLDS = {"llm_judge(context)": 0.92, "llm_judge(paper)": 0.5, "target_score": 7 / 9}


def default_threshold(kind: str, form: str | None = None) -> float:
    """The default threshold of a model verifier (``form``: llm_judge's, None = context)."""
    return DEFAULT_THRESHOLDS[f"llm_judge({form or 'context'})" if kind == "llm_judge" else kind]
