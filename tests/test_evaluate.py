"""`lrtune evaluate` end to end on the tiny pair: files, schema, resume, recomputable summary."""

import json
import subprocess
import sys

import pytest

pytest.importorskip("vllm")

from lrtune.eval import metrics  # noqa: E402
from lrtune.eval.evaluate import EvalConfig, EvalOptions, load_records, run  # noqa: E402
from lrtune.control import method_for_depths  # noqa: E402
from lrtune.api import ModelConfig  # noqa: E402
from lrtune.decoder import DecodeConfig  # noqa: E402
from lrtune.errors import ConfigError  # noqa: E402
from tiny_models import get_tiny_pair, sample_questions  # noqa: E402

RECORD_KEYS = {
    "problem",
    "index",
    "method",
    "kind",
    "gamma1",
    "gamma2",
    "answer",
    "expected",
    "correct",
    "tokens",
    "wall_s",
    "finish",
    "text",
    "stats",
}
METHOD_KEYS = {
    "n",
    "accuracy",
    "accuracy_ci95",
    "speedup_total",
    "speedup_mean",
    "speedup_mean_ci95",
    "speedup_median",
    "alpha1",
    "alpha1_by_pos",
    "alpha2",
    "mean_accepted_steps_per_round",
    "time_split_s",
    "tokens_per_s",
    "predicted_speedup",
}


@pytest.fixture(scope="module")
def data_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "problems.jsonl"
    with open(path, "w") as f:
        for i, q in enumerate(sample_questions(3)):
            f.write(json.dumps({"id": f"p{i}", "question": q, "answer": str(i)}) + "\n")
    return str(path)


def make_cfg(data_file, out, **opts):
    pair = get_tiny_pair()
    return EvalConfig(
        options=EvalOptions(
            task="custom",
            data=data_file,
            limit=3,
            methods="target,lr",
            out=str(out),
            progress=False,
            warmup_tokens=8,
            **opts,
        ),
        models=ModelConfig(
            target=str(pair.target),
            draft=str(pair.draft),
            verifier="random(0.5)",
            dtype="float32",
            max_model_len=512,
            kv_cache_gib=0.25,
        ),
        decode=DecodeConfig(gamma1=2, gamma2=2, max_new_tokens=40, max_step_tokens=16),
    )


@pytest.fixture(scope="module")
def first_run(data_file, tmp_path_factory):
    out = tmp_path_factory.mktemp("eval")
    summary = run(make_cfg(data_file, out))
    return out, summary


def test_each_latency_decode_starts_from_a_fresh_cache_holding_only_the_prompt():
    from types import SimpleNamespace

    from lrtune.eval.loops import _fresh_cache

    class Engine:
        def __init__(self, events, name):
            self.events, self.name = events, name

        def reset_prefix_cache(self):
            self.events.append((self.name, "reset"))

        def generate(self, prompts, params):
            self.events.append((self.name, "prefill", tuple(map(tuple, prompts)), params.max_tokens))

    events = []
    target, draft = Engine(events, "target"), Engine(events, "draft")
    _fresh_cache(SimpleNamespace(target=target, draft=draft), [5, 6, 7])
    assert events == [
        ("target", "reset"),
        ("draft", "reset"),
        ("target", "prefill", ((5, 6, 7),), 1),
        ("draft", "prefill", ((5, 6, 7),), 1),
    ]


