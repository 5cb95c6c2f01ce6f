"""The transformers backend's sampling and token-level SD math on logits (pure, torch only):
target probabilities under a step's sampling parameters, the draft's proposals, the accept/
resample rule of speculative sampling (Leviathan et al. 2023; greedy: argmax agreement), and
the prompt scores of a prefilled chain."""

from __future__ import annotations

from collections.abc import Sequence

from lrtune.backends.base import GenParams


def torch_module():
    import torch  # imported when first used: lrtune imports without it

    return torch


def prompt_scores(logits, prefix: Sequence[int], start: int, score_from: int) -> list[tuple[float, bool] | None]:
    """(log p(x_t | x_<t) in nats, x_t is the argmax) for t = ``score_from`` .. len(prefix) - 1,
    from ``logits`` [T, V] of a prefill of ``prefix[start:-1]`` (row r predicts token
    ``start + r + 1``); token 0, which nothing predicts, scores None."""
    torch = torch_module()
    first = max(score_from, 1)
    out: list[tuple[float, bool] | None] = [None] * (first - score_from)
    if first >= len(prefix):
        return out
    rows = logits[first - 1 - start : len(prefix) - 1 - start]
    toks = torch.tensor(prefix[first:], device=logits.device)
    lps = torch.log_softmax(rows, dim=-1).gather(-1, toks[:, None]).squeeze(-1)
    top = rows.argmax(-1) == toks
    return out + [(float(lp), bool(t)) for lp, t in zip(lps.tolist(), top.tolist())]


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def probs(logits, params: GenParams):
    """The sampling distribution over the last dim: softmax(logits / T), cut to the top-p nucleus."""
    torch = torch_module()
    p = torch.softmax(logits / params.temperature, dim=-1)
    if params.top_p < 1.0:
        sp, si = torch.sort(p, dim=-1, descending=True)
        keep = torch.cumsum(sp, dim=-1) - sp < params.top_p
        sp = sp * keep
        p = torch.zeros_like(p).scatter(-1, si, sp)
        p = p / p.sum(dim=-1, keepdim=True)
    return p


def fit_vocab(logits, width: int):
    """Draft logits [B, V_draft] on the target's output width: ids beyond it dropped, ids the
    draft lacks at -inf (never proposed), so q and p compare id by id (padded vocab sizes
    of one tokenizer, e.g. 151,936 against 152,064)."""
    torch = torch_module()
    have = logits.shape[-1]
    if have == width:
        return logits
    if have > width:
        return logits[..., :width]
    pad = torch.full((*logits.shape[:-1], width - have), float("-inf"), dtype=logits.dtype, device=logits.device)
    return torch.cat([logits, pad], dim=-1)


def draft_choices(logits, params: GenParams, gens) -> tuple[list[int], list]:
    """One draft token per row of ``logits`` [B, V] and the distribution q it came from
    (None when greedy: one argmax and one host transfer for the whole batch)."""
    torch = torch_module()
    if params.temperature <= 0:
        return logits.argmax(-1).tolist(), [None] * logits.shape[0]
    q = probs(logits, params)
    return [int(torch.multinomial(q[b], 1, generator=g)) for b, g in enumerate(gens)], list(q)


def token_infos(logits, toks: list[int], params: GenParams) -> list[tuple]:
    """(token, logprob, top-k {id: logprob}) of ``toks[i]`` under ``logits[i]`` (the target's
    raw distribution), for all positions at once."""
    torch = torch_module()
    lp = torch.log_softmax(logits[: len(toks)], dim=-1)
    idx = torch.tensor(toks, device=lp.device)
    chosen = lp.gather(1, idx[:, None])[:, 0].tolist()
    tops: list[dict] = [{} for _ in toks]
    if params.top_logprobs:
        v, i = torch.topk(lp, params.top_logprobs, dim=-1)
        tops = [dict(zip(a, b)) for a, b in zip(i.tolist(), v.tolist())]
        for t, top, c in zip(toks, tops, chosen):
            top.setdefault(t, c)
    return list(zip(toks, chosen, tops))


def accept_block(proposals: list[int], qs: list, logits, params: GenParams, gen):
    """Speculative acceptance of one row's whole draft block: (accepted count n, committed
    tokens, their infos).

    ``logits[i]`` is the target's distribution at position i (after proposals[:i]). Greedy:
    n = the length of the prefix where proposal i is argmax(logits[i]); the committed tokens
    are argmax(logits[:n+1]) (the accepted proposals and the target's own token), found with
    tensor ops and one host transfer. Sampled: proposal i is kept when u_i < p_i(d)/q_i(d)
    (all positions at once); at the first rejection the token comes from the residual
    max(p - q, 0), after a full accept from p[k]."""
    torch = torch_module()
    k = len(proposals)
    if params.temperature <= 0:
        tgt = logits[: k + 1].argmax(-1)
        if k:
            ok = (tgt[:k] == torch.tensor(proposals, device=tgt.device)).to(torch.int64)
            n_t = ok.cumprod(0).sum().view(1)
        else:
            n_t = tgt.new_zeros(1)
        both = torch.cat([n_t, tgt]).tolist()
        n = both[0]
        toks = both[1 : n + 2]
        return n, toks, token_infos(logits, toks, params)
    p = probs(logits[: k + 1], params)
    n = k
    if k:
        idx = torch.tensor(proposals, device=p.device)
        q = torch.stack(qs)
        rows = torch.arange(k, device=p.device)
        pd, qd = p[rows, idx], q[rows, idx]
        ratio = torch.where(qd > 0, pd / torch.where(qd > 0, qd, torch.ones_like(qd)), torch.zeros_like(qd))
        u = torch.rand(k, generator=gen, device=p.device)
        n = int((u < ratio.clamp(max=1.0)).to(torch.int64).cumprod(0).sum())
    if n < k:
        resid = torch.clamp(p[n] - qs[n], min=0)
        s = float(resid.sum())
        dist = resid / s if s > 0 else p[n]
    else:
        dist = p[k]
    toks = list(proposals[:n]) + [int(torch.multinomial(dist, 1, generator=gen))]
    return n, toks, token_infos(logits, toks, params)
