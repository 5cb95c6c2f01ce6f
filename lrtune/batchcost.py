"""The batch cost curve b(n) and the concurrency it implies.

b(n) = time of one engine call decoding n distinct prefixes ``tokens`` tokens each / the
time of one prefix (b(1) = 1). A round of N in-flight prompts with r target rows each is
one call of N·r rows, so problems finish at a rate proportional to N / b(N·r):
:func:`choose_concurrency` picks the N that (nearly) maximises it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from lrtune.errors import ConfigError


def batch_runs(backend, prompts: Sequence[Sequence[int]], sizes: Sequence[int], tokens: int = 32,
               repeats: int = 2) -> dict:
    """Per batch size n (1 and ``sizes``): the fastest of ``repeats`` calls decoding n distinct
    prefixes, ``tokens`` tokens each, plain (no SD). Prefix i is ``prompts[i % len]`` plus
    ``i // len + 1`` repeats of its last token, so every row differs. Each size's prefixes
    are prefilled first, untimed (a round's rows extend cached prefixes: b(n) prices
    decoding, not a cold prompt)."""
    from lrtune.backends.base import GenParams

    params = GenParams(max_tokens=tokens, stop_at_delimiter=False)
    prefill = GenParams(max_tokens=1, stop_at_delimiter=False)
    runs = {}
    for n in sorted({1, *sizes}):
        prefixes = [list(prompts[i % len(prompts)]) + [prompts[i % len(prompts)][-1]] * (i // len(prompts) + 1)
                    for i in range(n)]
        backend.generate(prefixes, prefill)
        runs[n] = min((backend.generate(prefixes, params) for _ in range(repeats)), key=lambda r: r.seconds)
    return runs


def measure_batch_cost(backend, prompts: Sequence[Sequence[int]], sizes: Sequence[int], tokens: int = 32,
                       repeats: int = 2) -> dict[int, float]:
    """{n: b(n)} on ``backend`` (see :func:`batch_runs`); b(1) = 1."""
    runs = batch_runs(backend, prompts, sizes, tokens, repeats)
    return {n: runs[n].seconds / runs[1].seconds for n in runs}


def read_profile_curve(path: str) -> dict[int, float]:
    """{n: b(n)} from an ``lrtune profile`` JSON: its ``batch_cost`` list (n = 1, 2, ...) and,
    where measured, its ``batch_cost_curve`` ({n: b(n)} at larger n)."""
    try:
        data = json.loads(Path(path).expanduser().read_text(encoding="utf-8"))
        b = data["batch_cost"]
        if not isinstance(b, list) or not b or not all(isinstance(v, (int, float)) and v > 0 for v in b):
            raise ValueError("batch_cost must be a non-empty list of positive numbers")
        curve = {n: float(v) for n, v in enumerate(b, start=1)}
        for n, v in (data.get("batch_cost_curve") or {}).items():
            if not (isinstance(v, (int, float)) and v > 0):
                raise ValueError("batch_cost_curve values must be positive numbers")
            curve[int(n)] = float(v)
    except (OSError, ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
        raise ConfigError(f"--profile {path}: not an lrtune profile ({e})") from None
    return dict(sorted(curve.items()))


def interpolate(curve: Mapping[int, float], n: float) -> float:
    """b(n) by linear interpolation between measured sizes (n within the measured range)."""
    xs = sorted(curve)
    if not xs or not xs[0] <= n <= xs[-1]:
        raise ValueError(f"n = {n} is outside the measured sizes {xs[:1]}..{xs[-1:]}")
    for lo, hi in zip(xs, xs[1:]):
        if lo <= n <= hi:
            return curve[lo] + (curve[hi] - curve[lo]) * (n - lo) / (hi - lo)
    return curve[xs[0]]


def choose_concurrency(curve: Mapping[int, float], rows_per_prompt: int, max_concurrent: int = 32,
                       within: float = 0.95) -> int:
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
