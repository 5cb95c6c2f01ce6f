"""lrtune.profiling: the calls a profile times are the calls the decoder makes."""

import pytest

from lrtune.backends.base import GenBatch, Generation
from lrtune.profiling import measure_prefill


class _Recorder:
    """A backend that answers every call in 0.1 s + 1 ms per prompt token and records its params."""

    def __init__(self):
        self.calls = []

    def generate(self, prefixes, params):
        self.calls.append(params)
        n = max(params.max_tokens, 1)
        return GenBatch(
            outputs=[Generation(token_ids=list(range(n)), text="", finish="length") for _ in prefixes],
            seconds=0.1 + 0.001 * sum(len(p) for p in prefixes),
        )


def test_the_score_call_is_timed_with_the_drafter_on_at_the_rounds_gamma2():
    target, draft = _Recorder(), _Recorder()
    out = measure_prefill(target, draft, [[1] * 10, [2] * 10], [16, 32], t_token=0.05, repeats=2, gamma2=4)
    assert out["gamma2"] == 4 and target.calls
    assert all(p.num_speculative_tokens == 4 for p in target.calls)  # warm-up, s(0) and the scored chains alike
    scored = [p for p in target.calls if p.score_from is not None]
    assert len(scored) == 4 and all(p.score_from == 10 for p in scored)
    # π(n) = (s(n) − s(0)) / (n·t_T): the fake's 1 ms per token over a 50 ms token
    assert [out["ratio_per_token"][n] for n in ("16", "32")] == pytest.approx([0.02, 0.02])


def test_without_sd_the_score_call_runs_the_target_alone():
    target, draft = _Recorder(), _Recorder()
    measure_prefill(target, draft, [[1] * 10], [16], t_token=0.05, repeats=1)
    assert all(p.num_speculative_tokens == 0 for p in target.calls)


class _CachingRecorder(_Recorder):
    """Charges 1 ms per prompt token the prefix cache does not hold; caches every prompt it ran."""

    def __init__(self):
        super().__init__()
        self.cached: list[tuple[int, ...]] = []

    def reset_prefix_cache(self):
        self.cached = []

    def generate(self, prefixes, params):
        self.calls.append(params)
        hit = max((len(c) for c in self.cached for p in prefixes if tuple(p[: len(c)]) == c), default=0)
        self.cached += [tuple(p) for p in prefixes]
        n = max(params.max_tokens, 1)
        return GenBatch(
            outputs=[Generation(token_ids=list(range(100, 100 + n)), text="", finish="length") for _ in prefixes],
            seconds=0.1 + 0.001 * sum(len(p) - hit for p in prefixes),
        )


def test_a_longer_chain_is_timed_without_the_blocks_a_shorter_one_left_in_the_cache():
    target, draft = _CachingRecorder(), _Recorder()
    out = measure_prefill(target, draft, [[1] * 10, [2] * 10], [16, 32, 64], t_token=0.05, repeats=2, gamma2=4)
    # every length pays for all its chain tokens: π(n) = 1 ms / 50 ms for each n
    assert [out["ratio_per_token"][n] for n in ("16", "32", "64")] == pytest.approx([0.02] * 3)


class _Clock:
    """A backend whose call of n rows takes cost(n) seconds (read from ``GenBatch.seconds``)."""

    def __init__(self, cost):
        self.cost, self.calls = cost, []

    def generate(self, prefixes, params):
        from lrtune.backends.base import GenBatch, Generation

        self.calls.append(len(prefixes))
        outs = [Generation(token_ids=[1] * params.max_tokens, text="", finish="length") for _ in prefixes]
        return GenBatch(outputs=outs, seconds=self.cost(len(prefixes), len(self.calls)))


def test_batch_costs_pair_each_size_with_the_one_row_time_of_its_own_try():
    """Drift between tries (every call of try k is k times slower) cancels in t(n)/t(1)."""
    from lrtune.profiling import batch_costs

    sizes = [2, 3, 4]
    clock = _Clock(lambda n, call: (1 + 0.25 * (n - 1)) * (1 + (call - 1) // 4))
    got = batch_costs(clock, [[1]] * 4, sizes, tokens=8, repeats=3)
    assert got["b"] == {1: 1.0, 2: 1.25, 3: 1.5, 4: 1.75}
    assert all(lo == hi for lo, hi in got["range"].values()) and got["t1"] == 2.0
    assert sorted(clock.calls) == sorted([1, 2, 3, 4] * 3)


def test_the_checks_flag_what_a_profile_cannot_mean():
    from lrtune.profiling import profile_checks

    good = {"c1": 0.2, "c2": 0.15, "batch_cost": [1.0, 1.1, 1.2], "prefill": {"overhead_tokens": 1.5}}
    assert profile_checks(good) == []
    bad = {
        "c1": 0.0,
        "c2": 2.0,
        "batch_cost": [1.0, 1.3, 0.8],
        "batch_cost_range": {"2": [1.29, 1.31], "3": [0.79, 0.81]},
        "prefill": {"overhead_tokens": -1.0, "ratio_per_token": {"16": -0.1}},
    }
    failed = " | ".join(profile_checks(bad))
    for words in ("c1 = 0.0", "c2 = 2.0", "overhead", "π(16)", "b(3) = 0.80 < 1", "below b(2)"):
        assert words in failed
    noisy = {**good, "batch_cost": [1.0, 1.3, 1.2], "batch_cost_range": {"2": [1.1, 1.5], "3": [1.0, 1.4]}}
    assert profile_checks(noisy) == []  # a dip within the noise is no failure


def _options():
    from lrtune.profiling import ProfileOptions

    return ProfileOptions(gamma1_max=2, tokens=4, repeats=1, sd_gamma2=0, prefill_max=0)


def test_a_profile_that_fails_its_checks_is_measured_once_more_and_the_second_kept():
    """The first measurement's 3-row batch runs in a third of a row's time (a hiccup), the second's
    as the machine does: the profile keeps the second, passing, with what the first failed."""
    from lrtune.profiling import measure_once

    calls = _Clock(lambda n, call: 1.0)
    measure_once(calls, _Clock(lambda n, call: 0.2), [[1]] * 3, _options())
    first = len(calls.calls)  # the target calls one measurement makes

    def cost(n, call):
        return 0.3 if n == 3 and call <= first else 1 + 0.1 * (n - 1)

    from lrtune.profiling import measure

    target = _Clock(cost)
    prof = measure(target, _Clock(lambda n, call: 0.2), [[1]] * 3, _options())
    assert prof["checks"]["remeasured"] is True and prof["checks"]["failed"] == []
    assert any("b(3)" in f for f in prof["checks"]["first_failed"])
    assert prof["batch_cost"] == pytest.approx([1.0, 1.1, 1.2])


def test_a_profile_that_passes_its_checks_is_measured_once_and_one_that_fails_twice_is_flagged(capsys):
    from lrtune.profiling import measure

    steady = _Clock(lambda n, call: 1 + 0.1 * (n - 1))
    prof = measure(steady, _Clock(lambda n, call: 0.2), [[1]] * 3, _options())
    assert prof["checks"] == {"failed": [], "remeasured": False}
    calls_once = len(steady.calls)
    broken = _Clock(lambda n, call: 0.3 if n == 3 else 1.0)
    prof = measure(broken, _Clock(lambda n, call: 0.2), [[1]] * 3, _options())
    assert prof["checks"]["remeasured"] and prof["checks"]["failed"] and len(broken.calls) == 2 * calls_once
    assert "fails its checks" in capsys.readouterr().err
