"""int8 copies of a model (the draft under ``--draft-quantization``, the target under
``--target-quantization``), built once into the model cache: W8A8 (``int8``: int8 weights per
output channel, int8 activations per token (dynamic), in the compressed-tensors format vLLM
loads) and weight-only (``int8-weights``: the same weights with bf16 scales, run by
:mod:`lrtune.backends.vllm_int8w` in bf16).

Every linear layer of the decoder blocks is quantized by round-to-nearest,

    s_o = max_i |W_oi| / 127,    Q_oi = round(W_oi / s_o) in [-127, 127],    W ≈ s · Q,

and stored as ``weight`` (int8) with ``weight_scale`` (float32, one per output row); vLLM
quantizes each activation row to int8 at run time. An untied ``lm_head`` (both default models':
151,936 rows read at every token) is quantized the same way; the embedding table stays in the
checkpoint's dtype (one row is read per token). The copy lives in
``<cache>/models/<name>-w8a8[-head]-<digest>/``; a marker with the sha256 of every weight file
makes a half-built or edited copy count as missing, and no network is touched.

Where int8 pays depends on the CPU: with int8 dot-product units (VNNI, AMX) int8 GEMMs are
fast; without them they are slower than float32 (:mod:`lrtune.machine`). ``auto`` therefore
uses the copy only where a measurement on this machine found it faster
(:func:`record_measurement`: the first ``auto`` run for a model on a machine times both
copies once, ``lrtune doctor --timing`` too for the draft), keyed by the model and the CPU
model, flags and GPUs.

A quantized target is a different model: lossless methods stay lossless relative to the
target that runs (its copy), not to the target as saved; ``benchmarks/target_accuracy.py``
and ``benchmarks/cpu_peers.py`` measure what a copy changes.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

from lrtune.backends.vllm_int8w import NAME as WEIGHTS_METHOD
from lrtune.errors import ConfigError
from lrtune.modeldir import LINEARS, copy_dtype_bytes, quantized_tensor, untied_head  # noqa: F401 (quantize.X)
from lrtune.store import sha256

MARKER = "lrtune_w8a8.json"
MEASURE_FILE = "int8_speed.json"  # one entry per model, scheme, dtype and machine
# the copies --draft-quantization / --target-quantization build: W8A8 (int8 weights and
# activations: vLLM's compressed-tensors kernels, fast with VNNI/AMX) and weight-only int8
# (lrtune.backends.vllm_int8w: bf16 compute, 1 byte per weight read, no int8 units needed)
SCHEMES = {"int8": "w8a8", "int8-weights": "w8"}
FORMAT = 2  # of the copy; older copies are rebuilt


def quantize_rows(weight, bf16_scale: bool = False):
    """(int8 weight, float32 per-row scale of shape (out, 1)) by round-to-nearest (module
    docstring); ``bf16_scale``: each scale rounded to the nearest bfloat16 first (the weight-only
    kernel multiplies in bf16), and Q clamped to ±127, so |s·Q − W| ≤ s/2 + 127·|s − s_exact|."""
    import torch

    w = weight.float()
    scale = w.abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / 127.0
    if bf16_scale:
        scale = scale.to(torch.bfloat16).float()
    q = torch.clamp(torch.round(w / scale), -127, 127).to(torch.int8)
    return q, scale.to(torch.float32)


def check_copyable(model_dir: str | Path, role: str, scheme: str) -> None:
    """Phase 1 of :func:`ensure_copy`, from files and headers alone: ``model_dir`` is not already
    quantized and holds safetensors weights with at least one linear layer to quantize."""
    src = Path(model_dir).resolve()
    already = quantized_source(src)
    if already:
        raise ConfigError(f"--{role}-quantization {scheme}: the {role} {model_dir} is already quantized ({already})")
    if not any(src.glob("*.safetensors")):
        raise ConfigError(f"--{role}-quantization {scheme} needs safetensors weights in {src}")
    if not copy_dtype_bytes(src, lm_head=False).get("I8"):
        raise ConfigError(f"--{role}-quantization {scheme}: {src} has no linear layers named {', '.join(LINEARS)}")


def quantization_config(lm_head: bool = False) -> dict:
    """The ``quantization_config`` of a W8A8 (channel / dynamic token) compressed-tensors model
    (``lm_head``: the output head quantized too)."""
    from compressed_tensors.quantization import QuantizationArgs, QuantizationConfig, QuantizationScheme

    scheme = QuantizationScheme(
        targets=["Linear", "re:(.*\\.)?lm_head$"] if lm_head else ["Linear"],
        weights=QuantizationArgs(num_bits=8, type="int", symmetric=True, strategy="channel"),
        input_activations=QuantizationArgs(num_bits=8, type="int", symmetric=True, strategy="token", dynamic=True),
    )
    cfg = QuantizationConfig(
        config_groups={"group_0": scheme},
        ignore=[] if lm_head else ["re:(.*\\.)?lm_head$"],
        format="int-quantized",
        quantization_status="compressed",
    )
    out = cfg.model_dump(mode="json")
    out["quant_method"] = "compressed-tensors"
    return out


def _digest_of(model_dir: Path) -> str:
    """A short digest of a model directory's config and weight files (names, sizes, mtimes)."""
    h = hashlib.sha256()
    for f in sorted(model_dir.glob("*")):
        if f.is_file() and (f.suffix in (".safetensors", ".json") or f.name.startswith("tokenizer")):
            st = f.stat()
            h.update(f"{f.name}:{st.st_size}:{int(st.st_mtime)}".encode())
    return h.hexdigest()[:12]


