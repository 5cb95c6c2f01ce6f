"""The declared shape of every JSON file lrtune reads back from disk, and one reader for them.

lrtune reads two sorts of JSON files it did not just compute: its own (checkpoint and
controller metadata, the int8 copy's marker and speed measurements, the default pair's
marker, an output directory's owner file) and a model's side files (``config.json``). Each
kind is a pydantic model here; :func:`read` parses the file through :mod:`lrtune.inputs`
(bounded size and nesting, UTF-8 whatever the locale), validates it strictly (``"3"`` is no
number, ``true`` no integer, NaN and infinity are refused) and returns the file's own
object, so extra keys (newer lrtune, notes) pass through untouched. A file that does not
fit raises one :class:`ConfigError` line naming the file and the field, never the
file's contents.

Cache files lrtune can rebuild (the int8 marker, the measurements, the default pair's
marker) are read with :func:`read_or_none`: one that does not fit is ignored and rebuilt.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from annotated_types import Ge, Gt, Interval, Len
from pydantic import BaseModel, ConfigDict, StringConstraints, ValidationError, model_validator

from lrtune.errors import ConfigError

Sha256Hex = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]

Probability = Annotated[float, Interval(ge=0, le=1)]
NonNegativeInt = Annotated[int, Ge(0)]
PositiveNumber = Annotated[float, Gt(0)]
NonNegativeNumber = Annotated[float, Ge(0)]


def exactly(n: int):
    """An integer field that must equal ``n`` (``Literal[1]`` would let ``true`` and ``1.0`` through)."""
    return Annotated[int, Interval(ge=n, le=n)]


class FileKind(BaseModel):
    """A JSON object lrtune reads back: typed strictly, extra keys allowed."""

    model_config = ConfigDict(extra="allow", strict=True, allow_inf_nan=False, frozen=True)


# ---- verifier checkpoints (lrtune_verifier.json) ---------------------------------------------
class VerifierTestMetrics(FileKind):
    n: NonNegativeInt | None = None
    acceptance: Probability | None = None
    acceptance_ci95: Annotated[list[Probability], Len(2, 2)] | None = None  # JSON has no tuples


class VerifierMetrics(FileKind):
    test: VerifierTestMetrics | None = None


class VerifierCalibration(FileKind):
    """How a checkpoint's threshold was set (``calibration``, ``calibration_history``): the
    fields a promise is read from. ``certified`` is JSON ``true`` or ``false`` (a recorded
    ``"no"`` is refused, never read as true)."""

    threshold: Probability | None = None
    certified: bool | None = None
    max_false_accept: Probability | None = None
    confidence: Probability | None = None


class VerifierAccuracyBudget(FileKind):
    """``accuracy_budget`` of a checkpoint (``lrtune calibrate --max-accuracy-loss``)."""

    threshold: Probability | None = None
    certified: bool | None = None
    max_accuracy_loss: Probability | None = None
    confidence: Probability | None = None
    problems: NonNegativeInt | None = None


class VerifierMeta(FileKind):
    """``lrtune_verifier.json``: what a distilled verifier is and how it reads a pair."""

    format: Literal["lrtune-verifier"]
    version: exactly(1)
    kind: Literal["cross-encoder", "lm-judge", "features", "forest", "router"]
    threshold: Probability
    context_chars: NonNegativeInt = 400
    max_length: NonNegativeInt | None = None
    context_form: Literal["tail", "head+tail"] = "tail"
    base_model: str | None = None
    encoder: str = "all-MiniLM-L6-v2"
    features: list[str] | None = None
    metrics: VerifierMetrics | None = None
    data: dict[str, Any] | None = None  # the training data: dirs, fingerprint, splits
    calibration: VerifierCalibration | None = None  # how the threshold was set (train/calibrate.py)
    calibration_history: list[VerifierCalibration | None] | None = None  # earlier calibrations (lrtune calibrate)
    accuracy_budget: VerifierAccuracyBudget | None = None  # lrtune calibrate --max-accuracy-loss
    # sha256 of every file the checkpoint loads (distilled.check_files); a name, never a path
    files: dict[Annotated[str, StringConstraints(pattern=r"^[^/\\]+$")], Sha256Hex] | None = None

    @model_validator(mode="after")
    def _features_once_each(self):
        if self.features is not None and len(set(self.features)) != len(self.features):
            raise ValueError("features names a feature twice")
        return self

    @model_validator(mode="after")
    def _base_model_where_needed(self):
        if self.kind in ("cross-encoder", "lm-judge") and not self.base_model:
            raise ValueError(f"base_model is required for kind {self.kind!r} (the model its adapter extends)")
        return self


# ---- learned controllers (lrtune_controller.json) ----------------------------------------------
Depth = Annotated[int, Interval(ge=0, le=16)]  # lrtune.control.GAMMA_BOUND


class ControllerBounds(FileKind):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, frozen=True)
    gamma1_min: Depth
    gamma1_max: Depth
    gamma2_min: Depth
    gamma2_max: Depth
    M: Annotated[float, Interval(gt=0, le=256)]


class ControllerProfile(FileKind):
    c1: PositiveNumber
    c2: PositiveNumber
    batch_cost: list[NonNegativeNumber] | None = None
    step_tokens: list[NonNegativeNumber] | None = None

    @model_validator(mode="after")
    def _curve_not_empty(self):
        if self.batch_cost is not None and not self.batch_cost:
            raise ValueError("batch_cost must list b(1), b(2), ... (it is empty)")
        return self


class ControllerFeatures(FileKind):
    tasks: list[str]
    encoder: str | None


class ControllerMetrics(FileKind):
    best_fixed: Annotated[list[Depth], Len(2, 2)] | None = None  # [gamma1, gamma2]


Numbers = list[float]


class ControllerModel(FileKind):
    """The ridge model that predicts (α1, α2) from a problem's features."""

    alpha: NonNegativeNumber
    coef: list[Numbers]
    intercept: Annotated[Numbers, Len(2, 2)]
    x_mean: Numbers
    x_scale: list[PositiveNumber]
    n_features_in: Annotated[int, Interval(ge=1, le=100_000)]


