"""Summary math of `lrtune evaluate` (pure functions over records)."""

import math

import pytest

from lrtune.decoder import DecodeConfig

from lrtune.eval import metrics
from lrtune.eval.evaluate import parse_methods, parse_sweep
from lrtune.errors import ConfigError
from lrtune.stats import DecodeStats


def test_wilson_interval_contains_the_proportion_and_stays_in_unit_range():
    for k, n in [(0, 10), (3, 10), (10, 10), (50, 100)]:
        lo, hi = metrics.wilson_ci(k, n)
        assert 0 <= lo <= k / n <= hi <= 1
    lo, hi = metrics.wilson_ci(50, 100)
    assert math.isclose(lo, 0.4038, abs_tol=1e-3) and math.isclose(hi, 0.5962, abs_tol=1e-3)
    assert metrics.wilson_ci(0, 0) is None


def test_bootstrap_interval_is_reproducible_and_brackets_the_mean():
    vals = [1.0, 1.2, 0.9, 1.5, 1.1, 1.3]
    a, b = metrics.bootstrap_ci(vals), metrics.bootstrap_ci(vals)
    assert a == b and a[0] <= sum(vals) / len(vals) <= a[1]


def rec(problem, method, wall, correct, **stats):
    s = DecodeStats(wall_s=wall, generated_tokens=stats.pop("tokens", 10), **stats)
    return {"problem": problem, "method": method, "wall_s": wall, "correct": correct, "stats": s.to_dict()}


def test_speedup_is_per_problem_target_wall_over_method_wall():
    records = [
        rec("a", "target", 10.0, True),
        rec("a", "lr", 5.0, True),
        rec("b", "target", 6.0, False),
        rec("b", "lr", 6.0, True),
    ]
    s = metrics.summarize(records, ["target", "lr"])
    assert s["lr"]["speedup_total"] == pytest.approx(16 / 11)
    assert s["lr"]["speedup_mean"] == pytest.approx((2.0 + 1.0) / 2)
    assert s["lr"]["speedup_median"] == pytest.approx(1.5)
    assert s["target"]["speedup_total"] == pytest.approx(1.0)
    assert s["lr"]["accuracy"] == 1.0 and s["target"]["accuracy"] == 0.5


def test_total_speedup_sums_only_the_problems_the_baseline_also_decoded():
    records = [rec("a", "target", 10.0, True), rec("a", "lr", 5.0, True), rec("b", "lr", 5.0, True)]
    s = metrics.summarize(records, ["target", "lr"])["lr"]
    assert s["speedup_total"] == pytest.approx(2.0) and s["speedup_mean"] == pytest.approx(2.0)
    assert s["wall_s"] == 10.0  # the row's own time still counts every record


def test_acceptance_is_pooled_over_problems():
    records = [
        rec("a", "target", 1.0, True),
        rec("a", "lr", 1.0, True, drafted_by_pos=[2, 1], accepted_by_pos=[1, 1]),
        rec("b", "target", 1.0, True),
        rec("b", "lr", 1.0, True, drafted_by_pos=[2, 0], accepted_by_pos=[2, 0]),
    ]
    s = metrics.summarize(records, ["target", "lr"])["lr"]
    assert s["alpha1_by_pos"] == [0.75, 1.0] and s["alpha1"] == pytest.approx(4 / 5)


def test_methods_always_start_with_the_target_baseline_and_reject_unknown_names():
    specs = parse_methods("lr+sd,sd", None, 2, 4)
    assert [s.label for s in specs] == ["target", "lr+sd", "sd"]
    assert specs[1].gamma1 == 2 and specs[1].gamma2 == 4 and specs[2].gamma1 == 0
    with pytest.raises(ConfigError, match="unknown method"):
        parse_methods("target,beam", None, 2, 4)


