"""Measuring the hardware constants of the speedup model on a started target/draft pair:
t_T, t_D (seconds per token at batch 1), c1 = t_D / t_T, c2 (from SD runs), b(n) (a batch of
n rows relative to one). ``lrtune profile`` (``eval/profile.py``) and ``lrtune doctor
--timing`` run :func:`measure`; see ``eval/profile.py`` for what each figure means.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated

from annotated_types import Interval

from lrtune.schema import STRICT, Checked, Text

from dataclasses import dataclass, field, replace

from lrtune.errors import ConfigError
from lrtune.runfiles import log


@dataclass
class ProfileOptions(Checked):
    __pydantic_config__ = STRICT

    out: Text = field(default="results/profile.json", metadata={"help": "JSON file to write"})
    gamma1_max: Annotated[int, Interval(ge=1, le=16)] = field(
        default=6, metadata={"help": "measure b(n) up to n = gamma1_max + 1"}
    )
    tokens: Annotated[int, Interval(ge=2, le=100_000)] = field(
        default=32, metadata={"help": "tokens per timed generation"}
    )
    repeats: Annotated[int, Interval(ge=1, le=1000)] = field(
        default=3,
        metadata={
            "help": "timed tries per size; b(n) pairs each size with the one-row time of the same try "
            "(the median counts, the range is its interval)"
        },
    )
    batch_max: Annotated[int, Interval(ge=0, le=4096)] = field(
        default=0,
        metadata={"help": "also measure b(n) at n = 8, 12, 16, 24, 32, ... up to this (0: only up to gamma1_max + 1)"},
    )
    task: Text = field(default="gsm_symbolic", metadata={"help": "task whose prompts are decoded"})
    data: Text | None = field(
        default=None, metadata={"help": "the problems file of a file task (as evaluate's --data)"}
    )
    sd_gamma2: Annotated[int, Interval(ge=0, le=16)] = field(
        default=4, metadata={"help": "measure c2 from token-level SD runs at this gamma2 (0: c2 = c1)"}
    )
    sd_tokens: Annotated[int, Interval(ge=2, le=100_000)] = field(
        default=128, metadata={"help": "tokens per SD (and matching plain) run for c2"}
    )
    sd_prompts: Annotated[int, Interval(ge=1, le=1000)] = field(
        default=3, metadata={"help": "prompts the c2 runs decode (their totals count)"}
    )
    prefill_max: Annotated[int, Interval(ge=0, le=4096)] = field(
        default=128,
        metadata={
            "help": "measure the target's prefill of a draft chain of 16, 32, 64, ... tokens up to this many (score "
            "rounds; 0: skip)"
        },
    )

    def check_rules(self) -> None:
        if self.sd_gamma2 == 0:  # no SD run: its sizes have no consumer
            from lrtune.consumers import check_read, unread_fields

            check_read(unread_fields(self, ("sd_tokens", "sd_prompts"), "--sd-gamma2 0 runs no SD (c2 = c1)"))
        if 0 < self.prefill_max < 16:  # the timed chain lengths are 16, 32, 64, ...: below 16 none is timed
            raise ConfigError(
                f"--prefill-max: 0 (skip) or at least 16 (the shortest chain timed), got {self.prefill_max}"
            )


def _time(backend, prefixes, tokens: int, repeats: int, gamma2: int = 0) -> float:
    from lrtune.backends.base import GenParams

    params = GenParams(max_tokens=tokens, stop_at_delimiter=False, num_speculative_tokens=gamma2)
    return min(backend.generate(prefixes, params).seconds for _ in range(repeats))


def time_alternately(backends: dict, prompt: list[int], tokens: int, repeats: int) -> dict[str, tuple[float, int]]:
    """``{name: (best seconds per token, tokens made)}`` of greedy batch-1 generation of
    ``tokens`` tokens (γ2 = 0) on each backend, after one short warm-up each, timed
    alternately (A B A B ...) so drift on a shared machine hits all alike; best of ``repeats``."""
    from lrtune.backends.base import GenParams

    params = GenParams(max_tokens=tokens, stop_at_delimiter=False, num_speculative_tokens=0)
    for b in backends.values():
        b.generate([prompt], GenParams(max_tokens=8, stop_at_delimiter=False))  # warm up
    best: dict[str, tuple[float, int]] = {name: (float("inf"), 0) for name in backends}
    for _ in range(repeats):
        for name, b in backends.items():
            out = b.generate([prompt], params)
            made = max(1, len(out.outputs[0].token_ids))
            best[name] = min(best[name], (out.seconds / made, made))
    return best


def measure_sd_cost(target, prompts: list[list[int]], opts: ProfileOptions) -> dict:
    """SD at γ2 = ``opts.sd_gamma2`` against plain decoding, ``opts.sd_tokens`` tokens on each
    prompt (one untimed warm-up of each first): the total speedup, the per-token acceptance α2
    (censoring-aware, :attr:`SDCounters.alpha`; the engine's accepted/drafted rate beside it)
    and the c2 they imply (:func:`lrtune.speedup.c_from_sd`)."""
    from lrtune.backends.base import GenParams, SDCounters
    from lrtune.speedup import c_from_sd

    plain = GenParams(max_tokens=opts.sd_tokens, stop_at_delimiter=False)
    spec = replace(plain, num_speculative_tokens=opts.sd_gamma2)
    t_plain = t_sd = 0.0
    total = SDCounters()
    for p in prompts:
        target.generate([p], plain)
        target.generate([p], spec)  # warm-up of both paths on this prompt
        a, b = target.generate([p], plain), target.generate([p], spec)
        if b.sd is None or len(b.outputs[0].token_ids) < opts.sd_tokens or len(a.outputs[0].token_ids) < opts.sd_tokens:
            raise ConfigError(
                "an SD profiling run drafted nothing or ended early; lower --sd-tokens or use --sd-gamma2 0"
            )
        t_plain, t_sd = t_plain + a.seconds, t_sd + b.seconds
        total.add(b.sd)
    alpha2 = total.alpha or 0.0
    speedup = t_plain / t_sd
    c2 = c_from_sd(speedup, min(alpha2, 0.999), opts.sd_gamma2)
    if c2 < 1e-3:
        log(
            f"warning: SD ran {speedup:.2f}x plain, faster than the model allows at α2 = {alpha2:.3f} "
            f"(c2 = {c2:.3f}); c2 is set to 0.001"
        )
    log(
        f"SD at γ2 = {opts.sd_gamma2}: {speedup:.2f}x plain over {len(prompts)} x {opts.sd_tokens} tokens, "
        f"α2 = {alpha2:.3f} (accepted/drafted {total.acceptance_rate or 0.0:.3f}) -> c2 = {c2:.3f}"
    )
    return {
        "gamma2": opts.sd_gamma2,
        "tokens": opts.sd_tokens,
        "prompts": len(prompts),
        "speedup": speedup,
        "alpha2": alpha2,
        "acceptance_rate": total.acceptance_rate,
        "c2": max(c2, 1e-3),
        "plain_s": t_plain,
        "sd_s": t_sd,
    }


def prefill_per_token(prefill: dict) -> float:
    """π: the mean over the measured chain lengths of a profile's ``prefill.ratio_per_token``."""
    ratios = [float(v) for v in prefill["ratio_per_token"].values()]
    return sum(ratios) / len(ratios)


def prefill_lengths(prefill_max: int) -> list[int]:
    """Chain lengths whose prefill is timed: 16, 32, 64, ... up to ``prefill_max`` tokens."""
    return [n for n in (16, 32, 64, 128, 256, 512, 1024, 2048, 4096) if n <= prefill_max]


def measure_prefill(
    target, draft, prompts: list[list[int]], lengths: list[int], t_token: float, repeats: int, gamma2: int = 0
) -> dict:
    """What a score round's scoring call costs: the target prefilling a draft chain of n tokens
    after a cached prompt and scoring it (``GenParams.score_from``, one token generated), for
    each n in ``lengths``; the fastest of ``repeats`` tries, each on another prompt's chain.
    Every timed call finds a prefix cache that holds its prompt alone (reset, then the prompt):
    a chain prefilled once sits in the cache, and a longer chain would otherwise find a shorter
    one's blocks and time only its new tail. Returns the seconds, the call overhead
    ``o = s(0) / t_T`` (a call that prefills nothing new, in target tokens) and the per-token
    ratio ``π(n) = (s(n) − s(0)) / (n · t_T)``: prefilling a chain of d steps of L tokens costs
    ``o + π·d·L`` target tokens, i.e. π per draft step in units of one target step.

    ``gamma2``: the call a score round makes, whose rows decode with SD at this γ2 (the decoder
    scores on the SD engine with its drafter on, so the drafter prefills the chain too and
    proposes after it: on vLLM-CPU that call costs several times the drafter-off one)."""
    from lrtune.backends.base import GenParams

    tries = prompts[: max(1, min(repeats, len(prompts)))]
    chains = [
        draft.generate([p], GenParams(max_tokens=max(lengths), stop_at_delimiter=False)).outputs[0].token_ids
        for p in tries
    ]
    one = GenParams(max_tokens=1, stop_at_delimiter=False, num_speculative_tokens=gamma2)
    reset = getattr(target, "reset_prefix_cache", None)

    def timed(prompt: list[int], ids: list[int], params) -> float:
        if reset is not None:
            reset()
        target.generate([prompt], one)  # the prompt alone in the prefix cache, as a round finds it
        return target.generate([ids], params).seconds

    seconds = {0: min(timed(p, p, one) for p in tries)}
    for n in lengths:
        seconds[n] = (
            min(timed(p, p + c[:n], replace(one, score_from=len(p))) for p, c in zip(tries, chains))
            if all(len(c) >= n for c in chains)
            else None
        )
    ratio = {n: (s - seconds[0]) / (n * t_token) for n, s in seconds.items() if n and s is not None}
    log(
        "prefill of a draft chain: "
        + ", ".join(f"π({n}) = {r:.3f}" for n, r in ratio.items())
        + f" of a decoded token each; call overhead {seconds[0] / t_token:.2f} tokens"
    )
    return {
        "gamma2": gamma2,
        "seconds": {str(n): s for n, s in seconds.items()},
        "overhead_tokens": seconds[0] / t_token,
        "ratio_per_token": {str(n): r for n, r in ratio.items()},
    }


def curve_sizes(start: int, batch_max: int) -> list[int]:
    """Sizes above ``start`` up to ``batch_max``: 8, 12, 16, 24, 32, 48, 64, ... (×1.5, ×4/3)."""
    sizes, n = [], 8
    while n <= batch_max:
        if n > start:
            sizes.append(n)
        n = n * 3 // 2 if (n & (n - 1)) == 0 else n * 4 // 3
    return sizes


def batch_costs(
    target, prompts: list[list[int]], sizes, tokens: int, repeats: int, gamma2: int = 0, seed: int = 0
) -> dict:
    """b(n) = t(n) / t(1), measured interleaved: each of ``repeats`` tries times one row and every
    size once, in a fresh seeded order, and divides t(n) by that try's own t(1), so drift on a
    shared machine hits every size of a try alike. A size's central value is the median of its
    ratios over the tries, its interval their range [min, max]. Returns ``{"t1": median seconds of
    one row, "b": {n: median}, "range": {n: [lo, hi]}}`` (n = 1 included)."""
    import random
    import statistics

    order = sorted({1, *sizes})
    rng = random.Random(seed)
    ratios: dict[int, list[float]] = {n: [] for n in order}
    ones: list[float] = []
    for _ in range(repeats):
        shuffled = order[:]
        rng.shuffle(shuffled)
        t = {n: _time(target, prompts[:n], tokens, 1, gamma2) for n in shuffled}
        ones.append(t[1])
        for n in order:
            ratios[n].append(t[n] / t[1])
    return {
        "t1": statistics.median(ones),
        "b": {n: statistics.median(r) for n, r in ratios.items()},
        "range": {n: [min(r), max(r)] for n, r in ratios.items()},
    }


# The lowest b(n) a CPU's matmul kernel explains where oneDNN runs its AVX-512 bf16 kernel
# without AMX (AMD EPYC): 4 rows of the target's projections cost 0.72-0.85 of one row
# (benchmarks/engine_costs/onednn_gemm_avx512bf16.json), rounded down.
KERNEL_FLOOR = 0.7


def batch_floor(flags: Sequence[str]) -> float:
    """The lowest b(n) this CPU's kernels explain: :data:`KERNEL_FLOOR` with AVX-512 bf16 and no
    AMX (the kernel does about as much work for one row as for four, so 4-6 rows cost less
    than one); 1 elsewhere (AMX costs the same for 1-8 rows, AVX2 more for more)."""
    return KERNEL_FLOOR if "avx512_bf16" in flags and "amx_bf16" not in flags else 1.0


def _span(spans: Mapping, n: int, v: float) -> tuple[float, float]:
    lo, hi = spans.get(str(n)) or spans.get(n) or (v, v)
    return lo, hi


def profile_checks(prof: dict, tolerance: float = 0.1, floor: float = 1.0) -> list[str]:
    """What is implausible in a profile: c1 or c2 outside (0, 1.5] (a draft as slow as the target
    is no draft), a negative prefill overhead or per-token cost, and, for each b(n) with its
    interval [lo, hi] (the range over the tries), a b(n) below ``floor`` − ``tolerance`` by more
    than its interval's width (n rows faster than the kernel allows, in every try; ``floor``:
    :func:`batch_floor`) or, where no kernel effect is known (``floor`` ≥ 1), a b(n + 1) below
    b(n) by more than both intervals' widths and ``tolerance`` (the kernel effect makes the
    curve dip and rise again above the floor). Each failure is one short text; none: []."""
    out = []
    for name in ("c1", "c2"):
        v = prof.get(name)
        if not isinstance(v, (int, float)) or not 0 < v <= 1.5:
            out.append(f"{name} = {v!r} outside (0, 1.5]")
    pre = prof.get("prefill") or {}
    if isinstance(pre.get("overhead_tokens"), (int, float)) and pre["overhead_tokens"] < 0:
        out.append(f"prefill overhead {pre['overhead_tokens']:.3f} < 0")
    for n, r in (pre.get("ratio_per_token") or {}).items():
        if isinstance(r, (int, float)) and r < 0:
            out.append(f"prefill π({n}) = {r:.3f} < 0")
    for key in ("batch_cost", "batch_cost_sd"):
        b = prof.get(key) or []
        spans = prof.get(f"{key}_range") or {}
        for i, v in enumerate(b):
            n = i + 1
            lo, hi = _span(spans, n, v)
            if v < floor - tolerance - (hi - lo):
                out.append(
                    f"{key} b({n}) = {v:.2f} [{lo:.2f}, {hi:.2f}] < {floor:g}: {n} rows ran faster than "
                    + ("one" if floor >= 1 else "this CPU's kernel explains")
                )
            if i and floor >= 1:
                plo, phi = _span(spans, n - 1, b[i - 1])
                if v < b[i - 1] - (hi - lo) - (phi - plo) - tolerance:
                    out.append(f"{key} b({n}) = {v:.2f} below b({n - 1}) = {b[i - 1]:.2f} beyond the noise")
    return out


def measure(target, draft, prompts: list[list[int]], opts: ProfileOptions, floor: float | None = None) -> dict:
    """A profile (:func:`measure_once`) that passes :func:`profile_checks`, or, when the first
    measurement fails them, a second one, which is kept whatever its checks say: ``checks``
    holds its failures (flagged with one warning line), ``remeasured``, the first
    measurement's failures and ``b_floor`` (``floor``; None: :func:`batch_floor` of this CPU)."""
    if floor is None:
        from lrtune.machine import cpu_flags

        floor = batch_floor(cpu_flags())
    prof = measure_once(target, draft, prompts, opts)
    first = profile_checks(prof, floor=floor)
    prof["checks"] = {"failed": first, "remeasured": False, "b_floor": floor}
    if not first:
        return prof
    log(f"this profile fails its checks ({'; '.join(first)}): measuring once more")
    prof = measure_once(target, draft, prompts, opts)
    failed = profile_checks(prof, floor=floor)
    prof["checks"] = {"failed": failed, "remeasured": True, "first_failed": first, "b_floor": floor}
    if failed:
        log(f"warning: this profile fails its checks ({'; '.join(failed)}) twice; see 'checks' in the JSON")
    return prof


def measure_once(target, draft, prompts: list[list[int]], opts: ProfileOptions) -> dict:
    """c1, c2 (with the SD runs behind it), b(n) with their intervals (:func:`batch_costs`) and
    the per-token times of ``target`` (its SD engine when ``opts.sd_gamma2`` > 0) and ``draft`` on
    ``prompts`` (token ids; at least max(γ1_max + 1, sd_prompts, the curve's largest size) of
    them), after a warm-up; with the machine's load average before and after."""
    import os
    import statistics

    load_before = os.getloadavg()
    big = curve_sizes(opts.gamma1_max + 1, opts.batch_max)
    sizes = list(range(2, opts.gamma1_max + 2))
    for n in [1, *sizes, *big]:  # warm-up: every shape once, every prompt's prefix cached
        _time(target, prompts[:n], 8, 1)
    _time(draft, prompts[:1], 8, 1)
    td = statistics.median(_time(draft, prompts[:1], opts.tokens, 1) for _ in range(opts.repeats))  # as t(1)
    plain = batch_costs(target, prompts, [*sizes, *big], opts.tokens, opts.repeats)
    t1 = plain["t1"]
    for n in [*sizes, *big]:
        lo, hi = plain["range"][n]
        log(f"b({n}) = {plain['b'][n]:.3f} [{lo:.3f}, {hi:.3f}]")
    b = [1.0, *(plain["b"][n] for n in sizes)]
    curve = {n: plain["b"][n] for n in big}
    b_sd, sd_range = None, None
    if opts.sd_gamma2 > 0:  # LR+SD's target rows decode with SD: their batch cost, relative to one SD row
        for n in [1, *sizes]:
            _time(target, prompts[:n], 8, 1, opts.sd_gamma2)  # warm-up
        with_sd = batch_costs(target, prompts, sizes, opts.tokens, opts.repeats, opts.sd_gamma2)
        b_sd = [1.0, *(with_sd["b"][n] for n in sizes)]
        sd_range = {n: with_sd["range"][n] for n in [1, *sizes]}
        log("b_SD(n) (γ2 = %d): " % opts.sd_gamma2 + ", ".join(f"{v:.3f}" for v in b_sd))
    c = td / t1
    sd = measure_sd_cost(target, prompts[: opts.sd_prompts], opts) if opts.sd_gamma2 > 0 else None
    lengths = prefill_lengths(opts.prefill_max)
    prefill = (
        measure_prefill(target, draft, prompts, lengths, t1 / opts.tokens, opts.repeats, opts.sd_gamma2)
        if lengths
        else None
    )
    prof = {
        "c1": c,
        "c2": sd["c2"] if sd else c,
        "sd": sd,
        "batch_cost": b,
        "batch_cost_range": {n: plain["range"][n] for n in [1, *sizes]},
        "batch_cost_sd": b_sd,
        "batch_cost_sd_range": sd_range,
        "batch_cost_curve": curve,
        "target_s_per_token": t1 / opts.tokens,
        "draft_s_per_token": td / opts.tokens,
        "tokens": opts.tokens,
        "repeats": opts.repeats,
        "prefill": prefill,
        "load_avg": {"before": list(load_before), "after": list(os.getloadavg())},
    }
    return prof
