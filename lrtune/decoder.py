"""Lookahead Reasoning decoder (sync, paper Algorithm 1) with token-level SD inside steps.

One round, with committed ids ``P`` (prompt + generated so far)::

    draft:    ŝ1 = D(P), ŝ2 = D(P ŝ1), ..., ŝd = D(P ŝ1..ŝ(d-1))      d <= γ1 sequential steps
    target:   s1 = T(P), s2 = T(P ŝ1), ..., s(d+1) = T(P ŝ1..ŝd)          ONE batched call
    verify:   v_i = V(ŝi, si) for i = 1..d                                 ONE batched call
    commit:   j = number of leading accepted v_i; P <- P ŝ1..ŝj s(j+1)

So a round commits ``j + 1`` steps (the target's step always follows the accepted draft
prefix — the *bonus-step rule*), and the speedup model ``lrtune.speedup.f_sync`` uses
exactly this: E[committed] = (1 - α1^(γ1+1)) / (1 - α1), time = γ1·c1 + b(γ1+1).
The bonus target step s(d+1) is skipped when ŝd ended the sequence (the target's EOS) or
the token budget, since nothing can follow it; a draft-only EOS just ends the draft chain.
The answer ends on the target's EOS ids only, and a pair where exactly one of ŝi, si ends the
sequence is rejected without asking the verifier (its text, without special tokens, may match).
With ``method="lr+sd"`` the target's steps are produced by an engine that runs token-level
speculative decoding with γ2 draft tokens, so the two speedups multiply.

Token ids are the state (DESIGN §3.4): committed ids are the draft's or target's own
ids, never re-tokenized text. Decoding never prints; it returns ``(result, stats)``.
"""

from __future__ import annotations

import copy
import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Annotated, Literal

from annotated_types import Interval
from pydantic import StringConstraints

from lrtune.backends.base import (Backend, GenBatch, Generation, GenParams, SDCounters, add_counters, per_row,
                                  split_counters)
from lrtune.reuse import joined_step, matched_tokens, row_params, split_scores, whole_draft
from lrtune.control import Controller, ControlState, ProblemInfo, RoundOutcome
from lrtune import schema
from lrtune.errors import ConfigError
from lrtune.schema import STRICT, Count, Gamma, Seed, Size
from lrtune.stats import BatchStats, DecodeStats, leading_accepts
from lrtune.steps import DEFAULT_DELIMITER, split_steps
from lrtune.verifiers import StepPair, Verifier, accept
from lrtune.verifiers.base import DraftScores, wants_draft_scores
from lrtune.rounds import DRAFT, ends_apart, mix_seed, step_pair, step_params

Method = Literal["target", "sd", "lr", "lr+sd"]
METHODS: tuple[str, ...] = ("target", "sd", "lr", "lr+sd")
GAMMA_MAX = 16
DRAFT_TOP_K = 20  # top-k logprobs per draft token where draft steps are scored (DraftScores.draft_entropy)


