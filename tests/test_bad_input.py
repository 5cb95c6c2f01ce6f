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
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    """A workspace: a tiny pair, good and bad problem files, a collected dataset, checkpoints."""
    root = tmp_path_factory.mktemp("bad")
    pair = get_tiny_pair()
    qs = sample_questions(3, seed=21)
    (root / "good.jsonl").write_text("".join(json.dumps({"id": f"g{i}", "question": q, "answer": "1"}) + "\n"
                                             for i, q in enumerate(qs)))
    (root / "latin1.jsonl").write_bytes(json.dumps({"id": "x", "question": "caf", "answer": "1"}).encode()[:-2]
                                        + b"\xe9\"}\n")
    (root / "dupes.jsonl").write_text("".join(json.dumps({"id": "same", "question": q, "answer": "1"}) + "\n"
                                              for q in qs))
    (root / "long_line.jsonl").write_text(json.dumps({"id": "l", "question": "x" * (2 << 20), "answer": "1"}) + "\n")
    (root / "too_long.jsonl").write_text(json.dumps({"id": "t", "question": "word " * 3000, "answer": "1"}) + "\n")
    (root / "corrupt.parquet").write_bytes(b"PAR1 this is not parquet PAR1")
    (root / "float.yaml").write_text("gamma1: 2.5\n")
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
        m = {"format": distilled.FORMAT, "version": distilled.VERSION, "kind": "features", "threshold": 0.5,
             "features": ["len_ratio"]}
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
    ck = {"corrupt": ckpt("ck_corrupt", b"\x00\x01garbage"),
          "pickled_base": str(ce),
          "bad_length": ckpt("ck_bad_length", max_length="long"),
          "missing": ckpt("ck_missing", tensors={"mean": [0.0], "scale": [1.0], "coef": [1.0]}),
          "typed": ckpt("ck_typed", tensors={"mean": [0.0], "scale": [1.0], "coef": [1.0], "intercept": [0.0]},
                        features=3)}
    return {"root": root, "pair": pair, "ck": ck}


def tiny(ws) -> list[str]:
    p = ws["pair"]
    return ["--target", str(p.target), "--draft", str(p.draft), "--backend", "transformers", "--device", "cpu",
            "--max-model-len", "512"]


def collect_args(ws, data: str, *extra) -> list[str]:
    return ["collect", "--task", "custom", "--data", str(ws["root"] / data), "--limit", "3", "--out", str(ws["out"]),
            "--teacher", "exact", "--gamma1", "2", "--max-new-tokens", "24", "--max-step-tokens", "8",
            "--no-embedding-feature", "--no-target-score-feature", "--no-progress", *tiny(ws), *extra]


def eval_args(ws, data: str, *extra) -> list[str]:
    return ["evaluate", "--task", "custom", "--data", str(ws["root"] / data), "--limit", "3", "--out", str(ws["out"]),
            "--methods", "target", "--max-new-tokens", "24", "--max-step-tokens", "8", "--no-progress",
            "--warmup-tokens", "0", "--no-plots", *tiny(ws), *extra]


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
    "train verifier: corrupt pairs.parquet": (lambda ws: ["train", "verifier", "--data", str(ws["root"] / "bad_ds"),
                                                          "--out", str(ws["out"] / "v"), "--no-progress"], "parquet"),
    "collect --stats: corrupt parquet": (lambda ws: ["collect", "--stats", str(ws["root"] / "bad_ds")], "parquet"),
    "collect --stats: manifest lacks keys": (lambda ws: ["collect", "--stats", str(ws["root"] / "no_keys")], "manifest"),
    "corrupt features.safetensors": (lambda ws: ["decode", "hi", "--method", "lr", *tiny(ws), "--verifier",
                                                 ws["ck"]["corrupt"]], "features.safetensors"),
    "features.safetensors lacks a tensor": (lambda ws: ["decode", "hi", "--method", "lr", *tiny(ws), "--verifier",
                                                        ws["ck"]["missing"]], "intercept"),
    "mistyped checkpoint field": (lambda ws: ["decode", "hi", "--method", "lr", *tiny(ws), "--verifier",
                                              ws["ck"]["typed"]], "features"),
    "checkpoint names a pickled base model": (lambda ws: ["decode", "hi", "--method", "lr", *tiny(ws), "--verifier",
                                                          ws["ck"]["pickled_base"]], "pickle"),
    "mistyped max_length": (lambda ws: ["decode", "hi", "--method", "lr", *tiny(ws), "--verifier",
                                        ws["ck"]["bad_length"]], "max_length"),
    # specs and options, all refused before any model loads
    "unknown verifier": (lambda ws: ["decode", "hi", "--verifier", "bogus", *tiny(ws)], "unknown verifier"),
    "bad llm_judge form": (lambda ws: ["decode", "hi", "--verifier", "llm_judge(fancy)", *tiny(ws)], "form"),
    "bad teacher": (lambda ws: collect_args(ws, "good.jsonl", "--teacher", "consensus(llm_judge)"), "consensus"),
    "collect --max-concurrent 0": (lambda ws: collect_args(ws, "good.jsonl", "--max-concurrent", "0"), "max-concurrent"),
    "evaluate --max-concurrent 0": (lambda ws: eval_args(ws, "good.jsonl", "--mode", "throughput",
                                                         "--max-concurrent", "0"), "max-concurrent"),
    "async in throughput mode": (lambda ws: eval_args(ws, "good.jsonl", "--mode", "throughput", "--methods",
                                                      "lr/async"), "--mode latency"),
    "bad profile file": (lambda ws: collect_args(ws, "good.jsonl", "--profile", str(ws["root"] / "float.yaml")),
                         "not an lrtune profile"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_one_line_exit_2_and_loses_nothing(ws, case, capsys, tmp_path):
    from lrtune.cli import main

    argv_of, needle = CASES[case]
    out = tmp_path / "out"  # an output directory with results that must survive the bad run
    out.mkdir()
    (out / "records.jsonl").write_text('{"problem": "old", "method": "target"}\n')
    (out / "keep.txt").write_text("precious")
    ws = {**ws, "out": out}
    before = snapshot(ws["out"])
    rc = main(argv_of(ws))  # a traceback would fail the test here
    err = capsys.readouterr().err
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert rc == 2, err
    assert len(lines) == 1 and lines[0].startswith("lrtune: error:"), err
    assert needle in lines[0], lines[0]
    after = snapshot(ws["out"])
    assert {k: v for k, v in after.items() if k in before} == before  # nothing written before is lost or changed
