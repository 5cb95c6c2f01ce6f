"""`lrtune collect` on the tiny pair (transformers backend): schema, counts, crash safety,
sharding, merge, stats and bad input."""

import json
import os
import signal
import subprocess
import sys

import pytest

pytest.importorskip("pyarrow")

from lrtune.data_gen.collect import CollectConfig, collect_options, run  # noqa: E402
from lrtune.dataset import load_tables, merge, summarize_pairs  # noqa: E402
from lrtune.pairstats import auroc  # noqa: E402
from lrtune.api import ModelConfig  # noqa: E402
from lrtune.decoder import DecodeConfig  # noqa: E402
from lrtune.errors import ConfigError  # noqa: E402
from tiny_models import get_tiny_pair, sample_questions  # noqa: E402
from benchmarks.kill_trial import kill_after_files, rows_multiset, visible_parts_are_committed  # noqa: E402

KEY = ("problem_id", "round", "position", "branch")


@pytest.fixture(scope="module")
def data_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("cdata") / "problems.jsonl"
    with open(path, "w") as f:
        for i, q in enumerate(sample_questions(4, seed=99)):
            f.write(json.dumps({"id": f"q{i}", "question": q, "answer": str(i)}) + "\n")
    return str(path)


def cli_args(data_file, out, *extra, teacher="exact", limit=3):
    pair = get_tiny_pair()
    return [
        "--task",
        "custom",
        "--data",
        data_file,
        "--limit",
        str(limit),
        "--out",
        str(out),
        "--teacher",
        teacher,
        "--backend",
        "transformers",
        "--target",
        str(pair.target),
        "--draft",
        str(pair.draft),
        "--gamma1",
        "2",
        "--max-new-tokens",
        "48",
        "--max-step-tokens",
        "12",
        "--max-model-len",
        "512",
        "--no-embedding-feature",
        "--no-progress",
        *extra,
    ]


def collect_cli(*args, timeout=300):
    return subprocess.run(
        [sys.executable, "-m", "lrtune", "collect", *args], capture_output=True, text=True, timeout=timeout
    )


def make_cfg(data_file, out, teacher="llm_judge", **opts):
    pair = get_tiny_pair()
    return CollectConfig(
        options=collect_options(
            task="custom", data=data_file, limit=3, teacher=teacher, out=str(out), progress=False, **opts
        ),
        models=ModelConfig(target=str(pair.target), draft=str(pair.draft), backend="transformers", max_model_len=512),
        decode=DecodeConfig(method="lr", gamma1=2, max_new_tokens=48, max_step_tokens=12),
    )


def rows_by_key(out):
    pairs, _ = load_tables(out)
    d = pairs.to_pylist()
    return {tuple(r[k] for k in KEY): r for r in d}


@pytest.fixture(scope="module")
def collected(data_file, tmp_path_factory):
    out = tmp_path_factory.mktemp("collect")
    counts = run(make_cfg(data_file, out))
    return out, counts


def test_collect_writes_loadable_parquet_with_every_compared_pair(collected):
    import datasets

    out, counts = collected
    ds = datasets.load_dataset("parquet", data_files=str(out / "pairs" / "*.parquet"), split="train")
    probs = datasets.load_dataset("parquet", data_files=str(out / "problems" / "*.parquet"), split="train")
    assert len(ds) == counts["rows"] > 0 and len(probs) == 3
    for col in (
        "draft_step",
        "target_step",
        "teacher_score",
        "label",
        "draft_mean_logprob",
        "target_min_logprob",
        "exact_match",
        "target_score",
        "embedding_cosine",
        "draft_s",
        "target_s",
        "judge_s",
        "prefix_text",
    ):
        assert col in ds.column_names
    assert set(ds["teacher"]) == {"llm_judge"}
    assert all(0.0 <= s <= 1.0 for s in ds["teacher_score"])
    assert all(x is not None for x in ds["draft_mean_logprob"])
    # the target's likelihood of each draft step: every pair whose position has a following row
    scored = [m for m, n in zip(ds["draft_target_mean_logprob"], ds["draft_target_scored_tokens"]) if m is not None]
    assert scored and all(m <= 0.0 for m in scored)
    assert all(n == dl for n, dl in zip(ds["draft_target_scored_tokens"], ds["draft_len"]) if n is not None)
    # and the draft's own confidence: its top-k entropy over every draft step it scored
    assert all(h is not None and h >= 0.0 for h in ds["draft_entropy"])
    card = (out / "README.md").read_text()
    assert f"problems 3, step pairs {counts['rows']}" in card and "teacher `llm_judge`" in card
    assert "| exact | " in card and "| embedding@0.95 | " in card  # the --stats agreement table


