"""How well does each model-judge form agree with outcome labels, on the production path?

Reads a collected step-pair dataset (``lrtune collect``; best with ``--teacher rollout`` or
``consensus(...)``, whose labels are outcomes), and scores every pair with each judge spec
(default ``llm_judge(context)`` and ``llm_judge(paper)``) exactly as collect and the decoder
do: the pair's recorded ``context``/``draft_step``/``target_step`` (the teacher's inputs),
``make_verifier`` on the target backend, the identical-steps rule. Prints one real judge
prompt as token ids and decoded text (special tokens included), then per spec: AUROC and
agreement against the dataset's labels, acceptance rate, acceptance of identical pairs, and
seconds per pair; writes JSON.

    lrtune labels judge-probe --data results/collect_rollout --out results/judge_probe.json
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from lrtune import gate
from lrtune.configs import Command, Section
from lrtune.errors import ConfigError
from lrtune.schema import STRICT, Checked, ContextLength, Positive, Seed, Size, Text


@dataclass
class JudgeProbeConfig(Checked):
    """Settings of ``lrtune labels judge-probe``."""

    __pydantic_config__ = STRICT

    data: Text = field(default="", metadata={"help": "a collect output directory"})
    out: Text = field(default="", metadata={"help": "JSON file to write (rewritten after every spec)"})
    specs: Text = field(default="llm_judge(context),llm_judge(paper)", metadata={"help": "comma list of judge specs"})
    limit: Size = field(default=0, metadata={"help": "score at most this many pairs (0 = all)"})
    sample: Size = field(default=0, metadata={"help": "score a seeded uniform sample of this many pairs (0 = all)"})
    seed: Seed = field(default=0, metadata={"help": "seed of --sample"})
    target: Text = field(
        default="default", metadata={"help": "the judge model: default, or a local HF model directory"}
    )
    backend: Text = field(default="vllm", metadata={"help": "vllm | transformers"})
    max_model_len: ContextLength = field(default=4096, metadata={"help": "engine context length (tokens)"})
    kv_cache_gib: Positive = field(default=1.0, metadata={"help": "vLLM-CPU KV cache (GiB)"})

    def validate(self) -> "JudgeProbeConfig":
        from lrtune.verifiers import check_verifier_spec

        if not self.data or not self.out:
            raise ConfigError("lrtune labels judge-probe needs --data DIR and --out FILE")
        if self.backend not in ("vllm", "transformers"):
            raise ConfigError(f"--backend: must be vllm or transformers, got {self.backend!r}")
        specs = [x.strip() for x in self.specs.split(",") if x.strip()]
        if not specs:
            raise ConfigError("--specs: give at least one judge spec")
        for spec in specs:
            check_verifier_spec(spec)
        return self


def _backend(args):
    from lrtune.models import resolve_model

    path = resolve_model(args.target, "target", progress=True)
    if args.backend == "transformers":
        from lrtune.backends.hf import HFBackend

        return HFBackend(path, name="judge")
    from lrtune.backends.vllm import VLLMBackend, VLLMConfig

    return VLLMBackend(path, VLLMConfig(max_model_len=args.max_model_len, kv_cache_gib=args.kv_cache_gib), name="judge")


def main(args: JudgeProbeConfig) -> dict:
    """Score a dataset's pairs with each judge spec and compare with its labels (phase 1 first)."""
    from lrtune.outdir import json_out_file
    from lrtune.runfiles import write_json_file
    from lrtune.verifiers import StepPair
    from lrtune.verifiers.base import same_step

    args.validate()
    out = json_out_file(args.out, inputs=(args.data, args.target))
    rows, n_all, index = _chosen_rows(args)
    pairs = [StepPair(r["context"] or "", r["draft_step"], r["target_step"]) for r in rows]
    labels = [bool(r["label"]) for r in rows]
    same = [same_step(p.draft, p.target) for p in pairs]
    gate.passed("labels judge-probe")
    from lrtune.outdir import claim_json_out

    claim_json_out(out)
    backend = _backend(args)
    res: dict = {
        "data": args.data,
        "pairs": len(pairs),
        "dataset_pairs": n_all,
        "row_index": index,
        "positives": sum(labels),
        "identical_pairs": sum(same),
        "teacher": rows[0]["teacher"] if rows else None,
        "judge": args.target,
        "specs": {},
    }
    for spec in [x.strip() for x in args.specs.split(",") if x.strip()]:
        r = _score_spec(spec, backend, pairs, labels, same)
        res["specs"][spec] = r
        print(
            f"{spec}: AUROC {r['auroc']}, agreement {r['agreement']}, accept rate {r['accept_rate']}, "
            f"accepts identical {r['identical_acceptance']}, {r['seconds_per_pair']} s/pair",
            flush=True,
        )
        write_json_file(out, res)  # after every spec: a long probe keeps what it has
    return res


def _chosen_rows(args: JudgeProbeConfig) -> tuple[list[dict], int, list[int]]:
    """The dataset's pairs to score (a seeded ``--sample``, then the first ``--limit``), the
    dataset's number of pairs and the chosen rows' indices in it."""
    from lrtune.dataset import load_tables

    pairs_t, _ = load_tables(Path(args.data))
    rows = pairs_t.to_pylist()
    n_all = len(rows)
    index = list(range(n_all))
    if args.sample and args.sample < n_all:
        import random

        index = sorted(random.Random(args.seed).sample(index, args.sample))
    if args.limit:
        index = index[: args.limit]
    return [rows[i] for i in index], n_all, index


def _score_spec(spec: str, backend, pairs: list, labels: list[bool], same: list[bool]) -> dict:
    """Score every pair with one judge spec (after printing one real prompt of it); its
    AUROC, agreement and acceptance against ``labels``, and seconds per pair."""
    from lrtune.pairstats import auroc
    from lrtune.verifiers import make_verifier

    ver = make_verifier(spec.strip(), backend=backend)
    sample = next((p for p, s in zip(pairs, same) if not s), None)
    example = None
    if sample is not None:
        ids = ver.prompts([sample])[0]
        example = {"token_ids": ids, "text": backend.decode(ids, skip_special_tokens=False)}
        print(
            f"--- {spec}: one production prompt, {len(ids)} token ids ---\n{ids}\n{example['text']}\n---",
            flush=True,
        )
    t0 = time.perf_counter()
    scores = ver.score(pairs)
    secs = time.perf_counter() - t0
    accept = [s >= ver.threshold for s in scores]
    ident = [a for a, s in zip(accept, same) if s]
    return {
        "threshold": ver.threshold,
        "auroc": auroc(scores, labels),
        "agreement": sum(a == y for a, y in zip(accept, labels)) / len(labels) if labels else None,
        "accept_rate": sum(accept) / len(accept) if accept else None,
        "identical_acceptance": sum(ident) / len(ident) if ident else None,
        "seconds_per_pair": secs / len(pairs) if pairs else None,
        "example_prompt": example,
        "scores": scores,
    }


COMMAND = Command(("labels", "judge-probe"), __doc__.splitlines()[0], (Section(JudgeProbeConfig),))
add_arguments, make_parser, config_from_args = COMMAND.add_arguments, COMMAND.make_parser, COMMAND.config


def main_from_args(args) -> int:
    main(config_from_args(args))
    return 0


if __name__ == "__main__":  # pragma: no cover
    COMMAND.main(main_from_args)
