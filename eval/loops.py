"""The decode loops of an evaluate run: engines started once, then every method on every
problem (latency mode: interleaved per problem; throughput mode: method after method with
many problems in flight), each decode recorded as it ends."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lrtune.batchcost import measure_batch_cost
from lrtune.control import Bounds
from lrtune.errors import ConfigError
from lrtune.pricing import Pricing, priced
from lrtune.slots import Failed
from lrtune.runfiles import ProgressBar, log

from lrtune.eval import metrics
from lrtune.eval.config import EvalConfig
from lrtune.eval.methods import MethodSpec
from lrtune.eval.records import RECORDS, THROUGHPUT, append_record, load_records


@dataclass
class _Engines:
    """The loaded decoder and what each method plugs into its decode calls."""

    dec: Any  # lrtune.api.Decoder
    controller: Any  # adaptive / best-fixed / oracle methods only (None: no --controller)
    verifiers: dict  # MethodSpec.verifier (None: the configured verifier) -> Verifier
    controllers: dict = dataclasses.field(default_factory=dict)  # MethodSpec.controller (adaptive/c=) -> controller
    pricing: Pricing = dataclasses.field(default_factory=Pricing)  # the run's plan (run_pricing)

    def verifier(self, spec: MethodSpec):
        return self.verifiers[spec.verifier]

    kinds: dict = dataclasses.field(default_factory=dict)  # (controller, round kinds) -> its copy that picks them

    def controller_for(self, spec: MethodSpec):
        """The spec's controller; an ``adaptive/score`` or ``adaptive/lr+score`` row gets one
        controller for the whole run that may pick those kinds (so state it carries across
        problems stays), built with the run's plan and the row's verifier's scoring needs (a
        verifier that reads no target score of a draft step makes no scoring call)."""
        ctl = self.controllers[spec.controller] if spec.controller else self.controller
        if spec.control != "adaptive" or ctl is None:
            return ctl
        from lrtune.pricing import needs_scoring_call

        scoring = needs_scoring_call(self.verifiers.get(spec.verifier))
        key = (spec.controller, spec.round_kinds, scoring)
        if key not in self.kinds:
            out = with_round_kinds(ctl, spec.round_kinds)
            if "score" in getattr(out, "round_kinds", ()) and hasattr(out, "pricing"):
                out = priced(out, dataclasses.replace(out.pricing, scoring_call=scoring))
            self.kinds[key] = out
        return self.kinds[key]


def uses_draft_model(cfg: EvalConfig, specs) -> bool:
    return any(s.kind in ("lr", "lr+sd") for s in specs) or (
        any(s.kind in ("sd", "lr+sd") for s in specs) and cfg.models.sd_method == "draft"
    )


def with_round_kinds(ctl, kinds: tuple[str, ...]):
    """``ctl`` built again to pick the round ``kinds`` (``ctl`` itself when it picks none and
    only LR rounds are asked for); ConfigError for a controller that cannot pick kinds."""
    if tuple(kinds) == ("lr",) and tuple(getattr(ctl, "round_kinds", ("lr",))) == ("lr",):
        return ctl
    if not hasattr(ctl, "round_kinds") or not callable(getattr(ctl, "derive", None)):
        raise ConfigError(
            f"controller {getattr(ctl, 'name', type(ctl).__name__)!r} cannot pick the kind of a round "
            "(adaptive/score, adaptive/lr+score): use --controller bandit or a learned controller"
        )
    return ctl.derive(round_kinds=tuple(kinds))


def run_pricing(cfg: EvalConfig, specs) -> Pricing:
    """The run's pricing plan, decided once before any model loads: ``--profile``'s costs, the
    shared SD engine's draft count (the engine the decoder will start,
    :func:`lrtune.api.shared_spec_tokens`; 0 without one) and the highest α1 the run's verifier's
    calibration admits (:func:`lrtune.pricing.admitted_acceptance`)."""
    from lrtune.build import shared_spec_tokens
    from lrtune.pricing import admitted_acceptance, plan

    # the decoder is built for lr+sd (so it always loads the draft) and loads every method's engines
    shared = cfg.models.backend == "vllm" and shared_spec_tokens(
        cfg.models,
        dataclasses.replace(cfg.decode, method="lr+sd"),
        has_draft=True,
        load_all_methods=uses_draft_model(cfg, specs),
    )
    base = plan(profile=cfg.options.profile, engine_drafts=int(shared or 0))
    # what the run's verifier's calibration admits (its checkpoint, at its own threshold)
    ceiling = (
        1.0 if cfg.models.verification.threshold is not None else admitted_acceptance(cfg.models.verification.parsed)
    )
    return dataclasses.replace(base, alpha1_max=ceiling)


def resolve_auto(cfg: EvalConfig, specs, pricing: Pricing) -> list:
    """``specs`` with every ``auto`` row resolved (:mod:`policies.auto`) from ``--profile``'s
    measured SD, the run's plan and what its verifier promises; before any model loads. An
    adaptive choice runs the run's ``--controller``, or :data:`policies.auto.CONTROLLER` without one."""
    from lrtune.build import auto_choice
    from lrtune.eval.methods import AUTO, resolved_auto
    from lrtune.policies.auto import CONTROLLER as AUTO_CONTROLLER

    if not any(s.control == AUTO for s in specs):
        return specs
    choice = auto_choice(cfg.models, cfg.decode, pricing, cfg.options.profile)
    own = None if cfg.models.control.controller else AUTO_CONTROLLER
    return [resolved_auto(s, choice, own) if s.control == AUTO else s for s in specs]


