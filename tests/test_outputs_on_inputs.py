"""Outputs never land on inputs or special files (issue 53): an ``--out`` folder holding files
no lrtune command wrote (a model, a dataset) is refused before anything runs, ``--overwrite``
or not, and a JSON output path that is a pipe, a device or a non-JSON file (an input) too."""

import os
import subprocess
import sys

import pytest

from lrtune.errors import ConfigError
from lrtune.outdir import check_out
from lrtune.outdir import json_out_file
from tiny_models import get_tiny_pair


def snapshot(root):
    return {p.relative_to(root): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_evaluate_will_not_write_into_a_model_directory_even_with_overwrite(tmp_path):
    import shutil

    model = tmp_path / "model"
    shutil.copytree(get_tiny_pair().target, model)
    before = snapshot(model)
    got = subprocess.run(
        [
            sys.executable,
            "-m",
            "lrtune",
            "evaluate",
            "--out",
            str(model),
            "--overwrite",
            "--methods",
            "target",
            "--limit",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert got.returncode == 2 and "holds files lrtune did not write" in got.stderr
    assert len(got.stderr.strip().splitlines()) == 1 and snapshot(model) == before


def test_a_folder_of_someone_elses_files_is_foreign_and_hidden_files_or_lrtunes_own_are_not(tmp_path):
    data = tmp_path / "dataset" / "pairs"
    data.mkdir(parents=True)
    (data / "part-0.parquet").write_bytes(b"PAR1")
    with pytest.raises(ConfigError, match=r"holds files lrtune did not write \(e.g. part-0.parquet\)"):
        check_out(data, "evaluate")
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / ".gitkeep").write_text("")
    assert check_out(empty, "evaluate") == empty and check_out(tmp_path / "new", "evaluate")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "records.jsonl").write_text("")  # an earlier evaluate's output: resumable
    assert check_out(mine, "evaluate") == mine


def test_a_json_output_is_never_a_pipe_a_device_or_a_file_that_is_not_json(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="not a regular file"):
        json_out_file(str(fifo), "--json")
    with pytest.raises(ConfigError, match="not a regular file"):
        json_out_file("/dev/null", "--json")
    parquet = tmp_path / "pairs.parquet"
    parquet.write_bytes(b"PAR1\x00\x01")
    with pytest.raises(ConfigError, match="holds a file that is not JSON"):
        json_out_file(str(parquet))
    (tmp_path / "mine").mkdir()
    old = tmp_path / "mine" / "old.json"
    old.write_text('{"previous": 1}')
    assert json_out_file(str(old)) == old and json_out_file(str(tmp_path / "mine" / "new.json"))


def _dataset(root):
    root.mkdir(parents=True)
    (root / "collect_config.json").write_text('{"options": {}}')
    (root / "manifest-s000.json").write_text("{}")
    return root


@pytest.mark.parametrize(
    "where,inputs,why",
    [
        (lambda t: _dataset(t / "ds") / "collect_config.json", (), "output directory of `lrtune collect`"),
        (lambda t: _dataset(t / "ds") / "../ds/summary.json", (), "output directory of `lrtune collect`"),
        (lambda t: _dataset(t / "ds") / "new.json", lambda t: (t / "ds",), "inside .*, an input of this command"),
        (lambda t: t / "problems.jsonl", lambda t: (t / "problems.jsonl",), "is an input of this command"),
        (lambda t: t / "model" / "generation_config.json", (), "inside a model directory"),
        (lambda t: t / "plain" / "config.json", (), "would replace config.json"),
        (lambda t: t / "link.json", (), "symbolic link"),
    ],
)
def test_a_json_output_never_lands_on_an_input_a_dataset_a_model_or_a_file_they_are_made_of(
    tmp_path, where, inputs, why
):
    (tmp_path / "problems.jsonl").write_text('{"id": "a"}\n')
    (tmp_path / "model").mkdir()
    for name in ("config.json", "generation_config.json"):
        (tmp_path / "model" / name).write_text("{}")
    (tmp_path / "model" / "model.safetensors").write_bytes(b"x")
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "config.json").write_text("{}")
    (tmp_path / "elsewhere.json").write_text("{}")
    (tmp_path / "link.json").symlink_to(tmp_path / "elsewhere.json")
    path = where(tmp_path)
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file() and not p.is_symlink()}
    with pytest.raises(ConfigError, match=why):
        json_out_file(str(path), inputs=inputs(tmp_path) if callable(inputs) else inputs)
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file() and not p.is_symlink()} == before


def test_an_error_about_ids_read_from_a_file_names_lines_never_the_files_contents(tmp_path):
    from types import SimpleNamespace

    from lrtune.eval.problems import listed_problems
    from lrtune.tasks import get_task

    secret = tmp_path / "environ"
    secret.write_text("HF_TOKEN=hf_secret_value_123\nPATH=/usr/bin\n")
    opts = SimpleNamespace(
        heldout_from=None, problem_ids=f"@{secret}", limit=5, task="gsm_symbolic", task_seed=0, data=None
    )
    with pytest.raises(ConfigError) as e:
        listed_problems(get_task("gsm_symbolic"), opts)
    assert "line(s) 1, 2 of" in str(e.value) and "hf_secret" not in str(e.value) and "PATH" not in str(e.value)
    typed = SimpleNamespace(**{**vars(opts), "problem_ids": "no-such-id"})
    with pytest.raises(ConfigError, match="no-such-id"):  # what the user typed may be quoted back
        listed_problems(get_task("gsm_symbolic"), typed)


@pytest.mark.parametrize("problem", [["p1"], 3, None, {"id": "p1"}])
def test_an_evaluate_record_whose_problem_or_method_is_not_text_is_refused_naming_its_line(tmp_path, problem):
    import json

    from lrtune.errors import ConfigError
    from lrtune.eval.records import load_records

    f = tmp_path / "records.jsonl"
    good = {"problem": "p0", "method": "target", "wall_s": 1.0, "correct": True, "stats": {}}
    f.write_text(json.dumps(good) + "\n" + json.dumps({**good, "problem": problem}) + "\n")
    before = f.read_bytes()
    with pytest.raises(ConfigError, match=r"records.jsonl:2: not an lrtune evaluate record \(problem is not text\)"):
        load_records(f)
    assert f.read_bytes() == before