def test_sweep_grid_adds_one_method_per_point_and_skips_the_origin():
    specs = parse_methods("target", "gamma1=0,2 gamma2=0,4", 2, 4)
    assert [(s.kind, s.gamma1, s.gamma2) for s in specs[1:]] == [("sd", 0, 4), ("lr", 2, 0), ("lr+sd", 2, 4)]
    for bad in ("gamma3=1", "gamma1=a", "gamma1=99", ""):
        with pytest.raises(ConfigError):
            parse_sweep(bad)


def test_prediction_uses_the_speedup_model():
    from lrtune.speedup import f_sync, g

    assert metrics.predicted_speedup("sd", 0, 4, None, 0.8, 0.3) == pytest.approx(g(0.8, 0.3, 4))
    assert metrics.predicted_speedup("lr", 2, 0, 0.5, None, 0.3, [1.0, 1.1, 1.2]) == pytest.approx(
        f_sync(0.5, 0.3, 2, batch_cost=[1.0, 1.1, 1.2])
    )
    assert metrics.predicted_speedup("lr", 2, 0, None, None, 0.3) is None


def test_method_options_parse_into_async_width_and_verifier():
    from lrtune.eval.evaluate import parse_method

    s = parse_method("lr+sd/async/v=llm_judge", 2, 4)
    assert (s.kind, s.async_lr, s.width, s.verifier, s.gamma1, s.gamma2) == ("lr+sd", True, 1, "llm_judge", 2, 4)
    assert parse_method("lr/w=2", 3, 4).width == 2
    assert parse_method("lr/v=random(0.5)", 3, 4).verifier == "random(0.5)"
    ucb = parse_method("adaptive/c=grid-ucb", 3, 4)
    assert (ucb.kind, ucb.control, ucb.controller) == ("lr+sd", "adaptive", "grid-ucb")
    abort = parse_method("lr+sd/abort", 3, 4)
    assert abort.early_abort and abort.decode_config(DecodeConfig()).early_abort
    for bad in ("lr/fast", "sd/async", "lr/w=x", "beam/async", "sd/abort"):
        with pytest.raises(ConfigError):
            parse_method(bad, 2, 4)


def test_committed_step_tokens_pool_every_lr_records_steps():
    recs = [{"step_tokens": [3, 40, 0]}, {"step_tokens": None}, {"text": "no steps"}, {"step_tokens": [7]}]
    assert metrics.committed_step_tokens(recs) == [3, 40, 7]


def test_a_longest_step_priced_batch_lowers_the_lr_prediction_and_leaves_sd_alone():
    from lrtune.speedup import longest_step_batch_cost

    b = [1.0, 1.05, 1.1]
    priced = longest_step_batch_cost(b, [10, 30, 80])
    assert metrics.predicted_speedup("lr", 2, 0, 0.6, None, 0.3, priced) < metrics.predicted_speedup(
        "lr", 2, 0, 0.6, None, 0.3, b
    )
    assert metrics.predicted_speedup("sd", 0, 4, None, 0.8, 0.3, priced) == metrics.predicted_speedup(
        "sd", 0, 4, None, 0.8, 0.3
    )


def test_summary_by_task_splits_accuracy_finished_and_speedup_by_each_problems_own_task():
    records = [
        rec("g1", "target", 10.0, True),
        rec("g1", "lr", 5.0, True, drafted_by_pos=[2], accepted_by_pos=[1]),
        rec("h1", "target", 4.0, False),
        rec("h1", "lr", 8.0, True, drafted_by_pos=[2], accepted_by_pos=[0]),
        rec("h2", "target", 4.0, True),
        rec("h2", "lr", 8.0, False),
    ]
    for r in records:
        r["finish"] = "length" if r["problem"] == "h2" and r["method"] == "lr" else "eos"
    by = metrics.summarize_by_group(records, ["target", "lr"], {"g1": "gsm", "h1": "he", "h2": "he", "x": "other"})
    assert list(by) == ["gsm", "he"]  # a group with no record is left out
    assert by["gsm"]["lr"] == {"n": 1, "accuracy": 1.0, "finished": 1, "alpha1": 0.5, "speedup_total": 2.0}
    assert by["he"]["lr"]["speedup_total"] == pytest.approx(0.5) and by["he"]["lr"]["finished"] == 1
    assert by["he"]["lr"]["alpha1"] == 0.0 and by["he"]["target"]["accuracy"] == 0.5