def check_controllers(cfg: EvalConfig, specs, pricing: Pricing) -> tuple:
    """The run's controller and each method's own (``adaptive/c=``), built with the run's plan
    (cheap: no model loads) so that a bad name or directory fails before ``--out`` is touched."""
    from lrtune.build import build_controller

    ctl = build_controller(cfg.models.control.controller, cfg.decode, pricing)
    own = {s.controller: build_controller(s.controller, cfg.decode, pricing) for s in specs if s.controller}
    if any(s.control in ("adaptive", "best-fixed") and not s.controller for s in specs) and ctl is None:
        raise ConfigError("methods adaptive and best-fixed need --controller (a policy or a controller directory)")
    for s in specs:
        if s.control == "adaptive":
            with_round_kinds(own.get(s.controller, ctl), s.round_kinds)  # refuses a controller that cannot
    return ctl, own


def asked_gamma2s(cfg: EvalConfig, specs, controllers=(), pricing: Pricing | None = None) -> set[int]:
    """Every γ2 an evaluate run may ask the target for, so the GPU memory plan counts an engine
    for each (:func:`lrtune.memory.target_engine_keys`): each SD method's γ2; with a shared SD
    engine (the plan's ``engine_drafts``) nothing else (controllers and the oracle are capped at
    its γ2, :meth:`lrtune.pricing.Pricing.cap`); without one, each adaptive controller's range
    and the oracle's as well."""
    out = {s.gamma2 for s in specs if s.decode_config(cfg.decode).uses_sd}
    if not (pricing or run_pricing(cfg, specs)).engine_drafts:
        tops = [c.bounds.gamma2_max for c in controllers if getattr(c, "bounds", None) is not None]
        if any(s.control == "oracle" for s in specs):
            tops.append(next(iter(tops), Bounds().gamma2_max))
        out |= {g for top in tops for g in range(1, top + 1)}
    return out