@dataclass
class DecodeConfig:
    """How to decode one prompt. Each field's type states its range (:mod:`lrtune.schema`);
    :meth:`validate` checks them and the rules between options."""

    __pydantic_config__ = STRICT

    method: Method = field(default="lr+sd", metadata={"help": "target | sd | lr | lr+sd"})
    gamma1: Gamma = field(default=3, metadata={"help": f"draft steps per LR round (1..{GAMMA_MAX})"})
    gamma2: Gamma = field(default=4, metadata={"help": f"draft tokens per SD iteration (1..{GAMMA_MAX}); sd and lr+sd"})
    max_new_tokens: Count = field(default=512, metadata={"help": "generated-token budget per prompt"})
    max_step_tokens: Count = field(default=128, metadata={"help": "a step ends after this many tokens at the latest"})
    temperature: Annotated[float, Interval(ge=0, le=100)] = field(default=0.0, metadata={"help": "0 = greedy"})
    top_p: Annotated[float, Interval(gt=0, le=1)] = field(default=1.0, metadata={"help": "nucleus sampling mass (temperature > 0)"})
    seed: Seed = field(default=0, metadata={"help": "seed of all sampling (per round and position)"})
    delimiter: Annotated[str, StringConstraints(min_length=1, max_length=64)] = field(default=DEFAULT_DELIMITER, metadata={"help": "step delimiter"})
    context_tokens: Size = field(default=256, metadata={"help": "tokens of the solution so far shown to the verifier (the problem statement is always shown whole)"})
    width: Annotated[int, Interval(ge=1, le=8)] = field(default=1, metadata={"help": "W: draft branches per LR round (each up to gamma1 steps)"})
    logprobs: bool = field(default=False, metadata={"help": "keep per-token logprobs of LR steps (for collect features)"})
    async_lr: bool = field(default=False, metadata={"help": "pipelined (async) LR: target steps start as soon as their draft prefix exists", "flag": "--async"})
    branch_temperature: Annotated[float, Interval(gt=0, le=100)] = field(default=0.8, metadata={"help": "sampling temperature of branches >= 1 when temperature is 0"})
    early_abort: bool = field(default=False, metadata={"help": "sync LR, width 1: judge each position as soon as its target step ends and stop the target rows a rejection makes useless (positions after a rejection then get no verdict)"})
    score_drafts: bool = field(default=False, metadata={"help": "sync LR: score each draft step with the target's log-probabilities, read off the prefill of the target row that follows it (StepPair.draft_scores; always on when the verifier reads them)"})
    reuse_drafts: bool = field(default=False, metadata={"help": "sync LR, greedy, width 1: one prefill of the draft chain on the target finds the leading tokens of each draft step that are the target's own greedy choice; each target row starts after them (a step the target would write token for token needs no row). Outputs unchanged (lrtune.reuse)"})

    @property
    def uses_lr(self) -> bool:
        return self.method in ("lr", "lr+sd")

    @property
    def uses_sd(self) -> bool:
        return self.method in ("sd", "lr+sd")

    def validate(self) -> DecodeConfig:
        """The schema (types, ranges, choices) and the rules between options; returns self."""
        schema.check(self)
        if self.async_lr and self.width > 1:
            raise ConfigError("async LR drafts one branch (width 1)")
        if self.early_abort and (self.width > 1 or self.async_lr):
            raise ConfigError("early abort runs with sync LR and one branch (width 1, no --async)")
        if self.reuse_drafts and (self.width > 1 or self.async_lr or self.temperature > 0):
            raise ConfigError("draft-prefix reuse needs sync LR, one branch and greedy decoding "
                              "(width 1, no --async, temperature 0)")
        if self.reuse_drafts and self.logprobs:
            raise ConfigError("draft-prefix reuse keeps no per-token logprobs of the reused target tokens: "
                              "drop --logprobs or --reuse-drafts")
        if self.score_drafts and self.async_lr:
            raise ConfigError("draft-step scores come from sync LR's target rows: drop --async")
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
    # the verifier's exact inputs, per branch and position (clean text, DESIGN §3.6)
    pairs: list[list[StepPair]] = field(default_factory=list)


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
    target backend's business (its engine for γ2). :meth:`decode_many` decodes many
    prompts together (DESIGN §3.7); :meth:`decode` is that with one prompt.
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
               problem: ProblemInfo | None = None,
               verifier: Verifier | None = None) -> tuple[DecodeResult, DecodeStats]:
        """Decode one prompt; ``on_round`` sees every LR round, ``on_commit`` every committed
        step; ``controller`` (default ``self.controller``) picks (γ1, γ2) before each round;
        ``verifier`` (default ``self.verifier``) judges this call's pairs."""
        cfg = (config or self.config).validate()
        if not prompt_ids:
            raise ConfigError("empty prompt")
        if cfg.uses_lr and cfg.async_lr:
            _refuse_async_extras(on_round, controller if controller is not None else self.controller)
            if wants_draft_scores(verifier if verifier is not None else self.verifier):
                raise ConfigError("this verifier reads the target's scores of each draft step, which sync LR's "
                                  "target rows provide: drop --async")
            if self.draft is None:
                raise ConfigError(f"method {cfg.method!r} needs a draft model")
            from lrtune.async_lr import decode_async

            stats = DecodeStats(prompt_tokens=len(prompt_ids))
            t0 = time.perf_counter()
            text = problem.text if problem is not None else self.target.decode(prompt_ids, skip_special_tokens=True)
            gen, steps, _ = decode_async(self, list(prompt_ids), cfg, stats, on_commit,
                                         verifier if verifier is not None else self.verifier, text)
            result = DecodeResult(token_ids=gen, text=self.target.decode(gen, skip_special_tokens=True),
                                  finish="eos" if gen and gen[-1] in self.target.eos_ids else "length", steps=steps)
            stats.wall_s = time.perf_counter() - t0
            stats.generated_tokens = len(gen)
            return result, stats
        outs, _ = self.decode_many(
            [prompt_ids], cfg, controller=controller, verifier=verifier, problems=None if problem is None else [problem],
            on_round=None if on_round is None else (lambda _i, r: on_round(r)),
            on_commit=None if on_commit is None else (lambda _i, src, ids: on_commit(src, ids)))
        if isinstance(outs[0], Exception):
            raise outs[0]
        return outs[0]

    def decode_many(self, prompts: Sequence[Sequence[int]], config: DecodeConfig | None = None, *,
                    max_concurrent: int = 1, max_len: int | None = None,
                    controller: Controller | None = None, problems: Sequence[ProblemInfo] | None = None,
                    verifier: Verifier | None = None, on_round: Callable[[int, RoundRecord], None] | None = None,
                    on_commit: Callable[[int, str, list[int]], None] | None = None,
                    on_done: Callable[[int, tuple[DecodeResult, DecodeStats] | Exception], None] | None = None,
                    ) -> tuple[list[tuple[DecodeResult, DecodeStats] | Exception], BatchStats]:
        """Decode ``prompts`` with up to ``max_concurrent`` in flight (DESIGN §3.7).

        Sync LR: each round, the draft steps at position j of every in-flight prompt are one
        draft call, every target row of every prompt is one target call, and every pair one
        verifier call; a prompt that finishes frees its slot for the next waiting one
        (continuous batching at the round level). ``target``/``sd``: one engine call whose
        engine keeps ``max_concurrent`` sequences in flight. Greedy outputs equal decoding
        each prompt alone.

        Per-prompt stats are exact counts; a shared call's seconds (and, on vLLM, its SD
        counters) are split over its prompts in proportion to the tokens each generated in
        it; a prompt's ``wall_s`` runs from its admission to its end. A prompt that cannot
        run (empty, or longer than ``max_len`` with its budget) gets a :class:`ConfigError` in
        its place and the others go on. ``on_done(i, result)`` fires as each prompt ends.
        Returns the per-prompt results in input order and the :class:`BatchStats` of the set.
        """
        cfg = (config or self.config).validate()
        if max_concurrent < 1:
            raise ConfigError(f"max_concurrent must be >= 1, got {max_concurrent}")
        if cfg.uses_lr and cfg.async_lr:
            if max_concurrent > 1:
                raise ConfigError("async LR decodes one prompt at a time: use --max-concurrent 1 or sync LR")
            _refuse_async_extras(on_round, controller if controller is not None else self.controller)
            return self._decode_each_async(prompts, cfg, problems, on_commit, on_done, verifier)
        controller = controller if controller is not None else self.controller
        verifier = verifier if verifier is not None else self.verifier
        if cfg.uses_lr and self.draft is None:
            raise ConfigError(f"method {cfg.method!r} needs a draft model")
        results: list[tuple[DecodeResult, DecodeStats] | Exception | None] = [None] * len(prompts)
        runnable = []
        for i, ids in enumerate(prompts):
            need = len(ids) + cfg.max_new_tokens + (cfg.max_step_tokens if cfg.uses_lr else 0)
            if not ids:
                results[i] = ConfigError(f"prompt {i} is empty")
            elif max_len is not None and need > max_len:
                results[i] = ConfigError(
                    f"prompt {i} ({len(ids)} tokens) + max_new_tokens ({cfg.max_new_tokens}) does not fit max_model_len "
                    f"{max_len}; lower --max-new-tokens or raise --max-model-len")
            else:
                runnable.append(i)
                continue
            if on_done:
                on_done(i, results[i])
        batch = BatchStats(prompts=len(runnable), failed=len(prompts) - len(runnable), max_concurrent=max_concurrent)
        t0 = time.perf_counter()
        if cfg.uses_lr:
            self._lookahead_many(prompts, runnable, cfg, max_concurrent, controller, verifier, problems, on_round,
                                 on_commit, on_done, results, batch)
        else:
            self._plain_many(prompts, runnable, cfg, max_concurrent, on_commit, on_done, results, batch)
        batch.wall_s = time.perf_counter() - t0
        batch.generated_tokens = sum(len(r[0].token_ids) for r in results if isinstance(r, tuple))
        return results, batch  # type: ignore[return-value]

    def _decode_each_async(self, prompts, cfg, problems, on_commit, on_done, verifier):
        """Async LR: the prompts one after another (``problems[i]``: the verifier's problem statement)."""
        results, batch = [], BatchStats(prompts=len(prompts), max_concurrent=1)
        t0 = time.perf_counter()
        for i, ids in enumerate(prompts):
            try:
                r = self.decode(ids, cfg, verifier=verifier, problem=problems[i] if problems is not None else None,
                                on_commit=None if on_commit is None else (
                                    lambda src, step, _i=i: on_commit(_i, src, step)))
            except ConfigError as e:
                r = e
            results.append(r)
            if on_done:
                on_done(i, r)
        batch.wall_s = time.perf_counter() - t0
        batch.generated_tokens = sum(len(r[0].token_ids) for r in results if isinstance(r, tuple))
        batch.failed = sum(isinstance(r, Exception) for r in results)
        batch.prompts = len(results) - batch.failed
        return results, batch

    # ---- baselines: target alone / target + token-level SD --------------------------
    def _plain_params(self, cfg: DecodeConfig) -> GenParams:
        return GenParams(max_tokens=cfg.max_new_tokens, stop_at_delimiter=False, delimiter=cfg.delimiter,
                         temperature=cfg.temperature, top_p=cfg.top_p, seeds=(cfg.seed,),
                         num_speculative_tokens=cfg.gamma2 if cfg.uses_sd else 0)

    def _plain_many(self, prompts, runnable: list[int], cfg: DecodeConfig, max_concurrent: int, on_commit, on_done,
                    results: list, batch: BatchStats) -> None:
        """target / sd: every runnable prompt in one engine call (``max_concurrent`` in
        flight), or, with one in flight, one call per prompt (exact per-prompt times)."""
        groups = [[i] for i in runnable] if max_concurrent == 1 else ([runnable] if runnable else [])
        for group in groups:
            t0 = time.perf_counter()
            call = self.target.generate([list(prompts[i]) for i in group], [self._plain_params(cfg)] * len(group),
                                        max_concurrent=max_concurrent)
            batch.observe_call("target", len(group))
            shares = _time_shares(call, [[k] for k in range(len(group))])
            row_sd = _row_counters(call)
            for k, i in enumerate(group):
                out = call.outputs[k]
                stats = DecodeStats(prompt_tokens=len(prompts[i]), target_calls=1, target_s=shares[k])
                stats.observe_sd(row_sd[k] if row_sd is not None else None)
                ids = list(out.token_ids)
                if on_commit:
                    on_commit(i, "target", ids)
                stats.wall_s = call.row_seconds[k] if call.row_seconds else time.perf_counter() - t0
                stats.generated_tokens = len(ids)
                results[i] = (DecodeResult(token_ids=ids, text=self.target.decode(ids, skip_special_tokens=True),
                                           finish="eos" if out.finish == "eos" else "length", steps=[("target", ids)]),
                              stats)
                if on_done:
                    on_done(i, results[i])

    # ---- Lookahead Reasoning ---------------------------------------------------------
    def _lookahead_many(self, prompts, runnable: list[int], cfg: DecodeConfig, max_concurrent: int, controller,
                        verifier: Verifier, problems, on_round, on_commit, on_done, results: list, batch: BatchStats) -> None:
        eos = self.target.eos_ids  # the answer ends on the target's EOS only (a draft-only one just ends a chain)
        waiting = list(runnable)
        active: list[_Slot] = []
        while waiting or active:
            while waiting and len(active) < max_concurrent:  # admit (continuous batching)
                i = waiting.pop(0)
                ids = list(prompts[i])
                ctl = controller
                if controller is not None and max_concurrent > 1:
                    ctl = copy.copy(controller)  # per-prompt state; fitted parts are shared
                prob = problems[i] if problems is not None else None
                if prob is None:
                    prob = ProblemInfo(id=f"prompt-{stable_digest(ids)}",
                                       text=self.target.decode(ids, skip_special_tokens=True), prompt_tokens=len(ids))
                active.append(_Slot(index=i, prompt=ids, stats=DecodeStats(prompt_tokens=len(ids)), controller=ctl,
                                    problem=prob, started=time.perf_counter()))
            self._round(active, cfg, verifier, eos, on_round, on_commit, batch)
            for slot in [s for s in active if s.done]:
                active.remove(slot)
                slot.stats.wall_s = time.perf_counter() - slot.started
                slot.stats.generated_tokens = len(slot.gen)
                text = self.target.decode(slot.gen, skip_special_tokens=True)
                finish: Literal["eos", "length"] = "eos" if slot.gen and slot.gen[-1] in eos else "length"
                results[slot.index] = (DecodeResult(token_ids=slot.gen, text=text, finish=finish, steps=slot.steps),
                                       slot.stats)
                if on_done:
                    on_done(slot.index, results[slot.index])

    def _round(self, slots: list[_Slot], base_cfg: DecodeConfig, verifier: Verifier, eos: frozenset[int], on_round,
               on_commit, batch: BatchStats) -> None:
        """One LR round for every slot: batched drafts per position, one target call, one
        verifier call, then each slot commits its accepted prefix and the target's step."""
        for s in slots:  # 0. this round's depths (γ1 = 0: no drafts, the target runs to the horizon)
            self._plan(s, base_cfg)
        # 1. draft W chains of up to γ1 steps; chain w's step j follows its own steps < j.
        self._draft_chains(slots, batch, verifier)
        # 2. the target regenerates every drafted position (+ bonus steps) of every slot in ONE call
        #    (early abort: each position is judged as its row ends).
        early = self._target_call(slots, eos, verifier, batch)
        # 3. verify every other (slot, branch, position) pair in ONE call.
        self._verify(slots, early, verifier, batch)
        for s in slots:  # 4. commit
            self._commit(s, eos, on_round, on_commit)

    def _plan(self, s: _Slot, base_cfg: DecodeConfig) -> None:
        """The slot's round config: the controller's (γ1, γ2), within its bounds; γ1 = 0 runs
        the target to the controller's horizon."""
        s.budget = base_cfg.max_new_tokens - len(s.gen)
        s.base = s.prompt + s.gen
        s.cfg = base_cfg
        s.horizon = None
        if s.controller is not None:
            g1, g2 = s.controller.choose(s.problem, ControlState(round=s.rnd, generated_tokens=len(s.gen),
                                                                 budget_left=s.budget))
            if not s.controller.bounds.allows(g1, g2):
                raise ConfigError(f"controller chose (γ1, γ2) = ({g1}, {g2}) outside its bounds "
                                  f"{s.controller.bounds}")
            s.cfg = replace(base_cfg, gamma1=g1, gamma2=g2 if base_cfg.uses_sd else base_cfg.gamma2)
            if g1 == 0:
                h = s.controller.horizon()
                s.horizon = s.budget if h is None else max(1, min(h, s.budget))
        s.chains = [[] for _ in range(s.cfg.width)]
        s.targets = []  # this round's target steps (set by the target call)
        s.draft_secs = []
        s.verdicts, s.scores, s.pairs, s.verify_s, s.judged = [[] for _ in s.chains], [[] for _ in s.chains], [], 0.0, {}
        s.matched, s.chain_scores, s.prefill_s = [], [], 0.0

    def _target_call(self, slots: list[_Slot], eos: frozenset[int], verifier: Verifier,
                     batch: BatchStats) -> dict[int, _Slot]:
        """Every slot's target rows in one call; returns the slots judged during it (early abort).
        With draft-prefix reuse, one prefill call first finds the target's own draft tokens
        (:meth:`_reuse_prefill`) and the rows start after them."""
        self._reuse_prefill(slots, batch)
        rows: list[list[int]] = []
        params: list[GenParams] = []
        owner: list[list[int]] = []  # row indices of each slot
        wheres = []
        joins: dict[int, tuple[list[int], GenParams]] = {}  # reuse: row -> (draft tokens it continues, step params)
        early = {id(s): s for s in slots if s.cfg.early_abort and s.chains[0]}
        for s in slots:
            last = self._prejudge(s, verifier, batch) if id(s) in early and s.matched else None
            srows, where, froms, reused = _target_rows(s.base, s.chains, s.budget, eos, s.matched or None, last)
            owner.append(list(range(len(rows), len(rows) + len(srows))))
            p = step_params(s.cfg, s.budget, s.rnd, 0, len(srows), draft=False)
            if s.horizon is not None:  # γ1 = 0: one uninterrupted SD run, not one call per step
                p = replace(p, max_tokens=s.horizon, stop_at_delimiter=False)
            srow_params = per_row(p, len(srows))
            if s.matched:  # reuse: scores came from the prefill; rows continue after the reused tokens
                for r, (q, (k, m)) in enumerate(zip(srow_params, reused)):
                    if m:
                        joins[len(rows) + r] = (list(s.chains[0][k].token_ids[:m]), q)
                        srow_params[r] = row_params(q, m)
            elif s.cfg.score_drafts or wants_draft_scores(verifier):  # row k + 1 prefills draft step k: score it
                srow_params = [replace(q, score_from=f) for q, f in zip(srow_params, froms)]
            rows += srows
            params += srow_params
            wheres.append(where)

        def joined(row: int, out: Generation) -> Generation:
            if row not in joins:
                return out
            ids, q = joins[row]
            return joined_step(ids, out, q, self.target.decode, eos)

        on_done = self._early_judge(slots, owner, wheres, verifier, batch, joined) if early else None
        tb = self.target.generate(rows, params, on_done=on_done) if rows else GenBatch(outputs=[], seconds=0.0)
        if rows:
            batch.observe_call("target", len(rows))
        shares = _time_shares(tb, owner)
        row_sd = _row_counters(tb)
        for s, mine, share, where in zip(slots, owner, shares, wheres):
            s.target_s = share + s.prefill_s
            s.round_sd = add_counters([row_sd[r] for r in mine]) if row_sd is not None else None
            if mine:  # a slot whose rows reuse or an early rejection made unnecessary was not in the call
                s.stats.observe_target_call(share, s.round_sd)
            s.stats.target_step_tokens += sum(len(tb.outputs[r].token_ids) for r in mine)
            s.stats.aborted_target_rows += sum(tb.outputs[r].finish == "aborted" for r in mine)
            s.targets = [[joined(mine[where[w, k]], tb.outputs[mine[where[w, k]]]) if (w, k) in where
                          else whole_draft(c[k]) if (s.matched and k < len(c) and s.matched[k] == len(c[k].token_ids))
                          else None for k in range(len(c) + 1)]
                         for w, c in enumerate(s.chains)]
            if s.chains and s.chains[0]:
                s.stats.target_tokens_at_drafts += sum(len(t.token_ids) for t in s.targets[0][:len(s.chains[0])]
                                                       if t is not None)
            if s.matched:
                s.stats.reused_target_tokens += sum(
                    min(m, len(t.token_ids)) for m, t in zip(s.matched, s.targets[0]) if t is not None)
        return early

    def _reuse_prefill(self, slots: list[_Slot], batch: BatchStats) -> None:
        """Draft-prefix reuse (:mod:`lrtune.reuse`): one target row per slot prefills its
        chain ``P ŝ1..ŝd`` and scores every draft token; sets each slot's ``matched[k]``
        (leading tokens of ŝk that are the target's argmax), ``chain_scores`` and ``prefill_s``."""
        todo = [s for s in slots if s.cfg.reuse_drafts and s.chains and s.chains[0]]
        if not todo:
            return
        params = [replace(step_params(s.cfg, s.budget, s.rnd, 0, 1, draft=False), max_tokens=1,
                          stop_at_delimiter=False, score_from=len(s.base)) for s in todo]
        tb = self.target.generate([s.base + _concat(s.chains[0]) for s in todo], params)
        batch.observe_call("target", len(todo))
        row_sd = _row_counters(tb)
        for i, (s, share) in enumerate(zip(todo, _time_shares(tb, [[i] for i in range(len(todo))]))):
            s.chain_scores = split_scores(tb.outputs[i].prompt_scores or [], [len(c.token_ids) for c in s.chains[0]])
            s.matched = [_reusable(matched_tokens(x), c, self.target.eos_ids)
                         for x, c in zip(s.chain_scores, s.chains[0])]
            s.prefill_s = share
            s.stats.observe_target_call(share, row_sd[i] if row_sd is not None else None)

    def _prejudge(self, s: _Slot, verifier: Verifier, batch: BatchStats) -> int | None:
        """Early abort with reuse: judge the positions whose target step is the draft step
        itself (no row) before the call, in order; returns the first rejected one (the rows
        after it are useless), or None."""
        for k, (m, step) in enumerate(zip(s.matched, s.chains[0])):
            if m < len(step.token_ids):
                continue
            if not self._judge_one(s, k, whole_draft(step), verifier, batch):
                return k
        return None

    def _judge_one(self, s: _Slot, k: int, target: Generation, verifier: Verifier, batch: BatchStats) -> bool:
        """Early abort: the verdict on the slot's draft step k against ``target``, judged alone
        (kept in ``s.judged[k]``)."""
        pair = self._pair(s, 0, k, target)
        apart = ends_apart(s.chains[0][k].token_ids, target.token_ids, self.target.eos_ids)
        tv = time.perf_counter()
        (ok,), (score,) = accept(verifier, [pair], [apart])
        s.verify_s += time.perf_counter() - tv
        if not apart:
            s.stats.verifier_calls += 1
            batch.observe_call("verify", 1)
        s.judged[k] = (ok, score, pair)
        return ok

    def _verify(self, slots: list[_Slot], early: dict[int, _Slot], verifier: Verifier, batch: BatchStats) -> None:
        """Verdicts of every slot's pairs: one verifier call for all slots not judged early (a pair
        whose steps end apart, :func:`ends_apart`, is rejected unasked); an early slot's verdicts
        run up to its first position whose row was stopped."""
        for s in early.values():
            n = len(s.chains[0])
            judged = [s.judged[k] for k in range(next((k for k in range(n) if k not in s.judged), n))]
            s.verdicts, s.scores, s.pairs = [[v for v, _, _ in judged]], [[c for _, c, _ in judged]], [[p for *_, p in judged]]
            s.stats.verify_s += s.verify_s
        keys = [(s, w, k) for s in slots if id(s) not in early for w, c in enumerate(s.chains) for k in range(len(c))]
        for s in slots:
            if id(s) not in early:
                s.pairs = [[self._pair(s, w, k, s.targets[w][k]) for k in range(len(c))] for w, c in enumerate(s.chains)]
        if not keys:
            return
        pairs = [s.pairs[w][k] for s, w, k in keys]
        apart = [ends_apart(s.chains[w][k].token_ids, s.targets[w][k].token_ids, self.target.eos_ids)
                 for s, w, k in keys]  # one step ends the answer, the other not: rejected unasked
        asked = len(pairs) - sum(apart)
        tv = time.perf_counter()
        flat_v, flat_s = accept(verifier, pairs, apart)
        vsec = time.perf_counter() - tv
        if asked:
            batch.observe_call("verify", asked)
        for (s, w, _), v, sc, a in zip(keys, flat_v, flat_s, apart):
            s.verdicts[w].append(v)
            s.scores[w].append(sc)
            s.verify_s += 0.0 if a else vsec / asked
        for s in {id(s): s for s, _, _ in keys}.values():
            s.stats.verify_s += s.verify_s
        for s in {id(s): s for (s, _, _), a in zip(keys, apart) if not a}.values():
            s.stats.verifier_calls += 1

    def _early_judge(self, slots: list[_Slot], owner: list[list[int]], wheres, verifier: Verifier,
                     batch: BatchStats, joined: Callable[[int, Generation], Generation]):
        """The target call's ``on_done`` for early abort: when the row of (slot, position k)
        ends, judge draft step k against it at once; on a rejection, stop the slot's rows of
        the positions after k (their steps can no longer be committed). ``joined(row, out)``:
        the row's target step (with draft-prefix reuse, the reused tokens and the row's)."""
        if getattr(verifier, "backend", None) is self.target:
            raise ConfigError(f"early abort judges steps while the target engine runs, but verifier {verifier.name!r} "
                              "runs on the target's own engine: give it another model (--judge-model) or drop early abort")
        if wants_draft_scores(verifier) and not all(s.matched for s in slots if s.cfg.early_abort and s.chains[0]):
            raise ConfigError(f"early abort judges position k when its target row ends, before the row that scores "
                              f"draft step k does; verifier {verifier.name!r} reads those scores: add --reuse-drafts "
                              "(its prefill scores every draft step first) or drop early abort")
        row_of = {}
        for s, mine, where in zip(slots, owner, wheres):
            if s.cfg.early_abort and s.chains[0]:
                for (w, k), r in where.items():
                    row_of[mine[r]] = (s, k, [mine[where[0, j]] for j in range(k + 1, len(s.chains[0]) + 1)
                                              if (0, j) in where])

        def on_done(row: int, out: Generation) -> list[int]:
            hit = row_of.get(row)
            if hit is None or hit[1] >= len(hit[0].chains[0]):  # not early, or the bonus position
                return []
            s, k, later = hit
            return [] if self._judge_one(s, k, joined(row, out), verifier, batch) else later
        return on_done

    def _pair(self, s: _Slot, w: int, k: int, target: Generation) -> StepPair:
        """Branch ``w``'s pair at position ``k`` with the target's step there: the target saw
        the committed steps, then this branch's drafts before ``k``; the draft step's scores
        come from the row of position ``k + 1``, which prefilled it (when it was scored), or
        with draft-prefix reuse from the prefill of the whole chain."""
        if s.chain_scores:  # reuse: the prefill scored the whole chain
            scores = DraftScores.of(s.chain_scores[k], s.chains[w][k])
        else:
            follows = s.targets[w][k + 1] if (s.targets and k + 1 < len(s.targets[w])) else None
            scores = DraftScores.of(follows.prompt_scores, s.chains[w][k]) if follows is not None else None
        return step_pair(self.target, s.problem.text, s.gen + _concat(s.chains[w][:k]), s.cfg.context_tokens,
                         s.chains[w][k].token_ids, target.token_ids, scores)

    def _commit(self, s: _Slot, eos: frozenset[int], on_round, on_commit) -> None:
        """Keep the branch with the longest accepted prefix (ties: the higher score sum over
        it, then the lower index); commit it and the target's next step."""
        cfg = s.cfg
        best = max(range(len(s.chains)),
                   key=lambda w: (leading_accepts(s.verdicts[w]), sum(s.scores[w][:leading_accepts(s.verdicts[w])]), -w))
        j = leading_accepts(s.verdicts[best])
        drafts = s.chains[best]
        commit: list[tuple[str, list[int]]] = [("draft", list(d.token_ids)) for d in drafts[:j]]
        nxt = s.targets[best][j] if j < len(s.targets[best]) else None
        if nxt is not None:
            pieces = [list(nxt.token_ids)]
            if s.horizon is not None:  # a γ1 = 0 run: commit (and stream) it step by step
                pieces = split_steps(nxt.token_ids, self.target.decode, delimiter=cfg.delimiter, eos_ids=eos,
                                     max_step_tokens=cfg.max_step_tokens) or pieces
            commit += [("target", ids) for ids in pieces]
        s.stats.observe_round(s.verdicts[best], committed_target_steps=len(commit) - j)
        if on_round:
            on_round(s.index, RoundRecord(
                index=s.rnd, prefix_len=len(s.base), drafts=drafts,
                targets=[t for t in s.targets[best] if t is not None], scores=s.scores[best],
                accepted=s.verdicts[best], committed_drafts=j, draft_seconds=s.draft_secs, target_seconds=s.target_s,
                verify_seconds=s.verify_s, branch=best, branches=s.chains,
                branch_targets=[[t for t in ts if t is not None] for ts in s.targets], branch_scores=s.scores,
                branch_accepted=s.verdicts, pairs=s.pairs))
        progressed = False
        for source, ids in commit:
            ids = ids[:cfg.max_new_tokens - len(s.gen)]
            if not ids:
                break
            progressed = True
            s.gen.extend(ids)
            s.steps.append((source, ids))
            if on_commit:
                on_commit(s.index, source, ids)
            if ids[-1] in eos:
                s.done = True
                break
        if s.controller is not None:
            s.controller.update(RoundOutcome(
                gamma1=cfg.gamma1, gamma2=cfg.gamma2 if cfg.uses_sd else 0, verdicts=tuple(s.verdicts[best]),
                accepted_steps=j, committed_tokens=sum(len(ids) for _, ids in commit),
                sd=s.round_sd or SDCounters(), draft_s=sum(s.draft_secs), target_s=s.target_s, verify_s=s.verify_s))
        if not progressed or len(s.gen) >= cfg.max_new_tokens:  # context full: stop, never spin
            s.done = True
        s.rnd += 1

    def _draft_chains(self, slots: list[_Slot], batch: BatchStats, verifier: Verifier | None = None) -> None:
        """W draft chains per slot; position j of every live chain of every slot is ONE
        draft call (branch 0 at ``temperature``, branches >= 1 sampled at
        ``branch_temperature`` when ``temperature`` is 0, each with its own seed). Where draft
        steps are scored, each also returns its top-k logprobs (the draft's own confidence,
        :class:`DraftScores`)."""
        used = {id(s): [0] * s.cfg.width for s in slots}
        live = {id(s): list(range(s.cfg.width)) for s in slots}
        for j in range(max((s.cfg.gamma1 for s in slots), default=0)):
            items: list[tuple[_Slot, int]] = []
            for s in slots:
                if j < s.cfg.gamma1:
                    live[id(s)] = [w for w in live[id(s)] if used[id(s)][w] < s.budget]
                    items += [(s, w) for w in live[id(s)]]
            if not items:
                break
            params = []
            for s, w in items:
                temp = _branch_temperature(w, s.cfg)
                seeds = None
                if temp > 0:
                    seeds = (mix_seed(s.cfg.seed, s.rnd, j, DRAFT) if w == 0 else mix_seed(s.cfg.seed, s.rnd, j, DRAFT, w),)
                q = replace(step_params(s.cfg, s.budget, s.rnd, j, 1, draft=True), temperature=temp, seeds=seeds)
                if s.cfg.score_drafts or wants_draft_scores(verifier):
                    q = replace(q, top_logprobs=DRAFT_TOP_K)
                params.append(q)
            b = self.draft.generate([s.base + _concat(s.chains[w]) for s, w in items], params)
            batch.observe_call("draft", len(items))
            by_slot: dict[int, list[int]] = {}
            for r, (s, _) in enumerate(items):
                by_slot.setdefault(id(s), []).append(r)
            members = [s for s in slots if id(s) in by_slot]
            for s, share in zip(members, _time_shares(b, [by_slot[id(s)] for s in members])):
                s.stats.draft_calls += 1
                s.stats.draft_s += share
                s.draft_secs.append(share)
            for (s, w), step in zip(items, b.outputs):
                if not step.token_ids:
                    live[id(s)].remove(w)
                    continue
                s.chains[w].append(step)
                used[id(s)][w] += len(step.token_ids)
                s.stats.draft_step_tokens += len(step.token_ids)
                if step.finish == "eos" or step.token_ids[-1] in self.target.eos_ids:  # no step after it
                    live[id(s)].remove(w)


