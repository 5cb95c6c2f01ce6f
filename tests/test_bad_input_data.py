"""Bad dataset input (collect --merge / --stats, load_tables, profiles, --problem-ids files,
a collect --out's config): a one-line ``lrtune: error:`` with exit status 2, never a traceback,
and nothing already written lost or changed (DESIGN: bad input). No models: the collect dirs
are written by the real store from synthetic rows."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from lrtune.cli import main as cli_main
from lrtune.dataset import CONFIG, PAIR_FIELDS, PROBLEM_FIELDS, load_tables, merge, schema
from lrtune.errors import ConfigError
from lrtune.store import ShardStore


def collect_dir(root: Path, ids: list[str], task: str = "gsm_symbolic", gamma1: int = 2) -> Path:
    """A collect dir (config, one shard's manifest and parts) with one pair per problem."""
    root.mkdir(parents=True)
    cfg = {
        "options": {"task": task, "limit": len(ids), "teacher": "exact"},
        "models": {"target": "t"},
        "decode": {"gamma1": gamma1},
    }
    (root / CONFIG).write_text(json.dumps(cfg))
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
            "teacher": "exact",
            "judge_s": 1.0,
        }
        prob = {"problem_id": pid, "index": i, "task": task, "correct": True, "finished": True, "wall_s": 1.0}
        store.add(pid, i, [pair], prob, schema(PAIR_FIELDS), schema(PROBLEM_FIELDS))
    return root