class ControllerMeta(FileKind):
    """``lrtune_controller.json``: a learned controller's model, bounds and the costs it was trained with."""

    format: Literal["lrtune-controller"]
    version: exactly(1)
    policy: Literal["learned"]
    bounds: ControllerBounds
    profile: ControllerProfile
    features: ControllerFeatures
    model: ControllerModel
    prior_strength: PositiveNumber
    metrics: ControllerMetrics = ControllerMetrics()

    @model_validator(mode="after")
    def _best_fixed_within_bounds(self):
        bf, b = self.metrics.best_fixed, self.bounds
        if bf and not (b.gamma1_min <= bf[0] <= b.gamma1_max and b.gamma2_min <= bf[1] <= b.gamma2_max):
            raise ValueError("metrics.best_fixed lies outside the bounds")
        return self


# ---- caches lrtune rebuilds when they do not fit -----------------------------------------------
class Int8Marker(FileKind):
    """``lrtune_w8a8.json`` of an int8 copy: the digest of every weight file it holds."""

    format: exactly(2)
    sha256: dict[str, str]

    @model_validator(mode="after")
    def _lists_weights(self):
        if not self.sha256:
            raise ValueError("sha256 lists no weight file")
        return self


class Int8Measurement(FileKind):
    """One entry of the int8 speed measurements: whether the int8 draft ran faster here."""

    plain_tok_s: PositiveNumber
    int8_tok_s: PositiveNumber
    int8_faster: bool


class DefaultPairMarker(FileKind):
    """The marker of a converted default model: the GGUF it came from."""

    format: exactly(1)
    gguf_sha256: str


# ---- an output directory's owner, a model's config.json ----------------------------------------
class OwnerFile(FileKind):
    command: str


