"""``auto``: target, SD or adaptive, chosen per machine and verifier before any model loads."""

from __future__ import annotations

import dataclasses
import json

import pytest

from lrtune.control import Bounds
from lrtune.errors import ConfigError
from lrtune.pricing import Pricing
from lrtune.verifiers import check_verifier_spec as parse_verifier_spec
from lrtune.policies.auto import MIN_GAIN, accuracy_promise, best_sd, best_step_round, choose, measured_sd

# this CPU's profile (benchmarks/demo/default/profile.json, rounded) and a GPU-like one
CPU = Pricing(c1=0.35, c2=0.39, batch_cost=[1.0, 1.22, 1.01, 1.06, 1.11, 1.18, 1.39], engine_drafts=4)
GPU = Pricing(c1=0.05, c2=0.05, batch_cost=lambda n: 1 + 0.02 * (n - 1))


def test_without_a_draft_auto_runs_the_target():
    assert choose(GPU, has_draft=False, promise="lossless").method == "target"


def test_where_sd_measured_no_faster_than_the_target_auto_runs_the_target():
    c = choose(CPU, has_draft=True, promise="x", measured_sd_speedup=0.97, alpha2=0.9)
    assert c.method == "target" and "measured" in c.reason


def test_where_sd_models_no_faster_than_the_target_auto_runs_the_target():
    slow_draft = Pricing(c1=0.95, c2=0.95)
    assert best_sd(slow_draft, Bounds(), 0.3) == 1.0
    assert choose(slow_draft, has_draft=True, promise="x", alpha2=0.3).method == "target"


def test_a_verifier_that_states_no_accuracy_bound_keeps_auto_lossless():
    c = choose(dataclasses.replace(GPU, alpha1_max=0.9), has_draft=True, promise=None, alpha2=0.8)
    assert c.method == "sd" and "no accuracy bound" in c.reason


@pytest.mark.parametrize(
    "pricing,alpha1_max,expected",
    [(CPU, 0.59, "sd"), (CPU, 0.65, "sd"), (CPU, 1.0, "adaptive"), (GPU, 0.6, "adaptive"), (GPU, 0.05, "sd")],
)
def test_step_level_rounds_are_explored_only_where_the_model_lets_them_beat_sd_by_the_margin(
    pricing, alpha1_max, expected
):
    p = dataclasses.replace(pricing, alpha1_max=alpha1_max)
    c = choose(p, has_draft=True, promise="certified", alpha2=0.88)
    lr, sd = best_step_round(p, Bounds(), alpha1_max, 0.88, ("lr",)), best_sd(p, Bounds(), 0.88)
    assert c.method == expected
    assert (lr >= MIN_GAIN * sd) == (expected == "adaptive")
    assert c.lr_speedup == pytest.approx(lr) and c.alpha1_max == alpha1_max


def test_best_step_round_respects_the_controllers_arms():
    bounds = Bounds(gamma1_max=2, gamma2_max=4, M=4)
    allowed = [(g1, g2) for g1, g2 in bounds.arms() if g1 > 0]
    assert all(g1 * g2 <= 4 for g1, g2 in allowed)
    top = max(GPU.speedup("lr", g1, g2, 0.7, 0.8) for g1, g2 in allowed)
    assert best_step_round(GPU, bounds, 0.7, 0.8, ("lr",)) == pytest.approx(top)


def test_lossless_verifiers_promise_no_loss_and_training_free_ones_promise_nothing():
    assert accuracy_promise(parse_verifier_spec("exact")).startswith("lossless")
    assert accuracy_promise(parse_verifier_spec("never")).startswith("lossless")
    assert accuracy_promise(parse_verifier_spec("embedding")) is None
    assert accuracy_promise(parse_verifier_spec("target_logprob")) is None


def _checkpoint(root, **meta):
    from lrtune.verifiers import distilled

    root.mkdir()
    m = {"format": distilled.FORMAT, "version": distilled.VERSION, "kind": "features", "threshold": 0.7, **meta}
    (root / distilled.META).write_text(json.dumps(m))
    (root / "features.safetensors").write_bytes(b"")
    return str(root)


