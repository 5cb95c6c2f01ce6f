"""The learned controller: scikit-learn estimator rules, prior from predictions, files."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sklearn.utils.estimator_checks import parametrize_with_checks

from lrtune.control import Bounds, ControlState, ProblemInfo
from lrtune.errors import ConfigError
from lrtune.speedup import best_gammas
from lrtune.policies import learned
from lrtune.policies.learned import AlphaPredictor, LearnedController, ProblemFeaturizer


@parametrize_with_checks([AlphaPredictor(), AlphaPredictor(alpha=0.0)])
def test_alpha_predictor_follows_scikit_learn_rules(estimator, check):
    check(estimator)


def test_fit_returns_self_and_learned_attributes_end_in_underscore():
    X = np.random.default_rng(0).normal(size=(20, 3))
    y = np.c_[X[:, 0] * 0.1 + 0.5, X[:, 1] * -0.05 + 0.7]
    m = AlphaPredictor(alpha=0.1)
    assert m.fit(X, y) is m
    learned_attrs = {k for k in vars(m) if k not in m.get_params()}
    assert learned_attrs and all(k.endswith("_") for k in learned_attrs)
    assert np.abs(m.predict(X) - y).max() < 0.02


from lrtune.pricing import Pricing  # noqa: E402


def _controller(alpha1, alpha2, bounds=Bounds(gamma1_max=6, gamma2_max=8, M=24), **options):
    feats = ProblemFeaturizer(["gsm"], encoder=None)  # length + task only (no encoder in this test)
    X = feats.transform([ProblemInfo("a", "x" * 10, task="gsm"), ProblemInfo("b", "x" * 1000, task="gsm")])
    pred = AlphaPredictor(alpha=0.0).fit(X, np.array([[alpha1[0], alpha2[0]], [alpha1[1], alpha2[1]]]))
    return (
        LearnedController(pred, feats, bounds, Pricing(c1=0.3, c2=0.2), prior_strength=1000.0, mode="ucb", **options),
        feats,
        pred,
    )


def test_first_round_uses_the_best_gammas_for_the_predicted_alphas():
    """Without an exploration budget; with the default one (the bandit's), an LR round waits
    until the run has measured SD, whatever the prediction."""
    budgeted, _, _ = _controller((0.9, 0.2), (0.8, 0.8))
    assert budgeted.choose(ProblemInfo("x", "x" * 10, task="gsm"), ControlState(0, 0, 500))[0] == 0
    ctl, _, _ = _controller((0.9, 0.2), (0.8, 0.8), explore_budget=None)
    for text, a1 in (("x" * 10, 0.9), ("x" * 1000, 0.2)):
        g = ctl.choose(ProblemInfo(text[:4] + str(len(text)), text, task="gsm"), ControlState(0, 0, 500))
        assert ctl.last_prediction == pytest.approx((a1, 0.8), abs=1e-6)
        best = best_gammas(a1, 0.3, 0.8, 0.2, 24, 6, 8)
        assert g == (best.gamma1, best.gamma2) or abs(g[0] - best.gamma1) + abs(g[1] - best.gamma2) <= 1


def test_save_load_round_trip_and_pickle_refusal(tmp_path):
    ctl, feats, pred = _controller((0.9, 0.2), (0.8, 0.6))
    out = learned.save(
        tmp_path / "ctl",
        pred,
        feats,
        bounds=ctl.bounds,
        profile={"c1": 0.3, "c2": 0.2},
        prior_strength=1000.0,
        metrics={},
        data={},
    )
    back = learned.load(out, mode="ucb")
    p = ProblemInfo("q", "x" * 300, task="gsm")
    assert back.predict_alphas(p) == pytest.approx(ctl.predict_alphas(p))
    assert back.choose(p, ControlState(0, 0, 100)) == ctl.choose(p, ControlState(0, 0, 100))
    (out / "model.pkl").write_bytes(b"x")
    with pytest.raises(ConfigError, match="pickle"):
        learned.load(out)


@pytest.mark.parametrize(
    "meta,message",
    [
        (None, "not an lrtune controller"),
        ({"format": "x"}, "controller metadata .*: format: Input should be 'lrtune-controller'"),
        ({"format": learned.FORMAT, "version": 1, "policy": "magic"}, "policy: Input should be 'learned'"),
        ({"format": learned.FORMAT, "version": 1, "policy": "learned"}, "bounds is missing"),
    ],
)
def test_bad_controller_directories_are_refused(tmp_path, meta, message):
    d = tmp_path / "c"
    d.mkdir()
    if meta is not None:
        (d / learned.META).write_text(json.dumps(meta))
    with pytest.raises(ConfigError, match=message):
        learned.load(d)


def _collect_dir(tmp_path, n=16):
    """A collect-style dir whose per-problem α1 grows with the problem's text length."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from lrtune.tasks import get_task

    task = get_task("gsm_symbolic")
    probs = task.load(limit=n, seed=0)
    lens = np.array([len(task.prompt(p)) for p in probs], dtype=float)
    z = (lens - lens.min()) / (lens.max() - lens.min())
    rows = [
        {
            "problem_id": p.id,
            "index": i,
            "task": "gsm_symbolic",
            "alpha1": 0.2 + 0.7 * z[i],
            "alpha2": 0.8 - 0.3 * z[i],
            "c1": 0.4,
        }
        for i, p in enumerate(probs)
    ]
    d = tmp_path / "collect"
    d.mkdir()
    pq.write_table(pa.Table.from_pylist(rows), d / "problems.parquet")
    pq.write_table(
        pa.Table.from_pylist([{"problem_id": "x", "target_len": n} for n in (10, 20, 60, 30)]), d / "pairs.parquet"
    )
    (d / "collect_config.json").write_text(json.dumps({"options": {"task": "gsm_symbolic", "task_seed": 0}}))
    return d


def test_train_controller_fits_cross_validates_and_exports(tmp_path):
    from lrtune.train.controller import TrainControllerConfig, run

    d = _collect_dir(tmp_path)
    out = tmp_path / "ctl"
    m = run(TrainControllerConfig(data=str(d), out=str(out), encoder="none", folds=4))
    cv = m["cv"]
    assert cv["mae_alpha1"] < cv["mae_alpha1_mean_baseline"]  # length predicts α1 here
    assert cv["model_speedup_oracle"] >= cv["model_speedup_learned"] - 1e-9
    assert cv["model_speedup_oracle"] >= cv["model_speedup_best_fixed"] - 1e-9
    ctl = learned.load(out)
    assert ctl.bounds.allows(*ctl.choose(ProblemInfo("p", "x" * 200, task="gsm_symbolic"), ControlState(0, 0, 100)))
    # the speedup model prices a round's batch by its longest step (the collected target steps)
    assert learned.read_meta(out)["profile"]["step_tokens"] == [10, 20, 30, 60]
    assert ctl.batch_cost(1) == 1.0 and ctl.batch_cost(3) > 1.0
    assert "learned" in (out / "README.md").read_text()


def test_cli_train_controller_reports_missing_data_in_one_line(tmp_path, capsys):
    from lrtune.cli import main

    rc = main(["train", "controller", "--data", str(tmp_path / "none"), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "training data not found" in err[0]


def test_a_learned_controller_derived_with_the_runs_plan_keeps_its_trained_costs_and_everything_it_learned():
    ctl, _, _ = _controller((0.5, 0.7), (0.6, 0.8))
    run = ctl.derive(round_kinds=("lr", "score"), pricing=Pricing(c1=0.9, c2=0.9, engine_drafts=4))
    assert type(run) is LearnedController and run is not ctl
    assert (run.pricing.c1, run.pricing.c2) == (0.3, 0.2)  # the costs it was trained with
    assert run.pricing.engine_drafts == 4 and run.bounds.gamma2_max == 4  # the run's engine
    assert run.round_kinds == ("lr", "score") and run.prior_strength == ctl.prior_strength
    assert run.predictor is ctl.predictor and ctl.round_kinds == ("lr",) and ctl.bounds.gamma2_max == 8