class ModelSideConfig(FileKind):
    """The keys of a model's ``config.json`` that lrtune itself reads (transformers and vLLM read the rest)."""

    tie_word_embeddings: bool | None = None
    torch_dtype: str | None = None
    dtype: str | None = None
    quantization_config: dict[str, Any] | None = None
    vocab_size: Annotated[int, Interval(ge=1)] | None = None
    max_position_embeddings: Annotated[int, Interval(ge=1)] | None = None
    rope_scaling: dict[str, Any] | None = None
    num_hidden_layers: Annotated[int, Interval(ge=1)] | None = None
    num_attention_heads: Annotated[int, Interval(ge=1)] | None = None
    num_key_value_heads: Annotated[int, Interval(ge=1)] | None = None
    head_dim: Annotated[int, Interval(ge=1)] | None = None
    hidden_size: Annotated[int, Interval(ge=1)] | None = None

    @property
    def saved_dtype(self) -> str | None:
        return self.torch_dtype or self.dtype

    @property
    def kv_shape(self) -> tuple[int, int, int] | None:
        """(layers, KV heads, head dim) of the attention cache; None where config.json does not say."""
        if not (self.num_hidden_layers and self.num_attention_heads):
            return None
        head_dim = self.head_dim or (self.hidden_size // self.num_attention_heads if self.hidden_size else None)
        if not head_dim:
            return None
        return self.num_hidden_layers, self.num_key_value_heads or self.num_attention_heads, head_dim


class TokenizerSideConfig(FileKind):
    """The keys of a model's ``tokenizer_config.json`` that lrtune's prompts pass through."""

    model_max_length: Annotated[float, Gt(0)] | None = None  # often 1e30: "no limit"
    chat_template: str | list[dict[str, Any]] | None = None


class WeightIndex(FileKind):
    """``model.safetensors.index.json``: which weight file holds each tensor."""

    weight_map: dict[str, str]


# ---- a dataset's own files ---------------------------------------------------------------
PartFile = Annotated[str, StringConstraints(pattern=r"^(pairs|problems)/part-s\d{3}-p\d{6}\.parquet$")]


class ManifestPart(FileKind):
    file: PartFile  # a part of this dataset, nothing else (no ``..``, no other folder)
    sha256: Sha256Hex


class ManifestEntry(FileKind):
    index: NonNegativeInt
    pairs: ManifestPart
    problems: ManifestPart

    @model_validator(mode="after")
    def _each_part_in_its_folder(self):
        if not self.pairs.file.startswith("pairs/") or not self.problems.file.startswith("problems/"):
            raise ValueError("a part file lies in the other kind's folder")
        return self


class Manifest(FileKind):
    """``manifest-sNNN.json`` of a collect shard: its finished problems and their part files."""

    finished: dict[str, ManifestEntry]


class CollectConfigFile(FileKind):
    """``collect_config.json``: the sections a dataset was collected with."""

    options: dict[str, Any] = {}
    models: dict[str, Any] = {}
    decode: dict[str, Any] = {}


# ---- lines of the JSONL files lrtune appends (lrtune.runfiles.load_jsonl) ---------------------
class JudgedPair(FileKind):
    """A judged step pair of an evaluate record (``--record-pairs``): its verdict and whether it was asked."""

    accepted: bool
    asked: bool = True
    chosen: bool | None = None


class EvalRecord(FileKind):
    """A line of evaluate's ``records.jsonl``: one decode of one problem by one method."""

    problem: str
    method: str
    wall_s: NonNegativeNumber
    correct: bool
    stats: dict[str, Any]
    pairs: list[JudgedPair] | None = None


class EvalSummary(FileKind):
    """evaluate's ``summary.json``, the keys a resumed run carries over: seconds by phase, b(n)."""

    timing: dict[str, NonNegativeNumber] | None = None
    batch_cost: dict[Annotated[str, StringConstraints(pattern=r"^[1-9][0-9]{0,3}$")], PositiveNumber] | None = None
    batch_cost_sd: dict[str, Any] | None = None


class CalibrateProgressLine(FileKind):
    """A line of ``accuracy_budget.progress.jsonl``: one decode ``lrtune calibrate
    --max-accuracy-loss`` made (threshold None: target-only; ``"never"``: the lossless twin)."""

    key: str
    problem: str
    threshold: Probability | Literal["never"] | None
    correct: bool
    drafted: NonNegativeInt
    accepted: NonNegativeInt


class VoteRecord(FileKind):
    """A line of ``labels vote``'s ``votes.jsonl``: the vote on one step pair."""

    key: str
    greedy_label: bool
    vote_label: bool | None
    vote_score: Probability | None
    seconds: NonNegativeNumber


class VoteLogHead(FileKind):
    """The first line of ``votes.jsonl``: the settings its votes were cast with."""

    config: dict[str, Any]


def problem(error: ValidationError) -> str:
    """The first violation as ``field.sub: what is wrong`` (pydantic's message, never the value)."""
    e = error.errors(include_url=False, include_input=False)[0]
    names = _field_names()
    # a dict key comes from the file: shown as * (an error never echoes the file's contents)
    where = ".".join(p if p in names else "*" if isinstance(p, str) else str(p) for p in e["loc"]) or "the file"
    msg = e["msg"].removeprefix("Value error, ")
    return f"{where}: {msg}" if e["type"] != "missing" else f"{where} is missing"


def _field_names() -> set[str]:
    """Every field name a file kind declares (the only names an error shows)."""
    out = {"[key]"}
    for kind in FileKind.__subclasses__():
        out |= set(kind.model_fields)
        for sub in kind.__subclasses__():
            out |= set(sub.model_fields)
    return out


def check(data: Any, kind: type[FileKind], where: str) -> FileKind:
    """``data`` as a ``kind``; ConfigError ``<where>: <field>: <problem>`` when it does not fit."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where} must hold a JSON object, not {type(data).__name__}")
    try:
        return kind.model_validate(data)
    except ValidationError as e:
        raise ConfigError(f"{where}: {problem(e)}") from None


def read(path: str | Path, kind: type[FileKind], what: str | None = None) -> dict:
    """The JSON object in ``path``, checked against ``kind``; ConfigError (one line naming the
    file and the field) when it is unreadable, too large, too deep, not UTF-8 or does not fit."""
    from lrtune.inputs import read_json

    what = what or _describe(kind)
    data = read_json(path, what)
    check(data, kind, f"{what} {path}")
    return data


def read_or_none(path: str | Path, kind: type[FileKind]) -> dict | None:
    """The JSON object in ``path`` when it exists and fits ``kind``, else None (a cache to rebuild)."""
    try:
        return read(path, kind) if Path(path).is_file() else None
    except (ConfigError, OSError):
        return None


def read_json_object_or_none(path: str | Path) -> dict | None:
    """The JSON object in ``path`` (bounded, UTF-8), or None when it is missing, unreadable or not an object."""
    from lrtune.inputs import read_json

    try:
        data = read_json(path, "file") if Path(path).is_file() else None
    except (ConfigError, OSError):
        return None
    return data if isinstance(data, dict) else None


def model_side_config(model_dir: str | Path) -> ModelSideConfig:
    """The keys lrtune reads from ``<model_dir>/config.json`` (defaults when there is none);
    ``tokenizer_config.json``, where there is one, is checked as well."""
    f = Path(model_dir) / "config.json"
    if not f.is_file():
        return ModelSideConfig()
    from lrtune.inputs import read_json

    side = check(read_json(f, "model config"), ModelSideConfig, f"model config {f}")
    tok = Path(model_dir) / "tokenizer_config.json"
    if tok.is_file():
        check(read_json(tok, "tokenizer config"), TokenizerSideConfig, f"tokenizer config {tok}")
    return side


def _describe(kind: type[FileKind]) -> str:
    return (kind.__doc__ or kind.__name__).split(":")[0].strip("` ")


__all__ = [
    "CalibrateProgressLine",
    "CollectConfigFile",
    "ControllerMeta",
    "DefaultPairMarker",
    "EvalRecord",
    "EvalSummary",
    "VoteLogHead",
    "VoteRecord",
    "FileKind",
    "Int8Marker",
    "Int8Measurement",
    "JudgedPair",
    "Manifest",
    "ModelSideConfig",
    "OwnerFile",
    "TokenizerSideConfig",
    "VerifierAccuracyBudget",
    "VerifierCalibration",
    "VerifierMeta",
    "WeightIndex",
    "check",
    "model_side_config",
    "problem",
    "read",
    "read_json_object_or_none",
    "read_or_none",
]