def test_counts_match_the_decoders_stats(collected):
    out, _ = collected
    pairs, probs = load_tables(out)
    p = pairs.to_pylist()
    for prob in probs.to_pylist():
        mine = [r for r in p if r["problem_id"] == prob["problem_id"]]
        assert len(mine) == prob["pairs"]
        assert len({r["round"] for r in mine}) <= prob["rounds"]
        # rejected pairs are recorded too (the first rejection of a round ends it)
        for rnd in {r["round"] for r in mine}:
            labels = [r["label"] for r in sorted(mine, key=lambda r: r["position"]) if r["round"] == rnd]
            assert len(labels) <= 2


def test_rerun_skips_finished_problems_and_changed_config_is_refused(collected, data_file):
    out, counts = collected
    before = {f.name: f.stat().st_mtime_ns for f in (out / "pairs").iterdir()}
    again = run(make_cfg(data_file, out))
    assert again["rows"] == counts["rows"]
    assert {f.name: f.stat().st_mtime_ns for f in (out / "pairs").iterdir()} == before
    with pytest.raises(ConfigError, match="another config"):
        run(make_cfg(data_file, out, teacher="exact"))


def test_stats_report_agreement_of_cheap_verifiers_with_the_teacher(collected):
    out, _ = collected
    s = summarize_pairs(out)
    assert s["rows"] > 0 and 0.0 <= s["label_balance"] <= 1.0
    assert {"exact", "embedding@0.95", "target_score@7/9"} <= set(s["agreement_with_teacher"])
    proc = collect_cli("--stats", str(out))
    assert proc.returncode == 0 and "agreement with the teacher" in proc.stdout


def test_bootstrap_interval_resamples_whole_problems_and_brackets_the_point():
    from lrtune.pairstats import agreement_intervals, bootstrap_interval

    groups = ["a"] * 4 + ["b"] * 4 + ["c"] * 2
    one = ["x"] * 5  # one problem: every resample is the whole set
    assert bootstrap_interval(lambda rows: float(len(rows)), one) == (5.0, 5.0)
    assert bootstrap_interval(lambda rows: None, groups) == (None, None)
    scores = [0.9, 0.8, 0.2, 0.1, 0.7, 0.6, 0.4, 0.3, 0.95, 0.05]
    labels = [True, True, False, False, True, False, True, False, True, False]
    ci = agreement_intervals(scores, labels, 0.5, groups, reps=300)
    assert ci["accuracy"][0] <= 0.8 <= ci["accuracy"][1] and ci["auroc"][0] <= auroc(scores, labels) <= ci["auroc"][1]
    assert ci == agreement_intervals(scores, labels, 0.5, groups, reps=300)  # seeded


def test_auroc_table():
    assert auroc([0.1, 0.9], [False, True]) == 1.0
    assert auroc([0.9, 0.1], [False, True]) == 0.0
    assert auroc([0.5, 0.5, 0.5, 0.5], [True, False, True, False]) == 0.5
    assert auroc([0.2, 0.4, 0.6], [True, True, True]) is None


@pytest.fixture(scope="module")
def reference(data_file, tmp_path_factory):
    """An uninterrupted 3-problem run through the CLI (exact teacher)."""
    ref = tmp_path_factory.mktemp("ref")
    proc = collect_cli(*cli_args(data_file, ref))
    assert proc.returncode == 0, proc.stderr[-2000:]
    return rows_by_key(ref)


def test_sigkill_at_random_moments_mid_write_then_restart_gives_every_row_exactly_once(data_file, tmp_path, reference):
    import random
    from collections import Counter

    rng = random.Random(1)
    out = tmp_path / "killed"
    args = cli_args(data_file, out, "--max-concurrent", "1")
    kills = 0
    for _ in range(3):
        if kill_after_files(args, out, rng.randint(1, 4)):
            kills += 1
            assert visible_parts_are_committed(out)  # a crash never exposes rows of an unfinished problem
    assert kills >= 2
    done = collect_cli(*args)
    assert done.returncode == 0, done.stderr[-2000:]
    assert rows_multiset(out) == Counter(reference.keys())  # every row exactly once
    got = rows_by_key(out)
    for k in reference:
        assert got[k]["draft_step"] == reference[k]["draft_step"] and got[k]["label"] == reference[k]["label"]
    leftovers = [f for d in ("pairs", "problems") for f in (out / d).iterdir() if f.name.startswith(".")]
    assert not leftovers and not list(out.glob(".manifest*"))


