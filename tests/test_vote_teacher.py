"""The vote teacher (``lrtune.data_gen.rollout`` sampled rollouts, ``lrtune labels vote``): a
pair is accepted when its two branches' modal rollout outcomes are the same."""

from __future__ import annotations

import pytest

from lrtune.data_gen.rollout import (
    RolloutItem,
    branch_outcome,
    modal_outcome,
    outcome_equality,
    sampled_outcomes,
    vote_label,
)
from fake_backend import EOS, FakeBackend, chain
from lrtune.tasks import Problem, get_task

GSM = get_task("gsm_symbolic")
EQ = outcome_equality(GSM)


def test_the_mode_is_the_most_common_outcome_by_the_tasks_equality_ties_to_the_first():
    assert modal_outcome(["3", "4", "4.0", "3", "4"], EQ) == "4"  # 4 and 4.0 are one answer (3 votes)
    assert modal_outcome(["3", "4"], EQ) == "3"  # a tie goes to the greedy outcome, listed first
    assert modal_outcome([None, None, "5"], EQ) == "5"  # no answer never counts
    assert modal_outcome([None, None], EQ) is None and modal_outcome([], EQ) is None


@pytest.mark.parametrize(
    "draft,target,accept,score",
    [
        (["12", "12", "13"], ["12", "13", "12"], True, 5 / 9),  # the modes agree though greedy paths differ
        (["12", "13", "13"], ["12", "12", "12"], False, 3 / 9),  # the greedy outcomes agree, the modes do not
        ([None, None, None], [None, None, None], False, 0.0),  # no answer never matches
    ],
)
def test_vote_label_compares_modal_outcomes_and_scores_matching_couples(draft, target, accept, score):
    assert vote_label(draft, target, EQ) == (accept, pytest.approx(score))


def test_identical_steps_are_accepted_by_construction():
    assert vote_label([None], [None], EQ, identical=True) == (True, 1.0)


def test_branch_outcome_is_pass_fail_for_code_and_the_answer_for_math():
    prob = Problem(id="p", question="q", answer="12")
    assert branch_outcome(GSM, prob, "so \\boxed{12}") == "12"
    assert branch_outcome(GSM, prob, "no answer yet") is None
    assert outcome_equality(get_task("humaneval"))("passed", "passed")


def test_sampled_rollouts_are_seeded_rows_of_one_call_shared_by_identical_branches():
    backend = FakeBackend(chain(7))
    prob = Problem(id="p", question="q", answer="12")
    items = [
        RolloutItem(prob, 2, [5, 6, 9], [10, 11], [10, 11]),  # identical steps: one set of rows
        RolloutItem(prob, 2, [5, 6, 9], [12, EOS], [13]),
    ]  # the draft step ended the answer
    got, _ = sampled_outcomes(backend, GSM, items, samples=3, temperature=0.7, seed=5, max_tokens=20, max_len=100)
    assert len(backend.calls) == 1 and backend.calls[0][0] == 6  # (shared branch + target of item 2) x 3 samples
    assert [p.seeds for p in backend.row_params[0][:3]] == [(5,), (6,), (7,)]
    assert all(p.temperature == 0.7 and not p.stop_at_delimiter for p in backend.row_params[0])
    assert got[0]["draft"] == got[0]["target"] and all(len(g[b]) == 3 for g in got for b in ("draft", "target"))
    again, _ = sampled_outcomes(backend, GSM, items, samples=3, temperature=0.7, seed=5, max_tokens=20, max_len=100)
    assert again == got  # seeded: the same votes


def test_sampled_rollouts_refuse_greedy_settings():
    with pytest.raises(ValueError):
        sampled_outcomes(FakeBackend(chain(7)), GSM, [], samples=2, temperature=0.0, seed=0, max_tokens=5, max_len=50)


def _votes(rows, flip: set[int]) -> dict:
    from lrtune.data_gen.vote_labels import pair_key

    return {
        pair_key(r): {
            "key": pair_key(r),
            "task": r["task"],
            "problem": f"{r['task']}/{r['problem_id']}",
            "greedy_label": bool(r["label"]),
            "vote_label": bool(r["label"]) != (i in flip),
            "vote_score": 0.25,
            "greedy_is_mode": [True, i in flip],
        }
        for i, r in enumerate(rows)
    }