def _report_data(task: str, methods: dict, **extra) -> dict:
    """What render_markdown reads of a summary, around ``methods`` (no predictions made)."""
    for row in methods.values():
        row.update(predicted_speedup=None, measured_over_predicted=None)
    n = max(row["n"] for row in methods.values())
    return {
        "task": task,
        "problems": n,
        "decoded_problems": n,
        "methods": methods,
        "c_measured": None,
        "machine": {},
        "generated_at": "now",
        "timing": {},
        "evaluator_overhead": None,
        **extra,
    }


def test_report_of_a_task_mix_has_a_table_per_task_and_a_single_task_has_none():
    from lrtune.eval.report import render_markdown

    records = [
        rec("g1", "target", 10.0, True),
        rec("g1", "lr", 5.0, True),
        rec("h1", "target", 4.0, False),
        rec("h1", "lr", 8.0, True),
    ]
    data = _report_data(
        "gsm+he",
        metrics.summarize(records, ["target", "lr"]),
        by_task=metrics.summarize_by_group(records, ["target", "lr"], {"g1": "gsm", "h1": "he"}),
    )
    md = render_markdown(data)
    assert "## By task" in md
    assert "| gsm | lr | 1 | 1.00 | 0/1 | — | 2.00 |" in md and "| he | lr | 1 | 1.00 | 0/1 | — | 0.50 |" in md
    assert "## By task" not in render_markdown({**data, "by_task": None})


def test_mcnemar_p_is_the_exact_two_sided_binomial_test_of_the_discordant_problems():
    assert metrics.mcnemar_p(0, 0) == 1.0
    assert metrics.mcnemar_p(3, 3) == pytest.approx(1.0)
    assert metrics.mcnemar_p(0, 6) == pytest.approx(2 * 0.5**6)  # the 6 differing problems all went to B
    assert metrics.mcnemar_p(1, 9) == pytest.approx(2 * 11 / 2**10)  # P(≤1 of 10) both tails
    assert metrics.mcnemar_p(9, 1) == metrics.mcnemar_p(1, 9)


def test_paired_accuracy_counts_only_problems_both_methods_decoded():
    rec = lambda p, m, ok: {"problem": p, "method": m, "correct": ok}  # noqa: E731
    records = [
        rec("a", "target", True),
        rec("b", "target", True),
        rec("c", "target", False),
        rec("a", "lr", True),
        rec("b", "lr", False),
        rec("c", "lr", True),
        rec("d", "lr", True),
    ]
    r = metrics.paired_accuracy(records, "lr")
    assert (r["problems"], r["only_a"], r["only_b"]) == (3, 1, 1)  # d: target never decoded it
    assert r["accuracy_a"] == r["accuracy_b"] == pytest.approx(2 / 3) and r["difference"] == 0.0
    assert r["mcnemar_p"] == pytest.approx(1.0)
    assert metrics.paired_accuracy(records, "sd") is None