def test_sigkill_between_file_writes_and_manifest_is_repaired(data_file, tmp_path, reference):
    """Killed at each point between a problem's file writes and the manifest in turn (each run
    resumes the last one's leftovers), then a clean run: every row once, nothing orphaned."""
    out = tmp_path / "killed"
    for point in ("after-pairs:1", "after-problems:1", "after-manifest:1"):  # each at a problem not yet finished
        proc = subprocess.run(
            [sys.executable, "-m", "lrtune", "collect", *cli_args(data_file, out)],
            env={**os.environ, "LRTUNE_FAULT": point},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == -signal.SIGKILL, (point, proc.stderr[-1000:])
        assert visible_parts_are_committed(out), point
    (out / ".manifest-s000.json.999-1.tmp").write_text("{")  # a stale manifest temp file of some crash
    assert collect_cli(*cli_args(data_file, out)).returncode == 0
    assert rows_by_key(out).keys() == reference.keys()
    listed = {
        e[k]["file"]
        for m in out.glob("manifest-*.json")
        for e in json.loads(m.read_text())["finished"].values()
        for k in ("pairs", "problems")
    }
    on_disk = {f"{d}/{f.name}" for d in ("pairs", "problems") for f in (out / d).iterdir()}
    assert on_disk == listed  # no orphan, staged or temp file left
    assert not list(out.glob(".manifest*"))


def test_corrupt_shard_file_is_detected_and_redone(data_file, tmp_path):
    out = tmp_path / "c"
    assert collect_cli(*cli_args(data_file, out, limit=2)).returncode == 0
    want = rows_by_key(out)
    victim = sorted((out / "pairs").glob("*.parquet"))[0]
    victim.write_bytes(b"garbage")
    proc = collect_cli(*cli_args(data_file, out, limit=2))
    assert proc.returncode == 0 and "corrupt" in proc.stderr
    assert rows_by_key(out).keys() == want.keys()


def test_shards_union_equals_one_run_and_merge_is_idempotent(data_file, tmp_path):
    one = tmp_path / "one"
    assert collect_cli(*cli_args(data_file, one, limit=4)).returncode == 0
    shard_dirs = []
    for i in range(2):
        d = tmp_path / f"s{i}"
        proc = collect_cli(*cli_args(data_file, d, "--num-shards", "2", "--shard-id", str(i), limit=4))
        assert proc.returncode == 0, proc.stderr[-2000:]
        shard_dirs.append(str(d))
    merged = tmp_path / "merged"
    merge(shard_dirs, str(merged))
    first = (merged / "pairs.parquet").read_bytes()
    assert set(rows_by_key(merged)) == set(rows_by_key(one))
    merge(shard_dirs + shard_dirs[:1], str(merged))
    assert (merged / "pairs.parquet").read_bytes() == first


def test_bad_input_clear_errors_nothing_lost(data_file, tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        if os.geteuid() != 0:  # root ignores directory permissions
            proc = collect_cli(*cli_args(data_file, ro / "x"))
            assert proc.returncode == 2 and "cannot write" in proc.stderr
    finally:
        ro.chmod(0o700)
    for args, msg in (
        (["--shard-id", "3", "--num-shards", "2"], "--shard-id"),
        (["--method", "target"], "lr or lr+sd"),
        (["--early-abort"], "Use --schedule sync"),
        (["--schedule", "abort"], "Use --schedule sync"),
        (["--schedule", "reuse"], "Use --schedule sync"),
        (["--schedule", "score", "--verifier", "target_logprob"], "score rounds generate no target step"),
        (["--teacher", "oracle"], "unknown verifier"),
        (["--verifier", "llm_judge"], "--verifier llm_judge: decodes only under a rollout teacher"),
    ):
        proc = collect_cli(*cli_args(data_file, tmp_path / "bad"), *args)
        assert proc.returncode == 2 and msg in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    proc = collect_cli("--stats", str(tmp_path / "nothing"))
    assert proc.returncode == 2
    proc = collect_cli("--stats", str(tmp_path), "--merge", str(tmp_path), "--out", str(tmp_path / "m"))
    assert proc.returncode == 2 and "give one of them" in proc.stderr and not (tmp_path / "m").exists()


# Ray's cluster start-up (16 s): slow. Ray is an optional extra; its settings forwarding and the
# refusal without it stay in the default run.
@pytest.mark.slow
def test_ray_runs_shards_as_tasks_and_matches_one_run(data_file, tmp_path, reference):
    """--ray on a local Ray instance: 2 shard tasks into one dir == the uninterrupted run."""
    pytest.importorskip("ray")
    out = tmp_path / "ray"
    proc = collect_cli(
        *cli_args(data_file, out, "--num-shards", "2", "--ray", "--ray-cpus-per-shard", "1"), timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = rows_by_key(out)
    assert set(got) == set(reference)
    assert all(
        got[k]["draft_step"] == reference[k]["draft_step"] and got[k]["label"] == reference[k]["label"]
        for k in reference
    )
    assert sorted(p.name for p in out.glob("manifest-s*.json")) == ["manifest-s000.json", "manifest-s001.json"]
    assert "problems 3, step pairs" in (out / "README.md").read_text()  # the card, written once by the driver


def test_ray_flag_without_ray_installed_is_a_clear_error(data_file, tmp_path, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_ray(name, *a, **k):
        if name == "ray":
            raise ImportError("no ray")
        return real_import(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    from lrtune.data_gen.collect import run_ray

    cfg = make_cfg(data_file, tmp_path / "o", teacher="exact", ray=True, num_shards=2)
    with pytest.raises(ConfigError, match=r"pip install 'lrtune\[ray\]'"):
        run_ray(cfg)


def test_a_dataset_from_an_older_lrtune_without_newer_default_options_still_resumes(data_file, tmp_path):
    from lrtune.data_gen.collect import check_collect_out, collect_key, prepare_out
    from lrtune.dataset import CONFIG

    cfg = make_cfg(data_file, tmp_path / "old", teacher="exact")
    key = collect_key(cfg)
    del key["options"]["teacher_threshold"]  # an option added later, at its default
    del key["models"]["controller"]
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / CONFIG).write_text(json.dumps(key))
    prepare_out(cfg, check_collect_out(cfg))  # accepted as the same dataset
    assert json.loads((tmp_path / "old" / CONFIG).read_text()) == collect_key(cfg)
    changed = make_cfg(data_file, tmp_path / "old", teacher="exact", teacher_threshold=0.7)
    with pytest.raises(ConfigError, match="another config"):
        check_collect_out(changed)


def test_batched_collect_records_exactly_the_rows_of_one_problem_at_a_time(data_file, tmp_path, reference):
    """--max-concurrent N decodes N problems together; every recorded pair (steps, label,
    context, prefix) is the one a one-at-a-time collect records. The reference run chose its
    concurrency from a b(n) curve measured at start."""
    runs = {}
    for n in (1, 3):
        out = tmp_path / f"n{n}"
        proc = collect_cli(*cli_args(data_file, out, "--max-concurrent", str(n)))
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert "in flight" not in proc.stderr  # an explicit --max-concurrent measures nothing
        runs[n] = rows_by_key(out)
    assert set(runs[1]) == set(runs[3]) == set(reference)
    for k in runs[1]:
        for col in ("draft_step", "target_step", "label", "context", "prefix_sha", "prefix_len"):
            assert runs[3][k][col] == runs[1][k][col] == reference[k][col], (k, col)


def test_collect_picks_its_concurrency_from_a_profile_curve(data_file, tmp_path):
    prof = tmp_path / "profile.json"
    # free batches up to 9 rows: 3 problems x (γ1 + 1 = 3 rows) fit
    prof.write_text(json.dumps({"batch_cost": [1.0] * 9}))
    proc = collect_cli(*cli_args(data_file, tmp_path / "p", "--profile", str(prof)))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"collect: 3 problem(s) in flight (b(n) {prof}" in proc.stderr
    bad = collect_cli(*cli_args(data_file, tmp_path / "q", "--profile", str(tmp_path / "missing.json")))
    assert bad.returncode == 2 and bad.stderr.strip().startswith("lrtune: error: --profile")
    assert "Traceback" not in bad.stderr


def test_ray_forwards_settings_but_never_secrets():
    from lrtune.data_gen.collect import ray_env

    env = ray_env(
        {
            "HF_HUB_OFFLINE": "1",
            "HF_TOKEN": "hf_secret",
            "HUGGING_FACE_HUB_TOKEN": "x",
            "VLLM_API_KEY": "k",
            "OMP_NUM_THREADS": "2",
            "HOME": "/root",
            "AWS_SECRET_ACCESS_KEY": "s",
            "LRTUNE_UNSAFE_EXEC": "0",
        }
    )
    assert env == {"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "2", "LRTUNE_UNSAFE_EXEC": "0"}


def _tiny_dataset(root, task: str, ids: list[str], gamma1: int = 2):
    """A collect directory with one pair per problem, written by the real store (no model)."""
    from lrtune.dataset import CONFIG, PAIR_FIELDS, PROBLEM_FIELDS, schema
    from lrtune.store import ShardStore

    root.mkdir(parents=True)
    (root / CONFIG).write_text(
        json.dumps(
            {
                "options": {"task": task, "limit": len(ids), "teacher": "rollout", "max_concurrent": 4},
                "models": {"target": "t"},
                "decode": {"gamma1": gamma1},
            }
        )
    )
    store = ShardStore(root, 0)
    for i, pid in enumerate(ids):
        pair = {
            "problem_id": pid,
            "task": task,
            "round": 0,
            "position": 0,
            "branch": 0,
            "draft_step": "a",
            "target_step": "a",
            "label": True,
            "exact_match": True,
            "teacher": "rollout",
            "judge_s": 1.0,
        }
        prob = {
            "problem_id": pid,
            "index": i,
            "task": task,
            "correct": True,
            "finished": True,
            "wall_s": 1.0,
            "tokens": 10,
            "alpha2": None,
        }
        store.add(pid, i, [pair], prob, schema(PAIR_FIELDS), schema(PROBLEM_FIELDS))


def test_an_option_a_newer_lrtune_added_merges_when_the_other_directory_holds_its_default(tmp_path):
    """A directory collected before an option existed lacks it in its config: it merges with
    one that records the option at its default, and is refused beside a non-default value."""
    from lrtune.errors import ConfigError

    _tiny_dataset(tmp_path / "old", "gsm_symbolic", ["gsm_symbolic-0-0"])
    for name, stop in (("new", None), ("stopped", -1.0)):
        _tiny_dataset(tmp_path / name, "humaneval", [f"HumanEval/{name}"])
        cfg = json.loads((tmp_path / name / "collect_config.json").read_text())
        cfg["decode"]["draft_stop"] = stop
        (tmp_path / name / "collect_config.json").write_text(json.dumps(cfg))
    defaults = {"decode": {"draft_stop": None}}
    merge([str(tmp_path / "old"), str(tmp_path / "new")], str(tmp_path / "all"), defaults=defaults)
    merge([str(tmp_path / "old"), str(tmp_path / "new")], str(tmp_path / "all"), defaults=defaults)  # again: same merge
    with pytest.raises(ConfigError, match="different settings"):
        merge([str(tmp_path / "old"), str(tmp_path / "stopped")], str(tmp_path / "bad"), defaults=defaults)


def test_directories_of_other_tasks_merge_into_a_mix_and_other_settings_are_refused(tmp_path):
    from lrtune.errors import ConfigError

    _tiny_dataset(tmp_path / "gsm", "gsm_symbolic", ["gsm_symbolic-0-0", "gsm_symbolic-0-1"])
    _tiny_dataset(tmp_path / "he", "humaneval", ["HumanEval/0"])
    _tiny_dataset(tmp_path / "other", "humaneval", ["HumanEval/1"], gamma1=3)
    merge([str(tmp_path / "gsm"), str(tmp_path / "he")], str(tmp_path / "all"))
    pairs, probs = load_tables(tmp_path / "all")
    assert sorted(probs.column("task").to_pylist()) == ["gsm_symbolic", "gsm_symbolic", "humaneval"]
    cfg = json.loads((tmp_path / "all" / "collect_config.json").read_text())
    assert cfg["options"]["task"] == "gsm_symbolic+humaneval" and len(cfg["merged_from"]) == 2
    with pytest.raises(ConfigError, match="different settings"):
        merge([str(tmp_path / "gsm"), str(tmp_path / "other")], str(tmp_path / "bad"))


def test_a_shard_refuses_a_folder_another_shard_recorded_with_another_config_after_its_check(data_file, tmp_path):
    import dataclasses

    from lrtune import locks
    from lrtune.data_gen.collect import check_collect_out, collect_key, prepare_out
    from lrtune.dataset import CONFIG

    out = tmp_path / "ds"
    mine = make_cfg(data_file, out, teacher="exact")
    other = dataclasses.replace(mine, decode=dataclasses.replace(mine.decode, gamma1=3))
    assert check_collect_out(mine) is False  # phase 1: an empty folder, nothing recorded yet
    out.mkdir()
    (out / CONFIG).write_text(json.dumps(collect_key(other)))  # another shard, started meanwhile
    try:
        with pytest.raises(ConfigError, match="another shard with another config"):
            prepare_out(mine, backup=False)
        assert json.loads((out / CONFIG).read_text()) == collect_key(other)  # its record stands
        (out / CONFIG).write_text(json.dumps(collect_key(mine)))
        assert prepare_out(mine, backup=False) == out  # the same config: shards share the folder
    finally:
        locks.release_all()
