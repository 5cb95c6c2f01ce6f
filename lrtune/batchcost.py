"""The batch cost curve b(n) and the concurrency it implies.

b(n) = time of one engine call decoding n distinct prefixes ``tokens`` tokens each / the
time of one prefix (b(1) = 1). A round of N in-flight prompts with r target rows each is
one call of N·r rows, so problems finish at a rate proportional to N / b(N·r):
:func:`choose_concurrency` picks the N that (nearly) maximises it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence

from lrtune.errors import ConfigError


def batch_runs(
    backend, prompts: Sequence[Sequence[int]], sizes: Sequence[int], tokens: int = 32, repeats: int = 2, gamma2: int = 0
) -> dict:
    """Per batch size n (1 and ``sizes``): the fastest of ``repeats`` calls decoding n distinct
    prefixes, ``tokens`` tokens each, plain or, with ``gamma2`` > 0, with token-level SD at
    that γ2 (LR+SD's target rows: a batch of SD rows verifies n·(γ2 + 1) tokens per forward
    and lasts until its slowest row is done, so it batches worse than plain rows). Prefix i
    is ``prompts[i % len]`` plus ``i // len + 1`` repeats of its last token, so every row
    differs. Each size's prefixes are prefilled first, untimed (a round's rows extend cached
    prefixes: b(n) prices decoding, not a cold prompt)."""
    from lrtune.backends.base import GenParams

    params = GenParams(max_tokens=tokens, stop_at_delimiter=False, num_speculative_tokens=gamma2)
    prefill = GenParams(max_tokens=1, stop_at_delimiter=False)
    runs = {}
    for n in sorted({1, *sizes}):
        prefixes = [
            list(prompts[i % len(prompts)]) + [prompts[i % len(prompts)][-1]] * (i // len(prompts) + 1)
            for i in range(n)
        ]
        backend.generate(prefixes, prefill)
        runs[n] = min((backend.generate(prefixes, params) for _ in range(repeats)), key=lambda r: r.seconds)
    return runs


def measure_batch_cost(
    backend, prompts: Sequence[Sequence[int]], sizes: Sequence[int], tokens: int = 32, repeats: int = 2, gamma2: int = 0
) -> dict[int, float]:
    """{n: b(n)} on ``backend`` (see :func:`batch_runs`; ``gamma2`` > 0: rows decoded with SD,
    b(n) relative to one SD row); b(1) = 1."""
    runs = batch_runs(backend, prompts, sizes, tokens, repeats, gamma2)
    return {n: runs[n].seconds / runs[1].seconds for n in runs}


def read_profile_curve(path: str) -> dict[int, float]:
    """{n: b(n)} from an ``lrtune profile`` JSON: its ``batch_cost`` list (n = 1, 2, ...) and,
    where measured, its ``batch_cost_curve`` ({n: b(n)} at larger n)."""

    def curve_of(data: dict) -> dict[int, float]:
        curve = _sizes(data["batch_cost"], "batch_cost")
        extra = data.get("batch_cost_curve") or {}
        if not isinstance(extra, dict):
            raise ValueError("batch_cost_curve must be an object {n: b(n)}")
        for n, v in extra.items():
            if not _BATCH_SIZE.fullmatch(n):  # JSON keys are text: "8", never "-3", "0", "8.0" or " 8"
                raise ValueError(f"batch_cost_curve key {n[:20]!r} is not a batch size n (an integer >= 1)")
            curve[int(n)] = _cost(v, f"batch_cost_curve[{n!r}]")
        return dict(sorted(curve.items()))

    return _from_profile(path, curve_of)


def read_profile_sd_curve(path: str) -> tuple[int, dict[int, float]] | None:
    """(γ2, {n: b_SD(n)}) from an ``lrtune profile`` JSON's ``batch_cost_sd`` (rows decoded
    with SD at the profile's ``sd.gamma2``), or None when the profile has none."""

    def sd_curve_of(data: dict) -> tuple[int, dict[int, float]] | None:
        b, sd = data.get("batch_cost_sd"), data.get("sd")
        if b is None:
            return None
        curve = _sizes(b, "batch_cost_sd")
        if not isinstance(sd, Mapping) or not isinstance(sd.get("gamma2"), int):
            raise ValueError("batch_cost_sd needs sd.gamma2")
        return sd["gamma2"], curve

    return _from_profile(path, sd_curve_of)


