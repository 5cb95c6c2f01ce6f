"""No value without a consumer: an option set to a value that nothing in this run reads is refused.

A run reads an option only under some conditions: the GPU memory shares only where vLLM runs
on a GPU, ``--device`` only on the transformers backend, γ1 only when LR rounds run. An option
given a value other than its default where nothing reads it would pass silently and make the
user believe it applied, so phase 1 refuses it in one line naming the option and why
(:func:`check_read`). A value equal to the default is never refused: a config file shared by
several backends may spell the defaults out.

Two sets of rules, pure functions of the configs:

* :func:`engine_unread` — options of the backend and the device (every command that starts
  engines);
* :func:`method_unread` — options of one decoding method (``lrtune decode``, whose run has one
  method; evaluate and serve run several and read each where one does).
"""

from __future__ import annotations

import dataclasses

from lrtune.errors import ConfigError

LR_METHODS = ("lr", "lr+sd")
SD_METHODS = ("sd", "lr+sd")


def _given(cfg, name: str):
    """The value of flat option ``name`` of ``cfg`` when it differs from its default, else None."""
    from lrtune.configs import flat_dict, flat_fields

    for flat, f, _ in flat_fields(type(cfg)):
        if flat == name:
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
            value = flat_dict(cfg)[name]
            return None if value == default else value
    raise KeyError(name)


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _spelled(cfg, name: str) -> str:
    """The option as a user gives it: ``--gamma1 5``, ``--enforce-eager``, ``--no-share-weights``."""
    value = _given(cfg, name)
    if isinstance(value, bool):
        return _flag(name) if value else "--no-" + _flag(name)[2:]
    return f"{_flag(name)} {value}"


def engine_unread(models, *, on_gpu: bool) -> list[str]:
    """One reason per option of ``models`` (a ModelConfig) set where its backend and device do not
    read it; ``on_gpu``: the engines run on a GPU."""
    vllm = models.backend == "vllm"
    rules = [
        ("device", not vllm, "it picks the transformers backend's device; vLLM runs on its own platform"),
        ("kv_cache_gib", vllm and not on_gpu, _kv_why(vllm)),
        ("memory_budget_gib", not on_gpu, "it caps a CPU run's resident memory; this run is on a GPU"),
        ("numerics", vllm and not on_gpu, "exact numerics are implemented for vLLM on CPU"),
        ("share_weights", vllm and not on_gpu, "it concerns vLLM engines on a CPU"),
    ]
    for name in ("max_num_batched_tokens", "max_num_seqs", "enforce_eager", "shared_engine"):
        rules.append((name, vllm, "a vLLM engine setting; the transformers backend has none"))
    where = "this run is on a CPU" if vllm else "the transformers backend does not read it"
    for name in ("gpu_memory_utilization", "target_gpu_share", "draft_gpu_share", "judge_gpu_share"):
        rules.append((name, vllm and on_gpu, f"a GPU setting of lrtune's vLLM engines; {where}"))
    rules.append(("tensor_parallel_size", vllm and on_gpu, f"a GPU setting of lrtune's vLLM engines; {where}"))
    return [f"{_spelled(models, n)}: {why}" for n, read, why in rules if not read and _given(models, n) is not None]


def _kv_why(vllm: bool) -> str:
    if vllm:
        return "it sizes vLLM's KV cache on a CPU; on a GPU --gpu-memory-utilization does"
    return "it sizes vLLM's KV cache on a CPU; the transformers backend's cache grows as it goes"


def method_unread(decode, models, given: set[str] | None = None) -> list[str]:
    """One reason per option of ``decode`` (a DecodeConfig) and ``models`` set where ``decode.method``
    does not read it; ``given``: only these options count (a call's or a request's own fields,
    whatever their defaults), each still exempt at DecodeConfig's default."""
    m = decode.method
    lr, sd = m in LR_METHODS, m in SD_METHODS
    draft = lr or (sd and models.sd_method == "draft")
    no_lr = f"--method {m} runs no LR rounds (lr, lr+sd do)"
    rules = [
        (decode, "gamma1", lr, no_lr),
        (decode, "width", lr, no_lr),
        (decode, "branch_temperature", lr, no_lr),
        (decode, "draft_stop", lr, no_lr),
        (decode, "context_tokens", lr, no_lr + "; it sizes what the verifier sees"),
        (models, "verifier", lr, no_lr + "; nothing verifies steps"),
        (models, "verifier_threshold", lr, no_lr + "; nothing verifies steps"),
        (models, "judge_model", lr, no_lr + "; nothing verifies steps"),
        (models, "controller", lr or sd, f"--method {m} has no γ1 or γ2 to choose"),
        (decode, "gamma2", sd, f"--method {m} runs no token-level SD (sd, lr+sd do)"),
        (models, "sd_method", sd, f"--method {m} runs no token-level SD (sd, lr+sd do)"),
        (decode, "record", lr, no_lr + "; only they record step details"),
        (models, "draft_quantization", draft, f"--method {m} loads no draft model"),
        (decode, "top_p", decode.temperature > 0, "greedy decoding (--temperature 0) samples nothing"),
    ]
    return [
        f"{_spelled(cfg, n)}: {why}"
        for cfg, n, read, why in rules
        if not read and (given is None or n in given) and _given(cfg, n) is not None
    ]


def unread_fields(cfg, names: tuple[str, ...], why: str) -> list[str]:
    """One reason per option of ``names`` set away from its default in ``cfg``, where a rule of
    its command says nothing reads them (``why``)."""
    return [f"{_spelled(cfg, n)}: {why}" for n in names if _given(cfg, n) is not None]


def check_read(reasons: list[str]) -> None:
    """ConfigError (one line) naming the first unread option, and how many more there are."""
    if reasons:
        more = f" (and {len(reasons) - 1} more option(s) nothing reads)" if len(reasons) > 1 else ""
        raise ConfigError(f"{reasons[0]}: drop it{more}")


def check_device(device: str) -> None:
    """ConfigError (one line) when ``device`` (``--device``: auto, cpu or cuda[:i]) names a CUDA
    device this machine does not have (torch would fail deep in the first model load)."""
    if not device.startswith("cuda"):
        return
    import torch

    index = int(device.split(":")[1]) if ":" in device else 0
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if index >= count:
        have = f"{count} CUDA device(s)" if count else "no CUDA device"
        raise ConfigError(f"--device {device}: torch sees {have} here; use --device cpu or auto")


def engines_on_gpu(models) -> bool:
    """Whether the engines of ``models`` would run on a GPU: vLLM on a CUDA platform, the
    transformers backend on a ``cuda`` device (``auto``: when CUDA is available)."""
    if models.backend == "transformers" and models.device != "auto":
        return models.device.startswith("cuda")
    import torch

    return torch.cuda.is_available()
