"""Verifiers: decide whether a draft step can stand in for the target's step.

``make_verifier(spec)`` builds one from a short spec string:

=====================  ===============================================================
``exact``              normalised text equality
``never`` / ``always`` reject / accept everything (baselines, invariant tests)
``random`` ``random(p)``  accept with probability p (seeded; ``random:p`` also works)
``embedding``          sentence-encoder cosine >= threshold (default 0.95)
``llm_judge``          a model judges draft vs target step aligned/unaligned (default 0.92 for the
                       context form, calibrated against outcome labels; 0.5 for the paper form);
                       ``llm_judge(context)`` (default form) or ``llm_judge(paper)``
``target_score``       the target rates the draft step 0-9; score/9 (default 7/9)
``target_logprob``     exp(mean log p_target) of the draft step's tokens, from the target
                       rows LR runs anyway (no model call; default 0.5); ``target_logprob(min)``
                       exp(min log p_target), the least likely token (default 0.05)
a directory            a distilled checkpoint from ``lrtune train verifier`` (``load``)
=====================  ===============================================================

Any spec may end in ``@T`` to set its threshold (``llm_judge@0.85``, ``embedding@0.9``,
``path/to/ckpt@0.4``); an explicit ``threshold`` argument wins.

``llm_judge`` and ``target_score`` need a ``backend`` (the model that judges).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from lrtune.errors import ConfigError
from lrtune.verifiers.base import StepPair, Verifier, accept
from lrtune.verifiers.simple import ConstantVerifier, ExactVerifier, RandomVerifier, TargetLogprobVerifier

__all__ = [
    "StepPair",
    "Verifier",
    "VerifierSpec",
    "accept",
    "load",
    "make_verifier",
    "VERIFIER_KINDS",
    "MODEL_VERIFIERS",
]

VERIFIER_KINDS = ("exact", "never", "always", "random", "embedding", "llm_judge", "target_score", "target_logprob")
MODEL_VERIFIERS = ("llm_judge", "target_score")
ONE_SIDED_KINDS = ("never", "always", "random", "target_logprob")  # judge a draft step alone (score rounds)
_SPEC = re.compile(r"^(?P<kind>[a-z_]+)(?:[(:](?P<arg>[^)]*)\)?)?$")


def load(path, *, device: str = "cpu", threshold: float | None = None) -> Verifier:
    """Load a distilled verifier checkpoint (see :mod:`lrtune.verifiers.distilled`)."""
    from lrtune.verifiers.distilled import load as load_checkpoint

    return load_checkpoint(path, device=device, threshold=threshold)


@dataclass(frozen=True)
class VerifierSpec:
    """A verifier spec parsed once: a built-in ``kind`` with its argument (``random``'s
    probability, ``llm_judge``'s form) or a distilled checkpoint ``path``, and an optional
    ``threshold`` (``@T``). ``str(spec)`` parses back to the same spec. A checkpoint is a
    directory that holds one, so a path is never read as options."""

    kind: str  # one of VERIFIER_KINDS, or "checkpoint"
    arg: float | str | None = None
    path: str | None = None
    threshold: float | None = None

    @classmethod
    def parse(cls, spec: str) -> VerifierSpec:
        """The spec of ``spec``; ConfigError (one line) when it names no verifier."""
        from lrtune.verifiers.distilled import is_checkpoint

        base, thr = split_threshold(spec)
        if is_checkpoint(base):
            return cls("checkpoint", path=base, threshold=thr)
        kind, arg = parse_spec(base)
        return cls(kind, arg=arg, threshold=thr)

    @classmethod
    def of(cls, spec: str | VerifierSpec) -> VerifierSpec:
        """``spec`` itself when it is parsed already, else :meth:`parse` of it."""
        return spec if isinstance(spec, VerifierSpec) else cls.parse(spec)

    @property
    def one_sided(self) -> bool | None:
        """Whether this verifier judges a draft step alone (what a score round needs), known
        before it is built: the constant and random kinds and ``target_logprob`` do; the other
        kinds compare two steps; a checkpoint does when every feature it reads is one-sided
        (None when its metadata cannot tell)."""
        if self.kind != "checkpoint":
            return self.kind in ONE_SIDED_KINDS
        from lrtune.verifiers.distilled import read_meta
        from lrtune.verifiers.features import ONE_SIDED_FEATURES

        meta = read_meta(self.path)
        if meta.get("kind") not in ("features", "forest", "router"):
            return False  # a cross-encoder or an LM judge reads both steps
        names = meta.get("features")
        if names is None:
            return False  # written before likelihood features: text and embedding features of both steps
        if not isinstance(names, (list, tuple)):
            return None
        return set(names) <= set(ONE_SIDED_FEATURES)

    def __str__(self) -> str:
        head = (
            self.path
            if self.kind == "checkpoint"
            else (
                f"{self.kind}({self.arg:g})"
                if isinstance(self.arg, float)
                else f"{self.kind}({self.arg})"
                if self.arg is not None
                else self.kind
            )
        )
        return head if self.threshold is None else f"{head}@{self.threshold:g}"


def split_threshold(spec: str) -> tuple[str, float | None]:
    """``"llm_judge@0.85"`` -> ``("llm_judge", 0.85)``; no ``@``: ``(spec, None)``."""
    base, sep, t = spec.strip().rpartition("@")
    if not sep:
        return spec.strip(), None
    try:
        thr = float(t)
    except ValueError:
        raise ConfigError(f"bad verifier threshold {t!r} in {spec!r} (expected KIND@NUMBER)") from None
    if not 0.0 <= thr <= 1.0:
        raise ConfigError(f"verifier threshold must be in [0, 1], got {thr} in {spec!r}")
    return base, thr


def check_verifier_spec(spec: str | VerifierSpec) -> VerifierSpec:
    """The parsed spec; ConfigError when ``spec`` names no verifier (nothing is built; a
    checkpoint's metadata is read and checked, and a feature, forest or router student's
    weights, a few KB, are loaded and checked too)."""
    from lrtune.verifiers.distilled import read_meta

    parsed = VerifierSpec.of(spec)
    if parsed.kind == "checkpoint":
        meta = read_meta(parsed.path)
        if meta["kind"] in ("features", "forest", "router"):  # small weights: checked whole now, not after the models
            from lrtune.verifiers.distilled import load

            load(parsed.path)
    return parsed


def parse_spec(spec: str) -> tuple[str, float | str | None]:
    """``(kind, argument)`` of a built-in verifier spec without its ``@threshold``: the
    probability of ``random(p)`` (0.5 by default), the form of ``llm_judge(form)`` (None:
    the default), None for the rest; ConfigError for an unknown kind or a bad argument."""
    m = _SPEC.match(spec.strip().lower())
    if m is None or m["kind"] not in VERIFIER_KINDS:
        raise ConfigError(
            f"unknown verifier {spec!r}; choose from {', '.join(VERIFIER_KINDS)} or a checkpoint directory"
        )
    kind, arg = m["kind"], (m["arg"] or "").strip()
    if kind == "random":
        try:
            p = 0.5 if not arg else float(arg)
        except ValueError:
            raise ConfigError(f"random verifier needs a probability, got {arg!r}") from None
        if not 0.0 <= p <= 1.0:
            raise ConfigError(f"random verifier needs a probability in [0, 1], got {p}")
        return kind, p
    if kind == "llm_judge" and arg:
        from lrtune.verifiers.judge import JUDGE_FORMS

        if arg not in JUDGE_FORMS:
            raise ConfigError(f"llm_judge form must be one of {', '.join(JUDGE_FORMS)}, got {arg!r}")
        return kind, arg
    if kind == "target_logprob" and arg:
        from lrtune.verifiers.simple import TARGET_LOGPROB_FORMS

        if arg not in TARGET_LOGPROB_FORMS:
            raise ConfigError(f"target_logprob form must be one of {', '.join(TARGET_LOGPROB_FORMS)}, got {arg!r}")
        return kind, arg
    if arg:
        raise ConfigError(f"verifier {kind!r} takes no argument (got {arg!r})")
    return kind, None


def make_verifier(
    spec: str | VerifierSpec | Verifier,
    *,
    threshold: float | None = None,
    seed: int = 0,
    model: str | None = None,
    backend=None,
    device: str = "cpu",
) -> Verifier:
    """Build a verifier from ``spec`` (a spec text, or one parsed already; see module
    docstring); a Verifier passes through."""
    if not isinstance(spec, (str, VerifierSpec)):
        if not isinstance(spec, Verifier):
            raise ConfigError(f"not a verifier: {spec!r}")
        return spec
    parsed = VerifierSpec.of(spec)
    threshold = threshold if threshold is not None else parsed.threshold
    if threshold is not None and not 0.0 <= threshold <= 1.0:
        raise ConfigError(f"verifier threshold must be in [0, 1], got {threshold}")
    if parsed.kind == "checkpoint":
        return load(parsed.path, device=device, threshold=threshold)
    kind, arg = parsed.kind, parsed.arg
    if kind == "random":
        return RandomVerifier(arg, seed=seed)
    if kind == "exact":
        return ExactVerifier()
    if kind == "target_logprob":
        from lrtune.verifiers.simple import TARGET_LOGPROB_THRESHOLDS

        form = arg or "mean"
        return TargetLogprobVerifier(TARGET_LOGPROB_THRESHOLDS[form] if threshold is None else threshold, form)
    if kind in ("never", "always"):
        return ConstantVerifier(kind == "always")
    if kind in MODEL_VERIFIERS:
        from lrtune.verifiers.judge import LLMJudgeVerifier, TargetScoreVerifier, default_threshold

        if backend is None:
            raise ConfigError(f"verifier {kind!r} needs a model to judge with (a backend)")
        thr = default_threshold(kind, arg) if threshold is None else threshold
        if kind == "llm_judge":
            return LLMJudgeVerifier(backend, thr, form=arg or "context")
        return TargetScoreVerifier(backend, thr)
    from lrtune.verifiers.embedding import DEFAULT_THRESHOLD, EmbeddingVerifier

    return EmbeddingVerifier(model=model, threshold=DEFAULT_THRESHOLD if threshold is None else threshold)