def copy_dir(
    model_dir: str | Path, cache_dir: str | Path | None = None, lm_head: bool = False, scheme: str = "int8"
) -> Path:
    """Where the ``scheme`` copy (:data:`SCHEMES`; W8A8 by default) of ``model_dir`` lives (built or not)."""
    from lrtune.default_pair import default_cache_dir

    src = Path(model_dir).resolve()
    root = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    return root / "models" / f"{src.name}-{SCHEMES[scheme]}{'-head' if lm_head else ''}-{_digest_of(src)}"


def _complete(d: Path) -> bool:
    """Whether ``d`` is a finished copy: its marker (:class:`lrtune.filekinds.Int8Marker`) lists
    every weight file of the copy with a matching digest (an empty or partial list proves nothing)."""
    from lrtune.filekinds import Int8Marker, read_or_none

    meta = read_or_none(d / MARKER, Int8Marker)
    weights = {f.name for f in d.glob("*.safetensors")}
    if meta is None or not weights or not set(meta["sha256"]) >= weights:
        return False
    try:
        return all(sha256(d / name) == v for name, v in meta["sha256"].items())
    except OSError:
        return False


def ensure_copy(
    model_dir: str | Path,
    cache_dir: str | Path | None = None,
    progress: bool = True,
    lm_head: bool | None = None,
    role: str = "draft",
    scheme: str = "int8",
) -> Path:
    """The ``scheme`` copy (:data:`SCHEMES`: ``int8`` W8A8, ``int8-weights`` weight-only) of
    ``model_dir`` (a Hugging Face directory), built once (module docstring); ``lm_head``:
    quantize the output head as well (None: when the checkpoint has an untied one); ``role``
    ("draft" | "target") names the option in errors."""
    if lm_head is None:
        lm_head = untied_head(model_dir)
    final = copy_dir(model_dir, cache_dir, lm_head, scheme)
    if _complete(final):
        return final
    if quantized_source(model_dir):
        raise ConfigError(f"{model_dir} is already quantized ({quantized_source(model_dir)})")
    import torch
    from safetensors.torch import load_file, save_file

    src = Path(model_dir).resolve()
    weights = sorted(src.glob("*.safetensors"))
    if not weights:
        raise ConfigError(f"--{role}-quantization {scheme} needs safetensors weights in {src}")
    if progress:
        from lrtune.runfiles import log

        what = "W8A8 (int8)" if scheme == "int8" else "weight-only int8"
        log(f"lrtune: building a {what} copy of {src.name} into {final} (once)")
    from lrtune.runfiles import building_dir

    from lrtune.filekinds import WeightIndex, read
    from lrtune.inputs import read_json_object

    with building_dir(final) as tmp:
        quantized = 0
        for wf in weights:
            tensors = load_file(str(wf))
            out = {}
            for name, t in tensors.items():
                if quantized_tensor(name, t.dim(), lm_head):
                    q, s = quantize_rows(t, bf16_scale=scheme == "int8-weights")
                    out[name], out[name[: -len("weight")] + "weight_scale"] = q, s
                    quantized += 1
                else:
                    out[name] = t.contiguous()
            save_file(out, str(tmp / wf.name), metadata={"format": "pt"})
        if not quantized:
            raise ConfigError(f"--{role}-quantization {scheme}: {src} has no linear layers named {', '.join(LINEARS)}")
        for f in src.iterdir():
            if f.is_file() and f.suffix != ".safetensors" and f.name != MARKER and not f.name.endswith(".index.json"):
                shutil.copy2(f, tmp / f.name)
        index = src / "model.safetensors.index.json"
        if index.is_file():
            meta = read(index, WeightIndex, "weight index")
            for name, file in list(meta.get("weight_map", {}).items()):
                if name.endswith(".weight") and (
                    name.split(".")[-2] in LINEARS or (lm_head and name == "lm_head.weight")
                ):
                    meta["weight_map"][name[: -len("weight")] + "weight_scale"] = file
            (tmp / index.name).write_text(json.dumps(meta, indent=1))
        cfg = read_json_object(src / "config.json", "model config")
        cfg["quantization_config"] = (
            quantization_config(lm_head) if scheme == "int8" else {"quant_method": WEIGHTS_METHOD, "lm_head": lm_head}
        )
        (tmp / "config.json").write_text(json.dumps(cfg, indent=2))
        marker = {
            "format": FORMAT,
            "source": str(src),
            "scheme": "w8a8-int8-channel-dynamic-token" if scheme == "int8" else "w8-int8-channel-bf16-scale",
            "linears": quantized,
            "lm_head": lm_head,
            "torch": torch.__version__,
            "sha256": {f.name: sha256(f) for f in sorted(tmp.iterdir()) if f.suffix == ".safetensors"},
        }
        (tmp / MARKER).write_text(json.dumps(marker, indent=1))
    return final


