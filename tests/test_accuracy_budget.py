"""The accuracy budget (``lrtune calibrate --max-accuracy-loss``): fixed-sequence testing of a
threshold ladder on answers that differ from target-only, with an exact binomial test."""

from __future__ import annotations

import dataclasses
import json

import pytest
from scipy.stats import binom

from lrtune.errors import ConfigError
from lrtune.train.accuracy_budget import choose, max_differences, parse_ladder, problems_needed


@pytest.mark.parametrize("n,loss", [(76, 0.03), (100, 0.05), (30, 0.2), (9, 0.25)])
def test_max_differences_is_the_largest_count_the_binomial_test_still_certifies(n, loss):
    k = max_differences(n, loss, 0.9)
    assert k >= 0 and binom.cdf(k, n, loss) <= 0.1 < binom.cdf(k + 1, n, loss)


def test_too_few_problems_certify_nothing_and_the_minimum_is_stated():
    assert problems_needed(0.03, 0.9) == 76 and max_differences(75, 0.03, 0.9) == -1 == max_differences(0, 0.5, 0.9)
    assert max_differences(76, 0.03, 0.9) == 0
    with pytest.raises(ConfigError, match="needs at least 76"):
        from lrtune.train.recalibrate import CalibrateConfig

        CalibrateConfig(verifier="embedding", max_accuracy_loss=0.03, limit=75, dry_run=True).validate()


def test_the_walk_keeps_the_last_certified_step_and_never_looks_past_the_first_failure():
    steps = [
        {"threshold": 1.0, "certified": True},
        {"threshold": 0.9, "certified": True},
        {"threshold": 0.8, "certified": False},
        {"threshold": 0.7, "certified": True},
    ]
    assert choose(steps)["threshold"] == 0.9
    assert choose(steps[2:]) is None


@pytest.mark.parametrize("text", ["0.9,0.95", "1.5", "a,b", "", "0.9,0.9"])
def test_a_ladder_must_run_strict_to_permissive_within_0_and_1(text):
    with pytest.raises(ConfigError, match="--thresholds"):
        parse_ladder(text)


def test_a_real_ladder_on_the_tiny_pair_certifies_the_strict_end_and_resumes_without_decoding(tmp_path):
    pytest.importorskip("vllm")
    from tests.tiny_models import get_tiny_pair, sample_questions
    from lrtune.api import ModelConfig
    from lrtune.decoder import DecodeConfig
    from lrtune.train.recalibrate import CalibrateConfig, run

    data = tmp_path / "problems.jsonl"
    data.write_text(
        "".join(
            json.dumps({"id": f"p{i}", "question": q, "answer": str(i)}) + "\n"
            for i, q in enumerate(sample_questions(4))
        )
    )
    pair = get_tiny_pair()
    models = ModelConfig(
        target=str(pair.target), draft=str(pair.draft), dtype="float32", max_model_len=512, kv_cache_gib=0.25
    )
    decode = DecodeConfig(gamma1=2, gamma2=2, max_new_tokens=32, max_step_tokens=12)
    cfg = CalibrateConfig(
        verifier="embedding",
        max_accuracy_loss=0.5,
        confidence=0.9,
        limit=4,
        task="custom",
        task_data=str(data),
        thresholds="1.0,0.0",
        out=str(tmp_path / "budget.json"),
    )
    budget = run(cfg, models, decode)
    first = budget["steps"][0]
    # threshold 1.0 accepts identical steps only: lr+sd answers as target-only greedy does
    assert first["threshold"] == 1.0 and first["changed"] == 0 and first["certified"] and first["decoded"] == 4
    assert budget["max_changed"] == 0 and budget["threshold"] == choose(budget["steps"])["threshold"]
    assert json.loads((tmp_path / "budget.json").read_text())["steps"] == budget["steps"]
    progress = tmp_path / "budget.json.progress.jsonl"
    lines = progress.read_text().splitlines()
    # target-only and the lossless twin once each, then each step (vLLM's own numerics: the twin is the reference)
    assert budget["reference"] == "lossless twin" and budget["floor"] == {"changed": 0, "problems": 4}
    assert len(lines) == 8 + sum(s["decoded"] for s in budget["steps"])
    again = run(cfg, models, decode)  # every decode is in the progress file: nothing is decoded again
    assert again["steps"] == budget["steps"] and progress.read_text().splitlines() == lines
    # problems decoded one at a time (default: 8 at once) walk the same ladder to the same evidence
    alone = run(dataclasses.replace(cfg, max_concurrent=1, out=str(tmp_path / "alone.json")), models, decode)
    assert alone["steps"] == budget["steps"] and alone["floor"] == budget["floor"]


def test_a_checkpoint_gets_the_chosen_threshold_and_its_evidence_and_its_card_says_so(tmp_path, monkeypatch):
    from lrtune.train import accuracy_budget, recalibrate
    from lrtune.train.verifier import TrainVerifierConfig, run as train
    from lrtune.verifiers import distilled
    from tests.test_train_verifier import _synthetic_rows, write_pairs

    data = write_pairs(tmp_path / "train", _synthetic_rows())
    train(
        TrainVerifierConfig.of(
            data=str(data), out=str(tmp_path / "ckpt"), student="features", progress=False, latency_pairs=4, seed=0
        )
    )
    steps = [
        {
            "threshold": 1.0,
            "changed": 0,
            "decoded": 50,
            "problems": 50,
            "bound": 0.045,
            "certified": True,
            "alpha1": 0.2,
        },
        {
            "threshold": 0.9,
            "changed": 3,
            "decoded": 4,
            "problems": 50,
            "bound": None,
            "certified": False,
            "alpha1": 0.5,
        },
    ]
    evidence = {
        "max_accuracy_loss": 0.05,
        "confidence": 0.9,
        "problems": 50,
        "max_changed": 0,
        "steps": steps,
        "threshold": 1.0,
        "certified": True,
        "target_accuracy": 0.6,
        "problem_ids": [],
        "ladder": [1.0, 0.9],
    }

    class Dec:  # the engines are not what this test is about: the ladder walk is tested above
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return None

        verifier = None

    monkeypatch.setattr("lrtune.decoding.Decoder.from_configs", lambda *a, **k: Dec())
    monkeypatch.setattr("lrtune.build.check_configs", lambda *a, **k: None)
    monkeypatch.setattr(accuracy_budget, "run_ladder", lambda *a, **k: dict(evidence))
    before = distilled.read_meta(tmp_path / "ckpt")
    got = recalibrate.run(
        recalibrate.CalibrateConfig(
            verifier=str(tmp_path / "ckpt"), max_accuracy_loss=0.05, limit=50, heldout_from=str(data)
        )
    )
    meta = distilled.read_meta(tmp_path / "ckpt")
    assert meta["threshold"] == 1.0 and meta["accuracy_budget"]["steps"] == steps and got["certified"]
    assert meta["calibration_history"] == [before["calibration"]]
    card = (tmp_path / "ckpt" / "README.md").read_text()
    assert "answers differ from target-only on <= 0.05 of problems with probability 0.9" in card
    assert recalibrate.summary_lines(got)[0].startswith("threshold 1:")
