"""benchmarks/profile_stability: a size passes when every profile's b(n) is within the tolerance of the median."""

import pytest

from benchmarks.profile_stability import stability


def _profile(b):
    return {"batch_cost": b, "target_s_per_token": 0.2, "c1": 0.4, "checks": {"failed": []}}


def test_a_size_passes_when_every_profile_is_within_the_tolerance_of_the_median():
    runs = [_profile([1.0, 1.0, 0.9]), _profile([1.0, 1.05, 0.95]), _profile([1.0, 1.2, 0.96])]
    out = stability(runs, tolerance=0.10)
    two, three = out["sizes"]
    assert two["median"] == 1.05 and two["max_deviation"] == pytest.approx(0.15 / 1.05) and not two["within"]
    assert three["median"] == 0.95 and three["within"] and out["below_one"] == [3]
    assert not out["all_within"] and out["profiles"] == 3
