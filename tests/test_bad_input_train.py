"""Bad input to the trainers, the checkpoints they write and ``lrtune profile``: a one-line
ConfigError (CLI: exit 2, ``lrtune: error: ...``), never a traceback, and nothing already
written lost: a finished checkpoint survives a failed retrain, a replaced one is kept as a backup."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from lrtune.outdir import OWNER

from lrtune.errors import ConfigError
from lrtune.verifiers import distilled
from lrtune.verifiers.base import DraftScores, StepPair
from lrtune.policies import learned
from tests.test_learned_controller import _collect_dir, _controller
from tests.test_train_verifier import _cfg, _synthetic_rows, write_pairs
from lrtune.train.data import PairExample, fingerprint


def snapshot(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def one_line_error(capsys, argv: list[str]) -> str:
    """The CLI's stderr for ``argv``, asserted to be exit 2 and one ``lrtune: error:`` line."""
    from lrtune.cli import main

    rc = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("lrtune: error: "), err
    return err[0]


# ---- train controller: the profile and the collect config (defect 3) ------------------------
@pytest.mark.parametrize(
    "content,message",
    [
        (b"{bad\n", "not valid JSON"),
        (b"[1, 2]\n", "not an lrtune profile"),
        (b"\xff\xfe", "not UTF-8"),
        (b'{"c1": 0.2, "c2": 0.3, "batch_cost": {"a": 1}}', "batch_cost must be a list of numbers"),
        (b'{"c1": 0.2, "c2": 0.3, "batch_cost": "fast"}', "batch_cost must be a list of numbers"),
        (b'{"c1": 0.2, "c2": 0.3, "batch_cost": [1, "x"]}', "batch_cost must be a list of numbers"),
        (b'{"c1": true, "c2": 0.3}', "c1 must be a number > 0"),
    ],
)
def test_train_controller_checks_the_profile_before_any_work(tmp_path, capsys, content, message):
    prof = tmp_path / "profile.json"
    prof.write_bytes(content)
    out = tmp_path / "ctl"
    err = one_line_error(
        capsys,
        [
            "train",
            "controller",
            "--encoder",
            "none",
            "--data",
            str(tmp_path / "no-data"),
            "--out",
            str(out),
            "--profile",
            str(prof),
        ],
    )
    assert message in err  # the profile is read first: the missing data is not even looked at
    assert not out.exists()


@pytest.mark.parametrize(
    "content,message",
    [
        (b"{not json", "not valid JSON"),
        (b"[1]", "must hold a JSON object"),
        (b'{"options": {"task": "caf\xe9"}}', "not UTF-8"),
        (b'{"options": [1]}', "options: Input should be a valid dictionary"),
    ],
)
def test_train_controller_refuses_a_bad_collect_config_in_one_line(tmp_path, capsys, content, message):
    d = _collect_dir(tmp_path)
    (d / "collect_config.json").write_bytes(content)
    err = one_line_error(
        capsys, ["train", "controller", "--encoder", "none", "--data", str(d), "--out", str(tmp_path / "ctl")]
    )
    assert message in err and "collect_config.json" in err


# ---- train controller: what --out holds (defect 10) -------------------------------------------
def _train_controller(tmp_path, data: Path, **kw) -> dict:
    from lrtune.train.controller import TrainControllerConfig, run

    return run(TrainControllerConfig(data=str(data), out=str(tmp_path / "ctl"), encoder="none", **{"folds": 2, **kw}))


def test_train_controller_refuses_an_out_holding_a_verifier_checkpoint_and_changes_nothing(tmp_path):
    out = tmp_path / "ctl"
    out.mkdir()
    (out / distilled.META).write_text(json.dumps({"format": distilled.FORMAT}))
    (out / "README.md").write_text("# a verifier\n")
    (out / "train_config.json").write_text(json.dumps({"options": {"student": "features"}}))
    before, data = snapshot(out), _collect_dir(tmp_path)
    with pytest.raises(ConfigError, match="holds the output of `lrtune train verifier`"):
        _train_controller(tmp_path, data)
    (out / distilled.META).unlink()  # a verifier run still in training: its train_config.json is not a controller's
    with pytest.raises(ConfigError, match="holds another training run"):
        _train_controller(tmp_path, data)
    assert snapshot(out) == {k: v for k, v in before.items() if k != distilled.META}


