"""Cheap pair features computed from the text of a step pair (pure functions).

These are what the ``features`` distilled verifier reads at decode time, so every one of
them must be computable from a :class:`~lrtune.verifiers.base.StepPair` alone (plus the
embedding cosine, which costs one sentence-encoder pass per step). Numbers carry most of
the meaning of a math step, so several features compare the numbers of the two steps.
"""

from __future__ import annotations

import ast
import math
import re

from lrtune.verifiers.simple import normalize_step

_NUM = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?")
_WORD = re.compile(r"[a-z]+|\d+(?:\.\d+)?")
_CODE = re.compile(r"```python|^[ \t]*def[ \t]+\w+[ \t]*\(|^[ \t]*class[ \t]+\w+[ \t]*[:(]", re.MULTILINE)

TEXT_FEATURES = (
    "exact_match",  # 1 when the normalised texts are equal
    "log_len_draft",  # log(1 + characters of the draft step)
    "log_len_target",  # log(1 + characters of the target step)
    "len_ratio",  # min/max of the two character lengths (1 = same length)
    "word_jaccard",  # |W_d ∩ W_t| / |W_d ∪ W_t| over lower-case words and numbers
    "num_jaccard",  # the same over the sets of numbers (1 when neither has one)
    "num_recall",  # share of the target's numbers that the draft also states
    "last_num_equal",  # 1 when both end on the same number (their running result)
    "both_boxed",  # 1 when both or neither write \\boxed (final answer reached)
)
# the target's likelihood of the draft step (StepPair.draft_scores; free in sync LR, see
# lrtune.verifiers.base.DraftScores) and the draft's own confidence in it; None when the
# decoder did not score the step (or, for the draft's two, its step carried no logprobs)
# the first three need the target's prefill of the draft step (a score round's scoring call);
# the draft's two come with its own generation
TARGET_SCORE_FEATURES = (
    "draft_target_mean_logprob",  # mean log p_target(x_t | x_<t) over the draft step's tokens (nats)
    "draft_target_min_logprob",  # their minimum (nats)
    "draft_target_argmax_share",  # share of the draft's tokens that are the target's argmax
)
LIKELIHOOD_FEATURES = (
    *TARGET_SCORE_FEATURES,
    "draft_mean_logprob",  # the draft's own confidence: mean log p_draft of its step's tokens (nats)
    "draft_entropy",  # mean top-k entropy of the draft's next-token distributions (nats)
)
# what kind of problem the pair belongs to, read off its context (problem statement first)
CONTEXT_FEATURES = (
    "context_is_code",  # 1 when the context holds Python code (a ```python block or a def/class line)
)
# does each step's own arithmetic hold, and does the draft state numbers the target does not
# (a wrong intermediate result sends the rest of the solution to another answer)
CHECK_FEATURES = (
    "draft_arith_wrong",  # equalities "a op b = c" in the draft step that are false (count)
    "target_arith_wrong",  # the same in the target step
    "num_precision",  # share of the draft's numbers that the target also states (1 when it has none)
)
FEATURE_NAMES = (*TEXT_FEATURES, "embedding_cosine", *LIKELIHOOD_FEATURES, *CONTEXT_FEATURES, *CHECK_FEATURES)
# what a verifier can read without the target's own step (score rounds): the draft step, its
# context and the likelihoods; a student trained on these alone is one-sided (``--student router``)
ONE_SIDED_FEATURES = ("log_len_draft", *LIKELIHOOD_FEATURES, *CONTEXT_FEATURES, "draft_arith_wrong")


def numbers(text: str) -> list[float]:
    """The numbers of ``text`` in order (thousands separators removed)."""
    out = []
    for m in _NUM.findall(text):
        try:
            out.append(float(m.replace(",", "")))
        except ValueError:
            continue
    return out


def _jaccard(a: set, b: set) -> float:
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


def text_features(draft: str, target: str) -> list[float]:
    """The :data:`TEXT_FEATURES` of one pair, in that order."""
    ld, lt = len(draft), len(target)
    wd, wt = set(_WORD.findall(draft.lower())), set(_WORD.findall(target.lower()))
    nd, nt = numbers(draft), numbers(target)
    sd, st = set(nd), set(nt)
    return [
        float(normalize_step(draft) == normalize_step(target)),
        math.log1p(ld),
        math.log1p(lt),
        min(ld, lt) / max(ld, lt) if max(ld, lt) else 1.0,
        _jaccard(wd, wt),
        _jaccard(sd, st),
        len(sd & st) / len(st) if st else 1.0,
        float(bool(nd) and bool(nt) and nd[-1] == nt[-1]),
        float(("\\boxed" in draft) == ("\\boxed" in target)),
    ]


_LATEX_FRAC = re.compile(r"\\d?frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_ARITH_RUN = re.compile(r"[\d.+\-*/()= ]+")
_OPS = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
}