PROFILE_KEYS = frozenset({"c1", "c2", "batch_cost", "sd", "prefill"})  # what lrtune profile writes and consumers read


def read_profile_json(path: str) -> dict:
    """The ``lrtune profile`` JSON object at ``path``; ConfigError naming the file otherwise, and
    the field when its c1 or c2 is not a finite number > 0 (whatever else it holds: a reader
    that takes only some of its keys must never take a c1 of -3 or NaN)."""

    def an_object(data):
        if not isinstance(data, Mapping):
            raise TypeError("a JSON object is expected")
        if not PROFILE_KEYS & set(data):  # nothing lrtune reads: defaults would stand in silently
            raise ValueError(f"none of {', '.join(sorted(PROFILE_KEYS))}")
        for key in ("c1", "c2"):
            if key in data:
                _cost(data[key], key)
        check_profile_blocks(data)
        return dict(data)

    return _from_profile(path, an_object)


# the profile's ``sd`` block: field -> (kind, lowest, highest); None where it may be absent
_SD_FIELDS = {
    "gamma2": ("count", 1, 16),
    "tokens": ("count", 1, None),
    "prompts": ("count", 1, None),
    "speedup": ("number", 0, None),
    "alpha2": ("number", 0, 1),
    "acceptance_rate": ("number", 0, 1),
    "c2": ("number", 0, None),
    "plain_s": ("number", 0, None),
    "sd_s": ("number", 0, None),
}


def check_profile_blocks(data: Mapping) -> None:
    """ValueError naming the field unless the profile's ``sd`` block (the SD run that measured c2)
    and ``prefill`` block (the score round's o and π) hold what ``lrtune profile`` writes: counts
    as whole numbers, the rest finite numbers in range (never a bool or text), ``prefill``'s
    ``ratio_per_token`` an object {chain length: number > 0}. Either may be absent or null."""
    sd = data.get("sd")
    if sd is not None:
        if not isinstance(sd, Mapping):
            raise ValueError("sd must be an object")
        for key, (kind, lo, hi) in _SD_FIELDS.items():
            v = sd.get(key)
            if v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, int if kind == "count" else (int, float)):
                raise ValueError(f"sd.{key} must be a {'whole number' if kind == 'count' else 'number'}, got {v!r:.40}")
            if not math.isfinite(v) or v < lo or (hi is not None and v > hi):
                raise ValueError(f"sd.{key} must be in [{lo}, {hi if hi is not None else 'inf'}], got {v!r:.40}")
    pre = data.get("prefill")
    if pre is not None:
        if not isinstance(pre, Mapping):
            raise ValueError("prefill must be an object")
        o = pre.get("overhead_tokens")
        if o is not None and (isinstance(o, bool) or not isinstance(o, (int, float)) or not math.isfinite(o)):
            raise ValueError(f"prefill.overhead_tokens must be a finite number, got {o!r:.40}")
        ratios = pre.get("ratio_per_token")
        if ratios is not None:
            if not isinstance(ratios, Mapping):
                raise ValueError("prefill.ratio_per_token must be an object {chain length: ratio}")
            for n, r in ratios.items():
                if not _BATCH_SIZE.fullmatch(str(n)):
                    raise ValueError(f"prefill.ratio_per_token key {str(n)[:20]!r} is not a chain length")
                _cost(r, f"prefill.ratio_per_token[{n!r}]")


def _from_profile(path: str, read):
    """``read(data)`` of the profile JSON at ``path``; a ConfigError names the file when it is
    unreadable or ``read`` finds it malformed (KeyError, TypeError, ValueError)."""
    try:
        from lrtune.inputs import read_json

        return read(read_json(path, "--profile"))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:  # ValueError: bad JSON, not UTF-8
        raise ConfigError(f"--profile {path}: not an lrtune profile ({e})") from None


