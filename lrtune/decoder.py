"""Lookahead Reasoning decoder (sync, paper Algorithm 1) with token-level SD inside steps.

One round, with committed ids ``P`` (prompt + generated so far)::

    draft:    ŝ1 = D(P), ŝ2 = D(P ŝ1), ..., ŝd = D(P ŝ1..ŝ(d-1))      d <= γ1 sequential steps
    target:   s1 = T(P), s2 = T(P ŝ1), ..., s(d+1) = T(P ŝ1..ŝd)          ONE batched call
    verify:   v_i = V(ŝi, si) for i = 1..d                                 ONE batched call
    commit:   j = number of leading accepted v_i; P <- P ŝ1..ŝj s(j+1)

So a round commits ``j + 1`` steps (the target's step always follows the accepted draft
prefix — the *bonus-step rule*), and the speedup model ``lrtune.speedup.f_sync`` uses
exactly this: E[committed] = (1 - α1^(γ1+1)) / (1 - α1), time = γ1·c1 + b(γ1+1).
The bonus target step s(d+1) is skipped when ŝd ended the sequence (EOS) or the token
budget, since nothing can follow it. With ``method="lr+sd"`` the target's steps are
produced by an engine that runs token-level speculative decoding with γ2 draft tokens,
so the two speedups multiply.

Token ids are the state (DESIGN §3.4): committed ids are the draft's or target's own
ids, never re-tokenized text. Decoding never prints; it returns ``(result, stats)``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from lrtune.backends.base import Backend, GenBatch, Generation, GenParams
from lrtune.control import Controller, ControlState, ProblemInfo, RoundOutcome
from lrtune.errors import ConfigError
from lrtune.stats import DecodeStats, leading_accepts
from lrtune.steps import DEFAULT_DELIMITER
from lrtune.verifiers import StepPair, Verifier, accept

Method = Literal["target", "sd", "lr", "lr+sd"]
METHODS: tuple[str, ...] = ("target", "sd", "lr", "lr+sd")
GAMMA_MAX = 16


@dataclass
class DecodeConfig:
    """How to decode one prompt. Ranges are checked by :meth:`validate`."""

    method: str = field(default="lr+sd", metadata={"help": "target | sd | lr | lr+sd"})
    gamma1: int = field(default=3, metadata={"help": f"draft steps per LR round (1..{GAMMA_MAX})"})
    gamma2: int = field(default=4, metadata={"help": f"draft tokens per SD iteration (1..{GAMMA_MAX}); sd and lr+sd"})
    max_new_tokens: int = field(default=512, metadata={"help": "generated-token budget per prompt"})
    max_step_tokens: int = field(default=128, metadata={"help": "a step ends after this many tokens at the latest"})
    temperature: float = field(default=0.0, metadata={"help": "0 = greedy"})
    top_p: float = field(default=1.0, metadata={"help": "nucleus sampling mass (temperature > 0)"})
    seed: int = field(default=0, metadata={"help": "seed of all sampling (per round and position)"})
    delimiter: str = field(default=DEFAULT_DELIMITER, metadata={"help": "step delimiter"})
    context_tokens: int = field(default=256, metadata={"help": "tokens of context shown to the verifier"})
    width: int = field(default=1, metadata={"help": "W: draft branches per LR round (each up to gamma1 steps)"})
    logprobs: bool = field(default=False, metadata={"help": "keep per-token logprobs of LR steps (for collect features)"})
    async_lr: bool = field(default=False, metadata={"help": "pipelined (async) LR: target steps start as soon as their draft prefix exists", "flag": "--async"})
    branch_temperature: float = field(default=0.8, metadata={"help": "sampling temperature of branches >= 1 when temperature is 0"})

    @property
    def uses_lr(self) -> bool:
        return self.method in ("lr", "lr+sd")

    @property
    def uses_sd(self) -> bool:
        return self.method in ("sd", "lr+sd")

    def validate(self) -> DecodeConfig:
        if self.method not in METHODS:
            raise ConfigError(f"unknown method {self.method!r}; choose from {', '.join(METHODS)}")
        if self.uses_lr and not 1 <= self.gamma1 <= GAMMA_MAX:
            raise ConfigError(f"gamma1 must be in 1..{GAMMA_MAX}, got {self.gamma1}")
        if self.uses_lr and not 1 <= self.width <= 8:
            raise ConfigError(f"width must be in 1..8, got {self.width}")
        if self.async_lr and self.width > 1:
            raise ConfigError("async LR drafts one branch (width 1)")
        if self.branch_temperature <= 0:
            raise ConfigError(f"branch_temperature must be > 0, got {self.branch_temperature}")
        if self.uses_sd and not 1 <= self.gamma2 <= GAMMA_MAX:
            raise ConfigError(f"gamma2 must be in 1..{GAMMA_MAX}, got {self.gamma2}")
        if self.max_new_tokens < 1:
            raise ConfigError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.max_step_tokens < 1:
            raise ConfigError(f"max_step_tokens must be >= 1, got {self.max_step_tokens}")
        if self.temperature < 0:
            raise ConfigError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ConfigError(f"top_p must be in (0, 1], got {self.top_p}")
        if not self.delimiter:
            raise ConfigError("the step delimiter must not be empty")
        return self


@dataclass
class RoundRecord:
    """Everything one LR round compared and decided (for data collection and debugging)."""

    index: int
    prefix_len: int
    drafts: list[Generation]
    targets: list[Generation]
    scores: list[float]
    accepted: list[bool]
    committed_drafts: int
    draft_seconds: list[float]
    target_seconds: float
    verify_seconds: float
    # multi-branch drafting (width W): the chosen branch above; every branch below
    branch: int = 0
    branches: list[list[Generation]] = field(default_factory=list)
    branch_targets: list[list[Generation]] = field(default_factory=list)
    branch_scores: list[list[float]] = field(default_factory=list)
    branch_accepted: list[list[bool]] = field(default_factory=list)


@dataclass
class DecodeResult:
    """Generated ids (prompt excluded), derived text, why decoding ended, committed steps."""

    token_ids: list[int]
    text: str
    finish: Literal["eos", "length"]
    steps: list[tuple[str, list[int]]] = field(default_factory=list)  # (source, ids); source in draft|target


class LookaheadDecoder:
    """Decode with ``target`` alone, target+SD, LR, or LR+SD (see module docstring).

    ``draft`` is the step drafter (needed for ``lr``/``lr+sd``); token-level SD is the
    target backend's business (its engine for γ2).
    """

    def __init__(self, target: Backend, draft: Backend | None, verifier: Verifier,
                 config: DecodeConfig | None = None, controller: Controller | None = None) -> None:
        self.target = target
        self.draft = draft
        self.verifier = verifier
        self.config = (config or DecodeConfig()).validate()
        self.controller = controller  # picks (γ1, γ2) per round for sync LR (None: the config's)

    def decode(self, prompt_ids: Sequence[int], config: DecodeConfig | None = None,
               on_round: Callable[[RoundRecord], None] | None = None,
               on_commit: Callable[[str, list[int]], None] | None = None,
               controller: Controller | None = None,
               problem: ProblemInfo | None = None) -> tuple[DecodeResult, DecodeStats]:
        """Decode one prompt; ``on_round`` sees every LR round, ``on_commit`` every committed
        step; ``controller`` (default ``self.controller``) picks (γ1, γ2) before each round."""
        cfg = (config or self.config).validate()
        controller = controller if controller is not None else self.controller
        if controller is not None and cfg.uses_lr and cfg.async_lr:
            raise ConfigError("a controller drives sync LR rounds; async LR keeps fixed depths")
        if not prompt_ids:
            raise ConfigError("empty prompt")
        if cfg.uses_lr and self.draft is None:
            raise ConfigError(f"method {cfg.method!r} needs a draft model")
        stats = DecodeStats(prompt_tokens=len(prompt_ids))
        t0 = time.perf_counter()
        if cfg.uses_lr and cfg.async_lr:
            from lrtune.async_lr import decode_async

            gen, steps, _ = decode_async(self, list(prompt_ids), cfg, stats, on_commit)
            eos = self.target.eos_ids | self.draft.eos_ids
            result = DecodeResult(token_ids=gen, text=self.target.decode(gen, skip_special_tokens=True),
                                  finish="eos" if gen and gen[-1] in eos else "length", steps=steps)
        elif cfg.uses_lr:
            if controller is not None and problem is None:
                problem = ProblemInfo(id=f"prompt-{hash(tuple(prompt_ids)) & 0xFFFFFFFF:08x}",
                                      text=self.target.decode(list(prompt_ids), skip_special_tokens=True),
                                      prompt_tokens=len(prompt_ids))
            result = self._lookahead(list(prompt_ids), cfg, stats, on_round, on_commit, controller, problem)
        else:
            result = self._plain(list(prompt_ids), cfg, stats, on_commit)
        stats.wall_s = time.perf_counter() - t0
        stats.generated_tokens = len(result.token_ids)
        return result, stats

    # ---- baselines: target alone / target + token-level SD --------------------------
    def _plain(self, prompt: list[int], cfg: DecodeConfig, stats: DecodeStats, on_commit) -> DecodeResult:
        params = GenParams(max_tokens=cfg.max_new_tokens, stop_at_delimiter=False, delimiter=cfg.delimiter,
                           temperature=cfg.temperature, top_p=cfg.top_p, seeds=(cfg.seed,),
                           num_speculative_tokens=cfg.gamma2 if cfg.uses_sd else 0)
        batch = self.target.generate([prompt], params)
        self._account_target(stats, batch)
        out = batch.outputs[0]
        if on_commit:
            on_commit("target", list(out.token_ids))
        return DecodeResult(token_ids=list(out.token_ids), text=self.target.decode(out.token_ids, skip_special_tokens=True),
                            finish="eos" if out.finish == "eos" else "length", steps=[("target", list(out.token_ids))])

    # ---- Lookahead Reasoning ---------------------------------------------------------
    def _lookahead(self, prompt: list[int], base_cfg: DecodeConfig, stats: DecodeStats, on_round, on_commit,
                   controller: Controller | None = None, problem: ProblemInfo | None = None) -> DecodeResult:
        assert self.draft is not None
        gen: list[int] = []
        steps: list[tuple[str, list[int]]] = []
        eos = self.target.eos_ids | self.draft.eos_ids
        finished = False
        rnd = 0
        cfg = base_cfg
        while not finished and len(gen) < base_cfg.max_new_tokens:
            budget = base_cfg.max_new_tokens - len(gen)
            base = prompt + gen
            if controller is not None:  # 0. this round's depths (γ1 = 0: one target step, no drafts)
                g1, g2 = controller.choose(problem, ControlState(round=rnd, generated_tokens=len(gen), budget_left=budget))
                if not controller.bounds.allows(g1, g2):
                    raise ConfigError(f"controller chose (γ1, γ2) = ({g1}, {g2}) outside its bounds {controller.bounds}")
                cfg = replace(base_cfg, gamma1=g1, gamma2=g2 if base_cfg.uses_sd else base_cfg.gamma2)
                sd_before = (stats.sd_drafts, stats.drafted_tokens, stats.accepted_tokens, _full_passes(stats, cfg))
                times_before = (stats.draft_s, stats.target_s, stats.verify_s)
            # 1. draft W chains of up to γ1 steps; chain w's step j follows its own steps < j.
            chains, draft_secs = self._draft_chains(base, cfg, budget, rnd, stats)
            # 2. the target regenerates every drafted position (+ bonus steps) in ONE batch.
            rows, where = _target_rows(base, chains, budget, eos)
            tb = self.target.generate(rows, self._step_params(cfg, budget, rnd, 0, len(rows), draft=False))
            self._account_target(stats, tb)
            stats.target_step_tokens += sum(len(t.token_ids) for t in tb.outputs)
            targets = [[tb.outputs[where[w, k]] if (w, k) in where else None for k in range(len(c) + 1)]
                       for w, c in enumerate(chains)]
            # 3. verify every (branch, position) pair in ONE batch.
            verdicts: list[list[bool]] = [[] for _ in chains]
            scores: list[list[float]] = [[] for _ in chains]
            vsec = 0.0
            keys = [(w, k) for w, c in enumerate(chains) for k in range(len(c))]
            if keys:
                context = self.target.decode(base[-cfg.context_tokens:])
                pairs = [StepPair(context=context, draft=chains[w][k].text, target=targets[w][k].text) for w, k in keys]
                tv = time.perf_counter()
                flat_v, flat_s = accept(self.verifier, pairs)
                vsec = time.perf_counter() - tv
                stats.verify_s += vsec
                stats.verifier_calls += 1
                for (w, _), v, sc in zip(keys, flat_v, flat_s):
                    verdicts[w].append(v)
                    scores[w].append(sc)
            # 4. keep the branch with the longest accepted prefix (ties: the higher score
            #    sum over it, then the lower index); commit it and the target's next step.
            best = max(range(len(chains)),
                       key=lambda w: (leading_accepts(verdicts[w]), sum(scores[w][:leading_accepts(verdicts[w])]), -w))
            j = leading_accepts(verdicts[best])
            drafts = chains[best]
            commit: list[tuple[str, list[int]]] = [("draft", list(d.token_ids)) for d in drafts[:j]]
            nxt = targets[best][j] if j < len(targets[best]) else None
            if nxt is not None:
                commit.append(("target", list(nxt.token_ids)))
            stats.observe_round(verdicts[best], committed_target_step=nxt is not None)
            if on_round:
                on_round(RoundRecord(
                    index=rnd, prefix_len=len(base), drafts=drafts,
                    targets=[t for t in targets[best] if t is not None], scores=scores[best],
                    accepted=verdicts[best], committed_drafts=j, draft_seconds=draft_secs, target_seconds=tb.seconds,
                    verify_seconds=vsec, branch=best, branches=chains,
                    branch_targets=[[t for t in ts if t is not None] for ts in targets], branch_scores=scores,
                    branch_accepted=verdicts))
            progressed = False
            for source, ids in commit:
                room = cfg.max_new_tokens - len(gen)
                ids = ids[:room]
                if not ids:
                    break
                progressed = True
                gen.extend(ids)
                steps.append((source, ids))
                if on_commit:
                    on_commit(source, ids)
                if ids[-1] in eos:
                    finished = True
                    break
            if controller is not None:
                it, dr, ac, full = (a - b for a, b in zip(
                    (stats.sd_drafts, stats.drafted_tokens, stats.accepted_tokens, _full_passes(stats, cfg)), sd_before))
                controller.update(RoundOutcome(
                    gamma1=cfg.gamma1, gamma2=cfg.gamma2 if cfg.uses_sd else 0, verdicts=tuple(verdicts[best]),
                    accepted_steps=j, committed_tokens=sum(len(ids) for _, ids in commit), sd_iterations=it,
                    sd_drafted=dr, sd_accepted=ac, sd_full=full,
                    draft_s=stats.draft_s - times_before[0], target_s=stats.target_s - times_before[1],
                    verify_s=stats.verify_s - times_before[2]))
            if not progressed:  # the engine produced nothing (context full): stop, never spin
                break
            rnd += 1
        text = self.target.decode(gen, skip_special_tokens=True)
        finish: Literal["eos", "length"] = "eos" if gen and gen[-1] in eos else "length"
        return DecodeResult(token_ids=gen, text=text, finish=finish, steps=steps)

    def _draft_chains(self, base: list[int], cfg: DecodeConfig, budget: int, rnd: int,
                      stats: DecodeStats) -> tuple[list[list[Generation]], list[float]]:
        """W draft chains; position j of every live chain is one batched draft call per
        temperature group (branch 0 at ``temperature``, branches >= 1 sampled at
        ``branch_temperature`` when ``temperature`` is 0, each with its own seed)."""
        W = cfg.width
        chains: list[list[Generation]] = [[] for _ in range(W)]
        used = [0] * W
        live = list(range(W))
        secs: list[float] = []
        for j in range(cfg.gamma1):
            live = [w for w in live if used[w] < budget]
            if not live:
                break
            spent = 0.0
            for group in _temperature_groups(live, cfg):
                temp = _branch_temperature(group[0], cfg)
                seeds = None
                if temp > 0:
                    seeds = tuple(_mix(cfg.seed, rnd, j, 1) if w == 0 else _mix(cfg.seed, rnd, j, 1, w) for w in group)
                params = replace(self._step_params(cfg, budget, rnd, j, len(group), draft=True),
                                 temperature=temp, seeds=seeds)
                b = self.draft.generate([base + _concat(chains[w]) for w in group], params)
                stats.draft_calls += 1
                stats.draft_s += b.seconds
                spent += b.seconds
                for w, step in zip(group, b.outputs):
                    if not step.token_ids:
                        live.remove(w)
                        continue
                    chains[w].append(step)
                    used[w] += len(step.token_ids)
                    stats.draft_step_tokens += len(step.token_ids)
                    if step.finish == "eos":
                        live.remove(w)
            secs.append(spent)
        return chains, secs

    def _step_params(self, cfg: DecodeConfig, budget: int, rnd: int, pos: int, n: int, *, draft: bool) -> GenParams:
        """Step params; seeds are a pure function of (seed, round, position, role)."""
        count = 1 if draft else n
        seeds = None
        if cfg.temperature > 0:
            role = 1 if draft else 2
            seeds = tuple(_mix(cfg.seed, rnd, pos + k, role) for k in range(count))
        return GenParams(max_tokens=min(cfg.max_step_tokens, budget), stop_at_delimiter=True, delimiter=cfg.delimiter,
                         temperature=cfg.temperature, top_p=cfg.top_p, seeds=seeds, logprobs=cfg.logprobs,
                         num_speculative_tokens=cfg.gamma2 if (cfg.uses_sd and not draft) else 0)

    @staticmethod
    def _account_target(stats: DecodeStats, batch: GenBatch) -> None:
        stats.target_calls += 1
        stats.target_s += batch.seconds
        if batch.sd is not None:
            stats.observe_sd(batch.sd.drafts, batch.sd.drafted_tokens, batch.sd.accepted_tokens, batch.sd.accepted_by_pos)


def _full_passes(stats: DecodeStats, cfg: DecodeConfig) -> int:
    """SD passes so far that accepted all γ2 of this round's draft tokens."""
    k = cfg.gamma2 if cfg.uses_sd else 0
    return stats.sd_accepted_by_pos[k - 1] if 0 < k <= len(stats.sd_accepted_by_pos) else 0