def test_evaluate_writes_records_summary_report_and_plots(first_run):
    out, summary = first_run
    for name in (
        "config.json",
        "records.jsonl",
        "summary.json",
        "report.md",
        "speedup_vs_accuracy.png",
        "acceptance_by_position.png",
        "time_split.png",
    ):
        assert (out / name).is_file(), name
    records = load_records(out / "records.jsonl")
    assert len(records) == 3 * 2
    assert all(RECORD_KEYS <= set(r) for r in records)
    assert {(r["problem"], r["method"]) for r in records} == {(f"p{i}", m) for i in range(3) for m in ("target", "lr")}
    data = json.loads((out / "summary.json").read_text())
    assert set(data["methods"]) == {"target", "lr"}
    assert all(METHOD_KEYS <= set(row) for row in data["methods"].values())
    assert data["methods"]["target"]["speedup_total"] == pytest.approx(1.0)
    assert 0.0 <= data["evaluator_overhead"] < 1.0
    # before each decode every engine forgets its prefixes and prefills the prompt again, untimed
    assert 0.0 < data["timing"]["prompt_cache_s"] < data["timing"]["loop_s"] - data["timing"]["decode_s"] + 1e-9
    report = (out / "report.md").read_text()
    assert "| target |" in report and "| lr |" in report and "α1 by draft position" in report
    assert summary["lr"]["n"] == 3
    # the prediction prices a round's batch by its longest step, from the LR records' committed steps
    for r in records:
        assert (r["step_tokens"] is None) == (r["kind"] == "target")
        assert r["kind"] == "target" or sum(r["step_tokens"]) == r["tokens"]
    assert set(data["longest_step_factor"]) == {"2", "3", "4", "5"}
    assert all(v >= 1.0 for v in data["longest_step_factor"].values())
    assert "priced by its longest step" in report
    # accuracy against target-only, paired, with McNemar's exact test
    (acc,) = data["accuracy_vs_target"]
    assert (acc["a"], acc["b"], acc["problems"]) == ("lr", "target", 3)
    assert acc["difference"] == pytest.approx(data["methods"]["lr"]["accuracy"] - data["methods"]["target"]["accuracy"])
    assert 0.0 <= acc["mcnemar_p"] <= 1.0 and "McNemar p" in report


def test_methods_run_interleaved_in_a_balanced_order(first_run):
    out, _ = first_run
    order = [r["method"] for r in load_records(out / "records.jsonl")]
    assert order == ["target", "lr", "lr", "target", "target", "lr"]


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6, 7])
def test_balanced_order_puts_every_method_at_every_position_and_after_every_other_equally(n):
    from collections import Counter

    period = n if n % 2 == 0 else 2 * n
    rows = [metrics.balanced_order(n, i) for i in range(period)]
    assert all(sorted(r) == list(range(n)) for r in rows)
    per = period // n  # each method at each position this many times per period
    assert Counter((pos, m) for r in rows for pos, m in enumerate(r)) == {
        (p, m): per for p in range(n) for m in range(n)
    }
    follows = Counter((a, b) for r in rows for a, b in zip(r, r[1:]))
    assert follows == {(a, b): per for a in range(n) for b in range(n) if a != b}
    assert metrics.balanced_order(n, period + 3) == metrics.balanced_order(n, 3)


def test_paired_ratio_is_the_ratio_of_total_times_with_an_interval_over_problems():
    recs = [
        {"problem": f"p{i}", "method": m, "wall_s": w}
        for i, (wa, wb) in enumerate([(1.0, 2.0), (2.0, 2.0), (1.0, 1.5)])
        for m, w in (("a", wa), ("b", wb))
    ] + [{"problem": "p9", "method": "a", "wall_s": 5.0}]
    r = metrics.paired_ratio(recs, "a", "b")
    assert r["problems"] == 3 and r["ratio"] == pytest.approx(5.5 / 4.0)  # p9 has no b: left out
    lo, hi = r["ratio_ci95"]
    assert 1.0 <= lo <= r["ratio"] <= hi <= 2.0
    assert metrics.paired_ratio(recs, "a", "c") is None
    labels = ["target", "sd", "lr+sd", "lr+sd/abort", "adaptive", "best-fixed", "lr"]
    recs = [{"problem": "p0", "method": m, "wall_s": 1.0 + k} for k, m in enumerate(labels)]
    got = {(p["a"], p["b"]): p["ratio"] for p in metrics.paired_comparisons(recs, labels)}
    assert got == pytest.approx(
        {
            ("adaptive", "best-fixed"): 6.0 / 5.0,
            ("adaptive", "sd"): 2.0 / 5.0,
            ("lr+sd/abort", "lr+sd"): 3.0 / 4.0,
            ("best-fixed", "sd"): 2.0 / 6.0,
        }
    )


def test_summary_numbers_are_recomputable_from_the_records(first_run):
    out, _ = first_run
    data = json.loads((out / "summary.json").read_text())
    again = metrics.summarize(load_records(out / "records.jsonl"), ["target", "lr"])
    for m in ("target", "lr"):
        for k, v in again[m].items():
            got = data["methods"][m][k]
            assert got == (list(v) if isinstance(v, tuple) else v) or got == pytest.approx(v), (m, k)