def test_the_relabelled_dataset_trains_on_the_vote_labels_and_keeps_only_voted_pairs(tmp_path):
    import json

    from lrtune.data_gen.vote_labels import summarize, write_dataset
    from tests.test_train_verifier import _synthetic_rows, write_pairs
    from lrtune.train.data import load_pairs

    rows = _synthetic_rows(4)
    src = write_pairs(tmp_path / "src", rows)
    (src / "collect_config.json").write_text(json.dumps({"options": {"teacher": "rollout"}}))
    votes = _votes(rows[:12], flip={0, 3})  # two problems' pairs voted, two labels changed
    n = write_dataset(src, tmp_path / "out", votes, "rollout_vote(greedy+4@0.7)", {"samples": 4})
    examples, teacher = load_pairs(str(tmp_path / "out"))
    assert n == len(examples) == 12 and teacher == "rollout_vote(greedy+4@0.7)"
    assert [e.label for e in examples] == [v["vote_label"] for v in votes.values()]
    assert all(e.target == 0.25 for e in examples)  # the vote score is the soft target
    assert json.loads((tmp_path / "out" / "collect_config.json").read_text())["vote_relabel"] == {"samples": 4}
    write_dataset(src, tmp_path / "greedy", votes, None, {"samples": 4})
    greedy, teacher = load_pairs(str(tmp_path / "greedy"))  # the same pairs, their recorded labels
    assert [e.label for e in greedy] == [r["label"] for r in rows[:12]] and teacher == "llm_judge"
    s = summarize(list(votes.values()), seed=0)["all"]
    assert s["pairs"] == 12 and s["agreement"] == pytest.approx(10 / 12)
    assert s["agreement_ci95"][0] <= s["agreement"] <= s["agreement_ci95"][1]
    assert s["greedy_is_mode"] == pytest.approx((12 + 2) / 24)


@pytest.mark.parametrize("flag", [["--samples", "0"], ["--temperature", "0"], ["--chunk", "0"]])
def test_vote_labels_refuses_settings_that_cannot_vote_before_any_model_loads(tmp_path, capsys, flag):
    from lrtune.cli import main

    rc = main(["labels", "vote", "--data", str(tmp_path), "--out", str(tmp_path / "o"), *flag])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and flag[0] in err[0]
    assert not (tmp_path / "o").exists()


def test_collect_with_rollout_samples_labels_by_vote_and_keeps_the_greedy_label(tmp_path):
    """collect --teacher rollout --rollout-samples 2 decodes the trajectories --teacher rollout
    decodes; every pair keeps its greedy label and gets the vote over greedy + 2 samples."""
    import json

    from lrtune.data_gen.collect import CollectConfig, collect_options, run
    from lrtune.api import ModelConfig
    from lrtune.dataset import load_tables
    from lrtune.decoder import DecodeConfig
    from tiny_models import get_tiny_pair, sample_questions

    data = tmp_path / "p.jsonl"
    data.write_text(
        "".join(
            json.dumps({"id": f"q{i}", "question": q, "answer": str(i)}) + "\n"
            for i, q in enumerate(sample_questions(2, seed=7))
        )
    )
    pair = get_tiny_pair()
    out = {}
    for k in (0, 2):
        cfg = CollectConfig(
            options=collect_options(
                task="custom",
                data=str(data),
                limit=2,
                teacher="rollout",
                out=str(tmp_path / f"k{k}"),
                progress=False,
                rollout_tokens=16,
                rollout_samples=k,
                max_concurrent=2,
                embedding_feature=False,
            ),
            models=ModelConfig(
                target=str(pair.target),
                draft=str(pair.draft),
                backend="transformers",
                max_model_len=512,
                verifier="exact",
            ),
            decode=DecodeConfig(method="lr", gamma1=2, max_new_tokens=32, max_step_tokens=12),
        )
        run(cfg)
        out[k] = load_tables(tmp_path / f"k{k}")[0].to_pylist()
    greedy, voted = out[0], out[2]
    key = lambda r: (r["problem_id"], r["round"], r["position"], r["branch"])  # noqa: E731
    assert voted and [key(r) for r in voted] == [key(r) for r in greedy]
    eq = outcome_equality(get_task("custom"))
    for g, v in zip(greedy, voted):
        assert v["teacher"] == "rollout_vote(greedy+2@0.7)" and g["teacher"] == "rollout"
        assert v["rollout_greedy_label"] == g["label"]
        votes = json.loads(v["rollout_votes"])
        assert len(votes["draft"]) == len(votes["target"]) == 3
        assert [votes["draft"][0], votes["target"][0]] == [g["rollout_draft_answer"], g["rollout_target_answer"]]
        assert (v["label"], v["teacher_score"]) == vote_label(
            votes["draft"], votes["target"], eq, identical=v["draft_step"] == v["target_step"]
        )

    # lrtune labels vote relabels the greedy dataset: every pair's prefix rebuilds, every pair votes
    from lrtune.data_gen.vote_labels import config_from_args, main, make_parser

    argv = [
        "--data",
        str(tmp_path / "k0"),
        "--samples",
        "2",
        "--chunk",
        "1",
        "--out",
        str(tmp_path / "vote"),
        "--greedy-out",
        str(tmp_path / "greedy"),
    ]
    assert main(config_from_args(make_parser().parse_args(argv))) == 0
    res = json.loads((tmp_path / "vote" / "summary.json").read_text())
    assert res["pairs_voted"] == res["pairs_written"] == len(greedy) and res["skipped_prefix_mismatch_this_run"] == 0
    relabelled = load_tables(tmp_path / "vote")[0].to_pylist()
    assert all(r["teacher"] == "rollout_vote(greedy+2@0.7)" for r in relabelled)
    assert [r["label"] for r in load_tables(tmp_path / "greedy")[0].to_pylist()] == [g["label"] for g in greedy]
    assert (
        main(config_from_args(make_parser().parse_args(argv))) == 0
    )  # resumed: nothing left to roll out, the same files
    assert json.loads((tmp_path / "vote" / "summary.json").read_text())["summary"] == res["summary"]


