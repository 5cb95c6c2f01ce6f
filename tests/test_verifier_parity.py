"""Train/serve parity of verifiers: one definition of a pair's columns (collect, training and
decode records), recorded decode-time pairs re-score offline to the same scores, and evaluate
reports decode-time acceptance beside the checkpoint's test split, flagging a gap."""

from __future__ import annotations

import json
import math

import pytest

from lrtune.verifiers.base import DraftScores, StepPair
from lrtune.verifiers.pairrecords import draft_scores_of, pair_columns, pair_from_columns

SCORED = DraftScores(-0.7, -2.5, 0.8, 12, draft_logprob=-0.4, draft_entropy=0.9)


@pytest.mark.parametrize(
    "scores", [None, SCORED, DraftScores.draft_only(type("G", (), {"logprobs": [-0.2, -0.4], "top_logprobs": None})())]
)
def test_a_pair_written_as_columns_reads_back_as_the_same_pair(scores):
    pair = StepPair("Problem. Step one.", "So 3 + 4 = 7.", "Thus 7.", scores)
    row = json.loads(json.dumps(pair_columns(pair)))  # through JSON, as records are stored
    assert pair_from_columns(row) == pair


def test_collect_rows_without_the_scored_flag_carry_scores_only_where_the_target_scored_the_step():
    row = {"context": "c", "draft_step": "d", "target_step": "t", "draft_mean_logprob": -0.3, "draft_entropy": 0.5}
    assert draft_scores_of(row) is None  # an LR pair the target did not score: what decoding passes too
    row.update(draft_target_mean_logprob=-1.0, draft_target_scored_tokens=4.0)
    got = draft_scores_of(row)
    assert got.mean_logprob == -1.0 and math.isnan(got.min_logprob) and got.tokens == 4 and got.draft_logprob == -0.3


def test_training_reads_collect_rows_through_the_same_function(tmp_path):
    from tests.test_train_verifier import _synthetic_rows, write_pairs
    from lrtune.train.data import load_pairs

    rows = _synthetic_rows(3)
    rows[0].update(
        draft_target_mean_logprob=-0.5,
        draft_target_min_logprob=-1.5,
        draft_target_argmax_share=0.5,
        draft_target_scored_tokens=6,
    )
    examples, _ = load_pairs(str(write_pairs(tmp_path / "d", rows)))
    assert [e.pair for e in examples] == [pair_from_columns(r) for r in rows]


def test_the_gap_flag_fires_only_when_the_intervals_do_not_overlap(monkeypatch):
    from lrtune.eval import parity

    recs = [
        {
            "problem": f"p{i}",
            "method": "lr+sd",
            "pairs": [{"accepted": True, "asked": True}] * 9
            + [{"accepted": False, "asked": True}, {"accepted": False, "asked": False}],
        }
        for i in range(6)
    ]
    promised = {"acceptance": 0.4, "ci95": [0.3, 0.5], "pairs": 40}
    monkeypatch.setattr(parity, "promised_acceptance", lambda v: promised)
    row = parity.parity(recs, ["lr+sd"], {"lr+sd": "ckpt"})["lr+sd"]
    assert row["decode"]["acceptance"] == pytest.approx(0.9) and row["decode"]["pairs"] == 60  # unasked left out
    assert row["gap"] is True and "GAP" in parity.parity_lines({"lr+sd": row})[0]
    promised["ci95"] = [0.3, 0.95]
    assert parity.parity(recs, ["lr+sd"], {"lr+sd": "ckpt"})["lr+sd"]["gap"] is False


@pytest.fixture(scope="module")
def student(tmp_path_factory):
    """A real features student (logistic regression on MiniLM cosine and text features)."""
    from tests.test_train_verifier import _synthetic_rows, write_pairs
    from lrtune.train.verifier import TrainVerifierConfig, run

    root = tmp_path_factory.mktemp("student")
    data = write_pairs(root / "pairs", _synthetic_rows())
    run(
        TrainVerifierConfig.of(
            data=str(data),
            out=str(root / "ckpt"),
            student="features",
            progress=False,
            latency_pairs=4,
            seed=0,
            max_false_accept=0.3,
            confidence=0.6,
        )
    )
    return root / "ckpt"


