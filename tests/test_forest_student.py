"""The forest student: trees exported as flat arrays predict exactly what scikit-learn
predicts, a malformed forest file is refused, and the context feature tells code from math."""

from __future__ import annotations

import json

import numpy as np
import pytest

from lrtune.errors import ConfigError
from lrtune.verifiers import distilled
from lrtune.verifiers.base import StepPair
from lrtune.verifiers.features import FEATURE_NAMES, context_features, pair_features
from lrtune.verifiers.trees import check_forest, forest_proba, pack_forest
from tests.test_train_verifier import _cfg, pair_dir, write_pairs  # noqa: F401 - pair_dir is a fixture


def _fitted(seed: int = 0, leaf: int = 1):
    from sklearn.ensemble import RandomForestClassifier

    rng = np.random.default_rng(seed)
    x = rng.normal(size=(200, 5))
    y = (x[:, 0] + 0.5 * x[:, 3] ** 2 + rng.normal(scale=0.3, size=200)) > 0.4
    return RandomForestClassifier(n_estimators=25, min_samples_leaf=leaf, random_state=seed).fit(x, y), rng


@pytest.mark.parametrize("leaf", [1, 5])
def test_packed_forest_predicts_what_scikit_learn_predicts(leaf):
    clf, rng = _fitted(leaf=leaf)
    arrays = pack_forest(clf.estimators_, positive=1)
    assert check_forest(arrays, 5) is None
    x = np.vstack([rng.normal(size=(300, 5)), clf.estimators_[0].tree_.threshold[:5].reshape(1, 5)])
    np.testing.assert_allclose(forest_proba(arrays, x), clf.predict_proba(x)[:, 1], rtol=0, atol=1e-12)


def test_check_forest_names_what_is_wrong_with_a_malformed_forest():
    clf, _ = _fitted()
    good = pack_forest(clf.estimators_)
    assert "lacks the tensor 'value'" in check_forest({k: v for k, v in good.items() if k != "value"}, 5)
    assert "outside its 3 features" in check_forest(good, 3)
    loop = dict(good, left=good["left"].copy())
    inner = np.nonzero(loop["left"] != -1)[0][0]
    loop["left"][inner] = inner  # a node that is its own child would never reach a leaf
    assert "child index out of range" in check_forest(loop, 5)
    assert "different lengths" in check_forest(dict(good, value=good["value"][:-1]), 5)


def test_context_feature_tells_a_code_problem_from_a_math_problem():
    code = "Complete the following Python function.\n\n```python\ndef add(a, b):\n    return a + b\n```"
    assert context_features(code) == [1.0]
    assert context_features("def f(x):\n    pass") == [1.0]
    assert context_features("A farmer has 3 cows. The class had 20 students.\n\nclass size is 20") == [0.0]
    f = pair_features(StepPair(code, "x = 1", "x = 1"), 1.0)
    assert set(f) == set(FEATURE_NAMES) and f["context_is_code"] == 1.0 and f["draft_target_mean_logprob"] is None


def _code_math_rows():
    """Code problems accept every pair, math problems accept only matching last numbers: a
    student needs the context feature and a split on it (an interaction) to fit both."""
    rows = []
    for p in range(30):
        code = p % 2 == 0
        ctx = "```python\ndef f(x):\n" if code else "How many apples?"
        for j in range(6):
            same = j % 2 == 0
            rows.append(
                {
                    "problem_id": f"p{p}",
                    "task": "synthetic",
                    "round": j,
                    "position": 0,
                    "context": ctx,
                    "draft_step": f"so the total is {j + (0 if same else 7)}",
                    "target_step": f"the total is {j}",
                    "label": code or same,
                    "teacher_score": 1.0 if (code or same) else 0.0,
                    "teacher": "synthetic",
                }
            )
    return rows


def test_forest_student_exports_a_pickle_free_checkpoint_that_reloads_to_the_same_scores(tmp_path):
    from lrtune.train.verifier import run

    cfg = _cfg(tmp_path, write_pairs(tmp_path / "cm", _code_math_rows()), "forest")
    meta = run(cfg)
    out = tmp_path / "forest"
    assert {p.name for p in out.iterdir()} == {
        ".lrtune-owner.json",
        "lrtune_verifier.json",
        "README.md",
        "forest.safetensors",
        "train_config.json",
    }
    assert "context_is_code" in meta["features"] and meta["min_samples_leaf"] in (1, 3, 5, 10)
    assert meta["metrics"]["test"]["auroc"] > 0.9
    v = distilled.load(out)
    assert v.name == "distilled:forest" and not v.uses_draft_scores
    code, math_ok, math_bad = (
        StepPair("```python\ndef f(x):\n", "so the total is 9", "the total is 2"),
        StepPair("How many?", "so the total is 2", "the total is 2"),
        StepPair("How many?", "so the total is 9", "the total is 2"),
    )
    s = v.score([code, math_ok, math_bad])
    assert s[0] >= v.threshold > s[2] and s[1] > s[2]  # accepts s >= threshold
    assert distilled.load(out).score([code, math_ok, math_bad]) == s


def test_forest_checkpoint_with_a_malformed_forest_is_refused_with_the_reason(tmp_path):
    from safetensors.numpy import load_file, save_file

    from lrtune.train.verifier import run

    run(_cfg(tmp_path, write_pairs(tmp_path / "cm", _code_math_rows()), "forest"))
    path = tmp_path / "forest" / "forest.safetensors"
    w = load_file(str(path))
    w["feature"] = np.where(w["left"] != -1, 99, w["feature"])
    save_file(w, str(path))
    with pytest.raises(ConfigError, match="forest.safetensors is not the file its lrtune_verifier.json records"):
        distilled.load(tmp_path / "forest")
    _record_files(tmp_path / "forest")  # tampered with the metadata's checksums too: the forest itself is read
    with pytest.raises(ConfigError, match="not a valid forest: a split on a feature outside"):
        distilled.load(tmp_path / "forest")
    path.write_bytes(b"not safetensors")
    _record_files(tmp_path / "forest")
    with pytest.raises(ConfigError, match="forest.safetensors is not a whole safetensors file"):
        distilled.load(tmp_path / "forest")


def _record_files(ckpt):
    meta_file = ckpt / distilled.META
    meta = json.loads(meta_file.read_text())
    meta_file.write_text(json.dumps({**meta, "files": distilled.file_digests(ckpt)}))


def test_drop_features_leaves_the_named_features_out_and_refuses_unknown_names(tmp_path):
    from lrtune.train.verifier import run

    d = write_pairs(tmp_path / "cm", _code_math_rows())
    meta = run(_cfg(tmp_path, d, "forest", drop_features="context_is_code, len_ratio"))
    assert "context_is_code" not in meta["features"] and "len_ratio" not in meta["features"]
    assert distilled.load(tmp_path / "forest").feature_names == tuple(meta["features"])
    with pytest.raises(ConfigError, match="unknown feature.*no_such_feature"):
        run(_cfg(tmp_path / "x", d, "features", drop_features="no_such_feature"))
    with pytest.raises(ConfigError, match="features, forest and router students only"):
        run(_cfg(tmp_path / "y", d, "cross-encoder", drop_features="len_ratio"))
