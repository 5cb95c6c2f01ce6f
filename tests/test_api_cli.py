"""The public API and `lrtune decode` on real vLLM engines with the tiny pair."""

import json
import subprocess
import sys

import pytest

pytest.importorskip("vllm")

from lrtune.errors import ConfigError  # noqa: E402
from tiny_models import get_tiny_pair, sample_questions, tiny_decoder  # noqa: E402


@pytest.fixture(scope="module")
def dec():
    d = tiny_decoder()
    yield d
    d.close()


def test_generate_returns_one_output_per_prompt_with_text_ids_and_stats(dec):
    qs = sample_questions(2)
    outs = dec.generate(qs, max_new_tokens=48)
    assert [o.prompt for o in outs] == qs
    for o in outs:
        assert 0 < len(o.token_ids) <= 48 and o.text and o.finish in ("eos", "length")
        assert o.stats.generated_tokens == len(o.token_ids) and o.stats.rounds >= 1
        assert "alpha1_by_pos" in o.stats.to_dict()


def test_sd_through_the_api_equals_target_greedy(dec):
    q = sample_questions(3)[2]
    target = dec.generate(q, method="target", max_new_tokens=64)[0]
    sd = dec.generate(q, method="sd", max_new_tokens=64)[0]
    assert sd.token_ids == target.token_ids and sd.stats.drafted_tokens > 0


def test_on_step_streams_committed_steps_in_order(dec):
    seen = []
    out = dec.generate(
        sample_questions(1), max_new_tokens=48, on_step=lambda i, src, text: seen.append((i, src, text))
    )[0]
    assert seen and all(i == 0 and src in ("draft", "target") for i, src, _ in seen)
    assert "".join(t for _, _, t in seen) == out.text


def test_generate_rejects_empty_prompts_unknown_options_and_context_overflow(dec):
    with pytest.raises(ConfigError):
        dec.generate(["  "])
    with pytest.raises(ConfigError):
        dec.generate(["hi"], beam_width=4)
    with pytest.raises(ConfigError):
        dec.generate(["hi"], max_new_tokens=5000)


def test_generate_fails_a_too_long_prompt_alone_and_decodes_the_others(dec):
    long_prompt = " ".join(["word"] * 900)
    outs = dec.generate(["What is 2+2?", long_prompt, "What is 3+5?"], max_new_tokens=16, max_concurrent=3)
    assert [o.finish == "error" for o in outs] == [False, True, False]
    assert "max_model_len" in outs[1].error and outs[1].token_ids == []
    assert all(len(o.token_ids) > 0 and o.error is None for o in (outs[0], outs[2]))
    assert (dec.last_batch.prompts, dec.last_batch.failed) == (2, 1) and dec.last_batch.generated_tokens == sum(
        len(o.token_ids) for o in outs
    )
    alone = dec.generate(["What is 3+5?"], max_new_tokens=16)[0]
    assert outs[2].token_ids == alone.token_ids


# a vLLM engine in a new process (15 s): slow. `lrtune decode` runs in test_locale.py, spawned
# engines in test_vllm_processes.py
@pytest.mark.slow
def test_cli_decode_json_on_the_tiny_pair():
    pair = get_tiny_pair()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "lrtune",
            "decode",
            sample_questions(1)[0],
            "--target",
            str(pair.target),
            "--draft",
            str(pair.draft),
            "--method",
            "lr",
            "--verifier",
            "exact",
            "--dtype",
            "float32",
            "--max-model-len",
            "1024",
            "--max-new-tokens",
            "32",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    rec = json.loads(proc.stdout.strip().splitlines()[-1])
    assert rec["method"] == "lr" and rec["stats"]["generated_tokens"] <= 32 and rec["stats"]["rounds"] >= 1
    assert "NUMA binding" not in proc.stderr  # torch's C++ notices are quiet (TORCH_CPP_LOG_LEVEL)