def _value(node) -> float:
    """The value of an arithmetic AST (numbers, + - * /, unary minus); ValueError otherwise."""
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return float(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _value(node.operand)
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_value(node.left), _value(node.right))
    raise ValueError("not arithmetic")


def _evaluate(expr: str) -> float | None:
    """``expr`` evaluated when it is plain arithmetic (parsed, never executed), else None."""
    try:
        return _value(ast.parse(expr.strip(), mode="eval").body)
    except (SyntaxError, ValueError, ZeroDivisionError, OverflowError, RecursionError, MemoryError):
        return None


def _decimals(text: str) -> int:
    t = text.strip()
    return len(t.split(".", 1)[1]) if re.fullmatch(r"-?\d+\.\d+", t) else 0


def _shown_as(value: float, text: str) -> bool:
    """Whether ``text`` (a number or arithmetic) states ``value``: exactly, or ``value`` rounded
    or truncated to the decimals ``text`` shows (``10 / 3 = 3.33``, ``2 / 3 = 0.666``)."""
    b = _evaluate(text)
    d = _decimals(text)
    tries = (value,) if not d else (value, round(value, d), math.trunc(value * 10**d) / 10**d)
    return any(abs(x - b) <= 1e-9 * max(1.0, abs(b)) for x in tries)


def arithmetic_errors(text: str) -> int:
    """Equalities in ``text`` whose two sides are plain arithmetic and differ: ``3 \\times 4 = 12``
    holds, ``48 / 5 = 9.6`` holds, ``48 / 5 = 9.5`` does not. LaTeX (``\\times``, ``\\div``,
    ``\\frac{a}{b}``, ``$``) and thousands separators are read; a side with words, units or ``%``
    is not checked. A right side rounded to the decimals it shows counts as equal."""
    t = _THOUSANDS.sub("", text)
    t = _LATEX_FRAC.sub(r"((\1)/(\2))", t)
    for a, b in (
        ("\\times", "*"),
        ("\\cdot", "*"),
        ("×", "*"),
        ("·", "*"),
        ("\\div", "/"),
        ("÷", "/"),
        ("\\left", ""),
        ("\\right", ""),
        ("$", " "),
        ("\\(", " "),
        ("\\)", " "),
        ("\\[", " "),
        ("\\]", " "),
        ("\\,", ""),
        ("{", "("),
        ("}", ")"),
    ):
        t = t.replace(a, b)
    wrong = 0
    for run in _ARITH_RUN.findall(t):
        sides = run.split("=")
        for left, right in zip(sides, sides[1:]):
            if not re.search(r"[\d)]\s*[+\-*/]\s*[\d(]", left + " " + right):
                continue  # "x = 5" or "5 = 5": nothing computed
            a, b = _evaluate(left), _evaluate(right)
            if a is None or b is None:
                continue
            wrong += not _shown_as(a, right)
    return wrong


def check_features(draft: str, target: str) -> list[float]:
    """The :data:`CHECK_FEATURES` of one pair, in that order."""
    sd, st = set(numbers(draft)), set(numbers(target))
    return [float(arithmetic_errors(draft)), float(arithmetic_errors(target)), len(sd & st) / len(sd) if sd else 1.0]


def likelihood_features(scores) -> list[float | None]:
    """The :data:`LIKELIHOOD_FEATURES` of a pair's ``draft_scores`` (all None when unscored)."""
    if scores is None:
        return [None] * len(LIKELIHOOD_FEATURES)
    own = lambda v: None if v is None else float(v)  # noqa: E731
    return [
        own(scores.mean_logprob),
        own(scores.min_logprob),
        own(scores.argmax_share),
        own(scores.draft_logprob),
        own(scores.draft_entropy),
    ]


def context_features(context: str) -> list[float]:
    """The :data:`CONTEXT_FEATURES` of a pair's context, in that order. Code steps are
    accepted far more often than math steps (rollout labels: 0.96 against 0.66 on the
    training split), so a student needs to know which kind of problem it is judging."""
    return [float(bool(_CODE.search(context)))]


def pair_features(pair, embedding_cosine: float) -> dict[str, float | None]:
    """Every :data:`FEATURE_NAMES` value of ``pair`` (a :class:`~lrtune.verifiers.base.StepPair`)
    given its embedding cosine; a likelihood feature is None when the pair is unscored."""
    f: dict[str, float | None] = dict(zip(TEXT_FEATURES, text_features(pair.draft, pair.target)))
    f["embedding_cosine"] = float(embedding_cosine)
    f.update(zip(LIKELIHOOD_FEATURES, likelihood_features(pair.draft_scores)))
    f.update(zip(CONTEXT_FEATURES, context_features(pair.context)))
    f.update(zip(CHECK_FEATURES, check_features(pair.draft, pair.target)))
    return f
