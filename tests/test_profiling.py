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
    for words in ("c1 = 0.0", "c2 = 2.0", "overhead", "π(16)", "b(3) = 0.80 [0.79, 0.81] < 1", "below b(2)"):
        assert words in failed
    noisy = {**good, "batch_cost": [1.0, 1.3, 1.2], "batch_cost_range": {"2": [1.1, 1.5], "3": [1.0, 1.4]}}
    assert profile_checks(noisy) == []  # a dip within the noise is no failure


def test_a_dip_below_one_whose_tries_reach_back_to_one_is_noise_not_a_failure():
    """A demo profile (2 tries of 16 tokens) with b(2) = 0.89 [0.75, 1.19]: one try's one-row time
    was slow, the other's was not; a dip as deep with tries that agree is flagged."""
    from lrtune.profiling import profile_checks

    noisy = {
        "c1": 0.36,
        "c2": 0.45,
        "batch_cost": [1.0, 0.89, 0.90],
        "batch_cost_range": {"2": [0.75, 1.19], "3": [0.77, 1.02]},
    }
    assert profile_checks(noisy) == []
    agreeing = {**noisy, "batch_cost": [1.0, 0.85, 0.86], "batch_cost_range": {"2": [0.84, 0.86], "3": [0.85, 0.87]}}
    failed = " | ".join(profile_checks(agreeing))
    assert "b(2) = 0.85 [0.84, 0.86] < 1" in failed and "b(3) = 0.86 [0.85, 0.87] < 1" in failed


def test_where_the_kernel_makes_four_rows_cheaper_than_one_the_curve_may_dip_down_to_its_floor():
    """AVX-512 bf16 without AMX (benchmarks/engine_costs): 1-3 rows cost about one row, 4 rows 0.75,
    then the cost rises; on that machine the dip is no failure, a b(n) far below it is."""
    from lrtune.profiling import KERNEL_FLOOR, profile_checks

    kernel = {"c1": 0.3, "c2": 0.3, "batch_cost": [1.0, 1.0, 0.98, 0.75, 0.85, 0.95, 1.3]}
    assert profile_checks(kernel, floor=KERNEL_FLOOR) == []
    assert any("below b(3)" in f for f in profile_checks(kernel, floor=1.0))  # no kernel effect known: a drop
    too_low = {**kernel, "batch_cost": [1.0, 1.0, 0.98, 0.45, 0.85, 0.95, 1.3]}
    (failed,) = profile_checks(too_low, floor=KERNEL_FLOOR)
    assert "b(4) = 0.45" in failed and "kernel explains" in failed


@pytest.mark.parametrize(
    "flags, floor",
    [
        (["avx2", "avx512f", "avx512_bf16", "avx512_vnni"], 0.7),  # AMD EPYC (Zen 4): AVX-512 bf16 matmul
        (["avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_int8"], 1.0),  # Intel with AMX
        (["avx2"], 1.0),  # AVX2, float32
    ],
)
def test_the_batch_cost_floor_follows_the_cpus_matmul_kernel(flags, floor):
    from lrtune.profiling import batch_floor

    assert batch_floor(flags) == floor


def test_the_committed_demo_profile_that_failed_the_interval_blind_rule_passes_with_its_intervals():
    """benchmarks/memory/demo_2048/profile.json failed the old rule (b(3) = 0.90 < 0.9 with its
    tries at [0.77, 1.02]); on its AMX machine (floor 1) every dip lies within its tries' spread."""
    import json
    from pathlib import Path

    from lrtune.profiling import batch_floor, profile_checks

    prof = json.loads((Path(__file__).parents[1] / "benchmarks/memory/demo_2048/profile.json").read_text())
    assert prof["checks"]["failed"] and batch_floor(prof["machine"]["cpu_flags"]) == 1.0
    assert profile_checks(prof, floor=1.0) == []


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
    prof = measure(target, _Clock(lambda n, call: 0.2), [[1]] * 3, _options(), floor=1.0)
    assert prof["checks"]["remeasured"] is True and prof["checks"]["failed"] == []
    assert any("b(3)" in f for f in prof["checks"]["first_failed"])
    assert prof["batch_cost"] == pytest.approx([1.0, 1.1, 1.2])


def test_a_profile_that_passes_its_checks_is_measured_once_and_one_that_fails_twice_is_flagged(capsys):
    from lrtune.profiling import measure

    steady = _Clock(lambda n, call: 1 + 0.1 * (n - 1))
    prof = measure(steady, _Clock(lambda n, call: 0.2), [[1]] * 3, _options(), floor=1.0)
    assert prof["checks"] == {"failed": [], "remeasured": False, "b_floor": 1.0}
    calls_once = len(steady.calls)
    broken = _Clock(lambda n, call: 0.3 if n == 3 else 1.0)
    prof = measure(broken, _Clock(lambda n, call: 0.2), [[1]] * 3, _options(), floor=1.0)
    assert prof["checks"]["remeasured"] and prof["checks"]["failed"] and len(broken.calls) == 2 * calls_once
    assert "fails its checks" in capsys.readouterr().err