# ---- auto: int8 only where it measured faster here ------------------------------------------
def _measure_key(model_dir: str | Path, dtype: str, scheme: str = "int8") -> str:
    from lrtune.machine import cpu_flags, cpu_model, gpus

    where = {"cpu": cpu_model(), "flags": cpu_flags(), "gpus": [g["name"] for g in gpus()], "dtype": dtype}
    if scheme != "int8":
        where["scheme"] = scheme
    text = json.dumps(where, sort_keys=True)
    return hashlib.sha256(f"{Path(model_dir).resolve()}|{text}".encode()).hexdigest()[:16]


def measurement_file(cache_dir: str | Path | None = None) -> Path:
    from lrtune.default_pair import default_cache_dir

    root = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    return root / "measurements" / MEASURE_FILE


def record_measurement(
    model_dir: str | Path,
    plain_tok_s: float,
    int8_tok_s: float,
    cache_dir: str | Path | None = None,
    dtype: str = "auto",
    scheme: str = "int8",
) -> dict:
    """Record this machine's speed of ``model_dir`` as saved and as its ``scheme`` copy
    (``int8_tok_s``; the ``auto`` decision)."""
    from lrtune.machine import cpu_flags, cpu_model
    from lrtune.runfiles import write_atomic

    path = measurement_file(cache_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    from lrtune.filekinds import read_json_object_or_none

    data = read_json_object_or_none(path) if path.is_file() else {}
    if data is None:  # lrtune's own cache file, unreadable or not an object: start it again
        from lrtune.runfiles import log

        log(f"warning: {path} was not a measurement record (a JSON object); it is written anew")
        data = {}
    entry = {
        "model": str(Path(model_dir).resolve()),
        "scheme": scheme,
        "dtype": dtype,
        "cpu": cpu_model(),
        "cpu_flags": cpu_flags(),
        "plain_tok_s": plain_tok_s,
        "int8_tok_s": int8_tok_s,
        "int8_faster": int8_tok_s > plain_tok_s,
    }
    data[_measure_key(model_dir, dtype, scheme)] = entry
    write_atomic(path, json.dumps(data, indent=1))
    return entry


def measurement(model_dir: str | Path, cache_dir: str | Path | None = None, dtype: str = "auto", scheme: str = "int8"):
    """This machine's recorded speeds of ``model_dir`` and its ``scheme`` copy
    (:class:`lrtune.filekinds.Int8Measurement`), or None when never measured."""
    from lrtune.filekinds import Int8Measurement, read_json_object_or_none

    data = read_json_object_or_none(measurement_file(cache_dir)) or {}
    entry = data.get(_measure_key(model_dir, dtype, scheme))
    try:  # an entry that is not a measurement ("no", 0, a list) is no answer: measure again
        return Int8Measurement.model_validate(entry)
    except ValueError:
        return None


def measured_faster(
    model_dir: str | Path, cache_dir: str | Path | None = None, dtype: str = "auto", scheme: str = "int8"
) -> bool | None:
    """Whether the ``scheme`` copy measured faster for ``model_dir`` on this machine; None when never measured."""
    m = measurement(model_dir, cache_dir, dtype, scheme)
    return None if m is None else m.int8_faster


def time_copies(
    plain_dir: str,
    int8_dir: str,
    dtype: str = "auto",
    tokens: int = 64,
    repeats: int = 3,
    gpu_share: float | None = None,
) -> dict:
    """Tokens/s of greedy batch-1 decoding with a model as saved and with one of its copies, on
    vLLM, timed alternately (A B A B ...; the best of ``repeats`` each). Starts two engines
    that vLLM cannot free in-process: :func:`measure_in_subprocess` runs it in a child. On a
    GPU each engine takes ``gpu_share`` of it (:func:`timing_share`)."""
    from lrtune.backends.vllm import VLLMBackend, VLLMConfig, on_cpu_platform
    from lrtune.profiling import time_alternately

    share = None if on_cpu_platform() else (gpu_share or 0.2)
    engines = {
        name: VLLMBackend(
            path,
            VLLMConfig(dtype=dtype, max_model_len=1024, kv_cache_gib=0.25, gpu_memory_utilization=share),
            name=name,
        )
        for name, path in (("plain", plain_dir), ("int8", int8_dir))
    }
    prompt = engines["plain"].encode_prompt(
        "A shop sells pens at 3 dollars each. Tom buys 7 pens and pays with a "
        "50 dollar bill. How much change does he get? Think step by step."
    )
    best = time_alternately(engines, prompt, tokens, repeats)
    return {f"{name}_tok_s": 1.0 / s_per_token for name, (s_per_token, _) in best.items()}


def timing_share(model_dir: str, cap: float, taken: float = 0.0) -> float | None:
    """The GPU share of each of the timing child's two engines (the memory plan's
    ``int8_timing`` role: what ``taken`` by engines already running leaves of ``cap``), or
    None off GPUs; :class:`ConfigError` naming the role when the model does not fit."""
    from lrtune.backends.vllm import gpu_device_bytes
    from lrtune.memory import plan_gpu_memory, weight_bytes

    device = gpu_device_bytes()
    if device is None:
        return None
    plan = plan_gpu_memory(
        {"int8_timing": weight_bytes(model_dir)},
        engines={"int8_timing": 2},
        cap=max(cap - taken, 1e-6),
        device_bytes=device,
    )
    return plan.engine_share("int8_timing")


def measure_in_subprocess(
    plain_dir: str,
    int8_dir: str,
    dtype: str = "auto",
    timeout_s: float = 900,
    gpu_share: float | None = None,
    role: str = "draft",
) -> dict:
    """:func:`time_copies` in a child process (its engines end with it)."""
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "lrtune.quantize", plain_dir, int8_dir, dtype, str(gpu_share or "")]
    try:
        proc = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env={**os.environ, "LRTUNE_VLLM_PATCHES": os.environ.get("LRTUNE_VLLM_PATCHES", "1")},
        )
    except subprocess.TimeoutExpired:
        raise ConfigError(
            f"--{role}-quantization auto: timing the int8 {role} took over {timeout_s:.0f} s; choose none or int8"
        ) from None
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise ConfigError(
            f"--{role}-quantization auto: timing the int8 {role} failed ({tail[:300]}); choose none or int8"
        )
    return json.loads(lines[-1])