def test_train_controller_refuses_a_controller_fitted_with_other_settings(tmp_path):
    data = _collect_dir(tmp_path)
    _train_controller(tmp_path, data)
    before = snapshot(tmp_path / "ctl")
    with pytest.raises(ConfigError, match=r"fitted with other settings \(folds\)"):
        _train_controller(tmp_path, data, folds=3)
    assert snapshot(tmp_path / "ctl") == before


def test_train_controller_refit_on_new_data_keeps_the_previous_controller_as_a_backup(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = _collect_dir(tmp_path)
    _train_controller(tmp_path, data)
    before = snapshot(tmp_path / "ctl")
    rows = pq.read_table(data / "problems.parquet").to_pylist()
    pq.write_table(pa.Table.from_pylist([dict(r, alpha1=1.0 - r["alpha1"]) for r in rows]), data / "problems.parquet")
    _train_controller(tmp_path, data)  # same settings, new data: refitted
    backups = sorted(tmp_path.glob("ctl.backup-*"))
    assert len(backups) == 1 and snapshot(backups[0]) == before and snapshot(tmp_path / "ctl") != before
    learned.load(backups[0])


# ---- a learned controller's metadata (defect 4) ------------------------------------------------
def _good_controller(tmp_path) -> Path:
    ctl, feats, pred = _controller((0.9, 0.2), (0.8, 0.6))
    return learned.save(
        tmp_path / "good",
        pred,
        feats,
        bounds=ctl.bounds,
        profile={"c1": 0.3, "c2": 0.2, "batch_cost": None, "step_tokens": [10, 20, 30]},
        prior_strength=8.0,
        metrics={"best_fixed": [2, 3]},
        data={},
    )


@pytest.mark.parametrize(
    "mutate",
    [
        lambda m: m["profile"].pop("c1"),
        lambda m: m.pop("prior_strength"),
        lambda m: m["profile"].__setitem__("c1", "fast"),
        lambda m: m.__setitem__("profile", [1]),
        lambda m: m["model"].__setitem__("alpha", "abc"),
        lambda m: m["model"].__setitem__("coef", [[1, 2], [3]]),
        lambda m: m["model"].__setitem__("intercept", [0.5]),
        lambda m: m.__setitem__("metrics", [1]),
        lambda m: m["metrics"].__setitem__("best_fixed", 3),
        lambda m: m["profile"].__setitem__("step_tokens", "abc"),
        lambda m: m["profile"].__setitem__("batch_cost", "abc"),
        lambda m: m["bounds"].__setitem__("gamma1_max", 6.5),
        lambda m: m["features"].__setitem__("tasks", "gsm"),
    ],
)
def test_incomplete_controller_metadata_is_refused_in_one_line(tmp_path, mutate):
    good = _good_controller(tmp_path)
    learned.load(good)  # the unmutated controller loads
    meta = json.loads((good / learned.META).read_text())
    mutate(meta)
    (good / learned.META).write_text(json.dumps(meta))
    with pytest.raises(ConfigError, match="controller metadata") as e:
        learned.load(good)
    assert "\n" not in str(e.value)


# ---- distilled checkpoints (defect 5) ---------------------------------------------------------
def _checkpoint(root: Path, name: str, tensors: dict, weights: str = "features", **meta) -> Path:
    from safetensors.numpy import save_file

    d = root / name
    d.mkdir()
    m = {
        "format": distilled.FORMAT,
        "version": distilled.VERSION,
        "kind": "features",
        "threshold": 0.5,
        "features": ["len_ratio"],
        "base_model": None,
        "encoder": "all-MiniLM-L6-v2",
        **meta,
    }
    (d / distilled.META).write_text(json.dumps(m))
    save_file({k: np.asarray(v) for k, v in tensors.items()}, str(d / f"{weights}.safetensors"))
    if m["kind"] in ("cross-encoder", "lm-judge"):
        (d / "adapter_config.json").write_text("{}")
        (d / "adapter_model.safetensors").write_bytes(b"")
    return d


LOGISTIC = {"mean": np.zeros(1), "scale": np.ones(1), "coef": np.ones(1), "intercept": np.zeros(1)}
FOREST = {
    "mean": np.zeros(1),
    "roots": np.array([0]),
    "left": np.array([1, -1, -1]),
    "right": np.array([2, -1, -1]),
    "feature": np.array([0, 0, 0]),
    "threshold": np.array([0.5, 0, 0]),
    "value": np.array([0.5, 0.2, 0.8]),
}


@pytest.mark.parametrize(
    "tensors,weights,meta,message",
    [
        ({**LOGISTIC, "intercept": np.zeros(0)}, "features", {}, "holds 0 intercepts, not 1"),
        ({**LOGISTIC, "intercept": np.array([np.inf])}, "features", {}, "weights that are not finite"),
        ({**LOGISTIC, "coef": np.array([np.nan])}, "features", {}, "weights that are not finite"),
        ({**LOGISTIC, "scale": np.zeros(1)}, "features", {}, r"a scale <= 0"),
        (LOGISTIC, "features", {"kind": "cross-encoder"}, "base_model is required for kind 'cross-encoder'"),
        (LOGISTIC, "features", {"kind": "lm-judge"}, "base_model is required for kind 'lm-judge'"),
        (LOGISTIC, "features", {"encoder": 123}, "encoder: Input should be a valid string"),
        (
            {
                **FOREST,
                "roots": np.array(0),
                "left": np.array(-1),
                "right": np.array(-1),
                "feature": np.array(0),
                "threshold": np.array(0.0),
                "value": np.array(0.5),
            },
            "forest",
            {"kind": "forest"},
            "is not 1-D",
        ),
        (
            {**FOREST, **{k: FOREST[k].astype(np.float64) for k in ("roots", "left", "right", "feature")}},
            "forest",
            {"kind": "forest"},
            "index tensor 'roots' is not of an integer type",
        ),
    ],
)
def test_mistyped_checkpoint_fields_are_refused_at_load(tmp_path, tensors, weights, meta, message):
    d = _checkpoint(tmp_path, "bad", tensors, weights, **meta)
    with pytest.raises(ConfigError, match=message):
        distilled.load(d)


def test_well_formed_forest_and_logistic_checkpoints_still_load_and_score(tmp_path):
    pair = StepPair("ctx", "a 1", "b 2")
    for name, tensors, weights in (("lr", LOGISTIC, "features"), ("rf", FOREST, "forest")):
        v = distilled.load(_checkpoint(tmp_path, name, tensors, weights, kind=weights))
        assert 0.0 <= v.score([pair])[0] <= 1.0


# ---- train verifier: a retrain never loses the finished checkpoint (defect 6) ------------------
def _features_cfg(tmp_path, data: Path, **kw):
    return _cfg(tmp_path, data, "features", drop_features="embedding_cosine", **kw)  # no encoder needed


def _relabel(data: Path) -> Path:
    """The same pairs in ``data`` with new teacher scores (new data, same --data)."""
    return write_pairs(data, [dict(r, teacher_score=0.95 if r["label"] else 0.05) for r in _synthetic_rows()])


def test_a_failed_retrain_puts_the_finished_checkpoint_back(tmp_path, monkeypatch):
    from lrtune.train import students
    from lrtune.train.verifier import run

    data = write_pairs(tmp_path / "a", _synthetic_rows())
    cfg = _features_cfg(tmp_path, data)
    run(cfg)
    out = Path(cfg.out)
    before = snapshot(out)

    def broken(train, val, out_dir, cfg_):
        (out_dir / "features.safetensors").write_bytes(b"half-written")
        raise RuntimeError("training failed")

    monkeypatch.setitem(students.FITTERS, "features", broken)
    with pytest.raises(RuntimeError, match="training failed"):
        run(_features_cfg(tmp_path, _relabel(data)))  # same settings, new data
    assert snapshot(out) == before and not list(tmp_path.glob("features.backup-*"))
    assert distilled.load(out).score([StepPair("c", "1 + 1 = 2", "1 + 1 = 2")])


def test_a_successful_retrain_keeps_the_previous_checkpoint_as_a_backup(tmp_path):
    from lrtune.train.verifier import run

    data = write_pairs(tmp_path / "a", _synthetic_rows())
    cfg = _features_cfg(tmp_path, data)
    first = run(cfg)
    before = snapshot(Path(cfg.out))
    second = run(_features_cfg(tmp_path, _relabel(data)))
    backups = list(tmp_path.glob("features.backup-*"))
    assert second["data"]["fingerprint"] != first["data"]["fingerprint"]
    kept = {k: v for k, v in before.items() if k != OWNER}  # the owner record stays with --out
    assert len(backups) == 1 and snapshot(backups[0]) == kept
    assert distilled.read_meta(backups[0])["data"]["fingerprint"] == first["data"]["fingerprint"]


def _scored_rows(bad_value: float | None = None) -> list[dict]:
    rows = _synthetic_rows()
    for i, r in enumerate(rows):
        r.update(
            draft_target_mean_logprob=-0.2 if r["label"] else -1.5,
            draft_target_min_logprob=-1.0,
            draft_target_argmax_share=0.8,
            draft_target_scored_tokens=6,
        )
        if bad_value is not None and i < 5:
            r["draft_target_min_logprob"] = bad_value
    return rows


@pytest.mark.parametrize("bad", [float("-inf"), float("nan")])
def test_non_finite_feature_values_are_refused_naming_the_column_before_out_is_touched(tmp_path, bad):
    from lrtune.train.verifier import run

    cfg = _features_cfg(tmp_path, write_pairs(tmp_path / "d", _scored_rows(bad)))
    with pytest.raises(ConfigError, match="column draft_target_min_logprob holds non-finite values"):
        run(cfg)
    assert not Path(cfg.out).exists()


def test_fingerprint_covers_every_column_the_students_read():
    def ex(scores=None, cosine=None):
        return PairExample("p", StepPair("c", "d", "t", draft_scores=scores), True, 1.0, embedding_cosine=cosine)

    base = fingerprint([ex()])
    legacy = hashlib.sha256(b"".join(part.encode() + b"\0" for part in ("p", "c", "d", "t", "1", "1.000000")))
    assert base == legacy.hexdigest()  # data without those columns keeps its fingerprint
    prints = {
        fingerprint([ex(DraftScores(-0.2, -1.0, 0.8, 6))]),
        fingerprint([ex(DraftScores(-0.2, -2.0, 0.8, 6))]),
        fingerprint([ex(DraftScores(-0.2, -1.0, 0.8, 6, draft_entropy=0.3))]),
        fingerprint([ex(cosine=0.9)]),
        fingerprint([ex(cosine=0.8)]),
        base,
    }
    assert len(prints) == 6


def test_changing_only_a_likelihood_column_retrains(tmp_path, capsys):
    from lrtune.train.verifier import run

    data = write_pairs(tmp_path / "d", _scored_rows())
    first = run(_features_cfg(tmp_path, data))
    write_pairs(data, [dict(r, draft_target_min_logprob=-2.0) for r in _scored_rows()])
    capsys.readouterr()
    second = run(_features_cfg(tmp_path, data))
    assert "up to date" not in capsys.readouterr().err
    assert second["data"]["fingerprint"] != first["data"]["fingerprint"]


# ---- train verifier: --drop-features leaving nothing (defect 7) -------------------------------
def test_dropping_every_feature_is_refused_before_out_is_touched(tmp_path):
    from lrtune.verifiers.features import FEATURE_NAMES, LIKELIHOOD_FEATURES
    from lrtune.train.verifier import run

    data = write_pairs(tmp_path / "d", _synthetic_rows())
    with pytest.raises(ConfigError, match="names every feature"):
        run(_cfg(tmp_path, data, "features", drop_features=",".join(FEATURE_NAMES)))
    # this data carries no likelihood column, so dropping the rest leaves nothing either
    rest = [n for n in FEATURE_NAMES if n not in LIKELIHOOD_FEATURES]
    cfg = _cfg(tmp_path, data, "forest", drop_features=",".join(rest))
    with pytest.raises(ConfigError, match="leaves no feature to train on"):
        run(cfg)
    assert not Path(cfg.out).exists()


# ---- cross-encoder resume state (defect 8) ----------------------------------------------------
def test_a_state_dir_of_other_settings_is_refused_before_out_is_touched(tmp_path):
    from lrtune.train import students
    from lrtune.train.verifier import run

    cfg = _cfg(tmp_path, write_pairs(tmp_path / "d", _synthetic_rows()), "cross-encoder", lora_r=4)
    sdir = students.state_dir(Path(cfg.out))
    (sdir / "last").mkdir(parents=True)
    (sdir / "last" / "trainer.json").write_text(
        json.dumps({"epoch": 1, "best_auroc": 0.5, "bad_epochs": 0, "history": []})
    )
    (sdir / students.STATE_KEY).write_text(json.dumps({"settings": {"lora_r": 2}, "data": "other"}))
    with pytest.raises(ConfigError, match=r"other settings or data \(.*lora_r.*data differ\); delete it") as e:
        run(cfg)
    assert "\n" not in str(e.value) and not Path(cfg.out).exists()


def _tiny_peft(r: int):
    import torch
    from peft import LoraConfig, get_peft_model

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(8, 1)

        def forward(self, x):
            return self.lin(x)

    model = get_peft_model(Net(), LoraConfig(r=r, target_modules=["lin"]))
    return model, torch.optim.AdamW([p for p in model.parameters() if p.requires_grad])


@pytest.mark.parametrize("trainer_json", ["{bad", "[1]", json.dumps({"epoch": "one"}), None])
def test_an_unusable_resume_state_is_a_one_line_error_saying_to_delete_it(tmp_path, trainer_json):
    from peft import get_peft_model_state_dict
    from safetensors.torch import save_file

    from lrtune.train import students

    sdir, (old, opt_old) = tmp_path / "ce.train-state", _tiny_peft(2)
    last = sdir / "last"
    last.mkdir(parents=True)
    save_file(get_peft_model_state_dict(old), str(last / "adapter_model.safetensors"))
    students.save_optimizer(opt_old, last)
    (last / "trainer.json").write_text(
        trainer_json or json.dumps({"epoch": 1, "best_auroc": 0.5, "bad_epochs": 0, "history": []})
    )
    model, opt = _tiny_peft(4)  # None: a well-formed state of another LoRA rank
    with pytest.raises(ConfigError, match="cannot resume from .*; delete .*ce.train-state") as e:
        students._resume_cross_encoder(model, opt, sdir)
    assert "\n" not in str(e.value)
    if trainer_json is None:
        assert "size mismatch" in str(e.value)


# ---- lrtune profile --out and write_atomic (defect 11) ----------------------------------------
def test_profile_refuses_an_out_directory_before_loading_any_model(tmp_path, monkeypatch):
    from lrtune.eval.profile import ProfileOptions, run
    from lrtune.api import Decoder, ModelConfig

    def loaded(*a, **k):
        raise AssertionError("models were loaded")

    monkeypatch.setattr(Decoder, "from_configs", loaded)
    (tmp_path / "prof").mkdir()
    with pytest.raises(ConfigError, match="is a directory"):
        run(ProfileOptions(out=str(tmp_path / "prof")), ModelConfig(backend="transformers"))
    assert list((tmp_path / "prof").iterdir()) == []


def test_write_atomic_removes_its_temp_file_when_the_write_fails(tmp_path):
    from lrtune.runfiles import write_atomic

    (tmp_path / "target").mkdir()
    with pytest.raises(OSError):
        write_atomic(tmp_path / "target", "{}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["target"]


def test_a_features_student_with_a_large_intercept_scores_0_or_1_and_never_overflows(tmp_path):
    """Within the bound a checkpoint may hold (distilled.LEARNED_BOUND) the score saturates
    without overflow (math.exp(800) overflows); past it the checkpoint is refused at load."""
    pair = StepPair("ctx", "a 1", "b 2")
    for b, want in ((800.0, 1.0), (-800.0, 0.0), (9000.0, 1.0)):
        v = distilled.load(
            _checkpoint(tmp_path, f"b{b:g}", {**LOGISTIC, "intercept": np.array([b])}, "features", kind="features")
        )
        assert v.score([pair]) == [want]
    huge = _checkpoint(tmp_path, "huge", {**LOGISTIC, "intercept": np.array([1e308])}, "features", kind="features")
    with pytest.raises(ConfigError, match="intercept"):
        distilled.load(huge)


@pytest.mark.parametrize("record", [{"options": []}, {"options": "x"}, {"format": 1}])
def test_a_train_config_that_is_no_training_record_is_refused_in_one_line_and_kept(tmp_path, record):
    from lrtune.train.verifier import run

    data = write_pairs(tmp_path / "a", _synthetic_rows())
    cfg = _features_cfg(tmp_path, data)
    out = Path(cfg.out)
    out.mkdir(parents=True)
    (out / "train_config.json").write_text(json.dumps(record))
    before = snapshot(out)
    with pytest.raises(ConfigError, match="is not a verifier's training record"):
        run(cfg)
    assert snapshot(out) == before