def test_rerun_with_the_same_out_skips_finished_pairs(first_run, data_file):
    out, _ = first_run
    before = (out / "records.jsonl").read_text()
    summary = run(make_cfg(data_file, out))
    assert (out / "records.jsonl").read_text() == before
    assert summary.data["timing_this_invocation"]["loop_s"] == 0.0 and summary["lr"]["n"] == 3
    assert summary.data["timing"]["loop_s"] > 0.0  # the first invocation's time is kept


def test_torn_last_record_is_redone_and_a_changed_config_is_refused(first_run, data_file, tmp_path):
    out, _ = first_run
    work = tmp_path / "copy"
    work.mkdir()
    for name in ("config.json", "records.jsonl"):
        (work / name).write_bytes((out / name).read_bytes())
    lines = (work / "records.jsonl").read_text().splitlines()
    (work / "records.jsonl").write_text("\n".join(lines[:-1]) + "\n" + lines[-1][:40])  # killed mid-write
    summary = run(make_cfg(data_file, work))
    records = load_records(work / "records.jsonl")
    assert len(records) == 6 and summary["lr"]["n"] == 3
    assert [r["method"] for r in records][:5] == [json.loads(x)["method"] for x in lines[:5]]
    changed = make_cfg(data_file, work)
    changed.decode.gamma1 = 3
    with pytest.raises(ConfigError, match="different config.*gamma1"):
        run(changed)
    changed.options.overwrite = True
    changed.options.methods = "target"
    summary = run(changed)
    assert summary["target"]["n"] == 3
    assert list(work.glob("records.jsonl.bak-*")), "old records must be kept"


def lrtune(*args, timeout=300):
    return subprocess.run(
        [sys.executable, "-m", "lrtune", "evaluate", *args], capture_output=True, text=True, timeout=timeout
    )


def test_cli_bad_input_gives_one_line_errors_and_exit_2(tmp_path, data_file):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    cases = [
        (["--methods", "target,beam"], "unknown method"),
        (["--task", "custom", "--data", str(tmp_path / "missing.jsonl")], "not found"),
        (["--task", "custom", "--data", str(empty)], "no problems"),
        (["--task", "custom", "--data", data_file, "--sweep", "gamma3=1"], "--sweep"),
        (["--limit", "0"], "--limit"),
        (["--methods", "lr/v=oracle"], "unknown verifier"),
        (["--task", "custom", "--data", data_file, "--profile", str(empty)], "not an lrtune profile"),
    ]
    for args, msg in cases:
        proc = lrtune(*args, "--out", str(tmp_path / "out"))
        assert proc.returncode == 2, (args, proc.stderr)
        assert msg in proc.stderr and "Traceback" not in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_method_variants_async_branches_and_verifiers_run_side_by_side(data_file, tmp_path):
    cfg = make_cfg(data_file, tmp_path / "variants")
    cfg.options.limit = 2
    cfg.options.methods = "lr,lr/w=2,lr/async/v=exact"
    summary = run(cfg)
    assert set(summary.methods) == {"target", "lr", "lr/w=2", "lr/async/v=exact"}
    rows = summary.methods
    assert rows["lr/w=2"]["width"] == 2 and rows["lr/async/v=exact"]["async_lr"]
    assert rows["lr/async/v=exact"]["verifier"] == "exact" and rows["lr"]["verifier"] == "random(0.5)"
    assert all(r["n"] == 2 for r in rows.values())