def test_heldout_from_a_task_mix_groups_each_problem_under_its_own_task(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from lrtune.eval.evaluate import EvalOptions, heldout_problems
    from lrtune.tasks import get_task

    d = tmp_path / "collect"
    d.mkdir()
    seen = [{"problem_id": f"HumanEval/{i}", "task": "humaneval", "index": i} for i in range(4)] + [
        {"problem_id": p.id, "task": "gsm_symbolic", "index": 4 + i}
        for i, p in enumerate(get_task("gsm_symbolic").load(limit=10, seed=0))
    ]
    pq.write_table(pa.Table.from_pylist(seen), d / "problems.parquet")
    pq.write_table(pa.Table.from_pylist([{"problem_id": "HumanEval/0"}]), d / "pairs.parquet")
    kept = heldout_problems(
        get_task("gsm_symbolic+humaneval"),
        EvalOptions(task="gsm_symbolic+humaneval", limit=8, task_seed=0, heldout_from=str(d)),
    )
    ids = [p.id for p in kept]
    assert len(ids) == 8 and not {f"HumanEval/{i}" for i in range(4)} & set(ids)  # seen HumanEval tasks stay out
    assert [p.meta["task"] for p in kept] == ["gsm_symbolic", "humaneval"] * 4  # equal shares, interleaved


def test_heldout_from_keeps_only_problems_whose_template_the_training_data_never_saw(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from lrtune.eval.evaluate import EvalOptions, heldout_problems, seen_templates
    from lrtune.tasks import get_task, template_of

    task = get_task("gsm_symbolic")
    train = task.load(limit=30, seed=0)
    d = tmp_path / "collect"
    d.mkdir()
    pq.write_table(
        pa.Table.from_pylist([{"problem_id": p.id, "task": "gsm_symbolic", "index": i} for i, p in enumerate(train)]),
        d / "problems.parquet",
    )
    pq.write_table(pa.Table.from_pylist([{"problem_id": train[0].id}]), d / "pairs.parquet")
    seen = seen_templates("gsm_symbolic", str(d))
    assert seen == {template_of("gsm_symbolic", p.id) for p in train}
    kept = heldout_problems(task, EvalOptions(task="gsm_symbolic", limit=6, task_seed=1, heldout_from=str(d)))
    assert len(kept) == 6 and not {template_of("gsm_symbolic", p.id) for p in kept} & seen
    plain = task.load(limit=6, seed=1)
    assert any(template_of("gsm_symbolic", p.id) in seen for p in plain)  # the filter does something here
    with pytest.raises(ConfigError, match="heldout-from"):
        seen_templates("gsm_symbolic", str(tmp_path / "missing"))


@pytest.mark.parametrize(
    "label",
    [
        "target",
        "sd",
        "lr",
        "lr+sd",
        "lr+sd/async",
        "lr/abort",
        "lr/reuse",
        "lr/reuse+abort",
        "lr+sd/w=2",
        "lr+sd/reuse/w=1/v=random(0.5)",
        "lr/v=path/with/slashes/ckpt@0.4",
        "adaptive",
        "oracle",
        "best-fixed",
        "adaptive/c=results/ctl/dir",
        "adaptive/score",
        "adaptive/lr+score",
        "adaptive/score/v=target_logprob(min)",
    ],
)
def test_a_method_spec_prints_a_label_that_parses_back_to_the_same_spec(label):
    from dataclasses import replace

    from lrtune.eval.methods import parse_method

    spec = parse_method(label, 3, 4)
    again = parse_method(str(spec), 3, 4)
    assert replace(again, label=spec.label) == spec


def test_lr_reuse_abort_reads_as_one_schedule_and_a_run_wide_abort_joins_a_method_reuse():
    from lrtune.decoder import DecodeConfig
    from lrtune.eval.methods import parse_method

    assert parse_method("lr/reuse/abort", 3, 4).schedule == "reuse+abort"
    base = DecodeConfig(method="lr", schedule="abort")
    assert parse_method("lr/reuse", 3, 4).decode_config(base).schedule == "reuse+abort"
    assert parse_method("lr", 3, 4).decode_config(base).schedule == "abort"


def test_adaptive_round_kind_options_name_the_rounds_its_controller_may_pick():
    from lrtune.eval.methods import parse_method

    assert parse_method("adaptive", 3, 4).round_kinds == ("lr",)
    score = parse_method("adaptive/score/v=ckpt/router", 3, 4)
    assert score.round_kinds == ("score",) and score.schedule == "score" and score.verifier == "ckpt/router"
    both = parse_method("adaptive/lr+score", 3, 4)
    assert both.round_kinds == ("lr", "score") and both.schedule == "sync"
    with pytest.raises(ConfigError, match="bad adaptive option"):
        parse_method("adaptive/tree", 3, 4)


def test_a_controller_without_round_kinds_is_refused_for_score_rows_and_copies_keep_the_original():
    from lrtune.eval.loops import with_round_kinds
    from lrtune.policies import make_controller

    bandit = make_controller("bandit")
    picked = with_round_kinds(bandit, ("lr", "score"))
    assert picked is not bandit and picked.round_kinds == ("lr", "score") and bandit.round_kinds == ("lr",)
    assert with_round_kinds(bandit, ("lr",)) is bandit
    with pytest.raises(ConfigError, match="cannot pick the kind of a round"):
        with_round_kinds(make_controller("grid-ucb"), ("score",))


def test_a_profile_prices_the_bandits_costs_and_its_score_round_prefill(tmp_path):
    import json

    from lrtune.api import build_controller
    from lrtune.decodeconfig import DecodeConfig
    from lrtune.pricing import plan

    prof = tmp_path / "profile.json"
    prof.write_text(
        json.dumps(
            {
                "c1": 0.3,
                "c2": 0.25,
                "batch_cost": [1.0, 1.5, 2.0],
                "prefill": {"overhead_tokens": 2.0, "ratio_per_token": {"16": 0.02, "32": 0.04}},
            }
        )
    )
    pricing = plan(profile=str(prof))
    ctl = build_controller("bandit", DecodeConfig(), pricing)
    assert ctl.pricing is pricing and (ctl.c1, ctl.c2, ctl.batch_cost) == (0.3, 0.25, (1.0, 1.5, 2.0))
    assert pricing.prefill.overhead_tokens == 2.0 and pricing.prefill.per_token == pytest.approx(0.03)
    assert build_controller(None, DecodeConfig(), pricing) is None


def test_the_summary_splits_rounds_by_kind_and_the_target_time_into_prefills_and_steps():
    from lrtune.eval.metrics import summarize_method
    from lrtune.eval.report import _split4
    from lrtune.stats import DecodeStats

    st = DecodeStats(draft_s=1.0, target_s=3.0, verify_s=0.5, prefill_s=1.0, rounds=4, wall_s=5.0)
    for kind, sec in (("score", 1.0), ("score", 1.0), ("sd", 2.0), ("lr", 0.5)):
        st.observe_round_kind(kind, sec)
    row = summarize_method(
        [{"problem": "p", "correct": True, "finish": "eos", "wall_s": 5.0, "stats": st.to_dict()}], None
    )
    kinds = row["round_kinds"]
    assert (
        kinds["score"]["share"] == 0.5
        and kinds["sd"]["rounds"] == 1
        and kinds["lr"]["time_share"] == pytest.approx(0.5 / 4.5)
    )
    assert row["target_split_s"] == {"prefill": 1.0, "steps": 2.0}
    assert _split4(row) == "22 / 22 / 44 / 11"  # of 1 + 1 + 2 + 0.5 s


def test_an_adaptive_row_that_picks_round_kinds_keeps_one_controller_for_the_whole_run():
    from lrtune.eval.loops import _Engines
    from lrtune.eval.methods import parse_method
    from lrtune.policies import make_controller

    run_ctl = make_controller("bandit-pooled")
    eng = _Engines(dec=None, controller=run_ctl, verifiers={})
    score, lr = parse_method("adaptive/score", 3, 4), parse_method("adaptive", 3, 4)
    first = eng.controller_for(score)
    assert first is eng.controller_for(score) and first is not run_ctl and first.round_kinds == ("score",)
    assert eng.controller_for(lr) is run_ctl and first.pooled  # the copy keeps the policy's settings


def test_a_controller_on_a_shared_sd_engine_never_picks_a_gamma2_that_would_start_another_engine():
    from lrtune.api import build_controller
    from lrtune.decodeconfig import DecodeConfig
    from lrtune.pricing import plan

    for name in ("bandit", "fixed", "heuristic", "grid-ucb"):  # default bounds allow γ2 up to 8
        ctl = build_controller(name, DecodeConfig(), plan(engine_drafts=4))
        assert ctl.bounds.gamma2_max == 4 and max(g2 for _, g2 in ctl.bounds.arms()) == 4, name
    assert build_controller("bandit", DecodeConfig(), plan(engine_drafts=4)).engine_drafts == 4
    free = build_controller("bandit", DecodeConfig(), plan(engine_drafts=0))
    assert free.bounds.gamma2_max == 8  # an engine per γ2 (no shared one): the bounds stay


def test_a_score_row_without_prefill_seconds_is_predicted_as_a_score_round_with_no_prefill():
    from lrtune.eval.evaluate import parse_method, predict_rows
    from lrtune.speedup import g, h_score

    spec = parse_method("score+sd/v=x", 3, 4)
    recs = [
        {"problem": "p", "method": "target", "tokens": 100, "wall_s": 10.0, "stats": {"target_s": 10.0}},
        {
            "problem": "p",
            "method": spec.label,
            "tokens": 100,
            "wall_s": 8.0,
            "stats": {"target_s": 4.0, "prefill_s": 0.0, "draft_s": 4.0},
        },
    ]
    rows = {
        "target": {
            "tokens": 100,
            "wall_s": 10.0,
            "draft_s": 0.0,
            "draft_step_tokens": 0,
            "alpha1": None,
            "alpha2": None,
            "speedup_total": 1.0,
        },
        spec.label: {
            "tokens": 100,
            "wall_s": 8.0,
            "draft_s": 4.0,
            "draft_step_tokens": 100,
            "alpha1": 0.5,
            "alpha2": 0.9,
            "speedup_total": 1.25,
        },
    }
    c = predict_rows([parse_method("target", 3, 4), spec], rows, recs, None, True, "x")
    assert c == pytest.approx(0.4) and rows[spec.label]["prefill_ratio"] == 0.0
    # a draft-only verifier's score rounds: h_score with P = 0, not an LR round priced with b(n)
    assert rows[spec.label]["predicted_speedup"] == pytest.approx(h_score(3, 4, 0.5, c, 0.0 / g(0.9, c, 4), 0.9, c))


def test_the_summary_and_report_show_where_the_measured_rate_guard_closed_lr():
    from lrtune.eval.report import render_markdown

    def state(lr_rounds, rho_upper, lr_open):
        return {
            "lr_rounds": lr_rounds,
            "sd_rounds": 4,
            "lr_tokens_per_s": 5.5,
            "sd_tokens_per_s": 8.1,
            "rho": 0.7,
            "rho_upper": rho_upper,
            "lr_open": lr_open,
        }

    records = [rec(p, "target", 10.0, True) for p in "abc"]
    for i, (p, st) in enumerate(zip("cab", (state(1, 1.0, True), state(3, 0.8, False), state(3, 0.8, False)))):
        records.append({**rec(p, "adaptive", 8.0, True), "index": [2, 0, 1][i], "controller_state": st})
    methods = metrics.summarize(records, ["target", "adaptive"])
    guard = methods["adaptive"]["rate_guard"]
    assert guard["lr_closed_from"] == 0 and guard["lr_rounds"] == 1  # by problem index, not by line order
    assert methods["target"]["rate_guard"] is None
    md = render_markdown(_report_data("gsm", methods))
    assert "## The controller's measured-rate guard" in md
    assert "| adaptive | 1 | 4 | 5.50 | 8.10 | 0.70 [1.00] | 0 | — |" in md


@pytest.mark.parametrize(
    "methods,words",
    [("", "--methods: empty"), ("target,,sd", "an empty entry"), ("sd,target,sd", "'sd' is listed twice")],
)
def test_an_empty_or_repeated_method_list_is_one_line_naming_methods(methods, words):
    from lrtune.eval.methods import parse_methods

    with pytest.raises(ConfigError, match=words):
        parse_methods(methods, None, 2, 4)
    assert [s.label for s in parse_methods("", "gamma1=2", 2, 4)][0] == "target"  # a sweep alone is a list
