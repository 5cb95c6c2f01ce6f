"""Outcome-grounded teachers (``data_gen.rollout``): labels from where the target's
reasoning ends up after the draft step vs after its own step."""

from __future__ import annotations

import json

import pytest

from data_gen.rollout import parse_teacher, rollout_labels
from fake_backend import EOS, FakeBackend, chain
from lrtune.errors import ConfigError
from lrtune.tasks import Problem, get_task, same_outcome


@pytest.mark.parametrize("spec,kind,live", [
    ("rollout", "rollout", None), ("consensus(rollout,llm_judge)", "consensus", "llm_judge"),
    ("consensus( rollout , llm_judge(paper)@0.7)", "consensus", "llm_judge(paper)@0.7"),
    ("embedding@0.9", "verifier", "embedding@0.9"),
])
def test_teacher_specs(spec, kind, live):
    t = parse_teacher(spec)
    assert (t.kind, t.live) == (kind, live)


@pytest.mark.parametrize("spec", ["consensus(llm_judge)", "consensus(rollout,nonsense)", "rolout"])
def test_bad_teacher_specs_are_refused_before_any_model_loads(spec):
    with pytest.raises(ConfigError):
        parse_teacher(spec)


@pytest.mark.parametrize("a,b,same", [
    ("so \\boxed{12}", "the answer is 12", True), ("\\boxed{12}", "\\boxed{13}", False),
    ("no answer yet", "\\boxed{12}", False), ("no answer", "no answer", True), ("\\boxed{1/2}", "\\boxed{0.5}", True),
])
def test_same_outcome_compares_final_answers_with_the_tasks_checker(a, b, same):
    task = get_task("gsm_symbolic")
    prob = Problem(id="p", question="q", answer="12")
    assert same_outcome(task, prob, a, b)[0] is same


def test_rollouts_of_a_problem_are_one_engine_call_and_steps_that_end_the_answer_stop():
    backend = FakeBackend(chain(7))
    task = get_task("gsm_symbolic")
    prob = Problem(id="p", question="q", answer="12")
    prompt = [5, 6]
    items = [(prompt + [9], [10, 11], [10, 11]),       # identical steps: identical continuations
             (prompt + [9], [12, EOS], [13]),           # the draft step ended the answer: not continued
             (prompt + [9, 9], [14], [15])]
    labels, secs = rollout_labels(backend, task, prob, prompt, items, max_tokens=20, max_len=100)
    assert len(backend.calls) == 1 and backend.calls[0][0] == 5  # 3 pairs x 2 rows, one not continued
    assert labels[0]["rollout_label"] is True and labels[0]["rollout_draft_text"] == labels[0]["rollout_target_text"]
    assert labels[1]["rollout_draft_text"] == backend.decode([9, 12, EOS], skip_special_tokens=True)
    for lab in labels:
        assert lab["rollout_label"] == same_outcome(task, prob, lab["rollout_draft_text"], lab["rollout_target_text"])[0]
    labels, _ = rollout_labels(backend, task, prob, prompt, items[:1], max_tokens=20, max_len=7)
    assert all(p.max_tokens == 7 - 5 - 1 for p in backend.row_params[-1])  # cut to fit the context


def test_rollout_and_consensus_teachers_in_collect(tmp_path):
    """collect --teacher rollout (live verifier: --verifier exact) and consensus(rollout,exact)
    decode the same trajectories; consensus keeps exactly the rollout rows whose live verdict
    agrees with the rollout label and counts the others."""
    from data_gen.collect import CollectConfig, CollectOptions, load_tables, run
    from lrtune.api import ModelConfig
    from lrtune.decoder import DecodeConfig
    from tiny_models import get_tiny_pair, sample_questions

    data = tmp_path / "p.jsonl"
    data.write_text("".join(json.dumps({"id": f"q{i}", "question": q, "answer": str(i)}) + "\n"
                            for i, q in enumerate(sample_questions(3, seed=7))))
    pair = get_tiny_pair()
    out = {}
    for teacher in ("rollout", "consensus(rollout,exact)"):
        cfg = CollectConfig(
            options=CollectOptions(task="custom", data=str(data), limit=3, teacher=teacher, out=str(tmp_path / teacher),
                                   progress=False, rollout_tokens=24, max_concurrent=2, embedding_feature=False),
            models=ModelConfig(target=str(pair.target), draft=str(pair.draft), backend="transformers",
                               max_model_len=512, verifier="exact"),
            decode=DecodeConfig(method="lr", gamma1=2, max_new_tokens=48, max_step_tokens=12))
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
    from argparse import Namespace

    from benchmarks.judge_probe import main as probe

    res = probe(Namespace(data=str(tmp_path / "rollout"), specs="llm_judge(context),llm_judge(paper)", limit=0,
                          target=str(pair.target), backend="transformers", max_model_len=512, kv_cache_gib=0.25,
                          out=str(tmp_path / "probe.json")))
    assert json.loads((tmp_path / "probe.json").read_text())["pairs"] == len(rows) == res["pairs"]
    for spec in ("llm_judge(context)", "llm_judge(paper)"):
        r = res["specs"][spec]
        assert len(r["scores"]) == len(rows) and all(0.0 <= x <= 1.0 for x in r["scores"])
        if res["identical_pairs"]:
            assert r["identical_acceptance"] == 1.0
