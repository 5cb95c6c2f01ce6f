"""Spec strings (verifier, teacher, method) are parsed once, by one parser each, and every
consumer reads the parsed value; each parsed spec prints back to a text that parses to itself."""

from __future__ import annotations

import pytest

from lrtune.errors import ConfigError
from lrtune.modelconfig import ModelConfig
from lrtune.verifiers import VerifierSpec


def _count_parses(monkeypatch) -> list[str]:
    calls: list[str] = []
    real = VerifierSpec.parse.__func__

    def spy(cls, spec):
        calls.append(spec)
        return real(cls, spec)

    monkeypatch.setattr(VerifierSpec, "parse", classmethod(spy))
    return calls


def test_building_a_decoder_parses_the_verifier_spec_once(monkeypatch):
    from lrtune.build import build_verifier, check_configs, judge_path, verifier_of
    from lrtune.decodeconfig import DecodeConfig

    calls = _count_parses(monkeypatch)
    monkeypatch.setattr("lrtune.models.resolve_model", lambda name, role, **kw: f"/models/{name}")
    monkeypatch.setattr("lrtune.models.check_tokenizers_compatible", lambda *a: None)
    monkeypatch.setattr("lrtune.models.needs_heterogeneous_vocab", lambda *a: False)
    models = ModelConfig(verifier="llm_judge@0.85", judge_model="X", backend="transformers")
    spec = verifier_of(models)
    check_configs(models, DecodeConfig(), verifier=spec, progress=False)
    assert judge_path(models, spec, progress=False) == "/models/X"
    assert (
        build_verifier(
            models.verification,
            models.device,
            DecodeConfig(),
            spec,
            target=object(),
            judge_dir=None,
            load_judge=lambda p: None,
        ).threshold
        == 0.85
    )
    assert calls == ["llm_judge@0.85"] and verifier_of(models) is models.verification.parsed


def test_a_config_parses_its_verifier_when_first_read_so_a_checkpoint_may_be_written_by_an_earlier_stage(tmp_path):
    later = ModelConfig(verifier=str(tmp_path / "verifier"))  # no checkpoint there yet: building is fine
    with pytest.raises(ConfigError, match="unknown verifier"):
        later.verification.parsed
    assert ModelConfig(verifier="random(0.3)@0.5").verification.parsed == VerifierSpec("random", arg=0.3, threshold=0.5)


@pytest.mark.parametrize(
    "text",
    [
        "rollout",
        "consensus(rollout,llm_judge)",
        "consensus(rollout, embedding@0.9)",
        "llm_judge(paper)",
        "embedding@0.95",
    ],
)
def test_a_teacher_spec_is_parsed_once_per_config_and_its_verifier_round_trips(text):
    from lrtune.data_gen.config import TeacherOptions
    from lrtune.data_gen.rollout import parse_teacher

    opts = TeacherOptions(spec=text)
    assert opts.parsed is opts.parsed and opts.parsed == parse_teacher(text)
    if opts.parsed.live is not None:
        live = VerifierSpec.parse(opts.parsed.live)
        assert VerifierSpec.parse(str(live)) == live


@pytest.mark.parametrize(
    "label",
    [
        "target",
        "sd",
        "lr+sd",
        "lr+sd/async",
        "lr+sd/w=2",
        "lr+sd/v=llm_judge@0.85",
        "score+sd/v=target_logprob(min)@0.4",
        "adaptive/lr+score",
        "oracle",
        "best-fixed",
    ],
)
def test_every_method_label_prints_back_to_a_label_that_parses_to_the_same_spec(label):
    from lrtune.eval.methods import parse_method

    spec = parse_method(label, 3, 4)
    again = parse_method(str(spec), 3, 4)
    assert (again.kind, again.gamma1, again.gamma2, again.schedule, again.verifier, again.control) == (
        spec.kind,
        spec.gamma1,
        spec.gamma2,
        spec.schedule,
        spec.verifier,
        spec.control,
    )
