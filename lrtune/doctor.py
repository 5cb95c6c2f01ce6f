"""``lrtune doctor``: what this machine runs, checked end to end on a small model pair.

    lrtune doctor [--models tiny|random|default] [--target DIR --draft DIR]
                  [--backend auto|vllm|transformers] [--timing] [--json FILE|-]

One line per check (ok / warn / fail / skip):

* **versions** and **device**: Python, lrtune, torch, transformers, vLLM; the CPU and the
  flags that change lrtune's figures (native bf16, int8 dot products) or the GPUs;
* **backend**: vLLM where its supported version is installed, else transformers; with vLLM,
  **plugin**: lrtune's ``vllm.general_plugins`` entry point, which patches every process
  vLLM starts;
* **models**: the pair (``tiny``: trained on the spot in ~20 s; ``random``: random weights
  shaped like the default pair, for a GPU with no network; ``default``: the offline
  default pair);
* **memory**: the GPU memory plan of the engines (``lrtune.memory``), or the KV cache and
  weights per engine on CPU beside the RAM available;
* **engines**: for each engine, the model runner and scheduling vLLM chose, where its engine
  core runs (in this process on CPUs, a process of its own on GPUs), the patches in its
  worker processes, eager mode or the CUDA-graph kind, a padded vocabulary mapped; **dtype**:
  what the engines compute in; a failed check names its cause where it is a known one
  (:mod:`lrtune.backends.vllm_platform` A–C);
* **per-request speculation**: on the shared SD engine, a γ2 = 0 request drafts nothing and a
  γ2 = 1 request at most 1 token per pass, by the engine's own counters;
* **prompt scores**: the target's log-probabilities of a prefix's tokens (``score_from``)
  against one plain transformers forward (float32, CPU), and again from the prefix cache;
* **greedy equality**: target = sd = lr = lr+sd token for token (the ``never`` verifier), a
  failure under ``--numerics exact`` and a warning otherwise (in the engine's own numerics a
  near tie can flip where a row prefills what target-only decodes: docs/limits.md);
* **timing** (``--timing``): ms per token of target and draft, c1, c2, α2 and b(n)
  (:func:`lrtune.profiling.measure`), and, with vLLM, a γ2 = 0 call on the shared SD engine
  against a plain vLLM engine of the target (a warning above 1.10×: the baseline would be
  slower than plain vLLM, cause D); **draft int8**: the draft against its W8A8 copy
  (vLLM), recorded for ``--draft-quantization auto``.

``--json FILE`` writes every check with its data. Exit status 0 when no check failed, 1
otherwise (2: bad options). Run it first on any new machine: it is the prepared script
for a GPU (``lrtune doctor --models random --timing --json doctor.json``).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Annotated, Literal

from annotated_types import Interval
from pydantic import StringConstraints

from lrtune import gate
from lrtune import schema
from lrtune.errors import ConfigError, LrtuneError
from lrtune.schema import STRICT, Checked, Share, Text


@dataclass
class DoctorOptions(Checked):
    __pydantic_config__ = STRICT

    models: Literal["tiny", "random", "default"] = field(
        default="tiny",
        metadata={
            "help": "tiny (trained on the spot, ~20 s on a CPU) | random (random weights shaped like the default pair; "
            "a GPU with no network) | default (the offline default pair)"
        },
    )
    target: Text | None = field(
        default=None, metadata={"help": "a target model directory (with --draft; overrides --models)"}
    )
    draft: Text | None = field(default=None, metadata={"help": "the draft model directory for --target"})
    backend: Literal["auto", "vllm", "transformers"] = field(
        default="auto", metadata={"help": "auto (vllm where installed, else transformers) | vllm | transformers"}
    )
    device: Annotated[str, StringConstraints(pattern=r"^(auto|cpu|cuda(:[0-9]{1,2})?)$")] = field(
        default="auto", metadata={"help": "transformers backend: auto | cpu | cuda[:i]"}
    )
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = field(
        default="auto", metadata={"help": "model dtype (auto: as lrtune would choose)"}
    )
    numerics: Literal["fast", "exact"] = field(
        default="fast",
        metadata={"help": "the engines' numerics (vLLM on CPU): exact makes greedy equality a hard check"},
    )
    gamma2: Annotated[int, Interval(ge=1, le=8)] = field(
        default=3, metadata={"help": "draft tokens per SD pass of the shared SD engine"}
    )
    max_new_tokens: Annotated[int, Interval(ge=4, le=4096)] = field(
        default=48, metadata={"help": "tokens per greedy-equality decode"}
    )
    timing: bool = field(default=False, metadata={"help": "also measure ms/token, c1, c2 and b(n)"})
    timing_tokens: Annotated[int, Interval(ge=4, le=4096)] = field(
        default=32, metadata={"help": "tokens per timed generation"}
    )
    json: Text | None = field(default=None, metadata={"help": "write every check as JSON to this file (- = stdout)"})
    kv_cache_gib: Annotated[float, Interval(gt=0, le=1024)] = field(
        default=0.5, metadata={"help": "KV cache per engine on CPU, GiB"}
    )
    gpu_memory_utilization: Share = field(
        default=0.5, metadata={"help": "share of the GPU the doctor's engines use together"}
    )
    cache_dir: Text | None = field(default=None, metadata={"help": "model cache root (default ~/.cache/lrtune)"})

    def validate(self) -> DoctorOptions:
        """The schema, then what can be known before any check runs: both model directories
        load (files and weight headers) and a CUDA device exists for ``--device cuda``."""
        schema.check(self)
        if not self.timing:
            from lrtune.consumers import check_read, unread_fields

            check_read(unread_fields(self, ("timing_tokens",), "only --timing times generations"))
        if (self.target is None) != (self.draft is None):
            raise ConfigError("--target and --draft go together")
        if self.numerics == "exact" and self.backend == "transformers":
            raise ConfigError("--numerics exact needs the vLLM backend (--backend vllm or auto with vLLM installed)")
        if self.target is not None:
            from lrtune.errors import ModelError
            from lrtune.modeldir import validate_model_dir

            for flag, path in (("--target", self.target), ("--draft", self.draft)):
                try:
                    validate_model_dir(path)
                except ModelError as e:
                    raise ConfigError(f"{flag}: {e}") from None
        from lrtune.consumers import check_device

        check_device(self.device)
        return self


@dataclass
class Check:
    name: str
    status: str  # ok | warn | fail | skip
    detail: str
    data: dict = field(default_factory=dict)


class _Run:
    """The checks of one doctor run and the state they hand on (pair, backends, outputs)."""

    def __init__(self, opts: DoctorOptions, echo: Callable[[Check], None]) -> None:
        self.opts, self.echo, self.checks = opts, echo, []
        self.backend = self.target_dir = self.draft_dir = self.plan = None
        self.target = self.draft = None
        self.prompts: list[list[int]] = []
        self.greedy: list[list[int]] = []
        self.exact = True  # float32 engines: equality must be exact

    def check(self, name: str, fn: Callable[[], tuple[str, str, dict]]) -> bool:
        """Run one check; an error becomes a failed check (one line), never a traceback."""
        t0 = time.perf_counter()
        try:
            status, detail, data = fn()
        except (LrtuneError, OSError, RuntimeError, ValueError, ImportError, AssertionError) as e:
            from lrtune.backends.vllm_platform import with_cause

            status, detail, data = "fail", f"{type(e).__name__}: {with_cause(e)}"[:600], {}
        c = Check(name, status, detail, {**data, "seconds": round(time.perf_counter() - t0, 2)})
        self.checks.append(c)
        self.echo(c)
        return status != "fail"


def run(opts: DoctorOptions, echo: Callable[[Check], None] = lambda c: None) -> dict:
    """Every check (module docstring), in order; a check that needs a failed one is skipped."""
    from lrtune import doctor_checks as dc

    opts.validate()
    r = _Run(opts, echo)
    r.check("versions", dc.versions)
    r.check("device", dc.device)
    r.check("backend", lambda: dc.choose_backend(r))
    if r.backend == "vllm":
        r.check("plugin", dc.plugin)
    ready = r.check("models", lambda: dc.models(r)) and r.check("memory", lambda: dc.memory(r))
    ready = ready and r.check("engines", lambda: dc.engines(r)) and r.check("dtype", lambda: dc.dtype(r))
    steps = [
        ("per-request speculation", dc.per_request_speculation),
        ("greedy equality", dc.greedy_equality),
        ("prompt scores", dc.prompt_scores),
    ] + ([("timing", dc.timing), ("draft int8", dc.draft_int8)] if opts.timing else [])
    for name, fn in steps:
        if ready:
            r.check(name, lambda fn=fn: fn(r))
        else:
            r.check(name, lambda: ("skip", "needs the engines", {}))
    from lrtune.machine import machine_info

    return {
        "ok": all(c.status != "fail" for c in r.checks),
        "options": asdict(opts),
        "machine": machine_info(),
        "checks": [asdict(c) for c in r.checks],
        "measured_at": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }


def print_check(c: Check) -> None:
    print(f"{c.status:<5} {c.name:<24} {c.detail}", flush=True)


def main(opts: DoctorOptions) -> int:
    from lrtune.outdir import json_out_file
    from lrtune.runfiles import write_json_file

    opts.validate()
    out = None
    if opts.json and opts.json != "-":
        out = json_out_file(
            opts.json, "--json", inputs=(opts.target, opts.draft)
        )  # a bad path fails before any check runs
    gate.passed("doctor")
    if out is not None:
        from lrtune.outdir import claim_json_out

        claim_json_out(out, "--json")
    report = run(opts, print_check if opts.json != "-" else (lambda c: None))
    text = json.dumps(report, indent=1)
    if opts.json == "-":
        sys.stdout.write(text + "\n")
    elif out is not None:
        write_json_file(out, report)
        print(f"wrote {out}")
    failed = [c["name"] for c in report["checks"] if c["status"] == "fail"]
    if failed and opts.json != "-":
        print(f"{len(failed)} check(s) failed: {', '.join(failed)}")
    return 0 if not failed else 1
