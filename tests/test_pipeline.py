"""``lrtune demo --size tiny``: every stage end to end on the tiny pair, then a re-run
that skips every finished stage."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tiny_models import get_tiny_pair


def demo(out, *extra, cache=None):
    """``lrtune demo --size tiny`` into ``out``; profiles are kept in ``cache`` (default: beside ``out``)."""
    pair = get_tiny_pair()
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "lrtune",
            "demo",
            "--size",
            "tiny",
            "--out",
            str(out),
            "--backend",
            "transformers",
            "--device",
            "cpu",
            "--target",
            str(pair.target),
            "--draft",
            str(pair.draft),
            "--teacher",
            "random(0.5)",
            "--max-model-len",
            "1024",
            "--max-step-tokens",
            "12",
            "--no-progress",
            "--cache-dir",  # profiles kept across runs go here, not to the user's cache
            str(cache or Path(out).parent / "cache"),
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    """The tiny demo, run once for every test of this module that needs it (any order)."""
    out = tmp_path_factory.mktemp("pipeline") / "demo"
    return out, demo(out)


@pytest.fixture(scope="module")
def demo_dir(demo_run):
    out, proc = demo_run
    assert proc.returncode == 0, proc.stderr[-4000:]
    return out


RENDERED = ("pipeline.json", "report.md", "summary.json")  # re-rendered from unchanged records on every run


def _mtimes(out: Path) -> dict[str, int]:
    """Every file a stage computes (data, checkpoints, records) and its modification time (ns)."""
    return {
        str(f.relative_to(out)): f.stat().st_mtime_ns
        for f in out.rglob("*")
        if f.is_file() and f.name not in RENDERED and f.suffix != ".png"
    }


@pytest.mark.slow  # ~75 s: every stage twice
def test_demo_tiny_runs_every_stage_and_a_rerun_skips_them(demo_run):
    out, proc = demo_run
    assert proc.returncode == 0, proc.stderr[-4000:]
    for f in (
        "collect/collect_config.json",
        "collect/README.md",
        "profile.json",
        "verifier/lrtune_verifier.json",
        "verifier/README.md",
        "controller/lrtune_controller.json",
        "eval/records.jsonl",
        "eval/summary.json",
        "eval/report.md",
        "pipeline.json",
    ):
        assert (out / f).is_file(), f
    summary = json.loads((out / "eval" / "summary.json").read_text())
    assert set(summary["methods"]) == {"target", "sd", "lr+sd/v=random(0.5)", "lr+sd", "auto"}
    assert summary["methods"]["auto"]["auto"]["runs"] in ("target", "sd", "adaptive")
    assert summary["methods"]["lr+sd"]["verifier"] == str(out / "verifier")
    prof = json.loads((out / "profile.json").read_text())
    assert set(prof["batch_cost_curve"]) == {"8", "12", "16"}  # up to 4 collected problems x (γ1 + 1) rows
    assert prof["memory_plan"]["total_gib"] > 0 and prof["max_rss_gib"] > 0  # what it planned, what it held
    # evaluate reused the profile's b(n)
    assert summary["batch_cost"] == {
        **{str(n): b for n, b in enumerate(prof["batch_cost"], 1)},
        **prof["batch_cost_curve"],
    }
    assert "problem(s) in flight (b(n) " + str(out / "profile.json") in proc.stderr  # collect's concurrency from it
    kept = list((out.parent / "cache" / "profiles").glob("*.json"))  # measured once, kept for later runs
    assert len(kept) == 1 and json.loads(kept[0].read_text())["batch_cost"] == prof["batch_cost"]
    assert "kept for later runs on this machine" in proc.stderr and "reused_from" not in prof
    bounds = json.loads((out / "controller" / "lrtune_controller.json").read_text())["bounds"]
    assert bounds["gamma2_max"] == 4  # = the rows' γ2, so the SD engine drafts no more than they use
    assert (
        "auto" in proc.stdout and "Stage times (s)" in proc.stdout and "test pairs of unseen templates" in proc.stdout
    )

    before = _mtimes(out)
    again = demo(out)
    assert again.returncode == 0, again.stderr[-4000:]
    assert (
        "up to date" in again.stderr and "profile" not in json.loads((out / "pipeline.json").read_text())["timings_s"]
    )
    assert _mtimes(out) == before  # no stage computed anything again (reports are re-rendered)
    assert "eval/records.jsonl" in before and "verifier/lrtune_verifier.json" in before


@pytest.mark.slow  # reuses the demo's kept profile and its collect; stops at the student
def test_demo_refuses_to_train_a_student_on_too_few_pairs_in_one_line(demo_dir, tmp_path):
    import shutil

    out = tmp_path / "demo"
    out.mkdir()
    shutil.copytree(demo_dir / "collect", out / "collect")
    shutil.copy(demo_dir / ".lrtune-owner.json", out / ".lrtune-owner.json")  # a demo's folder, stopped early
    proc = demo(out, "--min-train-pairs", "1000", cache=demo_dir.parent / "cache")
    assert proc.returncode != 0
    assert "fewer than --min-train-pairs 1000" in proc.stderr and "Traceback" not in proc.stderr
    # a new demo folder on the same machine, pair and settings copies the kept profile instead of measuring
    assert "reused the profile measured" in proc.stderr and "== profile: lrtune" not in proc.stderr
    reused, first = (json.loads((d / "profile.json").read_text()) for d in (out, demo_dir))
    assert reused["batch_cost"] == first["batch_cost"] and reused["options"]["out"] == str(out / "profile.json")
    assert not (out / "verifier" / "lrtune_verifier.json").exists() and not (out / "eval").exists()
    sizes = json.loads((demo_dir / "pipeline.json").read_text())["sizes"]
    assert sizes["min_train_pairs"] == 2 and sizes["collect_problems"] == 4  # the tiny size's, recorded


def test_demo_size_options_override_the_sizes_defaults():
    from lrtune.pipeline import SIZES, PipelineOptions, _sized

    size = _sized(
        PipelineOptions(size="default", collect_problems=5, max_new_tokens=64, collect_tokens=128, min_train_pairs=7)
    )
    assert (size.collect_problems, size.eval_tokens, size.collect_tokens, size.min_train_pairs) == (5, 64, 128, 7)
    assert size.eval_problems == SIZES["default"].eval_problems and size.test_fraction == SIZES["default"].test_fraction


def test_the_example_gpu_pipeline_config_names_only_known_options():
    from pathlib import Path

    from lrtune.api import ModelConfig
    from lrtune.configs import check_unknown_keys, load_config_file
    from lrtune.pipeline import SIZES, PipelineOptions

    path = Path(__file__).resolve().parents[1] / "examples" / "pipeline-gpu.yaml"
    values = load_config_file(str(path))
    check_unknown_keys(values, PipelineOptions, ModelConfig)
    opts = PipelineOptions(**{k: v for k, v in values.items() if k in PipelineOptions.__dataclass_fields__})
    models = ModelConfig(**{k: v for k, v in values.items() if k in ModelConfig.option_names()})
    assert opts.size in SIZES and models.engine.tensor_parallel_size == 4 and models.verification.judge_model


def test_pipeline_without_a_config_file_is_a_one_line_error(capsys):
    from lrtune.cli import main

    assert main(["pipeline"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "needs --config" in err[0]


@pytest.mark.slow  # needs the demo's outputs
def test_the_readme_python_example_runs_on_the_demo_outputs(demo_dir, capsys):
    """The README's Python API block, verbatim but for the model names, backend and budget."""
    pair = get_tiny_pair()
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    block = readme.split("## Python API", 1)[1].split("```python", 1)[1].split("```", 1)[0]
    code = (
        block.replace(
            '"default", "default"',
            f'"{pair.target}", "{pair.draft}", backend="transformers", '
            f'device="cpu", max_model_len=1024, progress=False',
        )
        .replace("results/demo/", f"{demo_dir}/")
        .replace("max_new_tokens=384", "max_new_tokens=40")
    )
    assert code.count(str(demo_dir)) == 2 and str(pair.target) in code
    scope: dict = {}
    exec(compile(code, "README.md", "exec"), scope)
    outs, dec = scope["outs"], scope["dec"]
    assert len(outs) == 2 and outs[0].stats.rounds >= 1
    assert dec.decoder.controller.name == "learned" and dec.decoder.verifier.name == "distilled:cross-encoder"
    assert "prompt 1 [" in capsys.readouterr().out  # committed steps were streamed