def test_adaptive_oracle_and_best_fixed_rows_run_beside_lr_sd(data_file, tmp_path):
    """Controlled methods on the shared vLLM engine: adaptive asks the controller each
    round (γ2 cut per request), oracle picks per problem from lr+sd's measured α."""
    cfg = make_cfg(data_file, tmp_path / "adaptive")
    cfg.options.limit = 2
    cfg.options.methods = "lr+sd,adaptive,oracle,best-fixed,adaptive/c=grid-ucb"
    cfg.models.control.controller = "bandit"
    profile = tmp_path / "profile.json"  # b(n) from a profile instead of measuring it
    profile.write_text(json.dumps({"c1": 0.3, "c2": 0.3, "batch_cost": [1.0, 1.25, 1.5, 1.75, 2.0, 2.25, 2.5]}))
    cfg.options.profile = str(profile)
    summary = run(cfg)
    assert summary.data["batch_cost"] == {1: 1.0, 2: 1.25, 3: 1.5, 4: 1.75, 5: 2.0, 6: 2.25, 7: 2.5}
    assert set(summary.methods) == {"target", "lr+sd", "adaptive", "oracle", "best-fixed", "adaptive/c=grid-ucb"}
    recs = load_records(tmp_path / "adaptive" / "records.jsonl")
    by = {}
    for r in recs:
        by.setdefault(r["method"], []).append(r)
    assert all(r["gamma1"] is None and r["control"] == "adaptive" for r in by["adaptive"] + by["adaptive/c=grid-ucb"])
    assert all(0 <= r["gamma1"] <= 6 and 0 <= r["gamma2"] <= 8 for r in by["oracle"])
    # a zero depth runs the matching method (γ1 = 0 is plain SD), and the row says so
    assert all(r["decode_method"] == method_for_depths(r["gamma1"], r["gamma2"]) for r in by["oracle"])
    assert all((r["gamma1"], r["gamma2"]) == (2, 2) for r in by["best-fixed"])  # bandit: no training data
    order = [r["method"] for r in recs if r["problem"] == "p1"]
    assert order.index("oracle") > order.index("lr+sd")  # oracle reads lr+sd's α of the same problem
    assert summary.methods["adaptive"]["predicted_speedup"] is None
    # the bandit's measured-rate guard is kept per problem and summarized; grid-ucb has none
    assert all(set(r["controller_state"]) >= {"rho", "rho_upper", "lr_open", "budget_slack_s"} for r in by["adaptive"])
    assert "controller_state" not in by["adaptive/c=grid-ucb"][0]
    assert summary.methods["adaptive"]["rate_guard"]["lr_rounds"] >= 0
    assert summary.methods["adaptive/c=grid-ucb"]["rate_guard"] is None


def test_adaptive_rows_over_round_kinds_report_each_kinds_share_and_the_prefill_time(data_file, tmp_path):
    """adaptive/score picks score rounds or SD alone per round, adaptive/lr+score any kind, on
    the real engine; the summary splits rounds by kind and the report shows it."""
    cfg = make_cfg(data_file, tmp_path / "kinds")
    cfg.options.limit = 2
    cfg.options.methods = "score+sd,adaptive/score,adaptive/lr+score"
    cfg.models.control.controller = "bandit"
    cfg.models.verification.spec = "target_logprob"
    profile = tmp_path / "profile.json"
    profile.write_text(
        json.dumps(
            {
                "c1": 0.1,
                "c2": 0.3,
                "batch_cost": [1.0, 1.9, 2.8, 3.7, 4.6, 5.5, 6.4],
                "prefill": {"overhead_tokens": 0.5, "ratio_per_token": {"16": 0.01}},
            }
        )
    )
    cfg.options.profile = str(profile)
    summary = run(cfg)
    rows = summary.methods
    for label in ("score+sd", "adaptive/score", "adaptive/lr+score"):
        kinds = rows[label]["round_kinds"]
        assert sum(k["rounds"] for k in kinds.values()) == rows[label]["rounds"] > 0
    assert rows["adaptive/score"]["round_kinds"]["lr"]["rounds"] == 0  # score rounds or SD alone only
    assert (
        rows["score+sd"]["round_kinds"]["score"]["share"] == 1.0 and rows["score+sd"]["target_split_s"]["prefill"] > 0
    )
    assert "## Round kinds" in (tmp_path / "kinds" / "report.md").read_text()
    with pytest.raises(ConfigError, match="cannot pick the kind of a round"):
        cfg.models.control.controller = "grid-ucb"
        cfg.options.out = str(tmp_path / "kinds2")
        run(cfg)


def test_adaptive_without_a_controller_is_refused(data_file, tmp_path):
    cfg = make_cfg(data_file, tmp_path / "nocontrol")
    cfg.options.methods = "adaptive"
    with pytest.raises(ConfigError, match="need --controller"):
        run(cfg)


