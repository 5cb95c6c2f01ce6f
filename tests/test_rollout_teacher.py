"""Outcome-grounded teachers (``lrtune.data_gen.rollout``): labels from where the target's
reasoning ends up after the draft step vs after its own step."""

from __future__ import annotations

import json

import pytest

from lrtune.data_gen.rollout import RolloutItem, parse_teacher, rollout_labels, trajectory_continuation
from fake_backend import EOS, FakeBackend, chain
from lrtune.errors import ConfigError
from lrtune.tasks import Problem, get_task, same_outcome


@pytest.mark.parametrize(
    "spec,kind,live",
    [
        ("rollout", "rollout", None),
        ("consensus(rollout,llm_judge)", "consensus", "llm_judge"),
        ("consensus( rollout , llm_judge(paper)@0.7)", "consensus", "llm_judge(paper)@0.7"),
        ("embedding@0.9", "verifier", "embedding@0.9"),
    ],
)
def test_teacher_specs(spec, kind, live):
    t = parse_teacher(spec)
    assert (t.kind, t.live) == (kind, live)


@pytest.mark.parametrize("spec", ["consensus(llm_judge)", "consensus(rollout,nonsense)", "rolout"])
def test_bad_teacher_specs_are_refused_before_any_model_loads(spec):
    with pytest.raises(ConfigError):
        parse_teacher(spec)


@pytest.mark.parametrize(
    "a,b,same",
    [
        ("so \\boxed{12}", "the answer is 12", True),
        ("\\boxed{12}", "\\boxed{13}", False),
        ("no answer yet", "\\boxed{12}", False),
        ("no answer", "no answer", True),
        ("\\boxed{1/2}", "\\boxed{0.5}", True),
    ],
)
def test_same_outcome_compares_final_answers_with_the_tasks_checker(a, b, same):
    task = get_task("gsm_symbolic")
    prob = Problem(id="p", question="q", answer="12")
    assert same_outcome(task, prob, a, b)[0] is same


def test_rollouts_of_a_problem_are_one_engine_call_and_steps_that_end_the_answer_stop():
    backend = FakeBackend(chain(7))
    task = get_task("gsm_symbolic")
    prob = Problem(id="p", question="q", answer="12")
    prompt = [5, 6]
    items = [
        RolloutItem(prob, 2, prompt + [9], [10, 11], [10, 11]),  # identical steps: one row for both
        RolloutItem(prob, 2, prompt + [9], [12, EOS], [13]),  # the draft step ended the answer: not continued
        RolloutItem(prob, 2, prompt + [9, 9], [14], [15]),
    ]
    labels, secs = rollout_labels(backend, task, items, max_tokens=20, max_len=100)
    assert len(backend.calls) == 1 and backend.calls[0][0] == 4  # 3 pairs x 2 rows, one shared, one not continued
    assert labels[0]["rollout_label"] is True and labels[0]["rollout_draft_text"] == labels[0]["rollout_target_text"]
    assert labels[1]["rollout_draft_text"] == backend.decode([9, 12, EOS], skip_special_tokens=True)
    for lab in labels:
        assert (
            lab["rollout_label"] == same_outcome(task, prob, lab["rollout_draft_text"], lab["rollout_target_text"])[0]
        )
    assert not any(lab["rollout_reused"] for lab in labels)
    labels, _ = rollout_labels(
        backend, task, [items[2], RolloutItem(prob, 2, prompt + [9, 9], [16], [15])], max_tokens=20, max_len=100
    )
    assert backend.calls[-1][0] == 3  # the two items share their target branch: one row for it
    assert labels[0]["rollout_target_text"] == labels[1]["rollout_target_text"]
    labels, _ = rollout_labels(backend, task, items[:1], max_tokens=20, max_len=7)
    assert all(p.max_tokens == 7 - 5 - 1 for p in backend.row_params[-1])  # cut to fit the context


def test_a_known_continuation_is_reused_instead_of_rolled_out():
    backend = FakeBackend(chain(7))
    task = get_task("gsm_symbolic")
    prob = Problem(id="p", question="q", answer="12")
    item = RolloutItem(prob, 2, [5, 6, 9], [14], [15], known={"target": ([16, 17], True)})
    labels, _ = rollout_labels(backend, task, [item], max_tokens=20, max_len=100)
    assert backend.calls[-1][0] == 1  # only the draft branch is decoded
    assert labels[0]["rollout_target_text"] == backend.decode([9, 15, 16, 17], skip_special_tokens=True)
    assert labels[0]["rollout_reused"] is True