@dataclass(eq=False)
class _Slot:
    """One prompt in flight in :meth:`LookaheadDecoder.decode_many` and its round state."""

    index: int
    prompt: list[int]
    stats: DecodeStats
    controller: Controller | None
    problem: ProblemInfo | None
    started: float
    gen: list[int] = field(default_factory=list)
    steps: list[tuple[str, list[int]]] = field(default_factory=list)
    rnd: int = 0
    done: bool = False
    # the current round
    cfg: DecodeConfig | None = None
    budget: int = 0
    base: list[int] = field(default_factory=list)
    chains: list[list[Generation]] = field(default_factory=list)
    draft_secs: list[float] = field(default_factory=list)
    targets: list[list[Generation | None]] = field(default_factory=list)
    target_s: float = 0.0
    round_sd: SDCounters | None = None
    pairs: list[list[StepPair]] = field(default_factory=list)
    verdicts: list[list[bool]] = field(default_factory=list)
    scores: list[list[float]] = field(default_factory=list)
    verify_s: float = 0.0
    horizon: int | None = None  # γ1 = 0: tokens the target runs uninterrupted this round
    judged: dict[int, tuple[bool, float, StepPair]] = field(default_factory=dict)  # early abort: position -> verdict
    matched: list[int] = field(default_factory=list)  # reuse: leading target-argmax tokens of each draft step
    chain_scores: list[list] = field(default_factory=list)  # reuse: the prefill's scores of each draft step
    prefill_s: float = 0.0  # reuse: this slot's share of the prefill call


