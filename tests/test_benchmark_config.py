"""Benchmark scripts take ``--config FILE`` like every lrtune command (benchmarks.parse)."""

from __future__ import annotations

import pytest

from benchmarks import parse
from benchmarks.bench_batched import make_parser


def test_a_config_file_sets_defaults_and_the_command_line_wins(tmp_path):
    cfg = tmp_path / "probe.yaml"
    cfg.write_text("limit: 3\nverifier: exact\nmax-model-len: 2048\n")
    args = parse(make_parser(), ["--config", str(cfg), "--limit", "5"])
    assert (args.limit, args.verifier, args.max_model_len) == (5, "exact", 2048)


@pytest.mark.parametrize("text,message", [("nope: 1\n", "unknown option(s)"), ("[1, 2]\n", "mapping")])
def test_a_bad_config_file_is_a_one_line_error(tmp_path, capsys, text, message):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(text)
    with pytest.raises(SystemExit) as e:
        parse(make_parser(), ["--config", str(cfg)])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1 and message in err[0]


def test_round_split_sums_counters_per_method_and_divides_by_rounds():
    from benchmarks.round_split import split

    recs = [
        {"method": "lr+sd", "stats": {"rounds": 2, "draft_s": 4.0, "target_s": 6.0, "aborted_target_rows": 1}},
        {"method": "lr+sd", "stats": {"rounds": 3, "draft_s": 1.0, "target_s": 4.0}},
        {"method": "sd", "stats": {"rounds": 0, "target_s": 9.0}},
    ]
    out = split(recs)
    assert set(out) == {"lr+sd"} and out["lr+sd"]["problems"] == 2
    assert out["lr+sd"]["per_round"]["draft_s"] == 1.0 and out["lr+sd"]["per_round"]["target_s"] == 2.0
    assert out["lr+sd"]["per_round"]["aborted_target_rows"] == 0.2


def test_round_split_equalises_identical_drafting_and_skips_problems_with_other_drafts():
    from benchmarks.round_split import vs_reference

    def rec(p, m, wall, draft, tokens=100):
        return {
            "problem": p,
            "method": m,
            "wall_s": wall,
            "stats": {"rounds": 3, "draft_s": draft, "draft_step_tokens": tokens},
        }

    recs = [
        rec("a", "lr+sd", 20.0, 8.0),
        rec("a", "lr+sd/abort", 18.0, 10.0),  # abort drafted slower by noise
        rec("b", "lr+sd", 30.0, 12.0),
        rec("b", "lr+sd/abort", 24.0, 12.0),
        rec("c", "lr+sd", 10.0, 5.0),
        rec("c", "lr+sd/abort", 9.0, 5.0, tokens=90),
    ]  # other drafts: skipped
    out = vs_reference(recs)["lr+sd/abort"]
    assert out["problems"] == 2
    assert out["ratio"] == 50.0 / 42.0
    assert out["ratio_equal_drafts"] == 50.0 / (16.0 + 24.0)
    assert out["ratio_oracle_draft_stop"] == out["ratio_equal_drafts"]  # no step counts: no draft stop


def test_round_split_oracle_draft_stop_keeps_the_draft_share_of_the_judged_steps():
    from benchmarks.round_split import vs_reference

    def rec(m, wall, draft, judged):
        return {
            "problem": "a",
            "method": m,
            "wall_s": wall,
            "stats": {"rounds": 2, "draft_s": draft, "draft_step_tokens": 90, "drafted_steps": judged},
        }

    # plain drafts 6 steps in 12 s; abort judged 4 of them: a drafter stopping at the rejection writes 4 (8 s)
    out = vs_reference([rec("lr+sd", 30.0, 12.0, 6), rec("lr+sd/abort", 26.0, 13.0, 4)])["lr+sd/abort"]
    assert out["ratio_equal_drafts"] == 30.0 / 25.0
    assert out["ratio_oracle_draft_stop"] == 30.0 / (26.0 - 13.0 + 8.0)