def open_engines(
    cfg: EvalConfig, specs, task, problems, timing, pricing: Pricing, ctl, own: dict
) -> tuple[_Engines, dict | None, dict | None]:
    """Start the engines; ``pricing``, ``ctl`` and ``own``: the run's plan and controllers, decided
    and built before any model loaded (:func:`run_pricing`, :func:`check_controllers`)."""
    from lrtune.decoding import Decoder

    t0 = time.perf_counter()
    uses_draft = uses_draft_model(cfg, specs)
    dec = Decoder.from_configs(
        dataclasses.replace(cfg.models, controller=None),
        dataclasses.replace(cfg.decode, method="lr+sd"),
        progress=cfg.options.progress,
        load_all_methods=uses_draft,
        gamma2s=asked_gamma2s(cfg, specs, [c for c in (ctl, *own.values()) if c is not None], pricing),
    )
    drafts = getattr(getattr(dec.target, "config", None), "shared_spec_tokens", 0) or 0
    if drafts != pricing.engine_drafts:  # the plan was decided from the same rule the decoder used
        raise RuntimeError(f"the SD engine drafts {drafts} tokens per pass, the pricing plan {pricing.engine_drafts}")
    for s in specs:  # start every engine now: lazy starts would bill the first problem
        dec.start_engines(s.decode_config(cfg.decode))
    eng = _Engines(dec, ctl, _method_verifiers(dec, cfg, specs), own, pricing=pricing)
    timing["load_s"] = time.perf_counter() - t0
    log(f"engines ready in {timing['load_s']:.1f} s")
    t0 = time.perf_counter()
    limit = cfg.models.engine.max_model_len
    need = cfg.decode.max_new_tokens + cfg.decode.max_step_tokens
    # never decode (not even warm up on) a prompt that does not fit; run() checked that one does
    warm = next(ids for ids in (dec.encode(task.prompt(p)) for p in problems) if len(ids) + need <= limit)
    if cfg.options.warmup_tokens > 0:
        for s in specs:
            dec.decoder.decode(
                warm,
                dataclasses.replace(s.decode_config(cfg.decode), max_new_tokens=cfg.options.warmup_tokens),
                verifier=eng.verifier(s),
            )
    batch_cost = batch_cost_sd = None
    lr_specs = [s for s in specs if s.kind in ("lr", "lr+sd")]
    if lr_specs and cfg.options.warmup_tokens > 0 and not cfg.options.profile:  # --profile: run() has b(n)
        sizes = sorted({s.gamma1 + 1 for s in lr_specs})
        if ctl is not None and any(s.control for s in specs):
            sizes = sorted(set(sizes) | set(range(2, ctl.bounds.gamma1_max + 2)))
        batch_cost = measure_batch_cost(dec.target, [warm], sizes)
        log("batch cost b(n): " + ", ".join(f"b({n})={v:.2f}" for n, v in batch_cost.items()))
        sd_specs = [s for s in lr_specs if s.kind == "lr+sd" and not s.control]
        if sd_specs:  # LR+SD's target rows decode with SD, which batches worse than plain rows
            g2 = sd_specs[0].gamma2
            curve = measure_batch_cost(dec.target, [warm], sorted({s.gamma1 + 1 for s in sd_specs}), gamma2=g2)
            batch_cost_sd = {"gamma2": g2, "curve": curve}
            log(f"batch cost of SD rows (γ2 = {g2}): " + ", ".join(f"b({n})={v:.2f}" for n, v in curve.items()))
    timing["warmup_s"] = time.perf_counter() - t0
    return eng, batch_cost, batch_cost_sd


def _method_verifiers(dec, cfg: EvalConfig, specs) -> dict:
    """One verifier object per distinct ``v=`` option (model verifiers judge with the target)."""
    from lrtune.verifiers import make_verifier

    out = {None: dec.verifier}
    for s in specs:
        if s.verifier is not None and s.verifier not in out:
            out[s.verifier] = make_verifier(s.verifier, threshold=None, seed=cfg.decode.seed, backend=dec.target)
    return out


