"""One GPU memory plan for every vLLM engine lrtune starts in a process.

vLLM gives each engine a share ``s`` of a device's memory (``gpu_memory_utilization``) and,
at start-up, refuses to start unless the device's free memory is at least ``s × total``,
even when ``kv_cache_memory_bytes`` fixes its KV cache. lrtune starts its engines one after
another in one process, so the shares of the roles on one device must fit together:

    Σ_{roles r on device d} s_r  ≤  cap        for every device d

Roles: ``target`` (the target with its token-level SD drafter, tensor parallel over
devices 0 .. TP−1), ``draft`` (the LR draft, TP 1, device 0), ``judge`` (a separate judge
model, TP 1, device 0), and two the doctor adds: ``plain_target`` (a plain vLLM engine of the
target, its timing reference) and ``int8_timing`` (the child process that times the draft
against its int8 copy, two engines). A role may start several engines: the target starts
one per γ2 when no shared SD engine serves them all (:func:`target_engine_keys`), and each
engine needs its own share. ``cap`` (``--gpu-memory-utilization``, default 0.9) leaves the
rest of each device to the CUDA context and to models outside vLLM (the embedding verifier).

A role's share is either fixed by the user (``--target-gpu-share`` ...) or, by default, its
part of what the fixed shares leave, in proportion to its weight bytes per device over all
its n_r engines; each of its engines gets s_r / n_r:

    s_r = (cap − Σ_fixed s) · w_r / Σ_{unfixed} w,   w_r = n_r · W_r / TP_r,   W_target = W_target + W_sd_drafter

Every check is made before any engine starts (:func:`plan_gpu_memory` is pure); a plan that
cannot work is one :class:`~lrtune.errors.ConfigError` line naming the role to lower.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from lrtune.errors import ConfigError

ROLES = ("target", "draft", "judge", "plain_target", "int8_timing")
DEFAULT_CAP = 0.9
# a share must hold the role's weights with room for activations and a KV cache
WEIGHT_HEADROOM = 1.2
GiB = 2**30


@dataclass(frozen=True)
class MemoryPlan:
    """The share of device memory each role's engine gets (``gpu_memory_utilization``)."""

    shares: dict[str, float]  # role -> the share of all its engines together
    cap: float
    tensor_parallel_size: int
    weight_bytes_per_device: dict[str, int]  # role -> one engine's weights per device
    device_bytes: int | None = None
    engines: dict[str, int] = field(default_factory=dict)  # role -> engines it starts (absent: 1)

    def engine_share(self, role: str) -> float | None:
        """``gpu_memory_utilization`` of each engine of ``role`` (None: not planned)."""
        share = self.shares.get(role)
        return None if share is None else share / self.engines.get(role, 1)

    def device_sums(self) -> list[float]:
        """Σ shares on each device: device 0 holds every role, devices 1..TP−1 the target."""
        first = sum(self.shares.values())
        return [first] + [self.shares.get("target", 0.0)] * (self.tensor_parallel_size - 1)

    def as_dict(self) -> dict:
        return {
            "shares": dict(self.shares),
            "engines": {r: self.engines.get(r, 1) for r in self.shares},
            "cap": self.cap,
            "tensor_parallel_size": self.tensor_parallel_size,
            "device_sums": self.device_sums(),
            "weight_gib_per_device": {r: round(b / GiB, 3) for r, b in self.weight_bytes_per_device.items()},
            "device_gib": None if self.device_bytes is None else round(self.device_bytes / GiB, 2),
        }

    def describe(self) -> str:
        parts = [
            f"{r} {s:.3f}" if self.engines.get(r, 1) == 1 else f"{r} {s:.3f} ({self.engines[r]} engines)"
            for r, s in self.shares.items()
        ]
        return f"GPU memory shares: {', '.join(parts)} (device 0 sum {self.device_sums()[0]:.3f} of cap {self.cap})"


