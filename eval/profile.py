"""``lrtune profile``: measure the hardware constants the speedup model needs.

    lrtune profile --out results/profile.json [--gamma1-max 6] [model/engine flags]

On the chosen backend and models (the same flags as decode/evaluate), after a warm-up:

* t_T, t_D: seconds per generated token of the target and the draft at batch 1 (plain
  decoding, ``tokens`` tokens from a task prompt, best of ``repeats``);
* c1 = t_D / t_T (a draft step relative to the target's, per token);
* c2: the draft cost SD really pays, from SD runs of the target at γ2 = ``sd_gamma2`` and
  plain runs of the same ``sd_tokens`` tokens on each of ``sd_prompts`` prompts (totals):
  c2 = (Σ_{j≤γ2} α2^j / S − 1) / γ2 with S = t_T / t_SD and α2 the runs' token acceptance
  (:func:`lrtune.speedup.c_from_sd`); ``--sd-gamma2 0``: c2 = c1 as before;
* b(n) = time of n distinct prompts decoding ``tokens`` tokens in one batch / time of one,
  for n = 1 .. γ1_max + 1 (a round's target batch; ``batch_cost``). b is not 1 on CPUs.
* with ``--batch-max M``, also b(n) at n = 8, 12, 16, 24, 32, ... up to M (``batch_cost_curve``):
  the rows of many prompts decoded together (``--max-concurrent``; collect picks its
  default concurrency from this curve).

The JSON it writes is what ``lrtune train controller --profile``, ``lrtune evaluate
--profile`` and ``lrtune collect --profile`` read.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from lrtune.api import ModelConfig
from lrtune.configs import ArgumentParser, add_dataclass_args, build, check_unknown_keys, load_config_file
from lrtune.decoder import DecodeConfig
from lrtune.errors import ConfigError, LrtuneError
from lrtune.runfiles import log, write_atomic


@dataclass
class ProfileOptions:
    out: str = field(default="results/profile.json", metadata={"help": "JSON file to write"})
    gamma1_max: int = field(default=6, metadata={"help": "measure b(n) up to n = gamma1_max + 1"})
    tokens: int = field(default=32, metadata={"help": "tokens per timed generation"})
    repeats: int = field(default=2, metadata={"help": "timed tries per size (the fastest counts)"})
    batch_max: int = field(default=0, metadata={"help": "also measure b(n) at n = 8, 12, 16, 24, 32, ... up to this (0: only up to gamma1_max + 1)"})
    task: str = field(default="gsm_symbolic", metadata={"help": "task whose prompts are decoded"})
    sd_gamma2: int = field(default=4, metadata={"help": "measure c2 from token-level SD runs at this gamma2 (0: c2 = c1)"})
    sd_tokens: int = field(default=128, metadata={"help": "tokens per SD (and matching plain) run for c2"})
    sd_prompts: int = field(default=3, metadata={"help": "prompts the c2 runs decode (their totals count)"})


def _time(backend, prefixes, tokens: int, repeats: int, gamma2: int = 0) -> float:
    from lrtune.backends.base import GenParams

    params = GenParams(max_tokens=tokens, stop_at_delimiter=False, num_speculative_tokens=gamma2)
    return min(backend.generate(prefixes, params).seconds for _ in range(repeats))


def measure_sd_cost(target, prompts: list[list[int]], opts: ProfileOptions) -> dict:
    """SD at γ2 = ``opts.sd_gamma2`` against plain decoding, ``opts.sd_tokens`` tokens on each
    prompt (one untimed warm-up of each first): the total speedup, the per-token acceptance α2
    (censoring-aware, :attr:`SDCounters.alpha`; the engine's accepted/drafted rate beside it)
    and the c2 they imply (:func:`lrtune.speedup.c_from_sd`)."""
    from lrtune.backends.base import GenParams, SDCounters
    from lrtune.speedup import c_from_sd

    plain = GenParams(max_tokens=opts.sd_tokens, stop_at_delimiter=False)
    spec = replace(plain, num_speculative_tokens=opts.sd_gamma2)
    t_plain = t_sd = 0.0
    total = SDCounters()
    for p in prompts:
        target.generate([p], plain)
        target.generate([p], spec)  # warm-up of both paths on this prompt
        a, b = target.generate([p], plain), target.generate([p], spec)
        if b.sd is None or len(b.outputs[0].token_ids) < opts.sd_tokens or len(a.outputs[0].token_ids) < opts.sd_tokens:
            raise ConfigError("an SD profiling run drafted nothing or ended early; lower --sd-tokens or use --sd-gamma2 0")
        t_plain, t_sd = t_plain + a.seconds, t_sd + b.seconds
        total.add(b.sd)
    alpha2 = total.alpha or 0.0
    speedup = t_plain / t_sd
    c2 = c_from_sd(speedup, min(alpha2, 0.999), opts.sd_gamma2)
    if c2 < 1e-3:
        log(f"warning: SD ran {speedup:.2f}x plain, faster than the model allows at α2 = {alpha2:.3f} "
            f"(c2 = {c2:.3f}); c2 is set to 0.001")
    log(f"SD at γ2 = {opts.sd_gamma2}: {speedup:.2f}x plain over {len(prompts)} x {opts.sd_tokens} tokens, "
        f"α2 = {alpha2:.3f} (accepted/drafted {total.acceptance_rate or 0.0:.3f}) -> c2 = {c2:.3f}")
    return {"gamma2": opts.sd_gamma2, "tokens": opts.sd_tokens, "prompts": len(prompts), "speedup": speedup,
            "alpha2": alpha2, "acceptance_rate": total.acceptance_rate, "c2": max(c2, 1e-3),
            "plain_s": t_plain, "sd_s": t_sd}


def curve_sizes(start: int, batch_max: int) -> list[int]:
    """Sizes above ``start`` up to ``batch_max``: 8, 12, 16, 24, 32, 48, 64, ... (×1.5, ×4/3)."""
    sizes, n = [], 8
    while n <= batch_max:
        if n > start:
            sizes.append(n)
        n = n * 3 // 2 if (n & (n - 1)) == 0 else n * 4 // 3
    return sizes


def out_file(spec: str) -> Path:
    """The JSON file ``--out`` names, its folder created; ConfigError (one line) when it is a
    directory or its folder cannot be written: checked before any model loads."""
    out = Path(spec).expanduser()
    if out.is_dir():
        raise ConfigError(f"--out {spec} is a directory; give the path of the JSON file to write")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"--out {spec}: cannot create its folder ({e.strerror or e})") from None
    if not os.access(out.parent, os.W_OK):
        raise ConfigError(f"--out {spec}: its folder {out.parent} is not writable")
    return out


def run(opts: ProfileOptions, models: ModelConfig) -> dict:
    from eval.evaluate import machine_info
    from lrtune.api import Decoder
    from lrtune.tasks import get_task

    if opts.gamma1_max < 1 or opts.tokens < 2 or opts.repeats < 1 or opts.sd_gamma2 < 0 or opts.sd_prompts < 1:
        raise ConfigError("--gamma1-max, --repeats and --sd-prompts must be >= 1, --tokens >= 2, --sd-gamma2 >= 0")
    out = out_file(opts.out)
    # with SD, one engine (vLLM: the shared SD engine, its drafter off for plain calls) serves every
    # measurement, as in evaluate: a second copy of the target would not fit beside it in float32
    dcfg = (DecodeConfig(method="lr+sd", gamma1=opts.gamma1_max, gamma2=opts.sd_gamma2) if opts.sd_gamma2 > 0
            else DecodeConfig(method="lr", gamma1=opts.gamma1_max))
    dec = Decoder.from_configs(replace(models, controller=None), dcfg, progress=True)
    dec.start_engines(dcfg)
    task = get_task(opts.task)
    big = curve_sizes(opts.gamma1_max + 1, opts.batch_max)
    probs = task.load(limit=max([opts.gamma1_max + 1, opts.sd_prompts, *big]), seed=0)
    prompts = [dec.encode(task.prompt(p)) for p in probs]
    target, draft = dec.target, dec.draft
    _time(target, prompts[:1], 8, 1)  # warm-up
    _time(draft, prompts[:1], 8, 1)
    t1 = _time(target, prompts[:1], opts.tokens, opts.repeats)
    td = _time(draft, prompts[:1], opts.tokens, opts.repeats)

    def costs(sizes, t_one: float, gamma2: int = 0) -> list[float]:
        """b(n) = time of n prompts / ``t_one`` for each size (rows decoded with SD at ``gamma2`` > 0)."""
        out = []
        for n in sizes:
            out.append(_time(target, prompts[:n], opts.tokens, opts.repeats, gamma2) / t_one)
            log(f"b{'_SD' if gamma2 else ''}({n}) = {out[-1]:.3f}" + (f" (γ2 = {gamma2})" if gamma2 else ""))
        return out

    sizes = range(2, opts.gamma1_max + 2)
    b = [1.0, *costs(sizes, t1)]
    curve = dict(zip(big, costs(big, t1)))
    b_sd = None
    if opts.sd_gamma2 > 0:  # LR+SD's target rows decode with SD: their batch cost, relative to one SD row
        _time(target, prompts[:1], 8, 1, opts.sd_gamma2)  # warm-up
        t1_sd = _time(target, prompts[:1], opts.tokens, opts.repeats, opts.sd_gamma2)
        b_sd = [1.0, *costs(sizes, t1_sd, opts.sd_gamma2)]
    c = td / t1
    sd = measure_sd_cost(target, prompts[:opts.sd_prompts], opts) if opts.sd_gamma2 > 0 else None
    prof = {"c1": c, "c2": sd["c2"] if sd else c, "sd": sd, "batch_cost": b, "batch_cost_sd": b_sd,
            "batch_cost_curve": curve, "target_s_per_token": t1 / opts.tokens,
            "draft_s_per_token": td / opts.tokens, "tokens": opts.tokens, "backend": models.backend,
            "target": models.target, "draft": models.draft, "dtype": models.dtype, "machine": machine_info(),
            "options": dataclasses.asdict(opts),
            "measured_at": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
    write_atomic(out, json.dumps(prof, indent=1))
    dec.close()
    return prof


def add_arguments(p: ArgumentParser) -> None:
    p.add_argument("--config", help="YAML file with any of these options")
    add_dataclass_args(p, ProfileOptions)
    add_dataclass_args(p, ModelConfig, skip=("verifier", "verifier_threshold", "judge_model", "controller"))


def make_parser() -> ArgumentParser:
    p = ArgumentParser(prog="lrtune profile", description=__doc__.splitlines()[0])
    add_arguments(p)
    return p


def main_from_args(args) -> int:
    file_values = load_config_file(getattr(args, "config", None))
    check_unknown_keys(file_values, ProfileOptions, ModelConfig)
    opts, models = build(ProfileOptions, args, file_values), build(ModelConfig, args, file_values)
    prof = run(opts, models)
    print(f"c1 = {prof['c1']:.3f}, c2 = {prof['c2']:.3f}; b(n) = " + ", ".join(f"{v:.2f}" for v in prof["batch_cost"])
          + f"; target {prof['target_s_per_token'] * 1000:.0f} ms/token, draft {prof['draft_s_per_token'] * 1000:.0f}"
          + f" ms/token -> {opts.out}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    try:
        raise SystemExit(main_from_args(make_parser().parse_args()))
    except LrtuneError as e:
        print(f"lrtune profile: error: {e}", file=sys.stderr)
        raise SystemExit(e.exit_code) from None
