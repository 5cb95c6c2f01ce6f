"""The decoder: target alone, target + token-level SD, Lookahead Reasoning (LR) and LR + SD.

:class:`LookaheadDecoder` decodes one prompt (:meth:`~LookaheadDecoder.decode`) or many in
flight (:meth:`~LookaheadDecoder.decode_many`, continuous admission at the round level, DESIGN
§3.7). ``target`` and ``sd`` answers run as one engine call; LR methods run rounds
(:func:`lrtune.round.run_round`, where one round reads top to bottom) over prompts in flight
(:meth:`~LookaheadDecoder.open_slot` / :meth:`~LookaheadDecoder.run_round` /
:meth:`~LookaheadDecoder.close_slot`, which ``lrtune serve`` drives directly); async LR is
:mod:`lrtune.async_lr`. Decoding never prints; it returns ``(result, stats)``.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Sequence
from typing import Literal

from lrtune import round as lr_round
from lrtune import score_round
from lrtune.backends.base import Backend, GenParams, row_counters, time_shares
from lrtune.control import Controller, ProblemInfo, checked_controller
from lrtune.decodeconfig import DecodeConfig
from lrtune.errors import ConfigError, check_count
from lrtune.slots import Decoded, DecodeResult, Failed, PromptResult, PromptState, RoundRecord, stable_digest
from lrtune.stats import BatchStats, DecodeStats
from lrtune.verifiers import Verifier
from lrtune.verifiers.base import wants_draft_scores


class LookaheadDecoder:
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
        results, runnable = _admit(prompts, cfg, max_len, on_done)
        batch = BatchStats(prompts=len(runnable), failed=len(prompts) - len(runnable), max_concurrent=max_concurrent)
        t0 = time.perf_counter()
        if cfg.uses_lr:
            hooks = (on_round, on_commit, on_done)
            self._lookahead_many(
                prompts, runnable, cfg, max_concurrent, controller, verifier, problems, hooks, results, batch
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
            num_speculative_tokens=cfg.sd_gamma2,
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
            shares = time_shares(call, [[k] for k in range(len(group))])
            row_sd = row_counters(call)
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
        hooks: tuple,
        results: list,
        batch: BatchStats,
    ) -> None:
        """Sync LR with continuous admission: up to ``max_concurrent`` prompts run a round
        together; a prompt that ends frees its place. ``hooks``: (on_round, on_commit, on_done)."""
        on_round, on_commit, on_done = hooks
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
        lr_round.run_round(
            self.target,
            self.draft,
            verifier,
            slots,
            on_round=on_round,
            on_commit=on_commit,
            batch=batch or BatchStats(),
        )

    def close_slot(self, slot: PromptState) -> Decoded:
        """The result of a slot that ended (or of what it committed so far)."""
        slot.stats.wall_s = time.perf_counter() - slot.started
        slot.stats.generated_tokens = len(slot.gen)
        text = self.target.decode(slot.gen, skip_special_tokens=True)
        finish: Literal["eos", "length"] = "eos" if slot.gen and slot.gen[-1] in self.target.eos_ids else "length"
        return Decoded(DecodeResult(token_ids=slot.gen, text=text, finish=finish, steps=slot.steps), slot.stats)


def _admit(prompts, cfg: DecodeConfig, max_len: int | None, on_done) -> tuple[list, list[int]]:
    """Per-prompt results with a :class:`Failed` for each prompt that cannot run (empty, or
    longer than ``max_len`` with its budget; ``on_done`` is told at once), and the indices of
    the others."""
    results: list[PromptResult | None] = [None] * len(prompts)
    runnable = []
    for i, ids in enumerate(prompts):
        if not ids:
            results[i] = Failed(ConfigError(f"prompt {i} is empty"))
        elif max_len is not None and cfg.tokens_needed(len(ids)) > max_len:
            results[i] = Failed(
                ConfigError(
                    f"prompt {i} ({len(ids)} tokens) + max_new_tokens ({cfg.max_new_tokens}) does not fit "
                    f"max_model_len {max_len}; lower --max-new-tokens or raise --max-model-len"
                )
            )
        else:
            runnable.append(i)
            continue
        if on_done:
            on_done(i, results[i])
    return results, runnable


def _refuse_async_extras(on_round, controller) -> None:
    """Async LR keeps no round records and fixed depths: refuse ``on_round`` and a controller."""
    if on_round is not None:
        raise ConfigError("async LR keeps no round records (on_round): use --schedule sync")
    if controller is not None:
        raise ConfigError("a controller drives sync LR rounds; async LR keeps fixed depths")
