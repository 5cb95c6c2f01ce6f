"""LR+SD's target rows decode with SD: their batch cost b_SD(n) is measured and priced apart."""

import json
from types import SimpleNamespace

import pytest

from lrtune.backends.base import SDCounters
from lrtune.batchcost import measure_batch_cost, read_profile_sd_curve
from lrtune.errors import ConfigError
from lrtune.speedup import h
from lrtune.stats import DecodeStats


class _Timed:
    """A backend whose call time grows with rows x (verified tokens per row): SD rows batch worse."""

    def __init__(self):
        self.seen = []

    def generate(self, prefixes, params):
        self.seen.append((params.max_tokens, params.num_speculative_tokens))
        per_row = 1 + params.num_speculative_tokens
        return SimpleNamespace(seconds=1.0 + 0.1 * len(prefixes) * per_row)


def test_measure_batch_cost_decodes_the_rows_with_sd_when_asked_and_divides_by_one_sd_row():
    be = _Timed()
    curve = measure_batch_cost(be, [[1, 2, 3]], [4], tokens=4, repeats=1, gamma2=4)
    assert {k for n, k in be.seen if n == 4} == {4}  # the timed calls decode with SD
    assert curve[1] == 1.0 and curve[4] == pytest.approx((1 + 0.1 * 4 * 5) / (1 + 0.1 * 5))
    plain = measure_batch_cost(_Timed(), [[1, 2, 3]], [4], tokens=4, repeats=1)
    assert curve[4] > plain[4]


def test_profile_sd_curve_is_read_with_its_gamma2_and_absent_in_old_profiles(tmp_path):
    p = tmp_path / "prof.json"
    p.write_text(json.dumps({"batch_cost": [1.0, 1.1], "batch_cost_sd": [1.0, 1.3, 1.5], "sd": {"gamma2": 4}}))
    assert read_profile_sd_curve(str(p)) == (4, {1: 1.0, 2: 1.3, 3: 1.5})
    p.write_text(json.dumps({"batch_cost": [1.0, 1.1], "sd": {"gamma2": 4}}))
    assert read_profile_sd_curve(str(p)) is None
    p.write_text(json.dumps({"batch_cost": [1.0], "batch_cost_sd": [1.0, -1], "sd": {"gamma2": 4}}))
    with pytest.raises(ConfigError, match="not an lrtune profile"):
        read_profile_sd_curve(str(p))


def test_report_prices_lr_sd_rows_with_the_sd_batch_cost_at_their_gamma2_and_lr_rows_with_plain(tmp_path, monkeypatch):
    from lrtune.eval import evaluate
    from lrtune.eval.evaluate import EvalConfig, EvalOptions, parse_methods

    monkeypatch.setattr(evaluate, "machine_info", lambda: {})
    cfg = EvalConfig(options=EvalOptions(plots=False, out=str(tmp_path)))
    specs = parse_methods("lr,lr+sd", None, 3, 4) + [evaluate.MethodSpec("lr+sd[g1=3,g2=2]", "lr+sd", 3, 2)]

    def rec(method, sd=None):  # c = (3 s / 100 draft tokens) / (10 s / 100 target tokens) = 0.3, α1 = 0.6
        lr = (
            {}
            if method == "target"
            else dict(draft_s=3.0, draft_step_tokens=100, drafted_by_pos=[10], accepted_by_pos=[6])
        )
        s = DecodeStats(wall_s=10.0 if method == "target" else 5.0, generated_tokens=100, **lr)
        if sd:
            s.observe_sd(sd)
        return {
            "problem": "p0",
            "method": method,
            "wall_s": s.wall_s,
            "correct": True,
            "finish": "eos",
            "stats": s.to_dict(),
        }

    sd = SDCounters(10, 40, 30, [9, 8, 7, 6])  # α2 = 30 / 34
    records = [rec("target"), rec("lr"), rec("lr+sd", sd), rec("lr+sd[g1=3,g2=2]", SDCounters(10, 20, 15, [8, 7]))]
    plain, with_sd = {1: 1.0, 4: 1.0}, {"gamma2": 4, "curve": {1: 1.0, 4: 1.5}}
    data = evaluate.write_reports(
        cfg, specs, [SimpleNamespace(id="p0", meta={})], records, tmp_path, {}, plain, batch_cost_sd=with_sd
    )
    rows = data["methods"]
    assert data["batch_cost_sd"] == with_sd
    assert rows["lr+sd"]["predicted_speedup"] == pytest.approx(h(3, 4, 0.6, 0.3, 30 / 34, 0.3, [1.0, 1.0, 1.0, 1.5]))
    g2_rate = rows["lr+sd[g1=3,g2=2]"]["alpha2"]  # another γ2: the plain curve (the SD one was measured at 4)
    assert rows["lr+sd[g1=3,g2=2]"]["predicted_speedup"] == pytest.approx(h(3, 2, 0.6, 0.3, g2_rate, 0.3, [1.0] * 4))
    assert rows["lr"]["predicted_speedup"] > rows["lr+sd"]["predicted_speedup"] / 2  # lr priced with plain b(n)