def test_reprice_feeds_the_per_token_alpha2_to_the_model_and_keeps_the_summarys_figures_beside(tmp_path):
    import json

    from benchmarks.reprice import reprice
    from lrtune.backends.base import SDCounters
    from lrtune.stats import DecodeStats

    def rec(problem, method, wall, sd=None, **lr):
        st = DecodeStats(wall_s=wall, generated_tokens=100, **lr)
        if sd:
            st.observe_sd(sd)
        return {
            "problem": problem,
            "method": method,
            "wall_s": wall,
            "correct": True,
            "finish": "eos",
            "stats": st.to_dict(),
        }

    sd = SDCounters(20, 80, 56, [18, 15, 13, 10])
    lr = dict(draft_s=1.5, draft_step_tokens=50, rounds=5, drafted_by_pos=[5], accepted_by_pos=[3])  # c = 0.3
    records = [r for p in "ab" for r in (rec(p, "target", 10.0), rec(p, "sd", 6.0, sd), rec(p, "lr+sd", 8.0, sd, **lr))]
    for r in records:  # written before sd_stopped was counted
        r["stats"].pop("sd_stopped")
    (tmp_path / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "options": {"methods": "target,sd,lr+sd", "sweep": None, "mode": "latency"},
                "models": {"verifier": "embedding"},
                "decode": {"gamma1": 3, "gamma2": 4},
            }
        )
    )
    (tmp_path / "summary.json").write_text(
        json.dumps(
            {
                "batch_cost": None,
                "methods": {
                    "target": {"alpha2": None, "predicted_speedup": 1.0},
                    "sd": {"alpha2": 0.7, "predicted_speedup": 1.2, "measured_over_predicted": 10 / 6 / 1.2},
                    "lr+sd": {"alpha2": 0.7, "predicted_speedup": 1.0},
                },
            }
        )
    )
    out = reprice(tmp_path)["methods"]["sd"]
    assert out["alpha2_summary"] == 0.7 and out["alpha2"] == 56 / (56 + 10)  # 10 of 20 passes stopped early
    assert out["predicted"] > out["predicted_summary"] and out["speedup_total"] == 10 / 6


def test_score_split_of_a_run_that_follows_the_model_has_output_and_cost_ratios_of_one():
    from benchmarks.score_split import split

    # t0 = 0.1 s/token; L = 10 tokens per drafted step -> T = 1 s; α1 = 0.5, γ1 = 3, no SD (g = 1)
    recs = [
        {"problem": "p", "method": "target", "tokens": 100, "wall_s": 10.0, "stats": {}},
        {
            "problem": "p",
            "method": "score/v=x",
            "tokens": 187.5,
            "wall_s": 25.0,
            "stats": {
                "score_rounds": 10,
                "drafted_steps": 30,
                "draft_step_tokens": 300,
                "draft_s": 12.0,
                "prefill_s": 3.0,
                "target_s": 13.0,
                "verify_s": 0.0,
                "committed_draft_steps": 8,
                "committed_target_steps": 10,
                "target_step_tokens": 100,
            },
        },
        {
            "problem": "p",
            "method": "adaptive/score/v=x",
            "tokens": 50,
            "wall_s": 5.0,
            "stats": {"score_rounds": 2, "sd_rounds": 1, "drafted_steps": 3, "draft_step_tokens": 30},
        },
    ]
    row = {
        "alpha1": 0.5,
        "alpha2": None,
        "gamma1": 3,
        "gamma2": 0,
        "prefill_ratio": 0.3,
        "speedup_total": 0.75,
        "predicted_speedup": 1.875 / 2.5,
        "measured_over_predicted": 1.0,
    }
    summary = {
        "c_measured": 0.4,
        "methods": {
            "target": {"predicted_speedup": 1.0},
            "score/v=x": row,
            "adaptive/score/v=x": {**row, "predicted_speedup": None},
        },
    }
    out = split(summary, recs)
    assert set(out) == {"score/v=x"}  # target-only and mixed rows have no score-round model to check
    r = out["score/v=x"]
    assert r["output_ratio"] == pytest.approx(1.0) and r["cost_ratio"] == pytest.approx(1.0)
    assert r["per_round_s"]["bonus_step"] == pytest.approx(1.0) and r["per_round"]["bonus_tokens"] == 10


@pytest.mark.parametrize("script", ["score_split", "score_bound"])
def test_score_scripts_refuse_a_missing_input_in_one_line_and_write_nothing(tmp_path, capsys, script):
    import importlib

    mod = importlib.import_module(f"benchmarks.{script}")
    if script == "score_split":
        code = mod.main([str(tmp_path / "nope")])
    else:
        code = mod.main(
            mod.make_parser().parse_args(
                ["--profile", str(tmp_path / "nope.json"), "--alpha2", "0.9", "--out", str(tmp_path / "out.json")]
            )
        )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("error:") and list(tmp_path.iterdir()) == []
