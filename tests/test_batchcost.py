"""The batch cost curve and the concurrency it implies (``lrtune.batchcost``)."""

import json
import re

import pytest

from lrtune.batchcost import choose_concurrency, interpolate, read_profile_curve
from lrtune.errors import ConfigError


@pytest.mark.parametrize("n,expect", [(1, 1.0), (2, 1.5), (3, 2.0), (6, 3.5), (8, 4.5)])
def test_interpolate_is_linear_between_measured_sizes(n, expect):
    assert interpolate({1: 1.0, 2: 1.5, 4: 2.5, 8: 4.5}, n) == pytest.approx(expect)


def test_interpolate_refuses_sizes_outside_the_curve():
    with pytest.raises(ValueError):
        interpolate({1: 1.0, 4: 2.0}, 5)


@pytest.mark.parametrize(
    "curve,rows,expect",
    [
        ({1: 1.0, 32: 1.0}, 4, 8),  # free batches: as many as fit the measured curve
        ({n: float(n) for n in range(1, 33)}, 3, 1),  # rows cost linearly: batching buys nothing
        ({1: 1.0, 4: 1.2, 8: 1.6, 16: 3.2, 32: 6.4}, 4, 2),  # the curve bends at 8 rows (2 prompts x 4)
        ({1: 1.0, 4: 1.2}, 8, 1),  # no measurement for even one prompt's rows: 1
    ],
)
def test_choose_concurrency_takes_the_smallest_near_best_throughput(curve, rows, expect):
    assert choose_concurrency(curve, rows) == expect


def test_choose_concurrency_respects_the_cap():
    assert choose_concurrency({1: 1.0, 64: 1.0}, 1, max_concurrent=5) == 5


def test_read_profile_curve_merges_the_list_and_the_large_sizes(tmp_path):
    p = tmp_path / "profile.json"
    p.write_text(json.dumps({"batch_cost": [1.0, 1.1, 1.2], "batch_cost_curve": {"8": 1.9, "16": 3.0}}))
    assert read_profile_curve(str(p)) == {1: 1.0, 2: 1.1, 3: 1.2, 8: 1.9, 16: 3.0}
    p.write_text(json.dumps({"batch_cost": [1.0, -2]}))
    with pytest.raises(ConfigError, match="not an lrtune profile"):
        read_profile_curve(str(p))
    p.write_bytes(b"\xff\xfe")
    with pytest.raises(ConfigError, match="not an lrtune profile"):
        read_profile_curve(str(p))


@pytest.mark.parametrize(
    "profile,where",
    [
        ({"batch_cost_curve": {"-3": 2.0, "8": 1.9}}, "batch_cost_curve key '-3' is not a batch size"),
        ({"batch_cost_curve": {"0": 1.0}}, "batch_cost_curve key '0' is not a batch size"),
        ({"batch_cost_curve": {"8.5": 1.0}}, "batch_cost_curve key '8.5' is not a batch size"),
        ({"batch_cost_curve": {"8": 0}}, r"batch_cost_curve\['8'\] must be a finite number > 0, got 0"),
        ({"batch_cost_curve": {"8": True}}, r"batch_cost_curve\['8'\] must be a finite number > 0, got True"),
        ({"batch_cost_curve": {"8": float("inf")}}, r"batch_cost_curve\['8'\] must be a finite number > 0, got inf"),
        ({"batch_cost": [1.0, float("inf")]}, r"batch_cost\[1\] \(b\(2\)\) must be a finite number > 0, got inf"),
        ({"batch_cost": [True, 1.2]}, r"batch_cost\[0\] \(b\(1\)\) must be a finite number > 0, got True"),
    ],
)
def test_a_batch_cost_curve_holds_sizes_of_at_least_one_and_finite_costs_above_zero(tmp_path, profile, where):
    p = tmp_path / "profile.json"
    p.write_text(json.dumps({"batch_cost": [1.0, 1.1], **profile}))  # json writes inf as Infinity
    with pytest.raises(ConfigError, match=rf"^--profile {re.escape(str(p))}: not an lrtune profile \({where}"):
        read_profile_curve(str(p))


def test_a_json_object_with_nothing_a_profile_holds_is_refused_naming_the_file(tmp_path):
    import pytest

    from lrtune.batchcost import read_profile_json
    from lrtune.errors import ConfigError

    path = tmp_path / "p.json"
    path.write_text('{"a": 1}')
    with pytest.raises(ConfigError, match=r"--profile .*p.json: not an lrtune profile \(none of batch_cost"):
        read_profile_json(str(path))
    path.write_text('{"sd": {"speedup": 1.5}}')
    assert read_profile_json(str(path)) == {"sd": {"speedup": 1.5}}
