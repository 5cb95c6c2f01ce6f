"""α2 as the speedup model's per-token acceptance: the rate conversion and old profiles."""

import pytest

from lrtune.batchcost import profile_c2
from lrtune.errors import ConfigError
from lrtune.speedup import alpha_from_rate, c_from_sd, g


@pytest.mark.parametrize("alpha,gamma", [(0.0, 1), (0.3, 2), (0.8, 4), (0.95, 8), (1.0, 3)])
def test_alpha_from_rate_inverts_the_accepted_fraction_of_iid_passes(alpha, gamma):
    rate = sum(alpha**j for j in range(1, gamma + 1)) / gamma
    assert alpha_from_rate(rate, gamma) == pytest.approx(alpha, abs=1e-9)


def test_alpha_from_rate_refuses_a_rate_outside_the_unit_interval():
    with pytest.raises(ConfigError):
        alpha_from_rate(1.2, 4)
    with pytest.raises(ConfigError):
        alpha_from_rate(0.5, 0)


def test_an_old_profile_gets_the_c2_that_makes_g_of_the_per_token_alpha_equal_its_measured_speedup():
    old = {"c1": 0.34, "c2": 0.22, "sd": {"gamma2": 4, "speedup": 1.69, "alpha2": 0.771, "c2": 0.22}}
    c2, note = profile_c2(old)
    alpha = alpha_from_rate(0.771, 4)
    assert note and "refitted" in note and c2 == pytest.approx(c_from_sd(1.69, alpha, 4))
    assert g(alpha, c2, 4) == pytest.approx(1.69)
    assert c2 > 0.22  # the rate understates α2, so the old fit understated what SD pays


def test_a_new_profile_keeps_its_c2():
    new = {"c1": 0.34, "c2": 0.35, "sd": {"gamma2": 4, "speedup": 1.69, "alpha2": 0.9, "acceptance_rate": 0.77}}
    assert profile_c2(new) == (0.35, None)
    assert profile_c2({"c1": 0.3, "c2": 0.3, "sd": None}) == (0.3, None)