def test_the_demo_closing_lines_fit_80_columns_and_report_finished_answers():
    from lrtune.pipeline import closing_lines

    row = {"accuracy": 0.75, "finished": 4, "n": 4, "speedup_total": 1.5, "alpha1": None, "alpha2": 0.8}
    res = {
        "summary": {
            "task": "gsm_symbolic",
            "decoded_problems": 4,
            "methods": {
                "target": {**row, "speedup_total": 1.0, "alpha2": None},
                "sd": row,
                "lr+sd/v=results/demo/verifier": {**row, "alpha1": 0.41},
                "auto": {**row, "auto": {"runs": "sd", "reason": "the verifier states no accuracy bound, " * 3}},
            },
        },
        "timings": {"profile": 100.0, "collect": 300.0, "train verifier": 60.0, "evaluate": 200.0},
        "peak_rss_gib": {"profile": 6.04, "collect": 7.5, "train verifier": 1.2, "evaluate": 7.91},
        "student": {
            "kind": "cross-encoder",
            "metrics": {
                "test": {"n": 46, "accuracy": 0.9, "auroc": 0.95, "acceptance": 0.4, "teacher_acceptance": 0.43}
            },
        },
        "eval_tokens": 512,
        "reused": {"profile": "/home/someone/.cache/lrtune/profiles/" + "0" * 64 + ".json"},
    }
    lines = closing_lines(res)
    assert max(len(line) for line in lines) <= 80
    text = "\n".join(lines)
    assert "The profile was not measured again" in text and "--no-reuse-profile" in text
    assert "The target finished 4 of 4 answers" in text and "46 test pairs" in text and "Total: 11.0 min" in text
    assert "lr+sd/v=resu" in text and "0.41" in text
    assert "auto ran sd: the verifier states no accuracy bound" in text
    assert "Peak resident memory (GiB): profile 6.0, collect 7.5," in text and "evaluate 7.9" in text