_BATCH_SIZE = re.compile(r"[1-9][0-9]{0,6}")  # n = 1 .. 9,999,999 rows in one call


def _cost(v, where: str) -> float:
    """``v`` as a b(n): a finite JSON number > 0 (not a bool); ValueError naming ``where`` otherwise."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not (math.isfinite(v) and v > 0):
        raise ValueError(f"{where} must be a finite number > 0, got {v!r:.40}")
    return float(v)


def _sizes(b, name: str) -> dict[int, float]:
    """{n: b(n)} of a profile list b(1), b(2), ...; ValueError unless a non-empty list of finite numbers > 0."""
    if not isinstance(b, list) or not b:
        raise ValueError(f"{name} must be a non-empty list of positive numbers")
    return {n: _cost(v, f"{name}[{n - 1}] (b({n}))") for n, v in enumerate(b, start=1)}


def profile_c2(prof: Mapping) -> tuple[float, str | None]:
    """c2 of an ``lrtune profile`` JSON, and a note when it had to be re-derived.

    Profiles written before SD's α2 became the censoring-aware per-token acceptance
    (their ``sd`` block has no ``acceptance_rate``) stored the accepted/drafted rate as
    ``alpha2`` and fitted c2 to it; such a c2 understates what SD pays when g(γ2) is fed
    the per-token α2. Their c2 is refitted from the same measurement:
    c2 = c_from_sd(speedup, alpha_from_rate(rate, γ2), γ2) (at least 0.001)."""
    from lrtune.speedup import alpha_from_rate, c_from_sd

    sd = prof.get("sd")
    if (
        not isinstance(sd, Mapping)
        or "acceptance_rate" in sd
        or not all(isinstance(sd.get(k), (int, float)) for k in ("speedup", "alpha2", "gamma2"))
    ):
        return float(prof["c2"]), None
    alpha = min(alpha_from_rate(sd["alpha2"], int(sd["gamma2"])), 0.999)
    c2 = max(c_from_sd(sd["speedup"], alpha, int(sd["gamma2"])), 1e-3)
    return c2, (
        f"the profile's SD run predates the per-token α2: c2 refitted from its speedup "
        f"{sd['speedup']:.3f} and α2 {alpha:.3f} (from its accepted/drafted rate {sd['alpha2']:.3f}): "
        f"{prof['c2']:.3f} -> {c2:.3f}"
    )


def interpolate(curve: Mapping[int, float], n: float) -> float:
    """b(n) by linear interpolation between measured sizes (n within the measured range)."""
    xs = sorted(curve)
    if not xs or not xs[0] <= n <= xs[-1]:
        raise ValueError(f"n = {n} is outside the measured sizes {xs[:1]}..{xs[-1:]}")
    for lo, hi in zip(xs, xs[1:]):
        if lo <= n <= hi:
            return curve[lo] + (curve[hi] - curve[lo]) * (n - lo) / (hi - lo)
    return curve[xs[0]]


def choose_concurrency(
    curve: Mapping[int, float], rows_per_prompt: int, max_concurrent: int = 32, within: float = 0.95
) -> int:
    """The smallest N whose throughput N / b(N·r) is at least ``within`` of the best over
    N = 1..``max_concurrent`` with N·r inside the measured curve (r = rows per prompt per
    round, γ1 + 1 for LR). More prompts in flight hold more KV cache and raise each
    prompt's latency, so a near-best smaller N wins."""
    r = max(1, int(rows_per_prompt))
    candidates = [n for n in range(1, max_concurrent + 1) if curve and min(curve) <= n * r <= max(curve)]
    if not candidates:  # not even one prompt's rows measured: no evidence for batching
        return 1
    rate = {n: n / interpolate(curve, n * r) for n in candidates}
    best = max(rate.values())
    return min(n for n in candidates if rate[n] >= within * best)
