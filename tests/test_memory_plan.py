"""The GPU memory plan (lrtune.memory): each engine's share, checked before any engine starts."""

import math

import pytest

from lrtune.errors import ConfigError
from lrtune.memory import GiB, plan_gpu_memory, weight_bytes


def test_unfixed_roles_split_the_cap_by_weight_bytes_per_device():
    plan = plan_gpu_memory({"target": 64 * GiB, "draft": 4 * GiB}, cap=0.9, tensor_parallel_size=4)
    # target 16 GiB per device, draft 4 GiB on device 0: 0.9 split 16:4
    assert plan.shares["target"] == pytest.approx(0.72) and plan.shares["draft"] == pytest.approx(0.18)
    assert plan.device_sums() == pytest.approx([0.9, 0.72, 0.72, 0.72])


def test_fixed_shares_win_and_the_others_take_the_rest():
    plan = plan_gpu_memory({"target": 3 * GiB, "draft": GiB, "judge": 2 * GiB}, cap=0.9, fixed={"target": 0.5})
    assert plan.shares["target"] == 0.5
    assert plan.shares["draft"] == pytest.approx(0.4 / 3) and plan.shares["judge"] == pytest.approx(0.8 / 3)
    assert sum(plan.shares.values()) == pytest.approx(0.9)


def test_shares_that_overfill_device_0_are_refused_naming_the_role_to_lower():
    """The README's old example: target and draft at 0.55 each on one device."""
    with pytest.raises(ConfigError, match=r"target 0.55 \+ draft 0.6 = 1.15 .* lower --draft-gpu-share"):
        plan_gpu_memory({"target": GiB, "draft": GiB}, fixed={"target": 0.55, "draft": 0.6})


def test_fixed_shares_that_leave_nothing_for_the_other_roles_are_refused():
    with pytest.raises(ConfigError, match="leave 0.00 of device 0 for draft"):
        plan_gpu_memory({"target": GiB, "draft": GiB}, cap=0.9, fixed={"target": 0.9})


@pytest.mark.parametrize("bad", [0.0, -0.1, 1.5, math.nan, math.inf])
def test_a_share_outside_0_1_is_refused(bad):
    with pytest.raises(ConfigError, match="must be in \\(0, 1\\]"):
        plan_gpu_memory({"target": GiB}, fixed={"target": bad})
    with pytest.raises(ConfigError, match="must be in \\(0, 1\\]"):
        plan_gpu_memory({"target": GiB}, cap=bad)


def test_a_share_for_a_role_this_run_does_not_start_is_refused():
    with pytest.raises(ConfigError, match="--judge-gpu-share is set but this run starts no judge engine"):
        plan_gpu_memory({"target": GiB}, fixed={"judge": 0.2})


def test_a_share_too_small_for_its_weights_is_refused_when_the_device_size_is_known():
    with pytest.raises(ConfigError, match="draft engine's share 0.050 .* raise --draft-gpu-share"):
        plan_gpu_memory({"target": 10 * GiB, "draft": 6 * GiB}, fixed={"draft": 0.05}, device_bytes=80 * GiB)
    plan = plan_gpu_memory({"target": 10 * GiB, "draft": 6 * GiB}, device_bytes=80 * GiB)
    assert plan.as_dict()["device_gib"] == 80.0


def test_weight_bytes_sum_the_weight_files_of_a_model_directory(tmp_path):
    (tmp_path / "model-00001.safetensors").write_bytes(b"x" * 100)
    (tmp_path / "pytorch_model.bin").write_bytes(b"x" * 20)
    (tmp_path / "config.json").write_text("{}")
    assert weight_bytes(tmp_path) == 120 and weight_bytes(None) == 0 and weight_bytes(tmp_path / "missing") == 0