def test_recorded_decode_pairs_rescore_offline_to_the_scores_the_decoder_saw(student, tmp_path):
    pytest.importorskip("vllm")
    from tests.tiny_models import get_tiny_pair, sample_questions
    from lrtune.api import ModelConfig
    from lrtune.decoder import DecodeConfig
    from lrtune.eval.evaluate import EvalConfig, EvalOptions, load_records, run
    from lrtune.verifiers import distilled

    data = tmp_path / "problems.jsonl"
    data.write_text(
        "".join(
            json.dumps({"id": f"p{i}", "question": q, "answer": str(i)}) + "\n"
            for i, q in enumerate(sample_questions(2))
        )
    )
    pair = get_tiny_pair()
    cfg = EvalConfig(
        options=EvalOptions(
            task="custom",
            data=str(data),
            limit=2,
            methods="target,lr",
            out=str(tmp_path / "eval"),
            progress=False,
            warmup_tokens=0,
            plots=False,
        ),
        models=ModelConfig(
            target=str(pair.target),
            draft=str(pair.draft),
            verifier=str(student),
            dtype="float32",
            max_model_len=512,
            kv_cache_gib=0.25,
        ),
        decode=DecodeConfig(gamma1=2, max_new_tokens=40, max_step_tokens=16),
    )
    summary = run(cfg)
    recs = [r for r in load_records(tmp_path / "eval" / "records.jsonl") if r["method"] == "lr"]
    pairs = [p for r in recs for p in r["pairs"]]
    assert pairs and all(r["stats"]["drafted_steps"] == len(r["pairs"]) for r in recs)
    v = distilled.load(student)
    asked = [p for p in pairs if p["asked"]]
    again = [v.score([pair_from_columns(p)])[0] for p in asked]
    assert again == pytest.approx([p["score"] for p in asked], abs=1e-6)
    assert [s >= v.threshold for s in again] == [p["accepted"] for p in asked]
    row = summary.data["verifier_parity"]["lr"]
    assert row["decode"]["pairs"] == len(asked) and row["test_split"]["pairs"] > 0
    assert row["test_split"]["threshold_rule"].startswith("false-accept bound")
    assert "Verifier acceptance: decoding against its test split" in (tmp_path / "eval" / "report.md").read_text()


def test_evaluate_checks_an_accuracy_budget_against_the_answers_that_changed(monkeypatch):
    from lrtune.eval import parity

    recs = [{"problem": f"p{i}", "method": "target", "answer": str(i)} for i in range(10)]
    recs += [
        {
            "problem": f"p{i}",
            "method": "lr+sd",
            "answer": str(i) if i else "x",
            "pairs": [{"accepted": True, "asked": True}],
        }
        for i in range(10)
    ]
    got = parity.changed_answers(recs, "lr+sd")
    assert (got["changed"], got["problems"]) == (1, 10) and got["ci95"][0] < 0.1 < got["ci95"][1]
    monkeypatch.setattr(parity, "promised_acceptance", lambda v: None)
    monkeypatch.setattr(parity, "promised_accuracy", lambda v: {"max_accuracy_loss": 0.05, "confidence": 0.9})
    row = parity.parity(recs, ["lr+sd"], {"lr+sd": "ckpt"})["lr+sd"]
    assert row["accuracy_budget"]["held"] is False  # 1 of 10 changed > 0.05
    assert "NOT held" in "\n".join(parity.parity_lines({"lr+sd": row}))


def test_judged_pairs_mark_the_pairs_rejected_without_asking_the_verifier():
    from lrtune.backends.base import Generation
    from lrtune.slots import RoundRecord
    from lrtune.verifiers.pairrecords import judged_pairs

    g = Generation(token_ids=[1, 2], text="x", finish="delimiter")
    pairs = [StepPair("c", "a", "b"), StepPair("c", "a2", "b2")]
    rec = RoundRecord(
        index=3,
        prefix_len=10,
        drafts=[g, g],
        targets=[g, g, g],
        scores=[0.9, 0.0],
        accepted=[True, False],
        committed_drafts=1,
        draft_seconds=[0.1, 0.1],
        target_seconds=0.2,
        verify_seconds=0.0,
        pairs=[pairs],
        unasked=frozenset({(0, 1)}),
    )
    got = judged_pairs(rec)
    assert [(p["position"], p["asked"], p["accepted"], p["score"]) for p in got] == [
        (0, True, True, 0.9),
        (1, False, False, 0.0),
    ]
    assert all(p["round"] == 3 and p["chosen"] for p in got) and pair_from_columns(got[1]) == pairs[1]