def _time_shares(call: GenBatch, rows_of: list[list[int]]) -> list[float]:
    """A shared call's seconds split over groups of its rows in proportion to the tokens
    each group generated (equal shares over the groups with rows when none generated any)."""
    tokens = [sum(len(call.outputs[r].token_ids) for r in rows) for rows in rows_of]
    total = sum(tokens)
    n = sum(1 for rows in rows_of if rows)
    return [call.seconds * (t / total if total else (1 / n if rows else 0.0)) for t, rows in zip(tokens, rows_of)]


def _row_counters(call: GenBatch) -> list[SDCounters | None] | None:
    """Per-row SD counters: the backend's, else its call total split by generated tokens."""
    if call.row_sd is not None or call.sd is None:
        return call.row_sd
    return split_counters(call.sd, [len(o.token_ids) for o in call.outputs])


def stable_digest(data: str | Sequence[int]) -> str:
    """A stable 8-hex-digit id of a text or a token sequence (the same in every process,
    unlike ``hash``)."""
    text = data if isinstance(data, str) else ",".join(map(str, data))
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def _branch_temperature(w: int, cfg: DecodeConfig) -> float:
    return cfg.temperature if (w == 0 or cfg.temperature > 0) else cfg.branch_temperature


def _target_rows(base: list[int], chains: list[list[Generation]], budget: int, eos: frozenset[int],
                 matched: list[int] | None = None, last: int | None = None,
                 ) -> tuple[list[list[int]], dict[tuple[int, int], int], list[int | None], list[tuple[int, int]]]:
    """Distinct target prefixes ``base + chain_w[:k]``, the row of each (w, k), where each
    row's last draft step starts (None for the row of position 0), and each row's
    ``(k, reused)``.

    Position k runs for k = 0..len(chain_w); the bonus position k = len(chain_w) is
    skipped when the chain ended the sequence (the target's ``eos``) or the token budget. With
    draft-prefix reuse (``matched``, chain 0 only) position k < len(chain) continues after ``matched[k]``
    draft tokens and needs no row when that is the whole draft step; ``last``: no rows
    after this position (an early verdict already rejected it).
    """
    rows: list[list[int]] = []
    froms: list[int | None] = []
    reused: list[tuple[int, int]] = []
    index: dict[tuple[int, ...], int] = {}
    where: dict[tuple[int, int], int] = {}
    for w, chain in enumerate(chains):
        drafted = sum(len(d.token_ids) for d in chain)
        ends = bool(chain) and (chain[-1].token_ids[-1] in eos or drafted >= budget)
        for k in range(len(chain) if ends else len(chain) + 1):
            if last is not None and k > last:
                break
            prefix = base + _concat(chain[:k])
            m = matched[k] if (matched is not None and k < len(chain)) else 0
            if m and m >= len(chain[k].token_ids):
                continue  # the target's step is the draft step itself
            if m:
                prefix += list(chain[k].token_ids[:m])
            key = tuple(prefix)
            if key not in index:
                index[key] = len(rows)
                rows.append(prefix)
                froms.append(len(prefix) - len(chain[k - 1].token_ids) if (k and not m) else None)
                reused.append((k, m))
            where[w, k] = index[key]
    return rows, where, froms, reused


def _reusable(matched: int, step: Generation, eos: frozenset[int]) -> int:
    """Draft-prefix reuse: the matched tokens of a draft step the target's step may start with;
    a step cut by a draft-only EOS (not in the target's ``eos``) keeps one token back, so its
    row runs on past the point where the target's step does not end."""
    n = len(step.token_ids)
    return min(matched, n - 1) if step.finish == "eos" and step.token_ids[-1] not in eos else matched


def _refuse_async_extras(on_round, controller) -> None:
    """Async LR keeps no round records and fixed depths: refuse ``on_round`` and a controller."""
    if on_round is not None:
        raise ConfigError("async LR keeps no round records (on_round): use sync LR (drop --async)")
    if controller is not None:
        raise ConfigError("a controller drives sync LR rounds; async LR keeps fixed depths")


def _concat(steps: Sequence[Generation]) -> list[int]:
    out: list[int] = []
    for s in steps:
        out.extend(s.token_ids)
    return out
