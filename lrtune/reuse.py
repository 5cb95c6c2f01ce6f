"""Draft-prefix reuse: target rows start after the draft tokens the target would write itself.

Greedy sync LR with draft chain ŝ1..ŝd after the committed ids P. One prefill of
``P ŝ1..ŝd`` on the target (one row per prompt, one generated token) scores every draft
token x_t given everything before it; ``m_k`` is the number of leading tokens of ŝk that
are the target's argmax there. Under greedy decoding the target's own step after
``P ŝ1..ŝ(k-1)`` then begins with ``ŝk[:m_k]``, so

    s_k = ŝk                             when m_k = |ŝk|  (no target row at all)
    s_k = ŝk[:m_k] + T(P ŝ1..ŝ(k-1) ŝk[:m_k])   otherwise (the row generates |s_k| − m_k tokens)

and the bonus row ``T(P ŝ1..ŝd)`` is unchanged. The rows read the prefill's prefix-cache
blocks, so the reused tokens are not computed twice; the prefill is the one the target
rows of ``P ŝ1..ŝk`` ran anyway. Outputs equal decoding without reuse (greedy, up to the
engine's numerics between a prefill and a decode step). Pure functions; the decoder
(:mod:`lrtune.decoder`) runs the calls.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from lrtune.backends.base import Generation, GenParams, finish_step


def split_scores(scores: Sequence[tuple[float, bool] | None], lengths: Sequence[int]) -> list[list]:
    """The prefill's prompt scores of the draft chain cut into one list per draft step
    (``lengths``: the steps' token counts; missing trailing scores count as None)."""
    out, at = [], 0
    for n in lengths:
        part = list(scores[at : at + n])
        out.append(part + [None] * (n - len(part)))
        at += n
    return out


def matched_tokens(step_scores: Sequence[tuple[float, bool] | None]) -> int:
    """m: the leading draft tokens that are the target's argmax (an unscored token, None,
    ends the run: nothing is assumed about it)."""
    m = 0
    for s in step_scores:
        if s is None or not s[1]:
            break
        m += 1
    return m


def row_params(params: GenParams, reused: int) -> GenParams:
    """A row that continues a step after ``reused`` of its tokens: its budget shrinks by them
    (``reused`` < ``params.max_tokens`` whenever a row runs)."""
    return replace(params, max_tokens=max(1, params.max_tokens - reused))


def joined_step(
    reused: Sequence[int],
    out: Generation,
    params: GenParams,
    decode: Callable[[Sequence[int]], str],
    eos_ids: frozenset[int],
) -> Generation:
    """The target's step: ``reused`` draft tokens, then the row's output, cut again at the
    step boundary of the whole (a delimiter may span the join, which the engine, searching
    only its own output, cannot see). ``params``: the step's params before reuse. An
    aborted row stays aborted; per-token logprobs are not kept (reused tokens have none)."""
    if out.finish == "aborted":
        return out
    ids, finish = finish_step(list(reused) + list(out.token_ids), decode, params, eos_ids)
    return Generation(token_ids=ids, text=decode(ids), finish=finish)


def reusable(matched: int, step: Generation, eos_ids: frozenset[int]) -> int:
    """The matched tokens of a draft step the target's step may start with: a step cut by a
    draft-only EOS (not in the target's ``eos_ids``) keeps one token back, so its row runs on
    past the point where the target's step does not end."""
    n = len(step.token_ids)
    return min(matched, n - 1) if step.finish == "eos" and step.token_ids[-1] not in eos_ids else matched


def whole_draft(step: Generation) -> Generation:
    """The target's step when it equals the draft step token for token (m = |ŝ|)."""
    return Generation(token_ids=list(step.token_ids), text=step.text, finish=step.finish)