def check_int8_runs(backend: str, role: str = "draft", scheme: str = "int8") -> None:
    """One line when this engine or platform cannot run a ``scheme`` copy of the ``role`` model."""
    if backend != "vllm":
        raise ConfigError(
            f"--{role}-quantization {scheme} needs --backend vllm (transformers would dequantize the "
            "int8 weights and run no faster)"
        )
    from lrtune.machine import gpus

    if scheme == "int8-weights":
        if gpus():
            raise ConfigError(
                f"--{role}-quantization int8-weights runs on CPUs only (its kernel is torch's CPU "
                "int8 weight-only GEMM); on a GPU use int8"
            )
        return
    for g in gpus():
        major, minor = (int(x) for x in g["capability"].split("."))
        if (major, minor) < (7, 5):
            raise ConfigError(
                f"--{role}-quantization int8: {g['name']} (compute capability {g['capability']}) "
                "has no int8 tensor cores vLLM can use (7.5 or newer)"
            )


def quantized_source(model_dir: str | Path) -> str | None:
    """The ``quant_method`` of an already quantized checkpoint, else None."""
    from lrtune.filekinds import model_side_config

    try:
        q = model_side_config(model_dir).quantization_config
    except ConfigError:
        return None
    return str(q.get("quant_method") or "quantized") if q is not None else None


