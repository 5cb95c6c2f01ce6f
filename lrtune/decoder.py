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
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Literal


from lrtune import score_round
from lrtune.backends.base import Backend, GenBatch, Generation, GenParams, add_counters, per_row
from lrtune.decodeconfig import GAMMA_MAX, METHODS, DecodeConfig, Method  # noqa: F401  (re-exported)
from lrtune.roundstate import (
    Decoded,
    DecodeResult,
    Failed,
    PromptResult,
    PromptState,
    RoundRecord,
    RoundState,
    _concat,  # noqa: F401
    _refuse_async_extras,
    _row_counters,
    _target_rows,
    _time_shares,
    stable_digest,
)
from lrtune.reuse import joined_step, row_params, whole_draft
from lrtune.control import Controller, ControlState, ProblemInfo, checked_choice, checked_controller
from lrtune.errors import ConfigError, check_count
from lrtune.stats import BatchStats, DecodeStats
from lrtune.verifiers import Verifier
from lrtune.verifiers.base import wants_draft_scores, wants_target_scores
from lrtune.round_commit import RoundCommit
from lrtune.round_draft import DRAFT_TOP_K, RoundDrafting, doubted  # noqa: F401  (re-exported)
from lrtune.round_verify import RoundVerification
from lrtune.rounds import step_params