def test_a_stage_reports_its_own_peak_resident_memory_not_its_parents_and_a_failed_stage_raises(tmp_path, monkeypatch):
    """run_child returns the child's own high-water mark: a child that held 300 MiB (freed before
    it exits) reports at least that, and one that held nothing reports far less than 300 MiB
    even where this (parent) process is large, as in a full test run. Each child stays up until
    run_child has read its mark after its peak (a readiness handshake, not a fixed sleep)."""
    import platform
    import sys

    from lrtune import peakmem, pipeline
    from lrtune.errors import LrtuneError

    if platform.system() != "Linux":
        pytest.skip("VmHWM is Linux's")
    read = peakmem.high_water_bytes
    ready, seen = tmp_path / "ready", tmp_path / "seen"

    def spy(pid):  # the real reading; tells the child once it was taken after the child's peak
        was_ready = ready.exists()
        value = read(pid)
        if value is not None and was_ready:
            seen.touch()
        return value

    monkeypatch.setattr(peakmem, "high_water_bytes", spy)
    hold = (
        "import os, time; b = bytearray({n} * 2**20); b[::4096] = b'x' * len(b[::4096]); del b; "
        f"open({str(ready)!r}, 'w').close(); end = time.monotonic() + 120\n"
        f"while not os.path.exists({str(seen)!r}) and time.monotonic() < end: time.sleep(0.01)"
    )
    peaks = {}
    for n in (300, 0):
        ready.unlink(missing_ok=True)
        seen.unlink(missing_ok=True)
        peaks[n] = pipeline.run_child(f"hold {n}", [sys.executable, "-c", hold.format(n=n)], poll_s=0.05)
        assert seen.exists()  # the mark was read after the peak, not at the 120 s deadline
    assert peaks[300] - peaks[0] > 250 / 1024 and peaks[0] < 250 / 1024
    with pytest.raises(LrtuneError, match="stage 'bad' failed"):
        pipeline.run_child("bad", [sys.executable, "-c", "raise SystemExit(3)"])