@pytest.mark.parametrize(
    "finish,start,room,divergent,expected",
    [
        ("eos", 2, 10, [], ([3, 4, 5], True)),  # ended by EOS within the room: the whole rest
        ("length", 2, 10, [], None),  # cut by the answer's budget before the room: not a rollout
        ("length", 2, 2, [], ([3, 4], False)),  # the room is reached: the first `room` tokens
        ("eos", 2, 3, [], ([3, 4, 5], True)),  # exactly the room, last token EOS
        ("eos", 2, 10, [3], None),  # a differing draft step accepted later: not greedy
        ("eos", 2, 10, [0], ([3, 4, 5], True)),  # one accepted before the start does not matter
    ],
)
def test_the_answer_is_a_rollout_only_where_it_is_the_targets_greedy_continuation(
    finish, start, room, divergent, expected
):
    assert trajectory_continuation([1, 2, 3, 4, 5], finish, start, room=room, divergent_starts=divergent) == expected


def test_committed_pairs_reuse_the_answer_and_get_the_labels_a_full_rollout_gives(tmp_path, monkeypatch):
    """--rollout-pairs committed keeps only the pairs on the answer's path; with --verifier
    exact the answer is the target's greedy continuation, so the committed branch is not
    rolled out again, and every label and continuation equals what a run that rolls out
    both branches of every pair records for the same pair."""
    import lrtune.data_gen.rollout as rollout_module
    from lrtune.data_gen.collect import CollectConfig, collect_options, run
    from lrtune.dataset import load_tables
    from lrtune.api import ModelConfig
    from lrtune.decoder import DecodeConfig
    from tiny_models import get_tiny_pair, sample_questions

    data = tmp_path / "p.jsonl"
    data.write_text(
        "".join(
            json.dumps({"id": f"q{i}", "question": q, "answer": str(i)}) + "\n"
            for i, q in enumerate(sample_questions(3, seed=11))
        )
    )
    pair = get_tiny_pair()
    got = {}
    reuse = rollout_module.trajectory_continuation
    for which in ("all", "committed"):  # "all" with reuse off: every branch really rolled out
        monkeypatch.setattr(
            rollout_module, "trajectory_continuation", reuse if which == "committed" else lambda *a, **k: None
        )
        cfg = CollectConfig(
            options=collect_options(
                task="custom",
                data=str(data),
                limit=3,
                teacher="rollout",
                rollout_pairs=which,
                out=str(tmp_path / which),
                progress=False,
                rollout_tokens=16,
                max_concurrent=2,
                embedding_feature=False,
                target_score_feature=False,
            ),
            models=ModelConfig(
                target=str(pair.target),
                draft=str(pair.draft),
                backend="transformers",
                max_model_len=512,
                verifier="exact",
            ),
            decode=DecodeConfig(method="lr", gamma1=2, max_new_tokens=48, max_step_tokens=12),
        )
        run(cfg)
        got[which] = load_tables(tmp_path / which)[0].to_pylist()
    key = lambda r: (r["problem_id"], r["round"], r["position"])  # noqa: E731
    full = {key(r): r for r in got["all"]}
    committed = got["committed"]
    assert committed and len(committed) < len(got["all"])
    assert all(r["chosen_branch"] and (r["committed"] or not r["verifier_label"]) for r in committed)
    assert any(r["rollout_reused"] for r in committed) and not any(r["rollout_reused"] for r in got["all"])
    for r in committed:
        f = full[key(r)]
        assert (r["label"], r["rollout_draft_text"], r["rollout_target_text"]) == (
            f["label"],
            f["rollout_draft_text"],
            f["rollout_target_text"],
        )