class LookaheadDecoder(RoundDrafting, RoundVerification, RoundCommit):
    """Decode with ``target`` alone, target+SD, LR, or LR+SD (see module docstring).

    ``draft`` is the step drafter (needed for ``lr``/``lr+sd``); token-level SD is the
    target backend's business (its engine for γ2). :meth:`decode_many` decodes many
    prompts together (DESIGN §3.7); :meth:`decode` is that with one prompt.
    """

    def __init__(
        self,
        target: Backend,
        draft: Backend | None,
        verifier: Verifier,
        config: DecodeConfig | None = None,
        controller: Controller | None = None,
    ) -> None:
        for role, backend in (("target", target), ("draft", draft)):
            if backend is not None and not isinstance(backend, Backend):
                raise ConfigError(
                    f"the {role} is not a backend: {type(backend).__name__} lacks part of lrtune.backends.base.Backend"
                )
        if not isinstance(verifier, Verifier):
            raise ConfigError(
                f"not a verifier: {type(verifier).__name__} lacks name, threshold or score (lrtune.verifiers.Verifier)"
            )
        self.target = target
        self.draft = draft
        self.verifier = verifier
        self.config = (config or DecodeConfig()).validate()
        # picks (γ1, γ2) per round for sync LR (None: the config's)
        self.controller = checked_controller(controller) if controller is not None else None

    def decode(
        self,
        prompt_ids: Sequence[int],
        config: DecodeConfig | None = None,
        on_round: Callable[[RoundRecord], None] | None = None,
        on_commit: Callable[[str, list[int]], None] | None = None,
        controller: Controller | None = None,
        problem: ProblemInfo | None = None,
        verifier: Verifier | None = None,
    ) -> tuple[DecodeResult, DecodeStats]:
        """Decode one prompt; ``on_round`` sees every LR round, ``on_commit`` every committed
        step; ``controller`` (default ``self.controller``) picks (γ1, γ2) before each round;
        ``verifier`` (default ``self.verifier``) judges this call's pairs."""
        cfg = (config or self.config).validate()
        if not prompt_ids:
            raise ConfigError("empty prompt")
        if cfg.uses_lr and cfg.async_lr:
            _refuse_async_extras(on_round, controller if controller is not None else self.controller)
            if wants_draft_scores(verifier if verifier is not None else self.verifier):
                raise ConfigError(
                    "this verifier reads the target's scores of each draft step, which sync LR's "
                    "target rows provide: use --schedule sync (not async)"
                )
            if self.draft is None:
                raise ConfigError(f"method {cfg.method!r} needs a draft model")
            from lrtune.async_lr import decode_async

            stats = DecodeStats(prompt_tokens=len(prompt_ids))
            t0 = time.perf_counter()
            text = problem.text if problem is not None else self.target.decode(prompt_ids, skip_special_tokens=True)
            gen, steps, _ = decode_async(
                self, list(prompt_ids), cfg, stats, on_commit, verifier if verifier is not None else self.verifier, text
            )
            result = DecodeResult(
                token_ids=gen,
                text=self.target.decode(gen, skip_special_tokens=True),
                finish="eos" if gen and gen[-1] in self.target.eos_ids else "length",
                steps=steps,
            )
            stats.wall_s = time.perf_counter() - t0
            stats.generated_tokens = len(gen)
            return result, stats
        outs, _ = self.decode_many(
            [prompt_ids],
            cfg,
            controller=controller,
            verifier=verifier,
            problems=None if problem is None else [problem],
            on_round=None if on_round is None else (lambda _i, r: on_round(r)),
            on_commit=None if on_commit is None else (lambda _i, src, ids: on_commit(src, ids)),
        )
        if isinstance(outs[0], Failed):
            raise outs[0].error
        return outs[0]

    def decode_many(
        self,
        prompts: Sequence[Sequence[int]],
        config: DecodeConfig | None = None,
        *,
        max_concurrent: int = 1,
        max_len: int | None = None,
        controller: Controller | None = None,
        problems: Sequence[ProblemInfo] | None = None,
        verifier: Verifier | None = None,
        on_round: Callable[[int, RoundRecord], None] | None = None,
        on_commit: Callable[[int, str, list[int]], None] | None = None,
        on_done: Callable[[int, PromptResult], None] | None = None,
    ) -> tuple[list[PromptResult], BatchStats]:
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
        run (empty, or longer than ``max_len`` with its budget) gets a :class:`Failed` (its
        :class:`ConfigError`) in its place and the others go on; the rest are :class:`Decoded`
        ``(result, stats)``. ``on_done(i, result)`` fires as each prompt ends. Returns the
        per-prompt results in input order and the :class:`BatchStats` of the set.
        """
        cfg = (config or self.config).validate()
        check_count("max_concurrent", max_concurrent, 1)
        if cfg.uses_lr and cfg.async_lr:
            if max_concurrent > 1:
                raise ConfigError("async LR decodes one prompt at a time: use --max-concurrent 1 or sync LR")
            _refuse_async_extras(on_round, controller if controller is not None else self.controller)
            return self._decode_each_async(prompts, cfg, problems, on_commit, on_done, verifier)
        controller = checked_controller(controller) if controller is not None else self.controller
        verifier = verifier if verifier is not None else self.verifier
        if cfg.uses_lr and self.draft is None:
            raise ConfigError(f"method {cfg.method!r} needs a draft model")
        if cfg.uses_lr and (cfg.score_rounds or "score" in getattr(controller, "round_kinds", ())):
            score_round.check_one_sided(verifier)
        results: list[PromptResult | None] = [None] * len(prompts)
        runnable = []
        for i, ids in enumerate(prompts):
            if not ids:
                results[i] = Failed(ConfigError(f"prompt {i} is empty"))
            elif max_len is not None and cfg.tokens_needed(len(ids)) > max_len:
                results[i] = Failed(
                    ConfigError(
                        f"prompt {i} ({len(ids)} tokens) + max_new_tokens ({cfg.max_new_tokens}) does not fit "
                        f"max_model_len "
                        f"{max_len}; lower --max-new-tokens or raise --max-model-len"
                    )
                )
            else:
                runnable.append(i)
                continue
            if on_done:
                on_done(i, results[i])
        batch = BatchStats(prompts=len(runnable), failed=len(prompts) - len(runnable), max_concurrent=max_concurrent)
        t0 = time.perf_counter()
        if cfg.uses_lr:
            self._lookahead_many(
                prompts,
                runnable,
                cfg,
                max_concurrent,
                controller,
                verifier,
                problems,
                on_round,
                on_commit,
                on_done,
                results,
                batch,
            )
        else:
            self._plain_many(prompts, runnable, cfg, max_concurrent, on_commit, on_done, results, batch)
        batch.wall_s = time.perf_counter() - t0
        batch.generated_tokens = sum(len(r.result.token_ids) for r in results if isinstance(r, Decoded))
        return results, batch  # type: ignore[return-value]

    def _decode_each_async(self, prompts, cfg, problems, on_commit, on_done, verifier):
        """Async LR: the prompts one after another (``problems[i]``: the verifier's problem statement)."""
        results, batch = [], BatchStats(prompts=len(prompts), max_concurrent=1)
        t0 = time.perf_counter()
        for i, ids in enumerate(prompts):
            try:
                r = self.decode(
                    ids,
                    cfg,
                    verifier=verifier,
                    problem=problems[i] if problems is not None else None,
                    on_commit=None if on_commit is None else (lambda src, step, _i=i: on_commit(_i, src, step)),
                )
            except ConfigError as e:
                r = Failed(e)
            else:
                r = Decoded(*r)
            results.append(r)
            if on_done:
                on_done(i, r)
        batch.wall_s = time.perf_counter() - t0
        batch.generated_tokens = sum(len(r.result.token_ids) for r in results if isinstance(r, Decoded))
        batch.failed = sum(isinstance(r, Failed) for r in results)
        batch.prompts = len(results) - batch.failed
        return results, batch

    # ---- baselines: target alone / target + token-level SD --------------------------
    def plain_params(self, cfg: DecodeConfig) -> GenParams:
        """The engine params of a ``target``/``sd`` answer in one run (no step stops)."""
        return GenParams(
            max_tokens=cfg.max_new_tokens,
            stop_at_delimiter=False,
            delimiter=cfg.delimiter,
            temperature=cfg.temperature,
            top_p=cfg.top_p,
            seeds=(cfg.seed,),
            num_speculative_tokens=cfg.gamma2 if cfg.uses_sd else 0,
        )

    def _plain_many(
        self,
        prompts,
        runnable: list[int],
        cfg: DecodeConfig,
        max_concurrent: int,
        on_commit,
        on_done,
        results: list,
        batch: BatchStats,
    ) -> None:
        """target / sd: every runnable prompt in one engine call (``max_concurrent`` in
        flight), or, with one in flight, one call per prompt (exact per-prompt times)."""
        groups = [[i] for i in runnable] if max_concurrent == 1 else ([runnable] if runnable else [])
        for group in groups:
            t0 = time.perf_counter()
            call = self.target.generate(
                [list(prompts[i]) for i in group], [self.plain_params(cfg)] * len(group), max_concurrent=max_concurrent
            )
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
                results[i] = Decoded(
                    DecodeResult(
                        token_ids=ids,
                        text=self.target.decode(ids, skip_special_tokens=True),
                        finish="eos" if out.finish == "eos" else "length",
                        steps=[("target", ids)],
                    ),
                    stats,
                )
                if on_done:
                    on_done(i, results[i])

    # ---- Lookahead Reasoning ---------------------------------------------------------
    def _lookahead_many(
        self,
        prompts,
        runnable: list[int],
        cfg: DecodeConfig,
        max_concurrent: int,
        controller,
        verifier: Verifier,
        problems,
        on_round,
        on_commit,
        on_done,
        results: list,
        batch: BatchStats,
    ) -> None:
        waiting = list(runnable)
        active: list[PromptState] = []
        while waiting or active:
            while waiting and len(active) < max_concurrent:  # admit (continuous batching)
                i = waiting.pop(0)
                prob = problems[i] if problems is not None else None
                ctl = controller
                if controller is not None and max_concurrent > 1:
                    ctl = copy.copy(controller)  # per-prompt state; fitted parts are shared
                active.append(self.open_slot(i, prompts[i], cfg, problem=prob, controller=ctl))
            self.run_round(active, verifier, on_round=on_round, on_commit=on_commit, batch=batch)
            for slot in [s for s in active if s.done]:
                active.remove(slot)
                results[slot.index] = self.close_slot(slot)
                if on_done:
                    on_done(slot.index, results[slot.index])

    # ---- one prompt in flight: open, run rounds, close (decode_many, lrtune serve) ----------
    def open_slot(
        self,
        index: int,
        prompt: Sequence[int],
        cfg: DecodeConfig,
        *,
        problem: ProblemInfo | None = None,
        controller: Controller | None | Literal["copy"] = "copy",
        horizon: int | None = None,
    ) -> PromptState:
        """A prompt in flight with its own config ``cfg`` (a server mixes methods and depths in
        one round). ``controller``: the slot's own, or ``"copy"``, a copy of the decoder's
        (LR methods only). A ``target``/``sd`` slot runs the target (with SD) ``horizon``
        tokens per round (None: its whole budget in one round; 0: one step per round, up to
        ``max_step_tokens``)."""
        ids = list(prompt)
        if controller == "copy":
            controller = copy.copy(self.controller) if (self.controller is not None and cfg.uses_lr) else None
        if problem is None:
            problem = ProblemInfo(
                id=f"prompt-{stable_digest(ids)}",
                text=self.target.decode(ids, skip_special_tokens=True),
                prompt_tokens=len(ids),
            )
        return PromptState(
            index=index,
            prompt=ids,
            stats=DecodeStats(prompt_tokens=len(ids)),
            controller=controller if cfg.uses_lr else None,
            problem=problem,
            started=time.perf_counter(),
            cfg=cfg,
            horizon=horizon,
        )

    def run_round(
        self,
        slots: list[PromptState],
        verifier: Verifier | None = None,
        *,
        on_round: Callable[[int, RoundRecord], None] | None = None,
        on_commit: Callable[[int, str, list[int]], None] | None = None,
        batch: BatchStats | None = None,
    ) -> None:
        """One round of every open slot, each with its own config: one draft call per
        position, one target call, one verifier call (``verifier``: the decoder's by default).
        A slot that ended has ``done`` set; :meth:`close_slot` gives its result."""
        verifier = verifier if verifier is not None else self.verifier
        if any(s.cfg.uses_lr and s.cfg.score_rounds for s in slots):
            score_round.check_one_sided(verifier)
        self._round(slots, verifier, self.target.eos_ids, on_round, on_commit, batch or BatchStats())

    def close_slot(self, slot: PromptState) -> Decoded:
        """The result of a slot that ended (or of what it committed so far)."""
        slot.stats.wall_s = time.perf_counter() - slot.started
        slot.stats.generated_tokens = len(slot.gen)
        text = self.target.decode(slot.gen, skip_special_tokens=True)
        finish: Literal["eos", "length"] = "eos" if slot.gen and slot.gen[-1] in self.target.eos_ids else "length"
        return Decoded(DecodeResult(token_ids=slot.gen, text=text, finish=finish, steps=slot.steps), slot.stats)

    def _round(
        self,
        slots: list[PromptState],
        verifier: Verifier,
        eos: frozenset[int],
        on_round,
        on_commit,
        batch: BatchStats,
    ) -> None:
        """One LR round for every slot: batched drafts per position, one target call, one
        verifier call, then each slot commits its accepted prefix and the target's step."""
        for s in slots:  # 0. this round's depths (γ1 = 0: no drafts, the target runs to the horizon)
            self._plan(s)
        # 1. draft W chains of up to γ1 steps; chain w's step j follows its own steps < j.
        self._draft_chains(slots, batch, verifier)
        scored = [s for s in slots if s.round.cfg.score_rounds]  # the controller may pick the kind per slot
        if scored:  # 2'. one prefill scores every chain; judge one-sided; the target's own step
            # (a verifier that reads no target score of a draft step, e.g. a draft-only router,
            # needs no prefill: the target's own step then prefills the accepted steps itself)
            self._reuse_prefill(
                scored if wants_target_scores(verifier) else [s for s in scored if s.round.cfg.reuse_drafts], batch
            )
            score_round.judge_and_continue(self, scored, verifier, eos, batch)
        generated = [s for s in slots if not s.round.cfg.score_rounds]
        if generated:
            # 2. the target regenerates every drafted position (+ bonus steps) of every slot in ONE call
            #    (early abort: each position is judged as its row ends).
            early = self._target_call(generated, eos, verifier, batch)
            # 3. verify every other (slot, branch, position) pair in ONE call.
            self._verify(generated, early, verifier, batch)
        for s in slots:  # 4. commit
            self._commit(s, eos, on_round, on_commit)

    def _plan(self, s: PromptState) -> None:
        """The slot's round config: the controller's (γ1, γ2), within its bounds, and the kind
        of round when it picks one (``round_kind``: lr or score); γ1 = 0 runs the target to
        the controller's horizon. A ``target``/``sd`` slot runs the target alone (with SD)
        for ``s.horizon`` tokens."""
        base_cfg = s.cfg
        budget = base_cfg.max_new_tokens - len(s.gen)
        if not base_cfg.uses_lr:  # horizon 0: one step per round (a step-sized row, as LR's target rows)
            cfg = base_cfg.for_round(0, base_cfg.gamma2 if base_cfg.uses_sd else 0, "sync")
            horizon = None if s.horizon == 0 else budget if s.horizon is None else max(1, min(s.horizon, budget))
            s.round = RoundState.start(cfg, budget, s.prompt + s.gen, horizon)
            return
        cfg, horizon = base_cfg, None
        if s.controller is not None:
            g1, g2 = checked_choice(
                s.controller,
                s.controller.choose(
                    s.problem, ControlState(round=s.rnd, generated_tokens=len(s.gen), budget_left=budget)
                ),
            )
            if not s.controller.bounds.allows(g1, g2):
                raise ConfigError(f"controller chose (γ1, γ2) = ({g1}, {g2}) outside its bounds {s.controller.bounds}")
            kind = s.controller.round_kind() if g1 > 0 and callable(getattr(s.controller, "round_kind", None)) else None
            schedule = base_cfg.schedule
            if kind is not None:  # lr: the target generates its own steps; score: a prefill judges them
                if kind not in ("lr", "score"):
                    raise ConfigError(f"controller chose round kind {kind!r}; expected lr or score")
                schedule = "score" if kind == "score" else "sync" if base_cfg.score_rounds else base_cfg.schedule
            cfg = base_cfg.for_round(g1, g2 if base_cfg.uses_sd else base_cfg.gamma2, schedule)
            if g1 == 0:
                h = s.controller.horizon()
                horizon = budget if h is None else max(1, min(h, budget))
        s.round = RoundState.start(cfg, budget, s.prompt + s.gen, horizon)

    def _target_call(
        self, slots: list[PromptState], eos: frozenset[int], verifier: Verifier, batch: BatchStats
    ) -> dict[int, PromptState]:
        """Every slot's target rows in one call; returns the slots judged during it (early abort).
        With draft-prefix reuse, one prefill call first finds the target's own draft tokens
        (:meth:`_reuse_prefill`) and the rows start after them."""
        self._reuse_prefill(slots, batch)
        rows: list[list[int]] = []
        params: list[GenParams] = []
        owner: list[list[int]] = []  # row indices of each slot
        wheres = []
        joins: dict[int, tuple[list[int], GenParams]] = {}  # reuse: row -> (draft tokens it continues, step params)
        early = {id(s): s for s in slots if s.round.cfg.early_abort and s.round.chains[0]}
        for s in slots:
            last = self._prejudge(s, verifier, batch) if id(s) in early and s.round.matched else None
            srows, where, froms, reused = _target_rows(
                s.round.base, s.round.chains, s.round.budget, eos, s.round.matched or None, last
            )
            owner.append(list(range(len(rows), len(rows) + len(srows))))
            p = step_params(s.round.cfg, s.round.budget, s.rnd, 0, len(srows), draft=False)
            if s.round.horizon is not None:  # γ1 = 0: one uninterrupted SD run, not one call per step
                p = replace(p, max_tokens=s.round.horizon, stop_at_delimiter=False)
            srow_params = per_row(p, len(srows))
            if s.round.matched:  # reuse: scores came from the prefill; rows continue after the reused tokens
                for r, (q, (k, m)) in enumerate(zip(srow_params, reused)):
                    if m:
                        joins[len(rows) + r] = (list(s.round.chains[0][k].token_ids[:m]), q)
                        srow_params[r] = row_params(q, m)
            elif s.round.cfg.score_drafts or wants_draft_scores(verifier):  # row k + 1 prefills draft step k: score it
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
            s.round.target_s = share + s.round.prefill_s
            s.round.round_sd = add_counters([row_sd[r] for r in mine]) if row_sd is not None else None
            if mine:  # a slot whose rows reuse or an early rejection made unnecessary was not in the call
                s.stats.observe_target_call(share, s.round.round_sd)
            s.stats.target_step_tokens += sum(len(tb.outputs[r].token_ids) for r in mine)
            s.stats.aborted_target_rows += sum(tb.outputs[r].finish == "aborted" for r in mine)
            s.round.targets = [
                [
                    joined(mine[where[w, k]], tb.outputs[mine[where[w, k]]])
                    if (w, k) in where
                    else whole_draft(c[k])
                    if (s.round.matched and k < len(c) and s.round.matched[k] == len(c[k].token_ids))
                    else None
                    for k in range(len(c) + 1)
                ]
                for w, c in enumerate(s.round.chains)
            ]
            if s.round.chains and s.round.chains[0]:
                s.stats.target_tokens_at_drafts += sum(
                    len(t.token_ids) for t in s.round.targets[0][: len(s.round.chains[0])] if t is not None
                )
            if s.round.matched:
                s.stats.reused_target_tokens += sum(
                    min(m, len(t.token_ids)) for m, t in zip(s.round.matched, s.round.targets[0]) if t is not None
                )
        return early
