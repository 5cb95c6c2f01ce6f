"""What a distilled student sees for a step pair, built by one function per student kind and used
alike by training and decoding (train/serve parity): the context window (the head and the tail
of the chain so far, ``CONTEXT_FORM``), the cross-encoder's text pair and the LM judge's chat
prompt, each shrunk to fit the model's ``max_length`` by cutting the context first."""

from __future__ import annotations

from collections.abc import Sequence

from lrtune.errors import ConfigError
from lrtune.verifiers.base import StepPair

# What a student reads of the context (StepPair.context: the problem statement, then the
# solution so far). "tail": its last characters only (checkpoints before head+tail, whose
# metadata has no context_form); "head+tail": the start of the problem statement and the
# latest steps (what the teacher judges with: it never loses the problem).
CONTEXT_FORMS = ("tail", "head+tail")
_GAP = " … "
CONTEXT_FORM = "head+tail"  # what new students train with


def _cut_head(text: str, chars: int) -> str:
    """The first ``chars`` characters of ``text``, cut back to a word boundary."""
    head = text[:chars]
    cut = head.rfind(" ")
    return (head[:cut] if len(text) > chars and chars - cut < 40 and cut > 0 else head).strip()


def context_tail(context: str, chars: int) -> str:
    """The last ``chars`` characters of the context, cut at a word boundary ("" for chars ≤ 0)."""
    if chars <= 0:
        return ""
    if len(context) <= chars:
        return context.strip()
    tail = context[-chars:]
    cut = tail.find(" ")
    return (tail[cut + 1 :] if 0 <= cut < 40 else tail).strip()


def context_view(context: str, chars: int, form: str = CONTEXT_FORM) -> str:
    """At most ``chars`` characters of the context (plus the " … " that joins the halves):
    all of it when it fits; else, for ``form`` "head+tail", its first ⌊chars/2⌋ characters
    (the problem statement's start) and its last ⌈chars/2⌉ (the latest steps), each cut at a
    word boundary; for "tail", :func:`context_tail`. "" for chars ≤ 0."""
    if form not in CONTEXT_FORMS:
        raise ConfigError(f"unknown context form {form!r}; expected one of {', '.join(CONTEXT_FORMS)}")
    if form == "tail" or chars <= 0 or len(context.strip()) <= chars:
        return context_tail(context, chars)
    context = context.strip()
    return f"{_cut_head(context, chars // 2)}{_GAP}{context_tail(context, chars - chars // 2)}"


def cross_encoder_text(
    pair: StepPair, context_chars: int, step_chars: int = 600, form: str = CONTEXT_FORM
) -> tuple[str, str]:
    """(first, second) segments of the cross-encoder: context view + draft | target."""
    ctx = context_view(pair.context, context_chars, form)
    return f"{ctx} || {pair.draft.strip()[:step_chars]}", pair.target.strip()[:step_chars]


def shrink(fits, context_chars: int, step_chars: int, what: str):
    """The first input ``fits(ctx, step)`` accepts (it returns the input, or None when too
    long): the context is halved first (to none, below 32 characters), then the steps are
    cut to ¾ of their characters per try; ConfigError when even 8 step characters are too many."""
    ctx, step = context_chars, step_chars
    while True:
        got = fits(ctx, step)
        if got is not None:
            return got
        if ctx > 0:
            ctx = ctx // 2 if ctx > 32 else 0
        elif step > 8:
            step = int(0.75 * step)
        else:
            raise ConfigError(f"max_length is too short for the {what}")


def fit_cross_encoder_text(
    pair: StepPair, tokenizer, context_chars: int, max_length: int, form: str = CONTEXT_FORM
) -> tuple[str, str]:
    """The cross-encoder segments of ``pair`` shortened (:func:`shrink`: context first) until
    both with their special tokens take ≤ ``max_length`` tokens, so truncation never cuts a
    step. Form "tail" (old checkpoints) returns them unshortened, as those were trained."""
    if form == "tail":
        return cross_encoder_text(pair, context_chars, form=form)
    longest = min(600, max(len(pair.draft.strip()), len(pair.target.strip())))

    def fits(ctx: int, step: int):
        a, b = cross_encoder_text(pair, ctx, step, form)
        return (a, b) if len(tokenizer(a, b)["input_ids"]) <= max_length else None

    return shrink(fits, context_chars, longest, "cross-encoder input")


def encode_cross_encoder(
    tokenizer, pairs: Sequence[StepPair], context_chars: int, max_length: int, form: str = CONTEXT_FORM
):
    """The padded batch (PyTorch tensors) a cross-encoder reads for ``pairs``; training and
    scoring both call this."""
    a, b = zip(*(fit_cross_encoder_text(p, tokenizer, context_chars, max_length, form) for p in pairs))
    return tokenizer(list(a), list(b), padding=True, truncation=True, max_length=max_length, return_tensors="pt")


def judge_student_prompt(
    pair: StepPair, context_chars: int, step_chars: int | None = None, form: str = CONTEXT_FORM
) -> str:
    """The paper's judge prompt with the context cut to its view (the student's input);
    ``step_chars`` caps each step's characters (None: whole steps)."""
    from lrtune.verifiers.judge import JUDGE_PROMPT

    draft, target = pair.draft.strip(), pair.target.strip()
    if step_chars is not None:
        draft, target = draft[:step_chars], target[:step_chars]
    return JUDGE_PROMPT.format(context=context_view(pair.context, context_chars, form), draft=draft, target=target)


ANSWER_TOKENS = 8  # room left in max_length for the answer ("unaligned") and the end-of-turn tokens


def _chat_ids(tokenizer, prompt: str) -> list[int]:
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=True
    )
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids)


def fit_judge_prompt(
    pair: StepPair, tokenizer, context_chars: int, max_length: int | None, form: str = CONTEXT_FORM
) -> tuple[str, list[int]]:
    """(prompt, chat token ids) of the student prompt, shortened (:func:`shrink`: context
    first, then steps) until ids + ANSWER_TOKENS ≤ ``max_length``. Training and scoring both
    call this, so the student never sees an input that SFT truncation would have cut
    (truncation drops the answer)."""

    def fits(ctx: int, step: int):
        prompt = judge_student_prompt(pair, ctx, step, form)
        ids = _chat_ids(tokenizer, prompt)
        return (prompt, ids) if max_length is None or len(ids) + ANSWER_TOKENS <= max_length else None

    step = max(len(pair.draft.strip()), len(pair.target.strip()))  # whole steps
    try:
        return shrink(fits, context_chars, step, "judge prompt")
    except ConfigError:
        n = len(_chat_ids(tokenizer, judge_student_prompt(pair, 0, 8, form)))
        raise ConfigError(
            f"max_length {max_length} is too short for the judge prompt: its instructions alone take {n} tokens"
        ) from None
