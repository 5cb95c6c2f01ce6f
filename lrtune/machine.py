"""What machine a result was measured on: versions, CPU model and the instruction sets that
change lrtune's figures by 2-3x (native bf16, int8 dot products), and the GPUs."""

from __future__ import annotations

import os
import platform
from pathlib import Path

# CPU flags that decide dtype and speed here: bf16 matmuls (avx512_bf16 / amx_bf16), int8
# dot products (avx512_vnni / avx_vnni / amx_int8), and the vector width (avx2 / avx512f)
CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "avx512_vnni", "avx_vnni", "amx_int8")


def cpu_flags() -> list[str]:
    """The :data:`CPU_FLAGS` this CPU advertises (Linux ``/proc/cpuinfo``; [] elsewhere)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return []
    for line in text.splitlines():
        if line.startswith("flags"):
            have = set(line.split(":", 1)[1].split())
            return [f for f in CPU_FLAGS if f in have]
    return []


def cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def native_bf16(flags: list[str]) -> bool:
    return "avx512_bf16" in flags or "amx_bf16" in flags


def int8_dot(flags: list[str]) -> bool:
    return any(f in flags for f in ("avx512_vnni", "avx_vnni", "amx_int8"))


def gpus() -> list[dict]:
    """Each visible CUDA device: name, compute capability, memory (GiB), bf16 support
    ([] without torch or CUDA; never initialises CUDA when none is present)."""
    try:
        import torch
    except ImportError:
        return []
    if not torch.cuda.is_available():
        return []
    out = []
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        out.append(
            {
                "index": i,
                "name": p.name,
                "capability": f"{p.major}.{p.minor}",
                "memory_gib": round(p.total_memory / 2**30, 1),
                "bf16": p.major >= 8,
            }
        )
    return out


def machine_info() -> dict:
    """Versions, CPU model and flags, cores and GPUs: what every result file records."""
    flags = cpu_flags()
    info = {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "cpu": cpu_model(),
        "cpu_flags": flags,
        "native_bf16": native_bf16(flags),
        "int8_dot": int8_dot(flags),
    }
    for mod in ("torch", "vllm", "transformers"):
        try:
            info[mod] = __import__(mod).__version__
        except Exception:  # noqa: BLE001 - optional
            pass
    found = gpus()
    if found:
        info["gpus"] = found
    return info
