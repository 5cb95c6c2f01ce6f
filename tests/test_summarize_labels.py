"""benchmarks.summarize_labels on a synthetic outcome-labelled dataset and a sampled probe."""

from __future__ import annotations

import json
import random

import pytest

from tests.test_train_verifier import write_pairs


def _dataset(tmp_path, n_problems: int = 8):
    rng = random.Random(0)
    rows = []
    for p in range(n_problems):
        for k in range(5):
            label = rng.random() < 0.6
            draft = f"step {p}-{k}" if label and k % 2 == 0 else f"draft {p}-{k}"
            rows.append(
                {
                    "problem_id": f"p{p}",
                    "task": "synthetic",
                    "round": k,
                    "position": k % 3,
                    "branch": 0,
                    "context": "ctx",
                    "draft_step": draft,
                    "target_step": f"step {p}-{k}",
                    "teacher": "rollout",
                    "teacher_score": float(label),
                    "label": label,
                    "judge_s": 2.0,
                    "exact_match": draft == f"step {p}-{k}",
                    "embedding_cosine": 0.99 if label else 0.9,
                    "rollout_reused": k == 0,
                    "rollout_finished": True,
                }
            )
    d = write_pairs(tmp_path / "data", rows)
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(
        pa.Table.from_pylist(
            [
                {"problem_id": f"p{p}", "task": "synthetic", "finished": True, "correct": p % 2 == 0, "tokens": 100}
                for p in range(n_problems)
            ]
        ),
        d / "problems.parquet",
    )
    return d, rows


def test_a_sampled_probe_is_rated_on_its_sample_and_thresholds_are_calibrated_held_out(tmp_path):
    from benchmarks.summarize_labels import markdown, summarize

    d, rows = _dataset(tmp_path)
    index = list(range(0, len(rows), 2))  # the probe scored every other pair: a perfect judge there
    probe = {
        "pairs": len(index),
        "dataset_pairs": len(rows),
        "row_index": index,
        "judge": "j",
        "specs": {
            "llm_judge(context)": {
                "threshold": 0.5,
                "seconds_per_pair": 1.0,
                "scores": [0.9 if rows[i]["label"] else 0.2 for i in index],
            }
        },
    }
    (tmp_path / "probe.json").write_text(json.dumps(probe))
    s = summarize(str(d), str(tmp_path / "probe.json"), reps=50)
    assert s["pairs"] == len(rows) and s["probe"]["pairs"] == len(index)
    assert s["auroc_vs_rollout"]["llm_judge(context)"]["auroc"] == pytest.approx(1.0)
    assert s["accept_rate"]["llm_judge(context)@0.5"] == pytest.approx(
        sum(rows[i]["label"] for i in index) / len(index)
    )  # rated on the sample, not on the unscored pairs
    assert s["threshold_sweep"]["llm_judge(context)"]["0.5"]["agreement"] == pytest.approx(1.0)
    cal = s["calibrated"]["llm_judge(context)"]
    assert cal["pairs"] == len(index) and cal["heldout_false_accept_rate"] == 0.0 and cal["heldout_agreement"] == 1.0
    assert all(c["disagreement_rate"] == 0.0 for c in s["consensus"].values())
    md = markdown(s)
    assert f"sample of {len(index)} of the {len(rows)} pairs" in md and "Thresholds calibrated" in md


def test_a_probe_of_another_dataset_is_refused(tmp_path):
    from benchmarks.summarize_labels import summarize

    d, rows = _dataset(tmp_path)
    (tmp_path / "probe.json").write_text(
        json.dumps({"pairs": 3, "dataset_pairs": len(rows) + 1, "row_index": [0, 1, 2], "specs": {}})
    )
    with pytest.raises(SystemExit, match="dataset of"):
        summarize(str(d), str(tmp_path / "probe.json"), reps=10)
