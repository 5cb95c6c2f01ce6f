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
import time
from dataclasses import replace

from lrtune import gate
from lrtune.modelconfig import ModelConfig
from lrtune.configs import Command, Section
from lrtune.errors import ConfigError
from lrtune.decoder import DecodeConfig
from lrtune import schema
from lrtune.profiling import ProfileOptions, curve_sizes, measure
from lrtune.outdir import claim_json_out, json_out_file
from lrtune.runfiles import write_json_file


def _check_prefill_fits(opts: ProfileOptions, models: ModelConfig, prompts: list[str]) -> None:
    """ConfigError unless the longest timed draft chain fits after the prompts it follows in
    ``--max-model-len`` (from the tokenizer alone, before any model loads): a chain cut short
    by the context would time too little and report a cost below zero."""
    from lrtune.build import encode_prompts
    from lrtune.profiling import prefill_lengths

    lengths = prefill_lengths(opts.prefill_max)
    if not lengths:
        return
    longest = max(len(ids) for ids in encode_prompts(models, prompts, progress=True))
    if longest + max(lengths) + 1 > models.engine.max_model_len:
        raise ConfigError(
            f"--prefill-max {opts.prefill_max}: a draft chain of {max(lengths)} tokens after a prompt of "
            f"{longest} does not fit --max-model-len {models.engine.max_model_len}; lower --prefill-max or raise "
            "--max-model-len"
        )


def run(opts: ProfileOptions, models: ModelConfig) -> dict:
    from lrtune.eval.evaluate import machine_info
    from lrtune.decoding import Decoder
    from lrtune.peakmem import max_rss_gib
    from lrtune.tasks import get_task

    schema.check(opts)
    out = json_out_file(opts.out, inputs=(opts.data, models.target, models.draft))
    # with SD, one engine (vLLM: the shared SD engine, its drafter off for plain calls) serves every
    # measurement, as in evaluate: a second copy of the target would not fit beside it in float32
    dcfg = (
        DecodeConfig(method="lr+sd", gamma1=opts.gamma1_max, gamma2=opts.sd_gamma2)
        if opts.sd_gamma2 > 0
        else DecodeConfig(method="lr", gamma1=opts.gamma1_max)
    )
    task = get_task(opts.task)  # an unknown task, or a file task's missing file, fails before any model loads
    big = curve_sizes(opts.gamma1_max + 1, opts.batch_max)
    probs = task.load(limit=max([opts.gamma1_max + 1, opts.sd_prompts, *big]), seed=0, path=opts.data)
    if not probs:
        raise ConfigError(
            f"no problems to profile with in task {opts.task!r}" + (f" ({opts.data})" if opts.data else "")
        )
    _check_prefill_fits(opts, models, [task.prompt(p) for p in probs[: max(1, opts.repeats)]])
    gate.passed("profile")
    claim_json_out(out)  # one writer per file: a second profile into it is refused
    dec = Decoder.from_configs(replace(models, controller=None), dcfg, progress=True)
    dec.start_engines(dcfg)
    prompts = [dec.encode(task.prompt(p)) for p in probs]
    prof = {
        **measure(dec.target, dec.draft, prompts, opts),
        "backend": models.backend,
        "target": models.target,
        "draft": models.draft,
        "dtype": models.dtype,
        # a quantized copy is another model: its costs are not the model's as saved
        "target_quantization": models.target_quantization,
        "draft_quantization": models.draft_quantization,
        "machine": machine_info(),
        "options": dataclasses.asdict(opts),
        "measured_at": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        # what the run planned to hold in RAM (lrtune.cpumemory) and held (this process's high-water mark)
        "memory_plan": dec.memory_plan.to_dict() if dec.memory_plan is not None else None,
        "max_rss_gib": None if (rss := max_rss_gib()) is None else round(rss, 2),
    }
    write_json_file(out, prof)
    dec.close()
    return prof


COMMAND = Command(
    ("profile",),
    __doc__.splitlines()[0],
    (
        Section(ProfileOptions),
        Section(ModelConfig, skip=("verifier", "verifier_threshold", "judge_model", "controller")),
    ),
)
add_arguments, make_parser = COMMAND.add_arguments, COMMAND.make_parser


def main_from_args(args) -> int:
    opts, models = COMMAND.configs(args)
    prof = run(opts, models)
    print(
        f"c1 = {prof['c1']:.3f}, c2 = {prof['c2']:.3f}; b(n) = "
        + ", ".join(f"{v:.2f}" for v in prof["batch_cost"])
        + f"; target {prof['target_s_per_token'] * 1000:.0f} ms/token, draft {prof['draft_s_per_token'] * 1000:.0f}"
        + f" ms/token -> {opts.out}"
    )
    return 0


if __name__ == "__main__":  # pragma: no cover
    COMMAND.main(main_from_args)