def _branch_temperature(w: int, cfg: DecodeConfig) -> float:
    return cfg.temperature if (w == 0 or cfg.temperature > 0) else cfg.branch_temperature


def _temperature_groups(branches: list[int], cfg: DecodeConfig) -> list[list[int]]:
    groups: dict[float, list[int]] = {}
    for w in branches:
        groups.setdefault(_branch_temperature(w, cfg), []).append(w)
    return list(groups.values())


def _target_rows(base: list[int], chains: list[list[Generation]], budget: int,
                 eos: frozenset[int]) -> tuple[list[list[int]], dict[tuple[int, int], int]]:
    """Distinct target prefixes ``base + chain_w[:k]`` and the row of each (w, k).

    Position k runs for k = 0..len(chain_w); the bonus position k = len(chain_w) is
    skipped when the chain ended the sequence (EOS) or the token budget.
    """
    rows: list[list[int]] = []
    index: dict[tuple[int, ...], int] = {}
    where: dict[tuple[int, int], int] = {}
    for w, chain in enumerate(chains):
        drafted = sum(len(d.token_ids) for d in chain)
        ends = bool(chain) and (chain[-1].finish == "eos" or chain[-1].token_ids[-1] in eos or drafted >= budget)
        for k in range(len(chain) if ends else len(chain) + 1):
            prefix = base + _concat(chain[:k])
            key = tuple(prefix)
            if key not in index:
                index[key] = len(rows)
                rows.append(prefix)
            where[w, k] = index[key]
    return rows, where


def _concat(steps: Sequence[Generation]) -> list[int]:
    out: list[int] = []
    for s in steps:
        out.extend(s.token_ids)
    return out


def _mix(*xs: int) -> int:
    """A deterministic 31-bit seed from integers (splitmix-style)."""
    h = 0x9E3779B97F4A7C15
    for x in xs:
        h ^= (x + 0x9E3779B97F4A7C15 + (h << 6) + (h >> 2)) & 0xFFFFFFFFFFFFFFFF
        h = (h * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    return int(h >> 33)