def snapshot(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def cli_error(capsys, *args: str) -> str:
    """Run the CLI in-process; assert exit 2 with one ``lrtune: error:`` line and return it."""
    capsys.readouterr()
    assert cli_main(list(args)) == 2
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("lrtune: error: "), lines
    return lines[0]


def edit_manifest(d: Path, change) -> None:
    m = json.loads((d / "manifest-s000.json").read_text())
    for e in m["finished"].values():
        change(e)
    (d / "manifest-s000.json").write_text(json.dumps(m))


def record_part_checksum(d: Path, part: Path) -> None:
    """Set the manifest's sha256 of pairs ``part`` to what the file holds now (a tampering that
    keeps the manifest consistent)."""
    digest = hashlib.sha256(part.read_bytes()).hexdigest()
    edit_manifest(d, lambda e: e["pairs"].update(sha256=digest) if e["pairs"]["file"] == f"pairs/{part.name}" else None)


def write_parquet(path: Path, rows: list[dict]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path)


# ---- defect 1: collect --merge turns bad sources into one-line errors -------------------------------------
@pytest.mark.parametrize(
    "blob",
    [b"{not json", b"[1]", b'{"options": {"task": "caf\xe9"}}', b'{"options": 5}'],
    ids=["corrupt", "list", "latin1", "options-not-object"],
)
def test_merge_of_a_source_with_an_unreadable_config_is_a_one_line_error(tmp_path, capsys, blob):
    src = collect_dir(tmp_path / "a", ["p0"])
    (src / CONFIG).write_bytes(blob)
    line = cli_error(capsys, "collect", "--merge", str(src), "--out", str(tmp_path / "m"))
    assert CONFIG in line and not (tmp_path / "m").exists()


def test_merge_of_a_garbage_part_whose_checksum_matches_names_the_file(tmp_path, capsys):
    src = collect_dir(tmp_path / "a", ["p0", "p1"])
    part = src / "pairs" / "part-s000-p000001.parquet"
    part.write_bytes(b"garbage")
    record_part_checksum(src, part)
    line = cli_error(capsys, "collect", "--merge", str(src), "--out", str(tmp_path / "m"))
    assert "part-s000-p000001.parquet" in line and "parquet" in line and not (tmp_path / "m").exists()


def test_a_stray_file_named_like_a_manifest_is_a_one_line_error_naming_it(tmp_path, capsys):
    src = collect_dir(tmp_path / "a", ["p0"])
    (src / "manifest-sX.json").write_text((src / "manifest-s000.json").read_text())
    assert "manifest-sX.json" in cli_error(capsys, "collect", "--merge", str(src), "--out", str(tmp_path / "m"))
    assert "manifest-sX.json" in cli_error(capsys, "collect", "--stats", str(src))


def test_merge_into_an_out_that_is_a_regular_file_is_a_one_line_error(tmp_path, capsys):
    src = collect_dir(tmp_path / "a", ["p0"])
    (tmp_path / "afile").write_text("keep me")
    assert "afile" in cli_error(capsys, "collect", "--merge", str(src), "--out", str(tmp_path / "afile"))
    assert (tmp_path / "afile").read_text() == "keep me"


# ---- defects 1 and 2: the manifest's index is checked ------------------------------------------------------
@pytest.mark.parametrize("index", ["missing", "x", 1.5, True, None])
def test_a_manifest_entry_without_an_int_index_is_a_one_line_error(tmp_path, capsys, index):
    src = collect_dir(tmp_path / "a", ["p0", "p1"])
    edit_manifest(src, lambda e: e.pop("index") if index == "missing" else e.update(index=index))
    before = snapshot(src)
    assert "manifest-s000.json" in cli_error(capsys, "collect", "--stats", str(src))
    assert "manifest-s000.json" in cli_error(capsys, "collect", "--merge", str(src), "--out", str(tmp_path / "m"))
    with pytest.raises(ConfigError, match="manifest"):
        load_tables(src)
    assert snapshot(src) == before


# ---- defect 2: load_tables checks the columns it hands on ----------------------------------------------------
def merged_dir(root: Path, change: dict | None = None, drop: str | None = None) -> Path:
    """A merged-layout dir whose pair rows have ``change`` applied and column ``drop`` removed."""
    src = collect_dir(root.with_name(root.name + "-src"), ["p0", "p1"])
    merge([str(src)], str(root))
    rows = [{**r, **(change or {})} for r in load_tables(root)[0].to_pylist()]
    write_parquet(root / "pairs.parquet", [{k: v for k, v in r.items() if k != drop} for r in rows])
    return root


@pytest.mark.parametrize(
    "change, drop, column",
    [
        (None, "label", "label"),
        ({"label": "yes"}, None, "label"),
        ({"position": "zero"}, None, "position"),
        ({"round": 1.5}, None, "round"),
    ],
    ids=["no-label", "label-str", "position-str", "round-float"],
)
def test_stats_of_pairs_with_a_missing_or_mistyped_column_names_the_file_and_column(
    tmp_path, capsys, change, drop, column
):
    d = merged_dir(tmp_path / "m", change, drop)
    line = cli_error(capsys, "collect", "--stats", str(d))
    assert "pairs.parquet" in line and repr(column) in line


def test_a_mistyped_part_file_of_a_collect_dir_is_named(tmp_path, capsys):
    src = collect_dir(tmp_path / "a", ["p0", "p1"])
    part = src / "pairs" / "part-s000-p000001.parquet"
    import pyarrow.parquet as pq

    write_parquet(part, [{**r, "label": "yes"} for r in pq.read_table(part).to_pylist()])
    record_part_checksum(src, part)
    line = cli_error(capsys, "collect", "--stats", str(src))
    assert "part-s000-p000001.parquet" in line and "'label'" in line
    assert "part-s000-p000001.parquet" in cli_error(
        capsys, "collect", "--merge", str(src), "--out", str(tmp_path / "m")
    )


def test_load_tables_still_reads_files_that_hold_only_some_columns(tmp_path):
    d = tmp_path / "few"
    d.mkdir()
    write_parquet(d / "pairs.parquet", [{"problem_id": "x", "target_len": 10, "teacher_score": 1}])
    write_parquet(d / "problems.parquet", [{"problem_id": "x", "index": 0, "alpha2": None}])
    pairs, probs = load_tables(d)
    assert pairs.num_rows == 1 and probs.num_rows == 1


# ---- defect 9: a merge never overwrites a collect run or a different merge -----------------------------------
def test_merge_refuses_an_out_that_holds_a_collect_runs_own_data(tmp_path, capsys):
    a = collect_dir(tmp_path / "a", ["p0"])
    b = collect_dir(tmp_path / "b", ["q0", "q1"])
    before = snapshot(b)
    assert "pick another --out" in cli_error(capsys, "collect", "--merge", str(a), "--out", str(b))
    assert snapshot(b) == before
    assert "pick another --out" in cli_error(capsys, "collect", "--merge", str(a), str(b), "--out", str(b))
    assert snapshot(b) == before


def test_a_second_merge_of_other_problems_into_one_out_is_refused_unless_force_new_keeps_a_backup(tmp_path, capsys):
    a = collect_dir(tmp_path / "a", ["p0", "p1"])
    b = collect_dir(tmp_path / "b", ["q0"])
    other = collect_dir(tmp_path / "other", ["p0", "p1"], gamma1=3)
    m = tmp_path / "m"
    merge([str(a)], str(m))
    merge([str(a), str(a)], str(m))  # the same merge again: idempotent
    before = snapshot(m)
    assert "pick another --out" in cli_error(capsys, "collect", "--merge", str(b), "--out", str(m))
    assert "pick another --out" in cli_error(capsys, "collect", "--merge", str(other), "--out", str(m))
    assert snapshot(m) == before
    merge([str(a), str(b)], str(m))  # grown: keeps every problem the first merge held
    assert sorted(load_tables(m)[1].column("problem_id").to_pylist()) == ["p0", "p1", "q0"]
    assert cli_main(["collect", "--merge", str(b), "--out", str(m), "--force-new"]) == 0
    assert load_tables(m)[1].column("problem_id").to_pylist() == ["q0"]
    backup = next(m.glob("backup-*"))
    assert sorted(load_tables(backup)[1].column("problem_id").to_pylist()) == ["p0", "p1", "q0"]


# ---- defect 11: profiles, --problem-ids files, a collect --out's config -------------------------------------
def test_a_profile_whose_batch_cost_curve_is_a_list_is_a_one_line_error(tmp_path, capsys):
    from lrtune.batchcost import read_profile_curve

    prof = tmp_path / "p.json"
    prof.write_text(json.dumps({"batch_cost": [1.0, 1.2], "batch_cost_curve": [1.0, 1.5]}))
    with pytest.raises(ConfigError, match="batch_cost_curve"):
        read_profile_curve(str(prof))
    line = cli_error(
        capsys,
        "collect",
        "--task",
        "gsm_symbolic",
        "--limit",
        "1",
        "--profile",
        str(prof),
        "--out",
        str(tmp_path / "c"),
    )
    assert "not an lrtune profile" in line


def test_problem_ids_from_a_file_that_is_not_utf8_is_a_one_line_error(tmp_path):
    from lrtune.eval.evaluate import EvalOptions, listed_problems
    from lrtune.tasks import get_task

    ids = tmp_path / "ids.txt"
    ids.write_bytes(b"gsm_symbolic-0-0\ncaf\xe9\n")
    with pytest.raises(ConfigError, match="UTF-8"):
        listed_problems(get_task("gsm_symbolic"), EvalOptions(problem_ids=f"@{ids}", limit=2))


def collect_cfg(out: Path, force_new: bool = False):
    from lrtune.data_gen.collect import CollectConfig, collect_options

    return CollectConfig(options=collect_options(task="gsm_symbolic", limit=2, out=str(out), force_new=force_new))


@pytest.mark.parametrize("blob", [b"{not json", b"[1]", b'{"options": "caf\xe9"}'], ids=["corrupt", "list", "latin1"])
def test_an_unreadable_config_in_collect_out_is_a_mismatch_and_force_new_recovers(tmp_path, capsys, blob):
    from lrtune.data_gen.collect import check_collect_out, prepare_out

    d = collect_dir(tmp_path / "c", ["p0"])
    (d / CONFIG).write_bytes(blob)
    before = snapshot(d)
    with pytest.raises(ConfigError, match="--force-new"):
        check_collect_out(collect_cfg(d))
    assert "--force-new" in cli_error(capsys, "collect", "--task", "gsm_symbolic", "--limit", "2", "--out", str(d))
    assert snapshot(d) == before
    cfg = collect_cfg(d, force_new=True)
    prepare_out(cfg, check_collect_out(cfg))
    backup = next(d.glob("backup-*"))
    assert snapshot(backup) == before and json.loads((d / CONFIG).read_text())["options"]["task"] == "gsm_symbolic"


@pytest.mark.parametrize(
    "field, value",
    [
        ("question", ["my key is hf_SECRET1"]),
        ("answer", {"v": "hf_SECRET1"}),
        ("id", ["hf_SECRET1"]),
        ("question", True),
    ],
)
def test_a_problem_field_that_is_not_a_text_or_number_is_one_line_naming_file_line_and_field_not_its_value(
    tmp_path, field, value
):
    from lrtune.tasks import get_task

    row = {"id": "p1", "question": "What is 2+3?", "answer": "5", field: value}
    path = tmp_path / "problems.jsonl"
    path.write_text(json.dumps(row) + "\n", encoding="utf-8")
    with pytest.raises(ConfigError) as e:
        get_task("custom").load(path=str(path))
    msg = str(e.value)
    assert f"{path}:1" in msg and repr(field) in msg and "SECRET" not in msg and "\n" not in msg


def test_a_reader_refuses_a_part_whose_checksum_disagrees_instead_of_dropping_its_problem(tmp_path, capsys):
    src = collect_dir(tmp_path / "a", ["p0", "p1", "p2"])
    (src / "pairs" / "part-s000-p000001.parquet").write_bytes(
        (src / "pairs" / "part-s000-p000002.parquet").read_bytes()
    )  # swapped in without the manifest knowing
    before = snapshot(src)
    line = cli_error(capsys, "collect", "--stats", str(src))
    assert "part-s000-p000001.parquet" in line and "missing or corrupt" in line and "p1" in line
    assert "part-s000-p000001.parquet" in cli_error(
        capsys, "collect", "--merge", str(src), "--out", str(tmp_path / "m")
    )
    assert snapshot(src) == before and not (tmp_path / "m").exists()


def test_a_part_of_another_problem_with_its_checksum_recorded_is_refused(tmp_path, capsys):
    src = collect_dir(tmp_path / "a", ["p0", "p1", "p2"])
    part, other = (src / "pairs" / f"part-s000-p00000{i}.parquet" for i in (1, 2))
    part.write_bytes(other.read_bytes())  # p2's rows under p1's name, the manifest's sha256 updated to match
    record_part_checksum(src, part)
    line = cli_error(capsys, "collect", "--stats", str(src))
    assert "part-s000-p000001.parquet" in line and "holds rows of problem 'p2'" in line
