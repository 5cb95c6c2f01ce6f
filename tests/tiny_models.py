"""The tiny model pair for tests (built by :mod:`lrtune.toymodels`) and the checks several
backend test modules run on it."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

from lrtune.doctor_checks import reference_prompt_scores  # noqa: F401  (tests import it from here)
from lrtune.toymodels import (  # noqa: F401  (tests import these from here)
    DELIMITER,
    EOS_TOKEN,
    SPECIAL_TOKENS,
    TinyPair,
    build_tiny_pair,
    cache_key,
    chat_prompt,
    default_cache_root,
    get_tiny_pair,
    make_corpus,
    sample_questions,
)


def check_early_abort(target, draft, prompts, reference, method: str, gamma2: int, max_new: int) -> None:
    """Early abort on real engines: with ``never`` the output is target greedy (``reference(p)``)
    and some target rows were really stopped; with ``exact`` it commits exactly the tokens and
    steps of the full round."""
    from lrtune.decoder import DecodeConfig, LookaheadDecoder
    from lrtune.verifiers import make_verifier

    base = DecodeConfig(method=method, gamma1=3, gamma2=gamma2, max_new_tokens=max_new, max_step_tokens=24)
    early = dataclasses.replace(base, schedule="abort")
    for p in prompts:
        rounds = []
        res, _ = LookaheadDecoder(target, draft, make_verifier("never"), early).decode(p, on_round=rounds.append)
        assert res.token_ids == reference(p)
        assert any(t.finish == "aborted" for r in rounds for t in r.targets)
        full, _ = LookaheadDecoder(target, draft, make_verifier("exact"), base).decode(p)
        again, _ = LookaheadDecoder(target, draft, make_verifier("exact"), early).decode(p)
        assert again.token_ids == full.token_ids and again.steps == full.steps


def check_reuse(target, draft, prompts, reference, method: str, gamma2: int, max_new: int) -> None:
    """Draft-prefix reuse on real engines: with ``never`` the output is target greedy
    (``reference(p)``); with ``exact`` and early abort it commits exactly the tokens and steps
    of decoding without reuse, while reading some target tokens off the prefill."""
    from lrtune.decoder import DecodeConfig, LookaheadDecoder
    from lrtune.verifiers import make_verifier

    base = DecodeConfig(method=method, gamma1=3, gamma2=gamma2, max_new_tokens=max_new, max_step_tokens=24)
    reuse = dataclasses.replace(base, schedule="reuse")
    reused = 0
    for p in prompts:
        res, stats = LookaheadDecoder(target, draft, make_verifier("never"), reuse).decode(p)
        assert res.token_ids == reference(p)
        reused += stats.reused_target_tokens
        full, _ = LookaheadDecoder(target, draft, make_verifier("exact"), base).decode(p)
        for cfg in (reuse, dataclasses.replace(reuse, schedule="reuse+abort")):
            again, st = LookaheadDecoder(target, draft, make_verifier("exact"), cfg).decode(p)
            assert again.token_ids == full.token_ids and again.steps == full.steps
            reused += st.reused_target_tokens
    assert reused > 0


def check_draft_scores(target, model_dir, prompt: list[int], *, cached_tokens_score_none: bool) -> None:
    """A backend's ``GenParams.score_from`` on a real engine: the scores of a prefix's last
    tokens equal one plain forward's; scoring leaves the generated tokens unchanged; a second
    call on the same prefix (reused cache) still agrees wherever it scores, and the engines
    that cannot score reused positions (vLLM) leave them None."""
    from lrtune.backends.base import GenParams

    plain = GenParams(max_tokens=40, stop_at_delimiter=False)
    first = target.generate([prompt], plain).outputs[0].token_ids
    prefix = list(prompt) + first[::-1]  # a tail no earlier request held (so no cache block covers it)
    plain = GenParams(max_tokens=12, stop_at_delimiter=False)
    start = len(prompt) + 2
    ref = reference_prompt_scores(model_dir, prefix, start)
    scored = GenParams(max_tokens=12, stop_at_delimiter=False, score_from=start)
    again = []
    for _ in range(2):
        out = target.generate([prefix], scored).outputs[0]
        assert out.token_ids == target.generate([prefix], plain).outputs[0].token_ids
        assert len(out.prompt_scores) == len(prefix) - start
        again.append(out.prompt_scores)
        for got, (lp, top) in zip(out.prompt_scores, ref):
            if got is not None:
                assert abs(got[0] - lp) < 2e-3 and got[1] == top
    assert all(s is not None for s in again[0])  # a fresh tail: every token scored
    if cached_tokens_score_none:
        assert any(s is None for s in again[1])  # reused blocks: not recomputed, not scored
    else:
        assert all(s is not None for s in again[1])


def check_scored_lr_rounds(
    target, draft, prompts, reference, method: str, gamma2: int, max_new: int, *, every_token: bool = True
) -> None:
    """Sync LR with draft scoring on real engines: the output is still target greedy with
    ``never``; every draft step followed by a target row carries the target's scores of its
    tokens (``every_token``: of all of them; vLLM cannot score tokens that sit in reused
    cache blocks, e.g. ones the target generated itself the round before, so there most but
    not all are scored); ``target_logprob`` decodes end to end and scores each pair from them."""
    import math

    import pytest

    from lrtune.decoder import DecodeConfig, LookaheadDecoder
    from lrtune.round_draft import DRAFT_TOP_K
    from lrtune.verifiers import make_verifier
    from lrtune.verifiers.base import topk_entropy

    cfg = DecodeConfig(
        method=method, gamma1=3, gamma2=gamma2, max_new_tokens=max_new, max_step_tokens=24, record="draft_scores"
    )
    for p in prompts:
        rounds = []
        res, _ = LookaheadDecoder(target, draft, make_verifier("never"), cfg).decode(p, on_round=rounds.append)
        assert res.token_ids == reference(p)
        followed = [(r.pairs[0][k], d) for r in rounds for k, d in enumerate(r.drafts) if k + 1 < len(r.targets)]
        assert followed
        scored = [(pair.draft_scores, d) for pair, d in followed if pair.draft_scores is not None]
        assert len(scored) == len(followed) if every_token else len(scored) >= len(followed) / 2
        for ds, d in scored:
            assert ds.tokens == len(d.token_ids) if every_token else 0 < ds.tokens <= len(d.token_ids)
            assert ds.min_logprob <= ds.mean_logprob <= 0.0
            # the draft's own confidence in its step, from the top-k logprobs it returned
            assert len(d.top_logprobs) == len(d.token_ids) and ds.draft_logprob <= 0.0
            assert ds.draft_entropy == pytest.approx(sum(topk_entropy(t) for t in d.top_logprobs) / len(d.token_ids))
            assert 0.0 <= ds.draft_entropy <= math.log(DRAFT_TOP_K + 1) + 1e-6  # vLLM may add the sampled token
    verifier = make_verifier("target_logprob")
    rounds = []
    plain = DecodeConfig(method=method, gamma1=3, gamma2=gamma2, max_new_tokens=max_new, max_step_tokens=24)
    res, _ = LookaheadDecoder(target, draft, verifier, plain).decode(prompts[0], on_round=rounds.append)
    assert res.token_ids
    for r in rounds:
        for k, (pair, score) in enumerate(zip(r.pairs[0], r.scores)):
            if pair.draft_scores is not None and pair.draft != pair.target:
                assert math.isclose(score, math.exp(pair.draft_scores.mean_logprob), rel_tol=1e-9)


if __name__ == "__main__":  # python tests/tiny_models.py [root]
    import sys

    t = time.perf_counter()
    pair = get_tiny_pair(root=Path(sys.argv[1]) if len(sys.argv) > 1 else None)
    print(json.dumps({"root": str(pair.root), "wall_s": round(time.perf_counter() - t, 2), **pair.info}, indent=2))


def check_score_rounds(target, draft, prompts, reference, method: str, gamma2: int, max_new: int) -> None:
    """Score rounds on a real engine: with ``never`` the output is target greedy
    (``reference(p)``); with ``target_logprob`` (the prefill's scores) some draft steps are
    committed and every compared pair was scored by the prefill, with no target step."""
    from lrtune.decoder import DecodeConfig, LookaheadDecoder
    from lrtune.verifiers import make_verifier

    cfg = DecodeConfig(
        method=method, gamma1=3, gamma2=gamma2, max_new_tokens=max_new, max_step_tokens=24, schedule="score"
    )
    accepted = 0
    for p in prompts:
        res, stats = LookaheadDecoder(target, draft, make_verifier("never"), cfg).decode(p)
        assert res.token_ids == reference(p) and stats.committed_draft_steps == 0
        rounds = []
        if hasattr(target, "reset_prefix_cache"):  # vLLM cannot score draft tokens an earlier decode left cached
            target.reset_prefix_cache()
        res, stats = LookaheadDecoder(target, draft, make_verifier("target_logprob"), cfg).decode(
            p, on_round=rounds.append
        )
        assert all(
            pair.target == "" and pair.draft_scores is not None and pair.draft_scores.tokens
            for r in rounds
            for pair in r.pairs[0]
        )
        accepted += stats.committed_draft_steps
    assert accepted > 0


def tiny_decoder(**overrides):
    """A ``Decoder`` on the tiny pair with vLLM, the settings several test modules share
    (lr+sd, exact verifier, γ1 2, γ2 2, 24-token steps, float32, 1024-token context)."""
    from lrtune import Decoder

    pair = get_tiny_pair()
    settings = dict(
        method="lr+sd",
        verifier="exact",
        gamma1=2,
        gamma2=2,
        max_step_tokens=24,
        dtype="float32",
        max_model_len=1024,
        kv_cache_gib=0.25,
        progress=False,
    )
    return Decoder.from_pretrained(target=str(pair.target), draft=str(pair.draft), **{**settings, **overrides})