def decode_all(eng: _Engines, cfg: EvalConfig, specs, task, problems, done, out: Path, timing) -> None:
    """Every pending (problem, method) row, one at a time, each problem's methods in a balanced
    order (the oracle last); records appended as they land (resumable); live accuracy and speed."""
    dec = eng.dec

    progress = ProgressBar(
        "evaluate", sum((p.id, s.label) not in done for p in problems for s in specs), cfg.options.progress
    )
    live: dict[str, dict] = {s.label: {"k": 0, "n": 0, "wall": 0.0, "base": 0.0} for s in specs}
    base_wall: dict[str, float] = {}
    lrsd_stats: dict[str, dict] = {}  # problem -> the lr+sd row's stats (the oracle's α)
    for r in load_records(out / RECORDS):
        if r["method"] == "target":
            base_wall[r["problem"]] = r["wall_s"]
        elif r["method"] == "lr+sd":
            lrsd_stats[r["problem"]] = r.get("stats", {})
    t_loop = time.perf_counter()
    try:
        for i, prob in enumerate(problems):
            pending = [s for s in specs if (prob.id, s.label) not in done]
            if not pending:
                continue
            ids = _prompt_ids(dec, cfg, task, prob)
            if ids is None:
                progress.advance(len(pending))
                continue
            order = [pending[j] for j in metrics.balanced_order(len(pending), i)]
            order = [s for s in order if s.control != "oracle"] + [s for s in order if s.control == "oracle"]
            for spec in order:
                rec, stats = _decode_row(eng, cfg, spec, task, prob, i, ids, lrsd_stats.get(prob.id), timing)
                ok = rec["correct"]
                append_record(out / RECORDS, rec)
                done.add((prob.id, spec.label))
                if spec.label == "target":
                    base_wall[prob.id] = stats.wall_s
                elif spec.label == "lr+sd":
                    lrsd_stats[prob.id] = rec["stats"]
                lv = live[spec.label]
                lv["k"] += ok
                lv["n"] += 1
                if prob.id in base_wall:
                    lv["wall"] += stats.wall_s
                    lv["base"] += base_wall[prob.id]
                progress.advance(1, _live_text(spec.label, lv))
    finally:
        timing["loop_s"] += time.perf_counter() - t_loop
        progress.close()


def _prompt_ids(dec, cfg: EvalConfig, task, prob) -> list[int] | None:
    """The problem's prompt ids, or None (with one line saying why) when it cannot be encoded or
    does not fit ``max_model_len`` with the budget."""
    try:
        ids = dec.encode(task.prompt(prob))
    except ConfigError as e:
        log(f"skipping {prob.id}: {e}")
        return None
    if len(ids) + cfg.decode.max_new_tokens + cfg.decode.max_step_tokens > cfg.models.engine.max_model_len:
        log(
            f"skipping {prob.id}: prompt of {len(ids)} tokens + budget exceeds max_model_len "
            f"{cfg.models.engine.max_model_len}"
        )
        return None
    return ids


def _decode_row(eng: _Engines, cfg: EvalConfig, spec, task, prob, i: int, ids: list[int], lrsd, timing) -> tuple:
    """One (problem, method) row decoded from a fresh prompt cache: its record and stats
    (``lrsd``: the problem's lr+sd stats, which the oracle reads)."""
    from lrtune.control import ProblemInfo

    dec = eng.dec
    dcfg, kwargs = _controlled(eng.controller_for(spec), cfg, spec, prob, task, lrsd, eng.pricing)
    kwargs.setdefault("problem", ProblemInfo(prob.id, task.prompt(prob), len(ids), cfg.options.task))
    t_warm = time.perf_counter()
    _fresh_cache(dec, ids)
    timing["prompt_cache_s"] += time.perf_counter() - t_warm
    judged, on_round = _pair_recorder(cfg, dcfg, dec)
    res, stats = dec.decoder.decode(
        ids,
        dcfg,
        verifier=eng.verifier(spec),
        **kwargs,
        on_round=None if on_round is None else (lambda r: on_round(0, r)),
    )
    timing["decode_s"] += stats.wall_s
    return _record(prob, i, spec, dcfg, cfg, task, res, stats, judged.get(0), kwargs.get("controller")), stats


def _pair_recorder(cfg: EvalConfig, dcfg, dec):
    """(pairs by prompt index, ``on_round(i, record)``) that keeps every pair the verifier
    judged (:func:`~lrtune.verifiers.pairrecords.judged_pairs`) when ``--record-pairs`` is on
    and the rows run sync LR rounds; (empty, None) otherwise (async LR reports no rounds)."""
    from lrtune.verifiers.pairrecords import judged_pairs

    judged: dict[int, list[dict]] = {}
    if not (cfg.options.record_pairs and dcfg.uses_lr and not dcfg.async_lr):
        return judged, None

    def on_round(i: int, r) -> None:
        judged.setdefault(i, []).extend(judged_pairs(r))

    return judged, on_round


