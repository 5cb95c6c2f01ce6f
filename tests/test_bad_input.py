"""Bad input, one row per case: exit status 2, one line on stderr starting ``lrtune: error:``,
no traceback, and nothing already written lost or changed (DESIGN: bad input)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from tiny_models import get_tiny_pair, sample_questions

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def snapshot(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    """A workspace: a tiny pair, good and bad problem files, a collected dataset, checkpoints."""
    root = tmp_path_factory.mktemp("bad")
    pair = get_tiny_pair()
    qs = sample_questions(3, seed=21)
    (root / "good.jsonl").write_text(
        "".join(json.dumps({"id": f"g{i}", "question": q, "answer": "1"}) + "\n" for i, q in enumerate(qs))
    )
    (root / "latin1.jsonl").write_bytes(
        json.dumps({"id": "x", "question": "caf", "answer": "1"}).encode()[:-2] + b'\xe9"}\n'
    )
    (root / "dupes.jsonl").write_text(
        "".join(json.dumps({"id": "same", "question": q, "answer": "1"}) + "\n" for q in qs)
    )
    (root / "long_line.jsonl").write_text(json.dumps({"id": "l", "question": "x" * (2 << 20), "answer": "1"}) + "\n")
    (root / "too_long.jsonl").write_text(json.dumps({"id": "t", "question": "word " * 3000, "answer": "1"}) + "\n")
    (root / "corrupt.parquet").write_bytes(b"PAR1 this is not parquet PAR1")
    (root / "float.yaml").write_text("gamma1: 2.5\n")
    (root / "twice.yaml").write_text("gamma1: 2\ngamma1: 3\n")
    (root / "alias.yaml").write_text("a: &a [x, x, x, x]\nb: &b [*a, *a, *a, *a]\nc: [*b, *b, *b, *b]\n")
    (root / "deep.yaml").write_text("gamma1: " + "[" * 3000 + "]" * 3000 + "\n")
    (root / "list_prompt.yaml").write_text("prompt: [1, 2]\n")
    (root / "nested_and_flat.yaml").write_text("engine:\n  max_model_len: 2048\nmax_model_len: 1024\n")
    (root / "nan_c2_profile.json").write_text('{"c1": 0.3, "c2": NaN}')
    (root / "deep.json").write_text("[" * 3000 + "]" * 3000)
    (root / "big_row.json").write_text(json.dumps([{"id": "b", "question": "x" * (2 << 20), "answer": "1"}]))
    (root / "bom.jsonl").write_bytes(b"\xef\xbb\xbf" + (root / "good.jsonl").read_bytes())
    empty_weights = root / "empty_weights"
    import shutil

    shutil.copytree(pair.target, empty_weights)
    (empty_weights / "model.safetensors").write_bytes(b"")
    owned = {}
    for command, marker in (
        ("collect", "manifest-s000.json"),
        ("train controller", "lrtune_controller.json"),
        ("train verifier", "lrtune_verifier.json"),
    ):
        d = root / f"owned_{command.replace(' ', '_')}"
        d.mkdir()
        (d / marker).write_text("{}")
        owned[command] = d
    (root / "text.yaml").write_text('gamma1: "abc"\n')
    (root / "latin1.yaml").write_bytes(b"method: caf\xe9\n")
    # a dataset whose parquet is corrupt, and one whose manifest lacks keys
    bad_ds = root / "bad_ds"
    (bad_ds / "pairs").mkdir(parents=True)
    (bad_ds / "pairs.parquet").write_bytes(b"garbage")
    (bad_ds / "problems.parquet").write_bytes(b"garbage")
    no_keys = root / "no_keys"
    no_keys.mkdir()
    (no_keys / "manifest-s000.json").write_text(json.dumps({"finished": {"p": {"index": 0}}}))
    # distilled checkpoints with a corrupt, an incomplete and a mistyped features file
    from lrtune.verifiers import distilled

    def ckpt(name, weights: bytes | None = None, tensors: dict | None = None, **meta) -> str:
        d = root / name
        d.mkdir()
        m = {
            "format": distilled.FORMAT,
            "version": distilled.VERSION,
            "kind": "features",
            "threshold": 0.5,
            "features": ["len_ratio"],
        }
        m.update(meta)
        (d / distilled.META).write_text(json.dumps(m))
        if tensors is not None:
            import numpy as np
            from safetensors.numpy import save_file

            save_file({k: np.asarray(v, dtype=np.float32) for k, v in tensors.items()}, str(d / "features.safetensors"))
        else:
            (d / "features.safetensors").write_bytes(weights or b"")
        return str(d)

    pickled_base = root / "pickled_base"
    pickled_base.mkdir()
    (pickled_base / "config.json").write_text("{}")
    (pickled_base / "pytorch_model.bin").write_bytes(b"x")
    ce = Path(ckpt("ck_pickled_base", kind="cross-encoder", base_model=str(pickled_base)))
    (ce / "adapter_config.json").write_text("{}")
    (ce / "adapter_model.safetensors").write_bytes(b"")
    ck = {
        "corrupt": ckpt("ck_corrupt", b"\x00\x01garbage"),
        "pickled_base": str(ce),
        "bad_length": ckpt("ck_bad_length", max_length="long"),
        "missing": ckpt("ck_missing", tensors={"mean": [0.0], "scale": [1.0], "coef": [1.0]}),
        "typed": ckpt(
            "ck_typed", tensors={"mean": [0.0], "scale": [1.0], "coef": [1.0], "intercept": [0.0]}, features=3
        ),
    }
    return {"root": root, "pair": pair, "ck": ck, "owned": owned, "empty_weights": empty_weights}


def tiny(ws) -> list[str]:
    p = ws["pair"]
    return [
        "--target",
        str(p.target),
        "--draft",
        str(p.draft),
        "--backend",
        "transformers",
        "--device",
        "cpu",
        "--max-model-len",
        "512",
    ]


def collect_args(ws, data: str, *extra) -> list[str]:
    return [
        "collect",
        "--task",
        "custom",
        "--data",
        str(ws["root"] / data),
        "--limit",
        "3",
        "--out",
        str(ws["out"]),
        "--teacher",
        "exact",
        "--gamma1",
        "2",
        "--max-new-tokens",
        "24",
        "--max-step-tokens",
        "8",
        "--no-embedding-feature",
        "--no-target-score-feature",
        "--no-progress",
        *tiny(ws),
        *extra,
    ]


def eval_args(ws, data: str, *extra) -> list[str]:
    return [
        "evaluate",
        "--task",
        "custom",
        "--data",
        str(ws["root"] / data),
        "--limit",
        "3",
        "--out",
        str(ws["out"]),
        "--methods",
        "target",
        "--max-new-tokens",
        "24",
        "--max-step-tokens",
        "8",
        "--no-progress",
        "--warmup-tokens",
        "0",
        "--no-plots",
        *tiny(ws),
        *extra,
    ]


CASES = {
    # config files: types are checked against the dataclass fields before anything loads
    "yaml float for an int": (lambda ws: ["decode", "hi", "--config", str(ws["root"] / "float.yaml")], "gamma1"),
    "yaml text for an int": (lambda ws: ["decode", "hi", "--config", str(ws["root"] / "text.yaml")], "gamma1"),
    "config not UTF-8": (lambda ws: ["decode", "hi", "--config", str(ws["root"] / "latin1.yaml")], "UTF-8"),
    # problem files
    "collect: JSONL not UTF-8": (lambda ws: collect_args(ws, "latin1.jsonl"), "UTF-8"),
    "evaluate: JSONL not UTF-8": (lambda ws: eval_args(ws, "latin1.jsonl"), "UTF-8"),
    "collect: duplicate ids": (lambda ws: collect_args(ws, "dupes.jsonl"), "appears twice"),
    "evaluate: duplicate ids": (lambda ws: eval_args(ws, "dupes.jsonl"), "appears twice"),
    "collect: a 2 MiB line": (lambda ws: collect_args(ws, "long_line.jsonl"), "longer than"),
    "evaluate: a 2 MiB line": (lambda ws: eval_args(ws, "long_line.jsonl"), "longer than"),
    "evaluate: corrupt parquet problems": (lambda ws: eval_args(ws, "corrupt.parquet"), "parquet"),
    "collect: no prompt fits": (lambda ws: collect_args(ws, "too_long.jsonl"), "max_model_len"),
    "evaluate: no prompt fits": (lambda ws: eval_args(ws, "too_long.jsonl"), "max_model_len"),
    # datasets and checkpoints
    "train verifier: corrupt pairs.parquet": (
        lambda ws: [
            "train",
            "verifier",
            "--data",
            str(ws["root"] / "bad_ds"),
            "--out",
            str(ws["out"] / "v"),
            "--no-progress",
        ],
        "parquet",
    ),
    "collect --stats: corrupt parquet": (lambda ws: ["collect", "--stats", str(ws["root"] / "bad_ds")], "parquet"),
    "collect --stats: manifest lacks keys": (
        lambda ws: ["collect", "--stats", str(ws["root"] / "no_keys")],
        "manifest",
    ),
    "corrupt features.safetensors": (
        lambda ws: ["decode", "hi", "--method", "lr", *tiny(ws), "--verifier", ws["ck"]["corrupt"]],
        "features.safetensors",
    ),
    "features.safetensors lacks a tensor": (
        lambda ws: ["decode", "hi", "--method", "lr", *tiny(ws), "--verifier", ws["ck"]["missing"]],
        "intercept",
    ),
    "mistyped checkpoint field": (
        lambda ws: ["decode", "hi", "--method", "lr", *tiny(ws), "--verifier", ws["ck"]["typed"]],
        "features",
    ),
    "checkpoint names a pickled base model": (
        lambda ws: ["decode", "hi", "--method", "lr", *tiny(ws), "--verifier", ws["ck"]["pickled_base"]],
        "pickle",
    ),
    "mistyped max_length": (
        lambda ws: ["decode", "hi", "--method", "lr", *tiny(ws), "--verifier", ws["ck"]["bad_length"]],
        "max_length",
    ),
    # specs and options, all refused before any model loads
    "unknown verifier": (lambda ws: ["decode", "hi", "--verifier", "bogus", *tiny(ws)], "unknown verifier"),
    "bad llm_judge form": (lambda ws: ["decode", "hi", "--verifier", "llm_judge(fancy)", *tiny(ws)], "form"),
    "bad teacher": (lambda ws: collect_args(ws, "good.jsonl", "--teacher", "consensus(llm_judge)"), "consensus"),
    "collect --max-concurrent 0": (
        lambda ws: collect_args(ws, "good.jsonl", "--max-concurrent", "0"),
        "max-concurrent",
    ),
    "evaluate --max-concurrent 0": (
        lambda ws: eval_args(ws, "good.jsonl", "--mode", "throughput", "--max-concurrent", "0"),
        "max-concurrent",
    ),
    "async in throughput mode": (
        lambda ws: eval_args(ws, "good.jsonl", "--mode", "throughput", "--methods", "lr/async"),
        "--mode latency",
    ),
    "bad profile file": (
        lambda ws: collect_args(ws, "good.jsonl", "--profile", str(ws["root"] / "float.yaml")),
        "not an lrtune profile",
    ),
}

# ---- kinds the schema (lrtune.schema) refuses: non-finite, out of range, unknown choices, wrong types --------
CASES.update(
    {
        "decode --temperature nan": (lambda ws: ["decode", "hi", "--temperature", "nan", *tiny(ws)], "finite"),
        "decode --temperature inf": (lambda ws: ["decode", "hi", "--temperature", "inf", *tiny(ws)], "finite"),
        "decode --verifier-threshold 5": (lambda ws: ["decode", "hi", "--verifier-threshold", "5", *tiny(ws)], "<= 1"),
        "decode --verifier-threshold nan": (
            lambda ws: ["decode", "hi", "--verifier-threshold", "nan", *tiny(ws)],
            "finite",
        ),
        "decode --kv-cache-gib -1": (lambda ws: ["decode", "hi", "--kv-cache-gib", "-1", *tiny(ws)], "--kv-cache-gib"),
        "decode --tensor-parallel-size 0": (
            lambda ws: ["decode", "hi", "--tensor-parallel-size", "0", *tiny(ws)],
            "--tensor-parallel-size",
        ),
        "decode --gpu-memory-utilization 7": (
            lambda ws: ["decode", "hi", "--gpu-memory-utilization", "7", *tiny(ws)],
            "--gpu-memory-utilization",
        ),
        "decode --context-tokens -5": (lambda ws: ["decode", "hi", "--context-tokens", "-5", *tiny(ws)], ">= 0"),
        "decode --device tpu": (lambda ws: ["decode", "hi", *tiny(ws), "--device", "tpu"], "--device"),
        "decode --dtype float7": (lambda ws: ["decode", "hi", "--dtype", "float7", *tiny(ws)], "float7"),
        "decode --task-problem huge": (lambda ws: ["decode", "--task-problem", "99999999999", *tiny(ws)], "<="),
        "evaluate --limit huge": (lambda ws: eval_args(ws, "good.jsonl", "--limit", "10000000000"), "--limit"),
        "train verifier --learning-rate nan": (
            lambda ws: [
                "train",
                "verifier",
                "--data",
                str(ws["root"] / "bad_ds"),
                "--learning-rate",
                "nan",
                "--out",
                str(ws["out"] / "v"),
            ],
            "finite",
        ),
        "train controller --prior-strength nan": (
            lambda ws: [
                "train",
                "controller",
                "--data",
                str(ws["root"] / "bad_ds"),
                "--prior-strength",
                "nan",
                "--out",
                str(ws["out"] / "c"),
            ],
            "finite",
        ),
        "decode --max-model-len 0": (lambda ws: ["decode", "hi", *tiny(ws), "--max-model-len", "0"], ">= 16"),
        "labels judge-probe --max-model-len 0": (
            lambda ws: [
                "labels",
                "judge-probe",
                "--data",
                str(ws["root"] / "bad_ds"),
                "--out",
                str(ws["out"] / "jp.json"),
                "--max-model-len",
                "0",
            ],
            "--max-model-len: must be >= 16",
        ),
        "decode: GPU shares summing past 1": (
            lambda ws: [
                "decode",
                "hi",
                *tiny(ws),
                *("--target-gpu-share", "0.9", "--draft-gpu-share", "0.9", "--judge-gpu-share", "0.3"),
            ],
            "the GPU shares must sum to at most 1",
        ),
        "decode --profile whose c2 is NaN": (
            lambda ws: [
                "decode",
                "hi",
                *tiny(ws),
                "--method",
                "auto",
                "--profile",
                str(ws["root"] / "nan_c2_profile.json"),
            ],
            "c2 must be a finite number > 0",
        ),
        "demo --gamma1 0": (lambda ws: ["demo", "--gamma1", "0", "--out", str(ws["out"]), *tiny(ws)], "--gamma1"),
        "profile --task unknown": (
            lambda ws: ["profile", "--task", "no_such_task", "--out", str(ws["out"] / "p.json"), *tiny(ws)],
            "no_such_task",
        ),
        # ---- config files, parsed safely (lrtune.inputs.read_yaml_mapping) ---------------------------------------
        "yaml key given twice": (lambda ws: ["decode", "hi", "--config", str(ws["root"] / "twice.yaml")], "twice"),
        "yaml aliases": (lambda ws: ["decode", "hi", "--config", str(ws["root"] / "alias.yaml")], "aliases"),
        "yaml nested 3000 deep": (lambda ws: ["decode", "hi", "--config", str(ws["root"] / "deep.yaml")], "deep"),
        "yaml option nested and flat": (
            lambda ws: ["decode", "hi", "--config", str(ws["root"] / "nested_and_flat.yaml"), *tiny(ws)],
            "'max_model_len' is given twice in config file (engine.max_model_len and max_model_len)",
        ),
        "yaml list as the prompt": (
            lambda ws: ["decode", "--config", str(ws["root"] / "list_prompt.yaml"), *tiny(ws)],
            "must be text",
        ),
        # ---- files handed in: names, sizes, encodings, nesting, weights -----------------------------------------
        "a path name too long": (lambda ws: eval_args(ws, "x" * 300 + ".jsonl"), "File name too long"),
        "a problem .json nested 3000 deep": (lambda ws: eval_args(ws, "deep.json"), "deep"),
        "a .json problem row over 1 MiB": (lambda ws: eval_args(ws, "big_row.json"), "longer than"),
        "a 0-byte model.safetensors": (
            lambda ws: ["decode", "hi", *tiny(ws), "--target", str(ws["empty_weights"])],
            "model.safetensors",
        ),
        # ---- output directories another command owns (lrtune.outdir) --------------------------------------------
        "evaluate --out into a collect dataset": (
            lambda ws: eval_args(ws, "good.jsonl") + ["--out", str(ws["owned"]["collect"])],
            "lrtune collect",
        ),
        "collect --merge --out into a controller": (
            lambda ws: [
                "collect",
                "--merge",
                str(ws["owned"]["collect"]),
                "--out",
                str(ws["owned"]["train controller"]),
            ],
            "lrtune train controller",
        ),
        "train verifier --out into a collect dataset": (
            lambda ws: [
                "train",
                "verifier",
                "--data",
                str(ws["root"] / "bad_ds"),
                "--out",
                str(ws["owned"]["collect"]),
            ],
            "lrtune collect",
        ),
        "train controller --out into a verifier": (
            lambda ws: [
                "train",
                "controller",
                "--data",
                str(ws["root"] / "bad_ds"),
                "--out",
                str(ws["owned"]["train verifier"]),
            ],
            "lrtune train verifier",
        ),
        "a file as --out": (
            lambda ws: eval_args(ws, "good.jsonl") + ["--out", str(ws["root"] / "good.jsonl")],
            "is a file",
        ),
    }
)


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_one_line_exit_2_and_loses_nothing(ws, case, capsys, tmp_path):
    from lrtune.cli import main

    argv_of, needle = CASES[case]
    out = tmp_path / "out"  # an output directory with files that must survive the bad run (hidden ones: a
    (out / ".sub").mkdir(
        parents=True
    )  # folder with any other file is refused as foreign, tests/test_outputs_on_inputs.py)
    (out / ".sub" / "data.bin").write_bytes(b"\x00\x01")
    (out / ".keep.txt").write_text("precious")
    ws = {**ws, "out": out}
    before, inputs = snapshot(ws["out"]), snapshot(ws["root"])
    rc = main(argv_of(ws))  # a traceback would fail the test here
    err = capsys.readouterr().err
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert rc == 2, err
    assert len(lines) == 1 and lines[0].startswith("lrtune: error:"), err
    assert needle in lines[0], lines[0]
    assert snapshot(ws["out"]) == before  # nothing written before is lost or changed, and nothing added
    assert snapshot(ws["root"]) == inputs  # nor in the inputs (datasets, checkpoints, other commands' dirs)
