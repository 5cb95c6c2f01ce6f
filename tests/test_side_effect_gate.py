"""One gate before any side effect (issue 75): every command checks all of its input before
it writes, creates, moves or deletes a file, loads a model or binds a socket
(:mod:`lrtune.gate`).

Each command runs in this process under the spy (:func:`lrtune.gate.watch`: Python's audit
hooks see every file operation under the watched folders, the loaders are wrapped) up to its
gate, where it stops; the test fails if the command has no gate or did anything before it.
Then late-found bad inputs are refused in phase 1: one line, no gate, nothing done.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest

from lrtune import gate
from lrtune.cli import main as cli_main
from tests.test_train_verifier import _synthetic_rows, write_pairs
from tiny_models import get_tiny_pair, sample_questions

pytest.importorskip("vllm")


def _tree(root) -> dict:
    return {
        str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None)
        for p in sorted(root.rglob("*"))
        if not p.is_symlink()
    }


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """Real inputs every command can take: the tiny pair, a problems file, a rollout-labelled
    collect run on the tiny pair, a merged-style pairs folder and a pipeline config."""
    root = tmp_path_factory.mktemp("inputs")
    pair = get_tiny_pair()
    problems = root / "problems.jsonl"
    problems.write_text(
        "".join(
            json.dumps({"id": f"q{i}", "question": q, "answer": str(i)}) + "\n"
            for i, q in enumerate(sample_questions(3, seed=99))
        )
    )
    collected = root / "collected"
    code = cli_main(
        [
            "collect",
            *("--task", "custom", "--data", str(problems), "--limit", "3", "--out", str(collected)),
            *("--teacher", "rollout", "--backend", "transformers", "--method", "lr+sd"),
            *("--target", str(pair.target), "--draft", str(pair.draft), "--gamma1", "2"),
            *("--max-new-tokens", "32", "--max-step-tokens", "12", "--max-model-len", "512"),
            *("--rollout-tokens", "16", "--no-embedding-feature", "--no-progress"),
        ]
    )
    assert code == 0
    pairs = write_pairs(root / "pairs", _synthetic_rows(12))
    config = root / "pipeline.yaml"
    config.write_text(f"target: {pair.target}\ndraft: {pair.draft}\nout: {root / 'never-made'}\nmax_model_len: 512\n")
    return {
        "T": str(pair.target),
        "D": str(pair.draft),
        "PROBLEMS": str(problems),
        "COLLECTED": str(collected),
        "PAIRS": str(pairs),
        "PIPELINE": str(config),
    }


MODELS = ("--target", "{T}", "--draft", "{D}", "--max-model-len", "1024")
# every command, with valid input; {OUT} is a fresh folder under the watched root
COMMANDS = {
    "decode": ("decode", "What is 2 + 3?", *MODELS),
    "decode --target-quantization": (
        *("decode", "What is 2 + 3?", *MODELS),
        *("--target-quantization", "int8-weights", "--draft-quantization", "int8-weights"),
    ),  # the copies are built after the gate
    "serve": ("serve", "--port", "0", *MODELS),
    "evaluate": ("evaluate", "--methods", "target,sd", "--limit", "1", "--out", "{OUT}/run", *MODELS),
    "collect": (
        "collect",
        *("--task", "custom", "--data", "{PROBLEMS}", "--limit", "2", "--out", "{OUT}/ds"),
        *("--teacher", "exact", "--backend", "transformers", *MODELS),
    ),
    "collect --merge": ("collect", "--merge", "{COLLECTED}", "--out", "{OUT}/merged"),
    "train verifier": ("train", "verifier", "--data", "{PAIRS}", "--student", "features", "--out", "{OUT}/v"),
    "train controller": ("train", "controller", "--data", "{COLLECTED}", "--out", "{OUT}/c"),
    "calibrate": ("calibrate", "--verifier", "embedding", "--data", "{PAIRS}", "--out", "{OUT}/cal.json"),
    "labels judge-probe": (
        *("labels", "judge-probe", "--data", "{COLLECTED}"),
        *("--target", "{T}", "--out", "{OUT}/jp.json"),
    ),
    "labels noise": ("labels", "noise", "--data", "{COLLECTED}", "--out", "{OUT}/noise.json"),
    "labels vote": ("labels", "vote", "--data", "{COLLECTED}", "--out", "{OUT}/vote"),
    "profile": ("profile", "--out", "{OUT}/profile.json", *MODELS),
    "demo": ("demo", "--out", "{OUT}/demo", "--size", "tiny", *MODELS),
    "pipeline": ("pipeline", "--config", "{PIPELINE}", "--out", "{OUT}/pipe"),
    "doctor": ("doctor", "--target", "{T}", "--draft", "{D}", "--json", "{OUT}/doctor.json"),
    "prepare": ("prepare", "--cache-dir", "{OUT}/cache"),
}


def _argv(template, inputs, out) -> list[str]:
    return [a.format(OUT=out, **inputs) for a in template]


def _watched(tmp_path, inputs):
    """The watched root: a copy of the inputs (so a write into one is seen) and the outputs."""
    root = tmp_path / "watched"
    (root / "in").mkdir(parents=True, exist_ok=True)
    copied = {}
    for k, v in inputs.items():
        src = os.fspath(v)
        if k in ("T", "D"):
            copied[k] = src  # the shared tiny models: only read (the spy's loaders see a load)
            continue
        dst = root / "in" / os.path.basename(src)
        if not dst.exists():
            (shutil.copytree if os.path.isdir(src) else shutil.copy2)(src, dst)
        copied[k] = str(dst)
    (root / "out").mkdir(parents=True, exist_ok=True)
    return root, copied


def test_every_command_is_listed():
    from lrtune.cli import make_parser

    sub = next(a for a in make_parser()._actions if a.dest == "command")
    listed = {c.split()[0] for c in COMMANDS}
    assert set(sub.choices) == listed


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_command_does_nothing_before_its_gate(command, inputs, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("LRTUNE_CACHE", str(tmp_path / "watched" / "cache"))
    root, copied = _watched(tmp_path, inputs)
    before = _tree(root / "in")
    with gate.watch(root, stop=True) as seen:
        code = cli_main(_argv(COMMANDS[command], copied, root / "out"))
    err = capsys.readouterr().err
    assert seen.reached is not None, f"{command} ended (exit {code}) without passing its gate: {err[-400:]}"
    assert seen.effects == [], f"{command} acted before its gate: {seen.effects[:5]}"
    assert _tree(root / "in") == before
    assert not any((root / "out").iterdir())


def _vllm_plugins_without_lrtune(monkeypatch, tmp_path, inputs):
    monkeypatch.setenv("VLLM_PLUGINS", "lora_filesystem_resolver")


def _missing_target_in_dataset(monkeypatch, tmp_path, inputs):
    conf = tmp_path / "watched" / "in" / "collected" / "collect_config.json"
    data = json.loads(conf.read_text())
    data["models"]["target"] = str(tmp_path / "no-such-model")
    conf.write_text(json.dumps(data))


def _context_longer_than_the_model(monkeypatch, tmp_path, inputs):
    pass  # the command below asks --max-model-len 4096 of a 2048-position model


def _read_only_records_to_resume(monkeypatch, tmp_path, inputs):
    run = tmp_path / "watched" / "out" / "run"
    run.mkdir(parents=True)
    (run / "records.jsonl").write_text("")
    (run / "records.jsonl").chmod(0o444)
    real = os.access  # root may write a read-only file: the permission is read as a user reads it
    monkeypatch.setattr(os, "access", lambda p, mode: False if str(p).endswith("records.jsonl") else real(p, mode))


# (command, extra flags, setup, words of the one-line error): each found late before the gate existed
LATE = [
    ("evaluate", (), _vllm_plugins_without_lrtune, "VLLM_PLUGINS"),
    ("decode", (), _vllm_plugins_without_lrtune, "VLLM_PLUGINS"),
    ("labels vote", (), _missing_target_in_dataset, "model path not found"),
    ("labels noise", (), _missing_target_in_dataset, "model path not found"),
    ("evaluate", (), _read_only_records_to_resume, "read-only"),
    ("decode", ("--max-model-len", "4096"), _context_longer_than_the_model, "--max-model-len"),
    ("evaluate", ("--max-model-len", "4096"), _context_longer_than_the_model, "--max-model-len"),
]


@pytest.mark.parametrize("command,extra,setup,words", LATE, ids=[f"{c}-{s.__name__}" for c, _, s, _ in LATE])
def test_a_late_found_bad_input_is_refused_before_the_gate_in_one_line(
    command, extra, setup, words, inputs, tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("LRTUNE_CACHE", str(tmp_path / "watched" / "cache"))
    root, copied = _watched(tmp_path, inputs)
    setup(monkeypatch, tmp_path, inputs)
    before, code = _tree(root / "in"), None
    with gate.watch(root, stop=True) as seen:
        code = cli_main([*_argv(COMMANDS[command], copied, root / "out"), *extra])
    err = capsys.readouterr().err.strip()
    assert code == 2 and seen.reached is None, (code, err[-300:])
    assert words in err and len(err.splitlines()) == 1, err
    assert seen.effects == [] and _tree(root / "in") == before
    left = [] if setup is not _read_only_records_to_resume else ["run", "records.jsonl"]  # as it was
    assert [p.name for p in (root / "out").rglob("*")] == left


def test_the_spy_sees_a_write_a_rename_a_removal_and_a_load_before_the_gate(tmp_path):
    from transformers import AutoModelForCausalLM

    with gate.watch(tmp_path) as seen:
        (tmp_path / "a.txt").write_text("x")
        os.replace(tmp_path / "a.txt", tmp_path / "b.txt")
        os.remove(tmp_path / "b.txt")
        (tmp_path / "d").mkdir()
        AutoModelForCausalLM.from_pretrained(get_tiny_pair().draft)
        gate.passed("test")
        (tmp_path / "after.txt").write_text("y")  # after the gate: allowed
    assert [e.split()[0] for e in seen.effects[:4]] == ["open-for-write", "os.rename", "os.remove", "os.mkdir"]
    assert seen.effects[4].startswith("load-model transformers") and seen.reached == "test"
    assert not any("after.txt" in e for e in seen.effects)


def _is_lock(name: str) -> bool:
    """A lock file (:mod:`lrtune.locks`): it holds no content."""
    return name.endswith(".lock") or ".lrtune-lock" in name


def in_place_writes(after: list[tuple[str, ...]], root) -> list[str]:
    """Files under ``root`` written in place: opened to write and then neither renamed (as
    themselves or inside a folder renamed later, as :func:`lrtune.runfiles.write_atomic` and
    ``building_dir`` do) nor removed. A lock file holds no content and does not count."""
    from pathlib import Path

    def covers(a: str, p) -> bool:
        return Path(a) == p or Path(a) in p.parents

    bad = set()
    for i, (op, path, *_) in enumerate(after):
        p = Path(path)
        if op != "open-for-write" or not covers(str(root), p) or _is_lock(p.name):
            continue
        if not any(o in ("os.rename", "os.remove", "shutil.rmtree") and covers(a, p) for o, a, *_ in after[i + 1 :]):
            bad.add(str(p.relative_to(root)))
    return sorted(bad)


def test_in_place_writes_are_told_from_atomic_ones():
    ops = [
        ("open-for-write", "/o/.a.json.1.tmp"),
        ("os.rename", "/o/.a.json.1.tmp", "/o/a.json"),
        ("open-for-write", "/o/.v.tmp-x/w.safetensors"),
        ("os.rename", "/o/.v.tmp-x", "/o/v"),
        ("open-for-write", "/o/.lock"),
        ("open-for-write", "/o/card.md"),  # written in place
        ("open-append", "/o/records.jsonl"),
    ]
    assert in_place_writes(ops, "/o") == ["card.md"]


# commands run to completion under the spy (the tiny pair on transformers): what they write
FULL = {
    "collect": COMMANDS["collect"],
    "collect --merge": COMMANDS["collect --merge"],
    "train verifier": COMMANDS["train verifier"],
    "train controller": COMMANDS["train controller"],
    "calibrate": COMMANDS["calibrate"],
    "labels noise": COMMANDS["labels noise"],
    "evaluate": (*COMMANDS["evaluate"], "--backend", "transformers", "--max-new-tokens", "16"),
    "profile": (
        *COMMANDS["profile"],
        "--backend",
        "transformers",
        "--tokens",
        "4",
        "--repeats",
        "1",
        "--sd-gamma2",
        "0",
    ),
    "labels judge-probe": (*COMMANDS["labels judge-probe"], "--backend", "transformers", "--limit", "2"),
    "doctor": (*COMMANDS["doctor"], "--backend", "transformers", "--no-timing"),
}


@pytest.mark.parametrize("command", sorted(FULL))
def test_a_command_run_to_the_end_writes_only_its_output_and_every_file_whole(
    command, inputs, tmp_path, monkeypatch, capsys
):
    """After its gate a command writes under its output only (never its inputs), each file by a
    temp file renamed into place (or a folder built aside and renamed), logs by appending."""
    monkeypatch.setenv("LRTUNE_CACHE", str(tmp_path / "watched" / "cache"))
    root, copied = _watched(tmp_path, inputs)
    before = _tree(root / "in")
    with gate.watch(root, everything=True) as seen:
        code = cli_main(_argv(FULL[command], copied, root / "out"))
    err = capsys.readouterr().err
    assert code == 0, err[-600:]
    assert seen.effects == [] and _tree(root / "in") == before
    touched = {p for _, *paths in seen.after for p in paths}
    assert not [p for p in touched if str(root / "in") in p]
    assert any(op == "os.rename" for op, *_ in seen.after)  # the spy saw its output land
    assert in_place_writes(seen.after, root / "out") == []
    appended = {os.path.basename(p) for op, p, *_ in seen.after if op == "open-append"}
    assert all(name.endswith(".jsonl") for name in appended), appended