def _record(
    prob, i: int, spec: MethodSpec, dcfg, cfg: EvalConfig, task, res, stats, pairs: list[dict] | None = None, ctl=None
) -> dict:
    """One problem x method line of records.jsonl; ``pairs``: the pairs its verifier judged;
    ``ctl``: the controller that decoded it, whose ``measured()`` state (the bandit's
    measured-rate guard) is kept as ``controller_state``."""
    answer, ok = task.check(prob, res.text)
    extra = {} if pairs is None else {"pairs": pairs}
    if callable(getattr(ctl, "measured", None)):
        extra["controller_state"] = ctl.measured()
    return {
        **extra,
        "problem": prob.id,
        "index": i,
        "method": spec.label,
        "kind": spec.kind,
        # depths actually run (0 = not used); adaptive rows change them per round
        "gamma1": None if spec.control == "adaptive" else dcfg.gamma1 * dcfg.uses_lr,
        "gamma2": None if spec.control == "adaptive" else dcfg.sd_gamma2,
        "control": spec.control,
        "decode_method": dcfg.method,
        "schedule": spec.schedule,
        "async_lr": spec.async_lr,
        "width": spec.width,
        "early_abort": spec.early_abort,
        "reuse_drafts": spec.reuse_drafts,
        "verifier": spec.verifier or cfg.models.verification.spec,
        "answer": answer,
        "expected": prob.answer,
        "correct": bool(ok),
        "tokens": len(res.token_ids),
        "wall_s": stats.wall_s,
        "finish": res.finish,
        "text": res.text,
        "stats": stats.to_dict(),
        "step_tokens": [len(ids) for _, ids in res.steps] if dcfg.uses_lr else None,
    }


def decode_throughput(eng: _Engines, cfg: EvalConfig, specs, task, problems, done, out: Path, timing) -> None:
    """Throughput mode: each method over every problem it has not finished, with
    ``--max-concurrent`` in flight; a record is written as each problem ends and one
    :class:`~lrtune.stats.BatchStats` line per method to ``throughput.jsonl``."""
    from lrtune.control import ProblemInfo

    dec = eng.dec
    opts = cfg.options
    progress = ProgressBar("evaluate", sum((p.id, s.label) not in done for p in problems for s in specs), opts.progress)
    t_loop = time.perf_counter()
    try:
        for spec in specs:
            todo = [(i, p) for i, p in enumerate(problems) if (p.id, spec.label) not in done]
            if not todo:
                continue
            dcfg, kwargs = _controlled(eng.controller_for(spec), cfg, spec, todo[0][1], task, None, eng.pricing)
            ids = [dec.encode(task.prompt(p)) for _, p in todo]
            problems_info = [ProblemInfo(p.id, task.prompt(p), len(x), opts.task) for (_, p), x in zip(todo, ids)]
            n_ok = [0]
            t_warm = time.perf_counter()
            _cache_prompt(dec, ids)  # untimed, as in latency mode: no method pays another's prefill
            timing["prompt_cache_s"] += time.perf_counter() - t_warm

            judged, on_round = _pair_recorder(cfg, dcfg, dec)

            def on_done(
                k: int, result, spec=spec, dcfg=dcfg, todo=todo, n_ok=n_ok, judged=judged, on_round=on_round
            ) -> None:
                i, prob = todo[k]
                if isinstance(result, Failed):
                    log(f"skipping {prob.id}: {result.message}")
                else:
                    rec = _record(prob, i, spec, dcfg, cfg, task, *result, judged.pop(k, []) if on_round else None)
                    append_record(out / RECORDS, rec)
                    done.add((prob.id, spec.label))
                    n_ok[0] += rec["correct"]
                progress.advance(1, f"{spec.label}: acc {n_ok[0]}")

            _, batch = dec.decoder.decode_many(
                ids,
                dcfg,
                max_concurrent=opts.max_concurrent,
                max_len=cfg.models.engine.max_model_len,
                controller=kwargs.get("controller"),
                verifier=eng.verifier(spec),
                problems=problems_info,
                on_done=on_done,
                on_round=on_round,
            )
            timing["decode_s"] += batch.wall_s
            append_record(out / THROUGHPUT, {"method": spec.label, **batch.to_dict()})
    finally:
        timing["loop_s"] += time.perf_counter() - t_loop
        progress.close()