def test_the_demo_states_the_students_promise_and_what_the_run_measured_against_it():
    from lrtune.pipeline import closing_lines

    row = {"accuracy": 0.5, "finished": 4, "n": 4, "speedup_total": 1.0, "alpha1": 0.3, "alpha2": None}
    calib = {
        "max_false_accept": 0.05,
        "confidence": 0.9,
        "certified": False,
        "val_rejected": 2,
        "unit": "template",
        "rejected_templates": 2,
        "rejected_pairs_needed": 45,
        "false_accept_bound": 0.68,
    }
    res = {
        "summary": {
            "task": "gsm_symbolic",
            "decoded_problems": 4,
            "methods": {"target": row, "lr+sd": row},
            "verifier_parity": {
                "lr+sd": {"decode": {"acceptance": 0.95, "pairs": 20}, "test_split": {"acceptance": 0.59}, "gap": True}
            },
            "accuracy_vs_target": [{"a": "lr+sd", "b": "target", "only_a": 0, "only_b": 2}],
        },
        "timings": {"evaluate": 60.0},
        "student": {
            "kind": "cross-encoder",
            "calibration": calib,
            "metrics": {"test": {"n": 46, "fp": 8, "tn": 18, "false_accept_rate": 8 / 26}},
        },
    }
    lines = closing_lines(res)
    assert max(len(line) for line in lines) <= 80
    text = "\n".join(lines)
    assert "accepts <= 5% of teacher-rejected steps at 90%" in text and "NOT certifiable from 2" in text
    assert "(needs 45 templates with a rejected pair)" in text and "accepted 8 of 26 rejected steps" in text
    assert "accepted 0.95 of 20 draft steps in decoding" in text and "GAP" in text
    assert "2 answer(s) only the target solved" in text
    calib.update(certified=True, val_rejected=60, rejected_templates=50, false_accept_bound=0.049)
    text = "\n".join(closing_lines(res))
    assert "certified on 60 teacher-rejected pairs in 50 templates (bound 0.049)" in text and "NOT" not in text
    calib.update(unit="pair")
    assert "certified on 60 teacher-rejected pairs (bound 0.049)" in "\n".join(closing_lines(res))


def test_tables_in_a_log_get_room_for_every_cell():
    from lrtune.runfiles import console

    c = console()  # pytest captures stdout: not a terminal, as in a log file
    assert not c.is_terminal and c.width >= 200


def test_allowed_values_live_in_the_type_so_every_source_is_checked():
    import argparse
    import typing

    from lrtune.configs import build
    from lrtune.errors import ConfigError
    from lrtune.pipeline import SIZES, PipelineOptions, SizeName
    from lrtune.train.verifier import StudentKind, TrainVerifierConfig
    from lrtune.verifiers.distilled import STUDENT_KINDS

    assert set(typing.get_args(SizeName)) == set(SIZES) and set(typing.get_args(StudentKind)) == set(STUDENT_KINDS)
    for cls, key in ((PipelineOptions, "size"), (TrainVerifierConfig, "student")):
        for bad in ("\x00", "huge"):
            with pytest.raises(ConfigError, match=key):
                build(cls, argparse.Namespace(), {key: bad})


def test_the_default_demo_runs_a_2048_token_context_unless_one_is_given():
    import argparse

    from lrtune.pipeline import SIZES, sized_context

    unset, given = argparse.Namespace(max_model_len=None), argparse.Namespace(max_model_len=4096)
    assert SIZES["default"].max_model_len == 2048
    assert sized_context("default", unset, {}) == {"max_model_len": 2048}
    assert sized_context("default", given, {}) == {}  # the flag wins (build reads it from args)
    assert sized_context("default", unset, {"max_model_len": 1536}) == {"max_model_len": 1536}
    assert sized_context("tiny", unset, {"task": "x"}) == {"task": "x"}  # sizes without one keep ModelConfig's
    assert sized_context("nonesuch", unset, {}) == {}
