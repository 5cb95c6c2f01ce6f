"""Is a directory a Hugging Face model that can load? Checked from its files and the
safetensors headers alone (a few KB), never the weights. A leaf module: the model resolver
(:mod:`lrtune.models`) and the default pair's builder (:mod:`lrtune.default_pair`) both use it.
"""

from __future__ import annotations

import json
from pathlib import Path

from lrtune.errors import ConfigError, ModelError, os_error_message

_TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt", "spiece.model")
_WEIGHT_GLOBS = ("*.safetensors", "pytorch_model*.bin", "*.safetensors.index.json")


def validate_model_dir(path: str | Path) -> Path:
    """Check that ``path`` looks like a Hugging Face model directory that can load.

    Requires ``config.json`` (a readable JSON object), tokenizer files and weights whose
    safetensors headers read; raises :class:`ModelError` naming what is missing or broken.
    Returns the resolved path. Reads headers only (a few KB), never the weights.
    """
    p = Path(path).expanduser()
    try:
        if not p.is_dir():
            raise ModelError(f"model path not found: {path}")
        missing = []
        if not (p / "config.json").is_file():
            missing.append("config.json")
        if not any((p / f).is_file() for f in _TOKENIZER_FILES):
            missing.append("tokenizer files (tokenizer.json, tokenizer.model or vocab.json)")
        if not any(any(p.glob(g)) for g in _WEIGHT_GLOBS):
            missing.append("weights (*.safetensors or pytorch_model*.bin)")
        if missing:
            hint = ""
            if any(p.glob("*.gguf")):
                hint = "; GGUF files are not loaded directly, convert them to a Hugging Face directory first"
            raise ModelError(f"not a Hugging Face model directory: {p} is missing {', '.join(missing)}{hint}")
        from lrtune.filekinds import model_side_config

        try:
            model_side_config(p)  # the keys lrtune reads itself, typed (lrtune.filekinds.ModelSideConfig)
        except ConfigError as e:
            raise ModelError(str(e)) from None
        generation_eos_ids(p)  # a side file the backends read for the stop tokens
        for f in sorted(p.glob("*.safetensors")):
            why = safetensors_header_problem(f)
            if why:
                raise ModelError(f"model weights {f} cannot load: {why}")
    except OSError as e:
        raise ModelError(f"model path {path}: {os_error_message(e)}") from None
    return p.resolve()


def generation_eos_ids(model_dir: str | Path) -> frozenset[int]:
    """The end-of-sequence ids a model's ``generation_config.json`` names (``eos_token_id``: an
    id or a list of ids; none without the file or the key); :class:`ModelError` naming the file
    when it is not a JSON object or the ids are not non-negative integers."""
    f = Path(model_dir) / "generation_config.json"
    if not f.is_file():
        return frozenset()
    from lrtune.inputs import read_json_object

    try:
        ids = read_json_object(f, "generation config").get("eos_token_id")
    except ConfigError as e:
        raise ModelError(str(e)) from None
    ids = [] if ids is None else ids if isinstance(ids, list) else [ids]
    if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids):
        raise ModelError(f"{f}: eos_token_id must be a token id or a list of token ids, got {ids!r:.60}")
    return frozenset(ids)


def safetensors_tensors(path: Path) -> dict[str, dict]:
    """A safetensors file's tensors (``{name: {"dtype", "shape", "data_offsets"}}``), read from its
    header alone; {} for a file whose header is unsound (:func:`safetensors_header_problem`)."""
    if safetensors_header_problem(path) is not None:
        return {}
    with open(path, "rb") as f:
        header = json.loads(f.read(int.from_bytes(f.read(8), "little")).decode("utf-8"))
    return {
        name: t
        for name, t in header.items()
        if name != "__metadata__" and isinstance(t, dict) and isinstance(t.get("dtype"), str)
    }


def safetensors_dtype_bytes(path: Path) -> dict[str, int]:
    """Bytes of a safetensors file's tensors per dtype (``{"BF16": n, "I8": m, ...}``), read from
    its header alone; {} for a file whose header is unsound (:func:`safetensors_header_problem`)."""
    out: dict[str, int] = {}
    for t in safetensors_tensors(path).values():
        start, end = t.get("data_offsets", [0, 0])
        out[t["dtype"]] = out.get(t["dtype"], 0) + end - start
    return out


def safetensors_header_problem(path: Path) -> str | None:
    """Why a safetensors file cannot be loaded, read from its header alone (8-byte length,
    then that many bytes of JSON); None when the header is sound and the data fits the file."""
    size = path.stat().st_size
    if size < 8:
        return f"{size} bytes, shorter than a safetensors header"
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        if n < 2 or n > min(size - 8, 100 * 2**20):
            return f"header length {n} does not fit the file ({size} bytes)"
        try:
            header = json.loads(f.read(n).decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            return "its header is not JSON"
    if not isinstance(header, dict):
        return "its header is not a JSON object"
    ends = [t.get("data_offsets", [0, 0])[1] for k, t in header.items() if k != "__metadata__" and isinstance(t, dict)]
    if any(not isinstance(e, int) for e in ends) or (ends and 8 + n + max(ends) > size):
        return f"its tensors need more bytes than the file holds ({size} bytes: truncated?)"
    return None


# ---- what a quantized copy holds (lrtune.quantize builds it; the memory plans count it first) -----
LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def untied_head(model_dir: str | Path) -> bool:
    """Whether the checkpoint stores its own ``lm_head.weight`` (not tied to the embeddings),
    read from its config and its safetensors headers."""
    from lrtune.filekinds import model_side_config

    src = Path(model_dir)
    try:
        if model_side_config(src).tie_word_embeddings:
            return False
    except ConfigError:
        return False
    return any("lm_head.weight" in safetensors_tensors(wf) for wf in src.glob("*.safetensors"))


def quantized_tensor(name: str, ndim: int, lm_head: bool) -> bool:
    """Whether a copy stores tensor ``name`` as int8 rows with a scale per row: the 2-D weight of
    a linear layer (:data:`LINEARS`), and the output head's where ``lm_head``."""
    parts = name.split(".")
    linear = len(parts) >= 2 and parts[-2] in LINEARS
    return name.endswith(".weight") and ndim == 2 and ((lm_head and name == "lm_head.weight") or linear)


def copy_dtype_bytes(model_dir: str | Path, lm_head: bool | None = None) -> dict[str, int]:
    """Bytes per dtype of a copy of ``model_dir`` (either scheme), from the source's safetensors
    headers alone, so a memory plan can count a copy before it is built: each quantized matrix
    (:func:`quantized_tensor`) as rows × cols bytes of ``I8`` plus 4 bytes of ``F32`` scale per
    row, every other tensor as saved. What :func:`ensure_copy` writes, less file headers."""
    if lm_head is None:
        lm_head = untied_head(model_dir)
    out: dict[str, int] = {}
    for f in sorted(Path(model_dir).glob("*.safetensors")):
        for name, t in safetensors_tensors(f).items():
            shape = t.get("shape") or []
            if quantized_tensor(name, len(shape), lm_head):
                out["I8"] = out.get("I8", 0) + shape[0] * shape[1]
                out["F32"] = out.get("F32", 0) + 4 * shape[0]
            else:
                start, end = t.get("data_offsets", [0, 0])
                out[t["dtype"]] = out.get(t["dtype"], 0) + end - start
    return out