@pytest.mark.parametrize(
    "opts,match",
    [
        ({"rollout_samples": -1}, "--rollout-samples"),
        ({"rollout_samples": 2, "teacher": "exact"}, "needs a rollout teacher"),
        ({"rollout_samples": 2, "rollout_temperature": 0.0}, "--rollout-temperature"),
    ],
)
def test_collect_refuses_vote_settings_that_cannot_vote(tmp_path, opts, match):
    from lrtune.data_gen.collect import CollectConfig, collect_options, run
    from lrtune.api import ModelConfig
    from lrtune.decoder import DecodeConfig
    from lrtune.errors import ConfigError

    kw = {"teacher": "rollout", **opts}
    with pytest.raises(ConfigError, match=match):  # a bad value when the options are built, a rule at the run
        run(
            CollectConfig(
                options=collect_options(task="gsm_symbolic", limit=1, out=str(tmp_path / "o"), **kw),
                models=ModelConfig(),
                decode=DecodeConfig(method="lr"),
            )
        )
    assert not (tmp_path / "o").exists()


def test_a_merge_treats_vote_options_that_are_off_as_absent():
    from lrtune.dataset import _settings

    old = {"options": {"teacher": "rollout", "task": "gsm_symbolic"}, "models": {}}
    new = {
        "options": {"teacher": "rollout", "task": "humaneval", "rollout_samples": 0, "rollout_temperature": 0.7},
        "models": {},
    }
    assert _settings(old) == _settings(new)
    assert _settings(old) != _settings({**new, "options": {**new["options"], "rollout_samples": 2}})


def test_a_votes_log_torn_by_a_kill_mid_append_resumes_without_its_last_line(tmp_path):
    import json

    from lrtune.data_gen.vote_labels import read_votes
    from lrtune.errors import ConfigError

    cfg = {"samples": 4, "temperature": 0.7}
    log = tmp_path / "votes.jsonl"

    def vote(key, label):
        return {"key": key, "greedy_label": True, "vote_label": label, "vote_score": 0.5, "seconds": 1.0}

    lines = [json.dumps({"config": cfg}), json.dumps(vote("a", True)), json.dumps(vote("b", False))]
    log.write_text("\n".join(lines) + "\n" + lines[2][:17])  # the kill cut the next append short
    with pytest.warns(UserWarning, match="torn last line"):
        assert set(read_votes(log, cfg)) == {"a", "b"}
    assert read_votes(log, cfg).keys() == {"a", "b"}  # the torn line is gone: appending can continue
    with pytest.raises(ConfigError, match="holds votes of other settings"):
        read_votes(log, {**cfg, "samples": 8})
    log.write_text(lines[0] + "\n" + json.dumps({"vote_label": True}) + "\n" + lines[1] + "\n")
    with pytest.raises(ConfigError, match=r"votes.jsonl:2: not an lrtune vote \(key is missing\)"):
        read_votes(log, cfg)
    for bad in ({"seconds": "slow"}, {"vote_label": "yes"}, {"vote_score": float("nan")}):
        log.write_text(lines[0] + "\n" + json.dumps({**vote("c", True), **bad}) + "\n")
        with pytest.raises(ConfigError, match=f"votes.jsonl:2: not an lrtune vote \\({next(iter(bad))}"):
            read_votes(log, cfg)
    assert read_votes(tmp_path / "none.jsonl", cfg) == {}