def engine_share(plan: MemoryPlan | None, role: str) -> float | None:
    """``gpu_memory_utilization`` of each engine of ``role`` under ``plan``; None without a plan
    (on a CPU) or for a role it does not hold."""
    return None if plan is None else plan.engine_share(role)


def _check_share(name: str, value: float) -> None:
    if not (value == value) or not 0.0 < value <= 1.0:  # NaN fails both
        raise ConfigError(f"{name} must be in (0, 1], got {value!r}")


def plan_gpu_memory(
    weight_bytes: dict[str, int],
    *,
    cap: float = DEFAULT_CAP,
    fixed: dict[str, float | None] | None = None,
    tensor_parallel_size: int = 1,
    device_bytes: int | None = None,
    engines: dict[str, int] | None = None,
) -> MemoryPlan:
    """The plan for the roles in ``weight_bytes`` (role -> one engine's weight bytes; the
    target's includes its SD drafter's) starting ``engines`` engines each (default 1), see
    the module docstring. ``fixed`` shares win; the others split the rest by weight bytes
    per device. ``device_bytes`` (one device's memory), when known, checks that every
    engine's share holds its weights (×``WEIGHT_HEADROOM``)."""
    fixed = {r: s for r, s in (fixed or {}).items() if s is not None}
    counts = {r: int((engines or {}).get(r, 1)) for r in weight_bytes}
    if any(n < 1 for n in counts.values()):
        raise ValueError(f"every role starts at least one engine, got {counts}")
    _check_share("--gpu-memory-utilization", cap)
    if tensor_parallel_size < 1:
        raise ConfigError(f"--tensor-parallel-size must be >= 1, got {tensor_parallel_size}")
    unknown = set(weight_bytes) - set(ROLES)
    if unknown:
        raise ValueError(f"unknown memory role(s): {sorted(unknown)}")
    for role, share in fixed.items():
        _check_share(f"--{role}-gpu-share", share)
        if role not in weight_bytes:
            raise ConfigError(f"--{role}-gpu-share is set but this run starts no {role} engine")
    per_device = {r: int(b) // (tensor_parallel_size if r == "target" else 1) for r, b in weight_bytes.items()}
    taken = sum(fixed.values())
    if taken > cap + 1e-9:
        big = max(fixed, key=fixed.get)
        spelled = " + ".join(f"{r} {s:g}" for r, s in fixed.items())
        raise ConfigError(
            f"GPU memory plan: {spelled} = {taken:.2f} of device 0 exceeds --gpu-memory-utilization "
            f"{cap:g}; lower --{big}-gpu-share"
        )
    free_roles = [r for r in weight_bytes if r not in fixed]
    shares = dict(fixed)
    if free_roles:
        rest = cap - taken
        if rest <= 0.01:
            fix = f"lower --{max(fixed, key=fixed.get)}-gpu-share" if fixed else "raise --gpu-memory-utilization"
            raise ConfigError(
                f"GPU memory plan: {'the fixed shares leave' if fixed else '--gpu-memory-utilization is'} "
                f"{max(rest, 0):.2f} of device 0 for {', '.join(free_roles)}; {fix}"
            )
        total = sum(counts[r] * max(per_device[r], 1) for r in free_roles)
        for r in free_roles:
            shares[r] = rest * counts[r] * max(per_device[r], 1) / total
    shares = {r: shares[r] for r in ROLES if r in shares}
    plan = MemoryPlan(
        shares=shares,
        cap=cap,
        tensor_parallel_size=tensor_parallel_size,
        weight_bytes_per_device=per_device,
        device_bytes=device_bytes,
        engines={r: n for r, n in counts.items() if n != 1},
    )
    if device_bytes:
        for r in shares:
            s, n = plan.engine_share(r), counts[r]
            need = per_device[r] * WEIGHT_HEADROOM
            if s * device_bytes < need:
                which = f"the {r} engine's share" if n == 1 else f"each of the {n} {r} engines' share"
                raise ConfigError(
                    f"GPU memory plan: {which} {s:.3f} ({s * device_bytes / GiB:.1f} GiB) does not hold "
                    f"its weights ({per_device[r] / GiB:.1f} GiB per device, +{WEIGHT_HEADROOM - 1:.0%} "
                    f"headroom); {_remedy(r, n)}"
                )
    return plan


def _remedy(role: str, engines: int) -> str:
    """What lowers a role's need, for the plan's one-line refusal."""
    if role == "target" and engines > 1:
        return (
            f"the target starts one engine per γ2 ({engines}) without a shared SD engine: use --sd-method draft "
            "with the shared engine, fewer γ2 values, or more memory"
        )
    flag = {"plain_target": "the doctor's --gpu-memory-utilization", "int8_timing": "--gpu-memory-utilization"}
    if role in flag:
        return f"raise {flag[role]}, or skip the check (--draft-quantization none / no --timing)"
    return f"raise --{role}-gpu-share or --gpu-memory-utilization, or use more tensor parallelism"


def target_engine_keys(gamma2s: Iterable[int], *, shared: int) -> tuple[int, ...]:
    """The γ2 keys of the target engines a run starts (:class:`~lrtune.backends.vllm.VLLMBackend`):
    the shared SD engine (key ``shared`` > 0) serves every γ2 up to its own, and each larger
    γ2 gets an engine of its own; without it, a plain engine (0: target-only and LR target
    calls) and one engine per distinct γ2 > 0."""
    asked = {int(g) for g in gamma2s if int(g) > 0}
    if shared:
        return tuple(sorted({shared} | {g for g in asked if g > shared}))
    return tuple(sorted({0} | asked))


def weight_bytes(model_dir: str | Path | None, *, as_copy: bool = False) -> int:
    """Bytes of a model directory's weight files (``*.safetensors``, ``*.bin``, ``*.pt``);
    0 for None or a directory without them. ``as_copy``: of the int8 copy lrtune would build of
    it (:func:`lrtune.modeldir.copy_dtype_bytes`, counted before it is built)."""
    if model_dir is None:
        return 0
    d = Path(model_dir)
    if not d.is_dir():
        return 0
    if as_copy:
        from lrtune.modeldir import copy_dtype_bytes

        return sum(copy_dtype_bytes(d).values())
    return sum(f.stat().st_size for pat in ("*.safetensors", "*.bin", "*.pt") for f in d.glob(pat) if f.is_file())


def held_weight_bytes(model_dir: str | Path | None, *, float32: bool, as_copy: bool = False) -> int:
    """Bytes of a model's weights as an engine holds them: :func:`weight_bytes`, with every 16-bit
    tensor counted twice where it runs in float32 (``float32``: vLLM on a CPU without native
    bf16, the transformers backend on a CPU); a quantized copy's int8 tensors stay as they are.
    ``as_copy``: of the int8 copy lrtune would build of ``model_dir``, counted before it is built."""
    from lrtune.filekinds import model_side_config
    from lrtune.modeldir import copy_dtype_bytes, safetensors_dtype_bytes

    kinds = copy_dtype_bytes(model_dir) if as_copy and model_dir is not None and Path(model_dir).is_dir() else None
    size = sum(kinds.values()) if kinds is not None else weight_bytes(model_dir)
    if not (size and float32 and model_side_config(str(model_dir)).saved_dtype in ("bfloat16", "float16")):
        return size
    if kinds is not None:
        return size + sum(n for k, n in kinds.items() if k in ("BF16", "F16"))
    files = list(Path(str(model_dir)).glob("*.safetensors"))
    if not files:  # .bin / .pt: no header to read per tensor
        return 2 * size
    sixteen = 0
    for f in files:  # a file whose header cannot be read counts as all 16-bit: the plan is an upper bound
        kinds = safetensors_dtype_bytes(f)
        sixteen += sum(n for k, n in kinds.items() if k in ("BF16", "F16")) if kinds else f.stat().st_size
    return size + sixteen
