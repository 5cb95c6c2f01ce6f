"""``lrtune calibrate``: a verifier's threshold from a false-accept budget with a guarantee,
for training-free verifiers (a JSON file and a spec) and checkpoints (updated in place)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from lrtune.errors import ConfigError
from lrtune.train.recalibrate import CalibrateConfig, run
from tests.test_train_verifier import _synthetic_rows, write_pairs


@pytest.fixture(scope="module")
def heldout(tmp_path_factory):
    return write_pairs(tmp_path_factory.mktemp("heldout") / "pairs", _synthetic_rows(30, seed=5))


def test_a_training_free_verifier_gets_a_certified_threshold_and_the_spec_to_decode_with(heldout, tmp_path):
    from lrtune.train.calibrate import hoeffding_bentkus_bound

    out = tmp_path / "cal.json"
    cal = run(
        CalibrateConfig(verifier="embedding", data=str(heldout), max_false_accept=0.2, confidence=0.9, out=str(out))
    )
    assert json.loads(out.read_text()) == json.loads(json.dumps(cal))
    assert cal["unit"] == "template" and cal["certified"] and cal["false_accept_bound"] <= 0.2
    # each template with a rejected pair counts once: the bound is on the mean of their false-accept rates
    assert cal["false_accept_bound"] == pytest.approx(
        hoeffding_bentkus_bound(cal["val_false_accept_rate"], cal["rejected_templates"], 0.9), abs=1e-9
    )
    assert cal["spec"] == f"embedding@{cal['threshold']:.6g}" and cal["rounds"] == "lr"
    assert cal["agreement"]["false_accept_rate"] == cal["val_pair_false_accept_rate"]


def test_calibration_over_single_pairs_is_the_exact_binomial_bound_over_pairs(heldout, tmp_path):
    from lrtune.train.calibrate import false_accept_bound

    pair = run(
        CalibrateConfig(
            verifier="embedding", data=str(heldout), max_false_accept=0.2, calibration_unit="pair", dry_run=True
        )
    )
    assert pair["unit"] == "pair"
    assert pair["false_accept_bound"] == pytest.approx(
        false_accept_bound(pair["false_accepts"], pair["val_rejected"], 0.9)
    )
    assert pair["agreement"]["false_accept_rate"] == pair["val_false_accept_rate"]


def test_a_checkpoint_is_recalibrated_in_place_keeping_its_previous_calibration(heldout, tmp_path):
    import shutil

    from lrtune.verifiers import distilled
    from lrtune.train.verifier import TrainVerifierConfig, run as train

    data = write_pairs(tmp_path / "train", _synthetic_rows())
    train(
        TrainVerifierConfig.of(
            data=str(data), out=str(tmp_path / "ckpt"), student="features", progress=False, latency_pairs=4, seed=0
        )
    )
    before = distilled.read_meta(tmp_path / "ckpt")
    with pytest.raises(ConfigError, match="trained on"):
        run(CalibrateConfig(verifier=str(tmp_path / "ckpt"), data=str(data)))
    assert distilled.read_meta(tmp_path / "ckpt") == before  # a refusal changes nothing
    shutil.copytree(tmp_path / "ckpt", tmp_path / "dry")
    run(CalibrateConfig(verifier=str(tmp_path / "dry"), data=str(heldout), dry_run=True))
    assert distilled.read_meta(tmp_path / "dry") == before
    cal = run(CalibrateConfig(verifier=str(tmp_path / "ckpt"), data=str(heldout), max_false_accept=0.2))
    meta = distilled.read_meta(tmp_path / "ckpt")
    assert meta["threshold"] == cal["threshold"] and meta["calibration"]["data"]["dirs"] == str(heldout)
    assert meta["calibration_history"] == [before["calibration"]]
    assert distilled.load(tmp_path / "ckpt").threshold == cal["threshold"]
    assert "false-accept rate <= 0.2 with probability 0.9" in (tmp_path / "ckpt" / "README.md").read_text()


@pytest.mark.parametrize(
    "kw,match",
    [
        ({"verifier": "llm_judge"}, "needs a model engine"),
        ({"verifier": "embedding@0.9"}, "without @T"),
        ({"verifier": "always"}, "no threshold"),
        ({"verifier": "embedding", "out": None}, "--out"),
        ({"verifier": "embedding", "data": "/nonexistent"}, "not a directory"),
    ],
)
def test_bad_requests_are_refused_before_any_model_loads(heldout, tmp_path, kw, match):
    args = {"data": str(heldout), "out": str(tmp_path / "c.json"), **kw}
    with pytest.raises(ConfigError, match=match):
        CalibrateConfig(**args).validate()


def test_the_cli_prints_the_spec_and_refuses_in_one_line(heldout, tmp_path):
    ok = subprocess.run(
        [
            sys.executable,
            "-m",
            "lrtune",
            "calibrate",
            "--verifier",
            "exact",
            "--data",
            str(heldout),
            "--max-false-accept",
            "0.2",
            "--dry-run",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ok.returncode == 0, ok.stderr
    assert "decode with: --verifier exact@" in ok.stdout
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "lrtune",
            "calibrate",
            "--verifier",
            "llm_judge",
            "--data",
            str(heldout),
            "--out",
            str(tmp_path / "x.json"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and not (tmp_path / "x.json").exists()


def _trained(tmp_path):
    from lrtune.train.verifier import TrainVerifierConfig, run as train

    data = write_pairs(tmp_path / "train", _synthetic_rows())
    train(
        TrainVerifierConfig.of(
            data=str(data), out=str(tmp_path / "ckpt"), student="features", progress=False, latency_pairs=4, seed=0
        )
    )
    from lrtune import locks

    locks.release_all()  # the training's claim on its output ends with it (the command line does this)
    return tmp_path / "ckpt"


def test_a_checkpoint_another_command_writes_is_not_recalibrated_and_stays_as_it_was(heldout, tmp_path):
    from tests.test_output_locks import _hold_in_child

    ckpt = _trained(tmp_path)
    before = {p.name: p.read_bytes() for p in ckpt.iterdir() if p.is_file()}
    holder = _hold_in_child(ckpt)
    try:
        with pytest.raises(ConfigError, match="being written by another lrtune command"):
            run(CalibrateConfig(verifier=str(ckpt), data=str(heldout), max_false_accept=0.2))
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
    assert {p.name: p.read_bytes() for p in ckpt.iterdir() if p.is_file()} == before


def test_a_calibration_refuses_metadata_changed_since_it_read_it(tmp_path):
    from lrtune import locks
    from lrtune.train.recalibrate import hold_checkpoint
    from lrtune.verifiers import distilled

    ckpt = _trained(tmp_path)
    read = distilled.read_meta(ckpt)
    meta_file = ckpt / distilled.META
    meta_file.write_text(json.dumps({**json.loads(meta_file.read_text()), "threshold": 0.123}))  # another calibration
    try:
        with pytest.raises(ConfigError, match="changed after this calibration read it"):
            hold_checkpoint(ckpt, read)
        hold_checkpoint(ckpt, distilled.read_meta(ckpt))  # what it holds now: fine
    finally:
        locks.release_all()


def test_a_calibration_that_cannot_write_changes_neither_the_card_nor_the_metadata(heldout, tmp_path, monkeypatch):
    import os

    ckpt = _trained(tmp_path)
    before = {p.name: p.read_bytes() for p in ckpt.iterdir() if p.is_file()}
    real_fsync, calls = os.fsync, []

    def full_disk(fd):  # the second file's temp write fails, as on a full disk
        calls.append(fd)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OSError, match="No space left"):
        run(CalibrateConfig(verifier=str(ckpt), data=str(heldout), max_false_accept=0.2))
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert {p.name: p.read_bytes() for p in ckpt.iterdir() if p.is_file()} == before
    assert not [p for p in ckpt.iterdir() if p.name.endswith(".tmp")]