def test_rollout_and_consensus_teachers_in_collect(tmp_path):
    """collect --teacher rollout (live verifier: --verifier exact) and consensus(rollout,exact)
    decode the same trajectories; consensus keeps exactly the rollout rows whose live verdict
    agrees with the rollout label and counts the others."""
    from lrtune.data_gen.collect import CollectConfig, collect_options, run
    from lrtune.dataset import load_tables
    from lrtune.api import ModelConfig
    from lrtune.decoder import DecodeConfig
    from tiny_models import get_tiny_pair, sample_questions

    data = tmp_path / "p.jsonl"
    data.write_text(
        "".join(
            json.dumps({"id": f"q{i}", "question": q, "answer": str(i)}) + "\n"
            for i, q in enumerate(sample_questions(3, seed=7))
        )
    )
    pair = get_tiny_pair()
    out = {}
    for teacher in ("rollout", "consensus(rollout,exact)"):
        cfg = CollectConfig(
            options=collect_options(
                task="custom",
                data=str(data),
                limit=3,
                teacher=teacher,
                out=str(tmp_path / teacher),
                progress=False,
                rollout_tokens=24,
                max_concurrent=2,
                embedding_feature=False,
                judge_features=teacher == "rollout",
            ),
            models=ModelConfig(
                target=str(pair.target),
                draft=str(pair.draft),
                backend="transformers",
                max_model_len=512,
                verifier="exact",
            ),
            decode=DecodeConfig(method="lr", gamma1=2, max_new_tokens=48, max_step_tokens=12),
        )
        run(cfg)
        pairs, probs = load_tables(tmp_path / teacher)
        out[teacher] = (pairs.to_pylist(), probs.to_pylist())
    rows, probs = out["rollout"]
    assert rows and all(r["teacher"] == "rollout" and r["decode_verifier"] == "exact" for r in rows)
    for r in rows:
        assert r["rollout_draft_text"] is not None and r["rollout_target_text"] is not None
        assert r["teacher_score"] == float(r["label"])
        if r["draft_step"] == r["target_step"]:
            assert r["label"] is True
    kept, cprobs = out["consensus(rollout,exact)"]
    key = lambda r: (r["problem_id"], r["round"], r["position"], r["branch"])  # noqa: E731
    agree = {key(r) for r in rows if r["label"] == r["verifier_label"]}
    assert {key(r) for r in kept} == agree
    assert sum(p["teacher_disagreements"] for p in cprobs) == len(rows) - len(agree)

    # the judge probe scores the recorded teacher inputs on the production path, both forms
    from lrtune.data_gen.judge_probe import JudgeProbeConfig
    from lrtune.data_gen.judge_probe import main as probe

    res = probe(
        JudgeProbeConfig(
            data=str(tmp_path / "rollout"),
            specs="llm_judge(context),llm_judge(paper)",
            limit=0,
            target=str(pair.target),
            backend="transformers",
            max_model_len=512,
            kv_cache_gib=0.25,
            out=str(tmp_path / "probe.json"),
        )
    )
    assert json.loads((tmp_path / "probe.json").read_text())["pairs"] == len(rows) == res["pairs"]
    for spec in ("llm_judge(context)", "llm_judge(paper)"):
        r = res["specs"][spec]
        assert len(r["scores"]) == len(rows) and all(0.0 <= x <= 1.0 for x in r["scores"])
        if res["identical_pairs"]:
            assert r["identical_acceptance"] == 1.0
        assert r["example_prompt"] is None or r["example_prompt"]["token_ids"]

    # collect --judge-features recorded exactly what the probe scores (one production path), and --stats shows them
    from lrtune.dataset import summarize_pairs

    for spec, col in (("llm_judge(context)", "llm_judge_context_score"), ("llm_judge(paper)", "llm_judge_paper_score")):
        assert res["specs"][spec]["scores"] == pytest.approx([r[col] for r in rows], abs=1e-6)
    stats = summarize_pairs(tmp_path / "rollout")
    assert {"llm_judge(context)@0.92", "llm_judge(paper)@0.5"} <= set(stats["agreement_matrix"]) & set(
        stats["agreement_with_teacher"]
    )
    assert out["consensus(rollout,exact)"][0][0]["llm_judge_paper_score"] is None  # off by default

    # the summary: every probed judge beside the cheap verifiers, against the rollout labels
    from benchmarks.summarize_labels import markdown, summarize

    summ = summarize(str(tmp_path / "rollout"), str(tmp_path / "probe.json"), reps=50)
    assert summ["pairs"] == len(rows) and summ["accepted"] == sum(r["label"] for r in rows)
    assert {"rollout", "exact", "llm_judge(context)@0.92", "llm_judge(paper)@0.5"} <= set(summ["agreement_matrix"])
    assert summ["agreement_matrix"]["rollout"]["exact"] == pytest.approx(
        sum(r["label"] == r["exact_match"] for r in rows) / len(rows)
    )
    assert "| llm_judge(paper)@0.5 |" in markdown(summ)

    # label noise: the same teacher on null edits of the recorded target steps, by the same code
    from lrtune.data_gen.label_noise import config_from_args as noise_config
    from lrtune.data_gen.label_noise import main as noise
    from lrtune.data_gen.label_noise import make_parser as noise_parser

    pos0 = [r for r in rows if r["position"] == 0]
    args = noise_config(
        noise_parser().parse_args(
            [
                "--data",
                str(tmp_path / "rollout"),
                "--sample",
                "50",
                "--edits",
                "space,bold",
                "--out",
                str(tmp_path / "noise.json"),
            ]
        )
    )
    assert noise(args) == 0
    res = json.loads((tmp_path / "noise.json").read_text())
    assert res["pairs_probed"] + res["skipped_prefix_mismatch"] == len(pos0)
    assert res["pairs_probed"] >= 1  # the recorded prefix text rebuilds the recorded ids
    assert 0.0 <= res["reproduced"] <= 1.0
    for e, f in res["edits"].items():
        assert f["pairs"] == sum(p["edit"] == e for p in res["pairs"])
        assert f["flip_rate"] == sum(not p["accept"] for p in res["pairs"] if p["edit"] == e) / f["pairs"]
