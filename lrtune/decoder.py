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
from dataclasses import dataclass, field
from typing import Literal

from lrtune.backends.base import Backend, GenBatch, Generation, GenParams
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
                 config: DecodeConfig | None = None) -> None:
        self.target = target
        self.draft = draft
        self.verifier = verifier
        self.config = (config or DecodeConfig()).validate()

    def decode(self, prompt_ids: Sequence[int], config: DecodeConfig | None = None,
               on_round: Callable[[RoundRecord], None] | None = None,
               on_commit: Callable[[str, list[int]], None] | None = None) -> tuple[DecodeResult, DecodeStats]:
        """Decode one prompt; ``on_round`` sees every LR round, ``on_commit`` every committed step."""
        cfg = (config or self.config).validate()
        if not prompt_ids:
            raise ConfigError("empty prompt")
        if cfg.uses_lr and self.draft is None:
            raise ConfigError(f"method {cfg.method!r} needs a draft model")
        stats = DecodeStats(prompt_tokens=len(prompt_ids))
        t0 = time.perf_counter()
        if cfg.uses_lr:
            result = self._lookahead(list(prompt_ids), cfg, stats, on_round, on_commit)
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
    def _lookahead(self, prompt: list[int], cfg: DecodeConfig, stats: DecodeStats, on_round, on_commit) -> DecodeResult:
        assert self.draft is not None
        gen: list[int] = []
        steps: list[tuple[str, list[int]]] = []
        eos = self.target.eos_ids | self.draft.eos_ids
        finished = False
        rnd = 0
        while not finished and len(gen) < cfg.max_new_tokens:
            budget = cfg.max_new_tokens - len(gen)
            base = prompt + gen
            # 1. draft up to γ1 steps, sequentially, each conditioned on the ones before.
            drafts: list[Generation] = []
            draft_secs: list[float] = []
            drafted = 0
            for j in range(cfg.gamma1):
                if drafted >= budget:
                    break
                # Same cap as the target's step at this position, so identical models agree;
                # tokens past the budget are cut at commit time.
                b = self.draft.generate([base + _concat(drafts)], self._step_params(cfg, budget, rnd, j, 0, draft=True))
                stats.draft_calls += 1
                stats.draft_s += b.seconds
                draft_secs.append(b.seconds)
                step = b.outputs[0]
                if not step.token_ids:
                    break
                drafts.append(step)
                drafted += len(step.token_ids)
                stats.draft_step_tokens += len(step.token_ids)
                if step.finish == "eos":
                    break
            # 2. the target regenerates every drafted position in one batch (+ the bonus step).
            ends = bool(drafts) and (drafts[-1].finish == "eos" or drafted >= budget)
            n_targets = len(drafts) if ends else len(drafts) + 1
            prefixes = [base + _concat(drafts[:k]) for k in range(n_targets)]
            tb = self.target.generate(prefixes, self._step_params(cfg, budget, rnd, 0, n_targets, draft=False))
            self._account_target(stats, tb)
            targets = tb.outputs
            stats.target_step_tokens += sum(len(t.token_ids) for t in targets)
            # 3. verify all drafted positions in one batch.
            verdicts: list[bool] = []
            scores: list[float] = []
            vsec = 0.0
            if drafts:
                context = self.target.decode(base[-cfg.context_tokens:])
                pairs = [StepPair(context=context, draft=d.text, target=t.text) for d, t in zip(drafts, targets)]
                tv = time.perf_counter()
                verdicts, scores = accept(self.verifier, pairs)
                vsec = time.perf_counter() - tv
                stats.verify_s += vsec
                stats.verifier_calls += 1
            # 4. commit the accepted draft prefix, then the target's step.
            j = leading_accepts(verdicts)
            commit: list[tuple[str, list[int]]] = [("draft", list(d.token_ids)) for d in drafts[:j]]
            if j < len(targets):
                commit.append(("target", list(targets[j].token_ids)))
            stats.observe_round(verdicts, committed_target_step=j < len(targets))
            if on_round:
                on_round(RoundRecord(index=rnd, prefix_len=len(base), drafts=drafts, targets=targets, scores=scores,
                                     accepted=verdicts, committed_drafts=j, draft_seconds=draft_secs,
                                     target_seconds=tb.seconds, verify_seconds=vsec))
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
            if not progressed:  # the engine produced nothing (context full): stop, never spin
                break
            rnd += 1
        text = self.target.decode(gen, skip_special_tokens=True)
        finish: Literal["eos", "length"] = "eos" if gen and gen[-1] in eos else "length"
        return DecodeResult(token_ids=gen, text=text, finish=finish, steps=steps)

    def _step_params(self, cfg: DecodeConfig, budget: int, rnd: int, pos: int, n: int, *, draft: bool) -> GenParams:
        """Step params; seeds are a pure function of (seed, round, position, role)."""
        count = 1 if draft else n
        seeds = None
        if cfg.temperature > 0:
            role = 1 if draft else 2
            seeds = tuple(_mix(cfg.seed, rnd, pos + k, role) for k in range(count))
        return GenParams(max_tokens=min(cfg.max_step_tokens, budget), stop_at_delimiter=True, delimiter=cfg.delimiter,
                         temperature=cfg.temperature, top_p=cfg.top_p, seeds=seeds,
                         num_speculative_tokens=cfg.gamma2 if (cfg.uses_sd and not draft) else 0)

    @staticmethod
    def _account_target(stats: DecodeStats, batch: GenBatch) -> None:
        stats.target_calls += 1
        stats.target_s += batch.seconds
        if batch.sd is not None:
            stats.observe_sd(batch.sd.drafts, batch.sd.drafted_tokens, batch.sd.accepted_tokens, batch.sd.accepted_by_pos)


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
