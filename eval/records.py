"""An evaluate run's directory: the config it was made with, its records (one JSON line per
problem x method, appended and fsynced), resuming and ``--overwrite``."""

from __future__ import annotations

import os
import json
import time
from pathlib import Path

from lrtune.modelconfig import ModelConfig
from lrtune.decoder import DecodeConfig
from lrtune.errors import ConfigError
from lrtune.outdir import check_out, claim_out
from lrtune.runfiles import append_jsonl as append_record  # noqa: F401 - evaluate appends through this name
from lrtune.runfiles import changed_keys, config_key, load_jsonl, log, read_json, write_atomic

from lrtune.eval.config import EvalConfig, EvalOptions

RECORDS, SUMMARY, REPORT, CONFIG = "records.jsonl", "summary.json", "report.md", "config.json"
THROUGHPUT = "throughput.jsonl"  # one line per (method, invocation) in throughput mode: BatchStats


# Options that may change between runs into the same --out (they do not change results).
RESUME_FREE = (
    "limit",
    "progress",
    "plots",
    "overwrite",
    "out",
    "profile",
    "record_pairs",
)  # profile: only the predicted column


def load_records(path: Path, keys: tuple[str, ...] = ("problem", "method")) -> list[dict]:
    """Records of ``records.jsonl`` (:func:`lrtune.runfiles.load_jsonl`: a torn last line is
    dropped and the file rewritten without it, so appending can continue)."""
    from lrtune.filekinds import EvalRecord

    return load_jsonl(
        path,
        keys,
        what="lrtune evaluate record",
        text_keys=tuple(k for k in ("problem", "method") if k in keys),
        kinds=(EvalRecord,) if keys == ("problem", "method") else (),
    )


def resume_key(cfg: EvalConfig) -> dict:
    """The part of the config that must match to append to an existing run: the options and,
    for each verifier checkpoint it decodes with, the sha256 of its metadata (threshold and
    calibration live there), so a resume across a recalibration is refused."""
    key = config_key({"options": cfg.options, "models": cfg.models, "decode": cfg.decode}, RESUME_FREE)
    digests = checkpoint_digests(cfg)
    return {**key, "checkpoints": digests} if digests else key


def checkpoint_digests(cfg: EvalConfig) -> dict[str, str]:
    """{checkpoint path: sha256 of its ``lrtune_verifier.json``} for the run's verifier and every
    method's ``v=`` checkpoint (a path that holds no checkpoint is left to the checks that refuse it)."""
    from lrtune.eval.methods import parse_methods
    from lrtune.store import sha256
    from lrtune.verifiers import VerifierSpec
    from lrtune.verifiers.distilled import META

    o = cfg.options
    try:
        methods = parse_methods(o.methods, o.sweep, cfg.decode.gamma1, cfg.decode.gamma2)
    except ConfigError:
        return {}
    out = {}
    for given in [cfg.models.verification.spec, *(m.verifier for m in methods)]:
        try:
            spec = VerifierSpec.parse(given) if isinstance(given, str) else None
        except ConfigError:
            continue
        if spec is not None and spec.kind == "checkpoint" and (Path(spec.path).expanduser() / META).is_file():
            out[spec.path] = sha256(Path(spec.path).expanduser() / META)
    return out


def check_resume(cfg: EvalConfig) -> None:
    """Phase 1: ``--out`` can take this run (:func:`lrtune.outdir.check_out`) and holds no run
    of another config unless ``--overwrite``; reads only."""
    out = check_out(cfg.options.out, "evaluate")
    if not cfg.options.overwrite:
        previous_summary(out)  # a summary whose carried-over keys do not fit is refused now
        records = out / RECORDS
        if records.is_file() and not os.access(records, os.W_OK):  # a resume appends to it
            raise ConfigError(f"{records} cannot be written (read-only): a resumed run appends to it")
    cfg_path = out / CONFIG
    if not cfg_path.is_file():
        return
    old = read_json(cfg_path)
    diff = _changed(old, resume_key(cfg)) if old is not None else ["unreadable config"]
    if cfg.options.mode == "throughput" and "options.methods" in diff:
        # throughput mode decodes method after method anyway: a new --methods list reuses the
        # finished (problem, method) decodes and decodes only the methods it adds
        diff.remove("options.methods")
        log(f"{out}: --methods changed; finished decodes are reused, new methods decoded")
    if diff and not cfg.options.overwrite:
        raise ConfigError(
            f"{out} holds a run with a different config ({', '.join(diff)}); "
            "use another --out, or --overwrite to start over (old records are kept)"
        )


def prepare_out_dir(cfg: EvalConfig) -> tuple[Path, list[dict]]:
    """Phase 2 (after :func:`check_resume`): claim ``--out``, set old files aside with
    ``--overwrite``, record this config; return the directory and the records already there."""
    out = claim_out(cfg.options.out, "evaluate")
    if not cfg.options.overwrite:
        load_records(out / RECORDS)  # records to resume are read (and refused) before anything is written
    else:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        for name in (RECORDS, SUMMARY, REPORT, CONFIG, THROUGHPUT):
            if (out / name).exists():
                (out / name).rename(out / f"{name}.bak-{stamp}")
    write_atomic(out / CONFIG, json.dumps(resume_key(cfg), indent=1))
    return out, load_records(out / RECORDS)


def _changed(old: dict, new: dict) -> list[str]:
    """Config keys whose value changed (see :func:`lrtune.runfiles.changed_keys`)."""
    return changed_keys(
        old, new, resume_key(EvalConfig(options=EvalOptions(), models=ModelConfig(), decode=DecodeConfig()))
    )


def throughput_rows(path: Path, labels) -> dict[str, dict]:
    """Per method, the sum of its ``throughput.jsonl`` lines (a resumed method has several):
    problems, wall seconds, tokens, problems/hour, tokens/s and rows per engine call."""
    out: dict[str, dict] = {}
    for line in load_records(path, keys=("method", "prompts", "wall_s")) if path.is_file() else []:
        m = out.setdefault(
            line["method"],
            {
                "prompts": 0,
                "wall_s": 0.0,
                "generated_tokens": 0,
                "calls": {},
                "rows": {},
                "max_concurrent": line["max_concurrent"],
            },
        )
        m["prompts"] += line["prompts"]
        m["wall_s"] += line["wall_s"]
        m["generated_tokens"] += line["generated_tokens"]
        for kind in line["calls"]:
            m["calls"][kind] = m["calls"].get(kind, 0) + line["calls"][kind]
            m["rows"][kind] = m["rows"].get(kind, 0) + line["rows"][kind]
    for m in out.values():
        m["problems_per_hour"] = 3600.0 * m["prompts"] / m["wall_s"] if m["wall_s"] else None
        m["tokens_per_s"] = m["generated_tokens"] / m["wall_s"] if m["wall_s"] else None
        m["rows_per_call"] = {k: m["rows"][k] / m["calls"][k] for k in m["calls"] if m["calls"][k]}
    return {k: out[k] for k in labels if k in out}


def previous_summary(out: Path) -> dict:
    """The last summary of this run directory (its timings and b(n) carry over to this
    invocation); ConfigError naming the file and field when they do not fit
    (:class:`lrtune.filekinds.EvalSummary`), before any model loads."""
    from lrtune.filekinds import EvalSummary, read

    return read(out / SUMMARY, EvalSummary, "evaluate summary") if (out / SUMMARY).exists() else {}