def _cache_prompt(dec, ids: list[int] | list[list[int]]) -> None:
    """Prefill the problem's prompt (or every prompt of a list) once on every engine,
    untimed. Engines cache prefixes, so otherwise the first method run on a problem would
    pay the prompt's prefill for all the others (a bias that the balanced order only cancels
    over many problems)."""
    from lrtune.backends.base import GenParams

    prompts = ids if ids and isinstance(ids[0], list) else [ids]
    params = GenParams(max_tokens=1, stop_at_delimiter=False)
    for backend in _backends(dec):
        backend.generate(prompts, params)


def _backends(dec) -> list:
    """The decoder's distinct engines: the target, and the draft when it has one."""
    return list({id(b): b for b in (dec.target, dec.draft) if b is not None}.values())


def _fresh_cache(dec, ids: list[int]) -> None:
    """Latency mode, before each timed decode: every engine forgets its cached prefixes and
    prefills the problem's prompt again, untimed. Each decode then starts from the same cache:
    greedy methods share prefixes (the same draft steps, the same target steps), so otherwise a
    method would find blocks an earlier method on the problem computed (which also hides draft
    tokens from the target's prefill scores: a reused block is not scored)."""
    for backend in _backends(dec):
        reset = getattr(backend, "reset_prefix_cache", None)
        if reset is not None:
            reset()
    _cache_prompt(dec, ids)


def _controlled(
    ctl, cfg: EvalConfig, spec: MethodSpec, prob, task, ref_stats: dict | None, pricing: Pricing | None = None
):
    """(decode config, decode kwargs) of one decode; controlled methods get their depths
    from ``ctl`` (the run's controller). ``ref_stats``: the lr+sd row's DecodeStats of this
    problem (the oracle reads its α); ``pricing``: the run's plan (the oracle's prices
    without a controller)."""
    from lrtune.control import ProblemInfo

    pricing = pricing or Pricing()

    dcfg = spec.decode_config(cfg.decode)
    if spec.control == "adaptive":
        return dcfg, {"controller": ctl, "problem": ProblemInfo(prob.id, task.prompt(prob), task=cfg.options.task)}
    if spec.control == "best-fixed":
        g1, g2 = getattr(ctl, "best_fixed", None) or (cfg.decode.gamma1, cfg.decode.gamma2)
        return _fixed_depths(dcfg, g1, g2), {}
    if spec.control == "oracle":
        st = ref_stats or {}
        a1, a2 = st.get("alpha1"), st.get("alpha2")
        if a1 is None or a2 is None:
            return dcfg, {}
        # priced as the controller prices (its plan), or by the run's plan without one
        best = (getattr(ctl, "pricing", None) or pricing).best_gammas(
            min(a1, 0.999), min(a2, 0.999), ctl.bounds if ctl is not None else Bounds()
        )
        return _fixed_depths(dcfg, best.gamma1, best.gamma2), {}
    return dcfg, {}


def _fixed_depths(dcfg, gamma1: int, gamma2: int):
    """``dcfg`` running fixed (γ1, γ2); a zero depth switches the method (γ1 = 0 → sd, ...)."""
    from lrtune.control import method_for_depths

    return dataclasses.replace(
        dcfg, method=method_for_depths(gamma1, gamma2), gamma1=max(1, gamma1), gamma2=max(1, gamma2)
    )


def reuse_keep_share(records: list[dict], label: str) -> float | None:
    """Draft-prefix reuse: the share of the target's tokens at drafted positions that its
    rows still generated, 1 − reused / all (None without such tokens in ``label``'s records)."""
    st = [r["stats"] for r in records if r["method"] == label]
    total = sum(x.get("target_tokens_at_drafts") or 0 for x in st)
    if not total:
        return None
    return min(1.0, max(0.0, 1.0 - sum(x.get("reused_target_tokens") or 0 for x in st) / total))


def _live_text(label: str, lv: dict) -> str:
    acc = f"{lv['k'] / lv['n']:.0%}" if lv["n"] else "—"
    sp = f"{lv['base'] / lv['wall']:.2f}x" if lv["wall"] else "—"
    return f"{label}: acc {acc}, speedup {sp}"