def test_a_checkpoint_promises_what_its_certified_calibration_says_at_its_own_threshold_only(tmp_path):
    from lrtune.verifiers import VerifierSpec

    calib = {"threshold": 0.7, "certified": True, "max_false_accept": 0.05, "confidence": 0.9}
    ok = _checkpoint(tmp_path / "ok", calibration=calib)
    assert accuracy_promise(VerifierSpec.of(ok)) == "false-accept rate <= 0.05 at 0.9"
    assert accuracy_promise(VerifierSpec.of(ok + "@0.5")) is None  # another threshold: no promise
    uncertified = _checkpoint(tmp_path / "no", calibration=dict(calib, certified=False))
    assert accuracy_promise(VerifierSpec.of(uncertified)) is None
    budget = {"certified": True, "threshold": 0.7, "max_accuracy_loss": 0.1, "confidence": 0.9}
    bud = _checkpoint(tmp_path / "budget", accuracy_budget=budget)
    assert accuracy_promise(VerifierSpec.of(bud)).startswith("answers differ from target-only on <= 0.1")


def test_the_profiles_measured_sd_is_read_and_a_malformed_one_refused_naming_the_file_and_field(tmp_path):
    f = tmp_path / "profile.json"
    f.write_text(json.dumps({"sd": {"speedup": 1.5, "alpha2": 0.88}}))
    assert measured_sd(str(f)) == (1.5, 0.88)
    f.write_text(json.dumps({"sd": {"speedup": "fast", "alpha2": True}}))
    with pytest.raises(ConfigError, match=rf"^--profile {f}: not an lrtune profile \(sd.speedup must be a number"):
        measured_sd(str(f))
    assert measured_sd(None) == (None, None)


def test_evaluate_resolves_an_auto_row_before_any_model_loads_under_its_own_label(tmp_path, monkeypatch):
    from lrtune.eval.config import EvalConfig, EvalOptions
    from lrtune.eval.loops import resolve_auto, run_pricing
    from lrtune.eval.methods import parse_methods
    from lrtune.modelconfig import ModelConfig
    import lrtune.backends.vllm as vllm_backend

    monkeypatch.setattr(vllm_backend.VLLMBackend, "_make_engine", lambda *a: pytest.fail("an engine started"))
    cfg = EvalConfig(
        options=EvalOptions(methods="sd,auto", out=str(tmp_path / "out"), progress=False),
        models=ModelConfig(target="t", draft="d", verifier="embedding"),
    )
    specs = parse_methods(cfg.options.methods, None, 3, 4)
    resolved = resolve_auto(cfg, specs, run_pricing(cfg, specs))
    auto = next(s for s in resolved if s.label == "auto")
    assert (auto.kind, auto.control, auto.gamma2) == ("sd", None, 4)
    assert "no accuracy bound" in auto.auto_reason
    assert [s.label for s in resolved] == ["target", "sd", "auto"]


def test_a_verifier_that_accepts_nothing_gets_sd_not_step_rounds():
    c = choose(GPU, has_draft=True, promise="lossless (no draft step accepted)", alpha2=0.8, alpha1_max=0.0)
    assert c.method == "sd" and c.alpha1_max == 0.0


def test_the_python_api_resolves_auto_before_any_model_loads(monkeypatch):
    from lrtune.decoding import auto_choice_for
    from lrtune.modelconfig import ModelConfig

    never = auto_choice_for(ModelConfig(target="t", draft="d", verifier="never"), 3, 4, 96, 0, None, None, False)
    emb = auto_choice_for(ModelConfig(target="t", draft="d", verifier="embedding"), 3, 4, 96, 0, None, None, False)
    own = auto_choice_for(ModelConfig(target="t", draft="d", verifier="exact"), 3, 4, 96, 0, None, None, True)
    assert (never.method, emb.method, own.method) == ("sd", "sd", "sd")
    assert own.promise is None and emb.promise is None and never.promise.startswith("lossless")