def test_throughput_mode_batches_problems_matches_latency_outputs_and_checks_no_latency_prediction(
    first_run, data_file, tmp_path
):
    """--mode throughput: each method over the set with N in flight, records equal to the
    latency run's (greedy), a throughput line per method, a Throughput table in the report."""
    latency_out, _ = first_run
    cfg = make_cfg(data_file, tmp_path / "tp", mode="throughput", max_concurrent=3)
    lat_cfg = make_cfg(data_file, tmp_path / "lat")
    for c in (cfg, lat_cfg):  # transformers: vLLM engines stay alive for the whole test process
        c.models.verification.spec, c.models.backend, c.models.device = "never", "transformers", "cpu"
        c.models.engine.kv_cache_gib = None  # vLLM's setting: the transformers backend has no KV cache size
    run(lat_cfg)
    summary = run(cfg)
    recs, lat = load_records(tmp_path / "tp" / "records.jsonl"), load_records(tmp_path / "lat" / "records.jsonl")
    key = {(r["problem"], r["method"]): r["text"] for r in lat}
    assert {(r["problem"], r["method"]): r["text"] for r in recs} == key
    tp = summary.data["throughput"]
    assert set(tp) == {"target", "lr"} and summary.data["mode"] == "throughput"
    assert all(t["prompts"] == 3 and t["problems_per_hour"] > 0 and t["max_concurrent"] == 3 for t in tp.values())
    assert tp["lr"]["rows_per_call"]["target"] > cfg.decode.gamma1 + 1 - 1e-9  # rows of several problems per call
    report = (tmp_path / "tp" / "report.md").read_text()
    assert "## Throughput" in report and "| finished |" in report and "with up to 3 problems in flight" in report
    # the speedup model predicts a decode alone: no measured/predicted ratio for latencies under load
    assert all(r["measured_over_predicted"] is None for r in summary.data["methods"].values())
    assert "no measured/predicted ratio is given" in report
    # a different mode is a different run: refused in the same --out
    with pytest.raises(ConfigError, match="different config"):
        run(make_cfg(data_file, tmp_path / "tp"))


def test_throughput_run_takes_more_methods_later_and_decodes_only_the_new_ones(data_file, tmp_path):
    out = tmp_path / "grow"
    cfg = make_cfg(data_file, out, mode="throughput", max_concurrent=3)
    cfg.options.methods = "target"
    cfg.models.verification.spec, cfg.models.backend, cfg.models.device = "never", "transformers", "cpu"
    cfg.models.engine.kv_cache_gib = None  # vLLM's setting: the transformers backend has no KV cache size
    run(cfg)
    before = (out / "records.jsonl").read_text()
    cfg.options.methods = "target,lr"
    summary = run(cfg)
    after = (out / "records.jsonl").read_text()
    assert after.startswith(before)  # target's decodes reused as they were
    assert [json.loads(x)["method"] for x in after[len(before) :].splitlines()] == ["lr"] * 3
    assert set(summary.data["methods"]) == {"target", "lr"} and summary["lr"]["n"] == 3
    assert summary.data["accuracy_vs_target"]  # the new row is paired against target's records
    # latency mode interleaves methods per problem: there a new --methods list is a new run
    lat = make_cfg(data_file, tmp_path / "lat")
    lat.options.methods = "target"
    lat.models.verification.spec, lat.models.backend, lat.models.device = "never", "transformers", "cpu"
    lat.models.engine.kv_cache_gib = None
    run(lat)
    lat.options.methods = "target,lr"
    with pytest.raises(ConfigError, match="different config.*methods"):
        run(lat)


def test_throughput_mode_refuses_async_and_oracle_rows(data_file, tmp_path):
    cfg = make_cfg(data_file, tmp_path / "x", mode="throughput")
    cfg.options.methods = "target,lr/async"
    with pytest.raises(ConfigError, match="--mode latency"):
        run(cfg)
    with pytest.raises(ConfigError, match="--max-concurrent"):
        run(make_cfg(data_file, tmp_path / "y", mode="throughput", max_concurrent=0))


