"""Tasks read from files: field names of common releases, bad rows, clear errors."""

import json
import warnings

import pytest

from lrtune.errors import ConfigError
from lrtune.tasks import get_task
from lrtune.tasks.files import DataWarning


def write_jsonl(path, rows, extra_lines=()):
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
        for line in extra_lines:
            f.write(line + "\n")
    return str(path)


def test_gsm8k_file_answers_are_read_after_hashes(tmp_path):
    p = write_jsonl(tmp_path / "gsm8k.jsonl", [{"question": "2+2?", "answer": "2+2=4\n#### 4"}])
    task = get_task("gsm8k")
    (prob,) = task.load(path=p)
    assert prob.answer == "4" and prob.id == "gsm8k-0"
    assert task.check(prob, "so \\boxed{4}") == ("4", True)
    assert task.check(prob, "#### 5")[1] is False


def test_math500_fields_and_ids_are_used(tmp_path):
    p = write_jsonl(tmp_path / "m.jsonl", [{"problem": "Compute 14/3.", "answer": "\\frac{14}{3}", "unique_id": "t/1"}])
    (prob,) = get_task("math500").load(path=p)
    assert prob.id == "t/1" and get_task("math500").check(prob, "\\boxed{\\dfrac{14}{3}}")[1]


def test_aime_capitalised_fields(tmp_path):
    p = tmp_path / "aime.json"
    p.write_text(json.dumps([{"ID": "2024-I-1", "Problem": "p", "Answer": 204}]))
    (prob,) = get_task("aime24").load(path=str(p))
    assert prob.id == "2024-I-1" and prob.answer == "204"


def test_custom_limit_takes_the_first_rows(tmp_path):
    p = write_jsonl(tmp_path / "c.jsonl", [{"id": f"q{i}", "question": f"q{i}", "answer": str(i)} for i in range(5)])
    assert [x.id for x in get_task("custom").load(limit=2, path=p)] == ["q0", "q1"]


def test_malformed_jsonl_line_is_reported_with_its_number_and_the_rest_is_used(tmp_path):
    p = write_jsonl(tmp_path / "c.jsonl", [{"question": "a", "answer": "1"}], extra_lines=["{not json", "[1, 2]"])
    with open(p, "a") as f:
        f.write(json.dumps({"question": "b", "answer": "2"}) + "\n")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        probs = get_task("custom").load(path=p)
    assert [x.question for x in probs] == ["a", "b"]
    msgs = [str(w.message) for w in caught if issubclass(w.category, DataWarning)]
    assert any(":2:" in m for m in msgs) and any(":3:" in m for m in msgs)


def test_row_without_an_answer_is_an_error_naming_the_line(tmp_path):
    p = write_jsonl(tmp_path / "c.jsonl", [{"question": "a", "answer": "1"}, {"question": "b"}])
    with pytest.raises(ConfigError, match=r"c\.jsonl:2.*answer"):
        get_task("custom").load(path=p)


def test_missing_file_and_missing_path_are_clear_errors(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        get_task("custom").load(path=str(tmp_path / "nope.jsonl"))
    with pytest.raises(ConfigError, match="--data"):
        get_task("custom").load()
    with pytest.raises(ConfigError, match="unknown task"):
        get_task("mmlu")


def test_gsm_symbolic_is_seeded_and_checked_numerically():
    task = get_task("gsm_symbolic")
    a, b = task.load(limit=3, seed=1), task.load(limit=3, seed=1)
    assert [p.question for p in a] == [p.question for p in b]
    assert task.check(a[0], f"... \\boxed{{{a[0].answer}}}")[1]


def test_templates_group_generated_problems_and_every_other_problem_is_its_own():
    from lrtune.tasks import get_task, template_of

    probs = get_task("gsm_symbolic").load(limit=40, seed=3)
    assert [template_of("gsm_symbolic", p.id) for p in probs] == [p.meta["template"] for p in probs]
    assert len({p.meta["template"] for p in probs}) < len(probs)  # ~100 templates: some repeat
    assert template_of("humaneval", "HumanEval/7") == "humaneval/HumanEval/7"
    assert template_of("gsm_symbolic", "not-an-id") == "gsm_symbolic/not-an-id"


def test_a_task_mix_interleaves_its_tasks_and_checks_each_problem_by_its_own_task():
    from lrtune.tasks import get_task, same_outcome, template_of

    mix = get_task("gsm_symbolic+humaneval")
    probs = mix.load(limit=5, seed=0)
    assert [p.meta["task"] for p in probs] == ["gsm_symbolic", "humaneval", "gsm_symbolic", "humaneval", "gsm_symbolic"]
    assert mix.KIND == "code" and get_task("gsm_symbolic+gsm8k").KIND == "math"
    g, h = probs[0], probs[1]
    assert mix.prompt(g) == get_task("gsm_symbolic").prompt(g) and "```python" in mix.prompt(h)
    assert mix.check(g, f"so \\boxed{{{g.answer}}}")[1] is True
    assert same_outcome(mix, g, f"\\boxed{{{g.answer}}}", f"the answer is {g.answer}")[0] is True
    assert template_of(mix.name, g.id) == g.meta["template"] and template_of(mix.name, h.id) == f"{mix.name}/{h.id}"


@pytest.mark.parametrize("name", ["gsm_symbolic+gsm_symbolic", "gsm_symbolic+", "gsm_symbolic+nope"])
def test_bad_task_mixes_are_refused(name):
    from lrtune.errors import ConfigError
    from lrtune.tasks import get_task

    with pytest.raises(ConfigError):
        get_task(name)