def for_engines(
    mode: str,
    model_dir: str,
    *,
    backend: str,
    role: str = "draft",
    dtype: str = "auto",
    cache_dir: str | None = None,
    progress: bool = True,
    gpu_cap: float = 0.9,
    build: bool = True,
) -> tuple[str, str]:
    """(the directory the ``role`` engines load, the scheme: "none", "int8" or "int8-weights")
    under ``--ROLE-quantization`` ``mode``: none keeps ``model_dir``; a scheme builds (once) and
    uses that copy; auto uses the fastest copy that measured faster than the model as saved on
    this machine (each timed once per model and machine, in a child process, then read from the
    measurement file), else the model as saved.

    ``build=False`` is phase 1 (:mod:`lrtune.gate`): nothing is built or timed; the copy's path
    is returned as it will be (:func:`check_copyable` checked), and ``auto`` with a scheme not
    yet timed here answers the model as saved (phase 2 times it)."""
    if mode == "none":
        return model_dir, "none"
    already = quantized_source(model_dir)
    if mode in SCHEMES:
        check_int8_runs(backend, role, mode)
        check_copyable(model_dir, role, mode)
        if not build:
            return str(copy_dir(model_dir, cache_dir, untied_head(model_dir), mode)), mode
        return str(ensure_copy(model_dir, cache_dir, progress, role=role, scheme=mode)), mode
    if already or backend != "vllm":
        return model_dir, "none"
    gains = {}
    for scheme in SCHEMES:
        try:
            check_int8_runs(backend, role, scheme)
        except ConfigError:
            continue
        m = measurement(model_dir, cache_dir, dtype, scheme)
        if m is not None and not m.int8_faster:
            continue  # slower here: its copy is not even built
        if not build:
            if m is None:
                return model_dir, "none"  # the choice needs a timing: made in phase 2
            gains[scheme] = (
                m.int8_tok_s / m.plain_tok_s,
                str(copy_dir(model_dir, cache_dir, untied_head(model_dir), scheme)),
            )
            continue
        copy = ensure_copy(model_dir, cache_dir, progress, role=role, scheme=scheme)
        if m is None:
            m = _time_once(model_dir, str(copy), role, scheme, dtype, cache_dir, progress, gpu_cap)
        if m.int8_faster:
            gains[scheme] = (m.int8_tok_s / m.plain_tok_s, str(copy))
    if not gains:
        return model_dir, "none"
    best = max(gains, key=lambda k: gains[k][0])
    return gains[best][1], best


def _time_once(model_dir, copy, role, scheme, dtype, cache_dir, progress, gpu_cap):
    """Time ``model_dir`` against its ``scheme`` copy once on this machine and record it."""
    from lrtune.filekinds import Int8Measurement
    from lrtune.runfiles import log

    if progress:
        log(f"lrtune: --{role}-quantization auto: timing the {role} and its {scheme} copy once on this machine")
    speeds = measure_in_subprocess(model_dir, copy, dtype, gpu_share=timing_share(model_dir, gpu_cap), role=role)
    entry = record_measurement(model_dir, speeds["plain_tok_s"], speeds["int8_tok_s"], cache_dir, dtype, scheme)
    if progress:
        log(
            f"lrtune: {role} {speeds['plain_tok_s']:.1f} tok/s, {scheme} copy {speeds['int8_tok_s']:.1f} tok/s"
            f"{'' if entry['int8_faster'] else ': keeping the ' + role + ' as saved'}"
        )
    return Int8Measurement.model_validate(entry)


if __name__ == "__main__":  # python -m lrtune.quantize PLAIN_DIR INT8_DIR [DTYPE]: time_copies as one JSON line
    import sys

    a = sys.argv[1:]
    print(
        json.dumps(
            time_copies(
                a[0], a[1], a[2] if len(a) > 2 else "auto", gpu_share=float(a[3]) if len(a) > 3 and a[3] else None
            )
        ),
        flush=True,
    )
    os._exit(0)