def test_a_real_evaluate_runs_the_auto_row_as_what_it_chose_and_says_why(tmp_path):
    """Tiny vLLM pair: with an embedding verifier (no bound) auto is SD, decoded like the sd row."""
    from lrtune.decoder import DecodeConfig
    from lrtune.eval.evaluate import EvalConfig, EvalOptions, run
    from lrtune.modelconfig import ModelConfig
    from lrtune.toymodels import get_tiny_pair, sample_questions

    data = tmp_path / "problems.jsonl"
    data.write_text(
        "".join(
            json.dumps({"id": f"p{i}", "question": q, "answer": "1"}) + "\n" for i, q in enumerate(sample_questions(1))
        )
    )
    pair = get_tiny_pair()
    cfg = EvalConfig(
        options=EvalOptions(
            task="custom",
            data=str(data),
            limit=1,
            methods="sd,auto",
            out=str(tmp_path / "out"),
            progress=False,
            warmup_tokens=8,
        ),
        models=ModelConfig(
            target=str(pair.target),
            draft=str(pair.draft),
            verifier="embedding",
            dtype="float32",
            max_model_len=512,
            kv_cache_gib=0.25,
        ),
        decode=DecodeConfig(gamma1=2, gamma2=2, max_new_tokens=16, max_step_tokens=8),
    )
    rows = run(cfg).data["methods"]
    assert rows["auto"]["auto"]["runs"] == "sd" and "no accuracy bound" in rows["auto"]["auto"]["reason"]
    assert (rows["auto"]["kind"], rows["auto"]["gamma2"]) == ("sd", 2)
    records = [json.loads(line) for line in (tmp_path / "out" / "records.jsonl").read_text().splitlines()]
    text = {(r["problem"], r["method"]): r["text"] for r in records}
    assert all(text[(p, "auto")] == text[(p, "sd")] for p in ("p0",))  # greedy SD: the same answers


def test_the_python_api_decodes_with_what_auto_chose(tmp_path):
    from lrtune import Decoder
    from lrtune.toymodels import get_tiny_pair

    pair = get_tiny_pair()
    prof = tmp_path / "profile.json"
    prof.write_text(json.dumps({"c1": 0.3, "c2": 0.3, "batch_cost": [1.0, 1.1], "sd": {"speedup": 0.9, "alpha2": 0.5}}))
    kw = dict(backend="transformers", device="cpu", max_model_len=512, progress=False, verifier="exact")
    with Decoder.from_pretrained(str(pair.target), str(pair.draft), method="auto", profile=str(prof), **kw) as dec:
        assert dec.auto.method == "target" and "measured by the profile" in dec.auto.reason
        out = dec.generate(["1 + 1 ="], max_new_tokens=8)[0]
    assert out.stats.draft_calls == 0 and dec.decoder.config.method == "target"
    with pytest.raises(Exception, match="profile"):
        Decoder.from_pretrained(str(pair.target), str(pair.draft), method="sd", profile=str(prof), **kw)


def test_decode_refuses_a_profile_without_method_auto(capsys):
    from lrtune.cli import main

    assert main(["decode", "hi", "--profile", "p.json", "--target", "t", "--draft", "d"]) == 2
    assert "--profile: used by --method auto only" in capsys.readouterr().err


def test_lrtune_decode_method_auto_runs_what_it_chose_and_records_why(capsys):
    """``lrtune decode --method auto`` (flag or config file) on the tiny pair: the embedding
    verifier states no accuracy bound, so auto keeps to lossless decoding and says so."""
    pytest.importorskip("vllm")
    from lrtune.cli import main
    from tests.tiny_models import get_tiny_pair, sample_questions

    pair = get_tiny_pair()
    args = ["decode", sample_questions(1)[0], "--target", str(pair.target), "--draft", str(pair.draft)]
    args += ["--dtype", "float32", "--max-model-len", "512", "--kv-cache-gib", "0.25", "--max-new-tokens", "16"]
    assert main([*args, "--method", "auto", "--json"]) == 0
    record = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert record["auto"]["method"] in ("target", "sd") and record["method"] == record["auto"]["method"]
    assert "no accuracy bound" in record["auto"]["reason"] and record["text"]