def test_problem_ids_pick_exactly_the_named_problems_in_order_and_name_a_missing_one(tmp_path):
    from lrtune.eval.evaluate import listed_problems
    from lrtune.tasks import get_task

    task = get_task("gsm_symbolic")
    ids = ["gsm_symbolic-1-7", "gsm_symbolic-1-0", "gsm_symbolic-1-19"]
    got = listed_problems(task, EvalOptions(task_seed=1, limit=10, problem_ids=",".join(ids)))
    assert [p.id for p in got] == ids
    listing = tmp_path / "ids.txt"
    listing.write_text("\n".join(ids) + "\n")
    assert [p.id for p in listed_problems(task, EvalOptions(task_seed=1, limit=2, problem_ids=f"@{listing}"))] == ids[
        :2
    ]
    with pytest.raises(ConfigError, match="gsm_symbolic-1-9999"):
        listed_problems(task, EvalOptions(task_seed=1, limit=10, problem_ids="gsm_symbolic-1-0,gsm_symbolic-1-9999"))
    with pytest.raises(ConfigError, match="no such file"):
        listed_problems(task, EvalOptions(task_seed=1, limit=10, problem_ids=f"@{tmp_path / 'none.txt'}"))


def test_an_adaptive_row_whose_verifier_reads_no_target_score_prices_score_rounds_without_a_prefill():
    from lrtune.eval.loops import _Engines
    from lrtune.eval.methods import parse_method
    from lrtune.policies.bandit import BanditController

    class DraftOnly:  # reads the draft's own confidence, not the target's scores (a draft-only router)
        name, threshold, one_sided, uses_draft_scores, uses_target_scores = "draft-only", 0.5, True, True, False

    class Reading(DraftOnly):
        uses_target_scores = True

    from lrtune.pricing import Prefill, Pricing

    bandit = BanditController(pricing=Pricing(prefill=Prefill(overhead_tokens=2.0, per_token=0.1, step_tokens=40.0)))
    eng = _Engines(dec=None, controller=bandit, verifiers={"a": DraftOnly(), "b": Reading()})
    free = eng.controller_for(parse_method("adaptive/score/v=a", 3, 4))
    paid = eng.controller_for(parse_method("adaptive/score/v=b", 3, 4))
    assert free.prefill_cost(3) == 0.0 and paid.prefill_cost(3) == pytest.approx((2.0 + 0.1 * 3 * 40) / 40)
    assert free.round_kinds == paid.round_kinds == ("score",) and bandit.prefill_cost(3) > 0  # the run's own stays
    assert eng.controller_for(parse_method("adaptive/score/v=a", 3, 4)) is free  # one copy per row for the run


def test_the_plan_prices_a_score_round_without_a_scoring_call_for_a_verifier_that_reads_no_target_score():
    from lrtune.eval.loops import with_round_kinds
    from lrtune.policies.bandit import BanditController
    from lrtune.pricing import needs_scoring_call, plan, priced

    class DraftOnly:
        name, threshold, one_sided, uses_draft_scores, uses_target_scores = "draft-only", 0.5, True, True, False

    assert not needs_scoring_call(DraftOnly()) and needs_scoring_call(None)
    score = with_round_kinds(BanditController(), ("lr", "score"))
    free = priced(score, plan(verifier=DraftOnly()))
    assert free is not score and free.prefill_cost(2) == 0.0 and score.prefill_cost(2) > 0
    assert priced(score, plan()).prefill_cost(2) == score.prefill_cost(2)
    assert priced(None, plan()) is None


def test_a_resume_across_a_recalibrated_checkpoint_is_refused(tmp_path):
    from lrtune.eval.records import CONFIG, check_resume, resume_key
    from lrtune.verifiers.distilled import META

    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / META).write_text(json.dumps({"kind": "features", "threshold": 0.5}))
    out = tmp_path / "run"
    cfg = EvalConfig(
        options=EvalOptions(out=str(out), methods=f"target,lr/v={ckpt}"), models=ModelConfig(), decode=DecodeConfig()
    )
    out.mkdir()
    (out / CONFIG).write_text(json.dumps(resume_key(cfg)))
    (out / "records.jsonl").write_text("")  # an evaluate run's folder
    check_resume(cfg)  # the same checkpoint: resumes
    (ckpt / META).write_text(json.dumps({"kind": "features", "threshold": 0.7}))  # recalibrated meanwhile
    with pytest.raises(ConfigError, match=r"different config \(checkpoints\."):
        check_resume(cfg)
