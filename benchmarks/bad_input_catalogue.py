"""A catalogue of bad inputs, by kind, run through the real command line.

    python -m benchmarks.bad_input_catalogue [--out benchmarks/reliability/bad_input_catalogue.json]

Every case runs ``python -m lrtune ...`` in a fresh process against a workspace of good and
bad files (the tiny model pair, problem files, datasets, checkpoints, other commands' output
directories). A case is **clean** when the command exits with status 2 (130 for Ctrl-C),
prints exactly one line on stderr that starts ``lrtune: error:`` (``lrtune: interrupted``),
no traceback, and leaves every file of the workspace as it was (nothing changed, moved,
deleted or added). The cases are written fresh for this catalogue, apart from the test
tables (``tests/test_bad_input*.py``), and cover the kinds the mechanism is meant to handle:
numbers, choices, types, config files, files handed in, models, output directories, data
that an early failure must not touch, and Ctrl-C; misuse of the Python API (snippets through its
public entry points), valid non-ASCII input under the C locale, errors that must not echo a
file's contents, and two runs at once on one output directory.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def snapshot(root: Path) -> dict[str, str]:
    out = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        out[rel] = hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
    return out


def workspace(root: Path) -> dict:
    """Good and bad inputs under ``root``."""
    from lrtune.outdir import claim_out
    from lrtune.toymodels import get_tiny_pair, sample_questions

    pair = get_tiny_pair()
    w = {"root": root, "target": str(pair.target), "draft": str(pair.draft), "other": str(pair.other_vocab)}
    qs = sample_questions(3, seed=5)
    good = "".join(json.dumps({"id": f"q{i}", "question": q, "answer": "1"}) + "\n" for i, q in enumerate(qs))
    files = {
        "good.jsonl": good.encode(),
        "latin1.jsonl": json.dumps({"id": "a", "question": "caf", "answer": "1"}).encode()[:-2] + b'\xe9"}\n',
        "dupes.jsonl": (json.dumps({"id": "d", "question": "x?", "answer": "1"}) + "\n").encode() * 2,
        "long_line.jsonl": (json.dumps({"id": "l", "question": "x" * (3 << 20), "answer": "1"}) + "\n").encode(),
        "empty.jsonl": b"",
        "deep.json": b"[" * 5000 + b"]" * 5000,
        "big_row.json": json.dumps([{"id": "b", "question": "y" * (2 << 20), "answer": "1"}]).encode(),
        "not_list.json": b'{"id": "x"}',
        "bad.parquet": b"PAR1 nonsense PAR1",
        "twice.yaml": b"gamma1: 2\ngamma1: 4\n",
        "unicode.jsonl": "".join(
            json.dumps(
                {"id": f"u{i}", "question": f"Zoë a {i + 2} crêpes et en mange une — combien ?", "answer": "1"},
                ensure_ascii=False,
            )
            + "\n"
            for i in range(2)
        ).encode("utf-8"),
        "secret.jsonl": b'{"id": "s", "question": ["my key is hf_SECRETabc123"], "answer": "1"}\n',
        "secret.yaml": b"gamma1: 2\nhf_token: SECRETxyz789\n",
        "alias.yaml": b"a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
        b"c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: [*c, *c, *c, *c, *c, *c, *c, *c, *c]\n",
        "deep.yaml": b"gamma1: " + b"[" * 4000 + b"]" * 4000 + b"\n",
        "huge.yaml": b"# " + b"x" * (2 << 20) + b"\n",
        "latin1.yaml": b"method: caf\xe9\n",
        "top_list.yaml": b"- gamma1\n- 2\n",
        "unknown.yaml": b"gamma3: 2\n",
        "float.yaml": b"gamma1: 2.5\n",
        "text.yaml": b"gamma1: three\n",
        "list_temp.yaml": b"temperature: [1]\n",
        "list_prompt.yaml": b"prompt: [a, b]\n",
        "null_dtype.yaml": b"dtype: null\n",
        "str_bool.yaml": b"shared_engine: 'yes'\n",
        "binary.yaml": bytes(range(256)),
        "profile_bad.json": b"{not json",
        "profile_deep.json": b'{"c1": ' + b"[" * 5000 + b"]" * 5000 + b"}",
        "profile_list.json": b"[1, 2]",
    }
    for name, blob in files.items():
        (root / name).write_bytes(blob)
    (root / "empty_dir").mkdir()
    # model directories that cannot load
    for name, change in (
        ("empty_weights", lambda d: (d / "model.safetensors").write_bytes(b"")),
        ("truncated", lambda d: (d / "model.safetensors").write_bytes((d / "model.safetensors").read_bytes()[:200])),
        ("bad_config", lambda d: (d / "config.json").write_text("{oops")),
        ("no_weights", lambda d: (d / "model.safetensors").unlink()),
    ):
        d = root / name
        shutil.copytree(pair.target, d)
        change(d)
        w[name] = str(d)
    # output directories of other commands: new (owner records) and old (their files only)
    for command in ("collect", "evaluate", "train verifier", "train controller"):
        claim_out(root / f"owned_{command.replace(' ', '_')}", command)
    legacy = root / "legacy_collect"
    (legacy / "pairs").mkdir(parents=True)
    (legacy / "manifest-s000.json").write_text('{"finished": {}}')
    (legacy / "README.md").write_text("a dataset card")
    # a collect run dir with files of an interrupted run, and one of another config
    interrupted = root / "interrupted"
    (interrupted / "pairs").mkdir(parents=True)
    (interrupted / "pairs" / ".part-s000-p000003.parquet.staged").write_bytes(b"half")
    (interrupted / "manifest-s000.json").write_text('{"finished": {}}')
    ctl = root / "ctl_dir"
    ctl.mkdir()
    (ctl / "README.md").write_text("not a controller")
    # metadata with a key missing or of the wrong type
    import pyarrow as pa
    import pyarrow.parquet as pq

    from lrtune.verifiers import distilled
    from lrtune.policies import learned

    nolabel = root / "ds_no_label"
    nolabel.mkdir()
    pq.write_table(pa.table({"problem_id": ["p"], "draft_text": ["a"]}), nolabel / "pairs.parquet")
    pq.write_table(pa.table({"problem_id": ["p"], "index": [0]}), nolabel / "problems.parquet")
    typed = root / "ds_typed_manifest"
    typed.mkdir()
    (typed / "manifest-s000.json").write_text(json.dumps({"finished": {"p": {"index": "zero"}}}))
    meta = root / "ctl_no_bounds"
    meta.mkdir()
    (meta / learned.META).write_text(
        json.dumps(
            {
                "format": learned.FORMAT,
                "version": learned.VERSION,
                "policy": "learned",
                "profile": {"c1": 0.4, "c2": 0.4},
            }
        )
    )
    ver = root / "ver_typed"
    ver.mkdir()
    (ver / distilled.META).write_text(
        json.dumps(
            {
                "format": distilled.FORMAT,
                "version": distilled.VERSION,
                "kind": "features",
                "threshold": "high",
                "features": ["len_ratio"],
            }
        )
    )
    _datasets_to_read(root)
    (root / "nul.yaml").write_bytes(b'delimiter: "\\0"\n')
    (root / "record.yaml").write_bytes(b"record: logprobs\n")
    return w


def _datasets_to_read(root: Path) -> None:
    """Two real datasets (two problems each, written by the store) that a reader must not change:
    one a crash left with a committed problem's parts still staged, one whose manifest names a
    file in a folder beside it (``victim``)."""
    import os

    from lrtune.dataset import CONFIG, PAIR_FIELDS, PROBLEM_FIELDS, schema
    from lrtune.store import ShardStore, _staged

    for name in ("ds_staged", "ds_escape"):
        d = root / name
        d.mkdir()
        (d / CONFIG).write_text(
            json.dumps(
                {
                    "options": {"task": "gsm8k", "limit": 2, "teacher": "exact"},
                    "models": {"target": "t"},
                    "decode": {"gamma1": 2},
                }
            )
        )
        store = ShardStore(d, 0)
        for i, pid in enumerate(("a", "b")):
            pair = {
                "problem_id": pid,
                "task": "gsm8k",
                "round": 0,
                "position": 0,
                "branch": 0,
                "draft_step": "x",
                "target_step": "y",
                "label": i == 0,
                "exact_match": False,
                "teacher": "exact",
                "judge_s": 0.0,
            }
            prob = {
                "problem_id": pid,
                "index": i,
                "task": "gsm8k",
                "correct": True,
                "finished": True,
                "wall_s": 1.0,
                "tokens": 10,
                "alpha2": None,
            }
            store.add(pid, i, [pair], prob, schema(PAIR_FIELDS), schema(PROBLEM_FIELDS))
    part = root / "ds_staged" / "pairs" / "part-s000-p000001.parquet"
    os.replace(part, _staged(part))  # the crash window: committed in the manifest, not yet renamed
    victim = root / "victim"
    victim.mkdir()
    (victim / ".part-s000-p000000.parquet.staged").write_bytes(b"someone else's file")
    m = root / "ds_escape" / "manifest-s000.json"
    data = json.loads(m.read_text())
    data["finished"]["a"]["pairs"]["file"] = "../victim/part-s000-p000000.parquet"
    m.write_text(json.dumps(data))


def cases(w: dict) -> list[tuple[str, str, list[str], dict]]:
    """(kind, name, argv, options) of every case; options (:func:`run_one`): ``env`` (extra
    environment), ``expect`` ("error", the default, or "ok": a valid control that must succeed),
    ``forbid`` (a text the error line must not show), ``python`` (a snippet of the Python API run
    instead of the command line), ``twice`` (two copies at once on one output)."""
    r = w["root"]
    tiny = [
        "--target",
        w["target"],
        "--draft",
        w["draft"],
        "--backend",
        "transformers",
        "--device",
        "cpu",
        "--max-model-len",
        "512",
    ]
    out = str(r / "new_out")
    ev = [
        "evaluate",
        "--task",
        "custom",
        "--data",
        str(r / "good.jsonl"),
        "--limit",
        "2",
        "--methods",
        "target",
        "--max-new-tokens",
        "16",
        "--no-progress",
        "--no-plots",
        "--out",
        out,
        *tiny,
    ]
    co = [
        "collect",
        "--task",
        "custom",
        "--data",
        str(r / "good.jsonl"),
        "--limit",
        "2",
        "--teacher",
        "exact",
        "--max-new-tokens",
        "16",
        "--no-progress",
        "--out",
        out,
        *tiny,
    ]
    dec = ["decode", "hello", *tiny]
    tv = ["train", "verifier", "--data", str(r / "legacy_collect"), "--out", out, "--no-progress"]
    tc = ["train", "controller", "--data", str(r / "legacy_collect"), "--out", out]
    c = []

    def add(kind, name, argv, **options):
        c.append((kind, name, argv, options))

    for flag, value in (
        ("--temperature", "nan"),
        ("--temperature", "-inf"),
        ("--temperature", "-0.5"),
        ("--top-p", "0"),
        ("--top-p", "1.5"),
        ("--gamma1", "0"),
        ("--gamma1", "17"),
        ("--gamma2", "99"),
        ("--max-new-tokens", "0"),
        ("--max-new-tokens", "100000000000"),
        ("--max-step-tokens", "-3"),
        ("--verifier-threshold", "nan"),
        ("--verifier-threshold", "1.5"),
        ("--kv-cache-gib", "0"),
        ("--kv-cache-gib", "inf"),
        ("--tensor-parallel-size", "-1"),
        ("--gpu-memory-utilization", "0"),
        ("--target-gpu-share", "2"),
        ("--context-tokens", "-1"),
        ("--width", "9"),
        ("--seed", "-7"),
        ("--max-model-len", "3"),
        ("--branch-temperature", "0"),
    ):
        add("numbers", f"decode {flag} {value}", [*dec, flag, value])
    for argv, name in (
        (ev + ["--limit", "0"], "evaluate --limit 0"),
        (ev + ["--max-concurrent", "0", "--mode", "throughput"], "evaluate --max-concurrent 0"),
        (ev + ["--warmup-tokens", "-1"], "evaluate --warmup-tokens -1"),
        (co + ["--rollout-samples", "-1"], "collect --rollout-samples -1"),
        (co + ["--rollout-temperature", "0"], "collect --rollout-temperature 0"),
        (co + ["--num-shards", "0"], "collect --num-shards 0"),
        (co + ["--shard-id", "5", "--num-shards", "2"], "collect --shard-id 5 of 2"),
        (tv + ["--learning-rate", "0"], "train verifier --learning-rate 0"),
        (tv + ["--epochs", "0"], "train verifier --epochs 0"),
        (tv + ["--val-fraction", "1.5"], "train verifier --val-fraction 1.5"),
        (tc + ["--prior-strength", "-inf"], "train controller --prior-strength -inf"),
        (tc + ["--folds", "1"], "train controller --folds 1"),
        (tc + ["--budget", "-1"], "train controller --budget -1"),
        (["profile", "--tokens", "1", "--out", str(r / "p.json"), *tiny], "profile --tokens 1"),
        (["doctor", "--gamma2", "0"], "doctor --gamma2 0"),
        (["demo", "--gamma2", "0", "--out", out, *tiny], "demo --gamma2 0"),
        (["decode", "--task-problem", "-1", *tiny], "decode --task-problem -1"),
    ):
        add("numbers", name, argv)
    for argv, name in (
        ([*dec, "--dtype", "fp8"], "--dtype fp8"),
        ([*dec, "--device", "gpu0"], "--device gpu0"),
        ([*dec, "--backend", "tensorrt"], "--backend tensorrt"),
        ([*dec, "--method", "fast"], "--method fast"),
        (ev + ["--mode", "batch"], "--mode batch"),
        ([*dec, "--sd-method", "eagle"], "--sd-method eagle"),
        (tv + ["--student", "svm"], "--student svm"),
        (tv + ["--threshold-rule", "best"], "--threshold-rule best"),
        (co + ["--rollout-pairs", "some"], "--rollout-pairs some"),
        (["demo", "--size", "huge", "--out", out], "--size huge"),
        (["doctor", "--models", "big"], "doctor --models big"),
        ([*dec, "--verifier", "bogus"], "--verifier bogus"),
        ([*dec, "--controller", "nope"], "--controller nope"),
        (co + ["--teacher", "consensus(exact)"], "--teacher consensus(exact)"),
    ):
        add("choices", name, argv)
    srv = ["serve", *tiny]
    for argv, name in (
        ([*srv, "--port", "70000"], "serve --port 70000"),
        ([*srv, "--max-concurrent", "0"], "serve --max-concurrent 0"),
        ([*srv, "--max-queue", "-1"], "serve --max-queue -1"),
        ([*srv, "--request-timeout", "0"], "serve --request-timeout 0"),
        ([*srv, "--schedule", "async"], "serve --schedule async"),
        ([*srv, "--host", "no-such-host.invalid"], "serve --host that does not resolve"),
        ([*srv, "--profile", str(r / "no_such_profile.json")], "serve --profile that does not exist"),
    ):
        add("serve", name, argv)
    for name in ("float.yaml", "text.yaml", "list_temp.yaml", "null_dtype.yaml", "str_bool.yaml"):
        add("types", f"--config {name}", ["decode", "hi", "--config", str(r / name), *tiny])
    add("types", "--config list_prompt.yaml", ["decode", "--config", str(r / "list_prompt.yaml"), *tiny])
    for name in (
        "twice.yaml",
        "alias.yaml",
        "deep.yaml",
        "huge.yaml",
        "latin1.yaml",
        "top_list.yaml",
        "unknown.yaml",
        "binary.yaml",
        "missing.yaml",
    ):
        add("config files", f"--config {name}", ["decode", "hi", "--config", str(r / name), *tiny])
    add("config files", "--config a directory", ["decode", "hi", "--config", str(r / "empty_dir"), *tiny])
    add("config files", "pipeline without --config", ["pipeline", "--out", out])
    for data, name in (
        ("missing.jsonl", "missing"),
        ("x" * 300 + ".jsonl", "name too long"),
        ("empty_dir", "a directory of no problem files"),
        ("latin1.jsonl", "not UTF-8"),
        ("deep.json", "JSON nested 5000 deep"),
        ("big_row.json", "a .json row over 1 MiB"),
        ("not_list.json", ".json not a list"),
        ("bad.parquet", "corrupt parquet"),
        ("long_line.jsonl", "a 3 MiB JSONL line"),
        ("empty.jsonl", "no problems"),
        ("dupes.jsonl", "duplicate ids"),
    ):
        add("files", f"evaluate --data {name}", [*ev, "--data", str(r / data)])
    add("files", "collect --data latin1", [*co, "--data", str(r / "latin1.jsonl")])
    add("files", "evaluate --problem-ids @missing", [*ev, "--problem-ids", "@" + str(r / "nope.txt")])
    for prof in ("missing.json", "profile_bad.json", "profile_deep.json", "profile_list.json"):
        add("files", f"evaluate --profile {prof}", [*ev, "--profile", str(r / prof)])
    add("files", "evaluate --heldout-from missing", [*ev, "--heldout-from", str(r / "nope")])
    add("files", "train controller --profile bad", [*tc, "--profile", str(r / "profile_bad.json")])
    add("files", "collect --stats of a file", ["collect", "--stats", str(r / "good.jsonl")])
    add(
        "metadata", "train verifier on pairs without labels", [*tv[:-3], "--data", str(r / "ds_no_label"), "--out", out]
    )
    add(
        "metadata",
        "collect --stats of a manifest with a mistyped index",
        ["collect", "--stats", str(r / "ds_typed_manifest")],
    )
    add(
        "metadata",
        "--controller whose metadata lacks bounds",
        ["decode", "hi", "--method", "lr+sd", *tiny, "--controller", str(r / "ctl_no_bounds")],
    )
    add(
        "metadata",
        "--verifier checkpoint with a text threshold",
        ["decode", "hi", "--method", "lr", *tiny, "--verifier", str(r / "ver_typed")],
    )
    for name in ("empty_weights", "truncated", "bad_config", "no_weights"):
        add("models", f"--target {name}", ["decode", "hi", *tiny, "--target", w[name]])
    add("models", "--target missing", ["decode", "hi", *tiny, "--target", str(r / "nope")])
    add("models", "--target a file", ["decode", "hi", *tiny, "--target", str(r / "good.jsonl")])
    add("models", "--draft of another vocabulary", ["decode", "hi", "--method", "lr", *tiny, "--draft", w["other"]])
    add(
        "models",
        "--judge-model missing",
        ["decode", "hi", "--method", "lr", "--verifier", "llm_judge", *tiny, "--judge-model", str(r / "nope")],
    )
    add(
        "models",
        "--verifier missing checkpoint dir",
        ["decode", "hi", "--method", "lr", *tiny, "--verifier", str(r / "empty_dir")],
    )
    add(
        "models",
        "--controller dir that is not one",
        ["decode", "hi", "--method", "lr+sd", *tiny, "--controller", str(r / "ctl_dir")],
    )
    for owned in ("collect", "train_verifier", "train_controller"):
        add("output dirs", f"evaluate --out owned by {owned}", [*ev, "--out", str(r / f"owned_{owned}")])
    add("output dirs", "evaluate --out an old collect dataset", [*ev, "--out", str(r / "legacy_collect")])
    add("output dirs", "train verifier --out a collect dataset", [*tv[:-3], "--out", str(r / "owned_collect")])
    add("output dirs", "train controller --out an evaluate run", [*tc[:-2], "--out", str(r / "owned_evaluate")])
    add(
        "output dirs",
        "collect --merge --out a controller",
        ["collect", "--merge", str(r / "legacy_collect"), "--out", str(r / "owned_train_controller")],
    )
    add("output dirs", "collect --out owned by evaluate", [*co, "--out", str(r / "owned_evaluate")])
    add("output dirs", "--out is a file", [*ev, "--out", str(r / "good.jsonl")])
    add("output dirs", "--out under a file", [*ev, "--out", str(r / "good.jsonl" / "sub")])
    add("output dirs", "profile --out a directory", ["profile", "--out", str(r / "empty_dir"), *tiny])
    add("output dirs", "doctor --json a directory", ["doctor", "--json", str(r / "empty_dir")])
    add(
        "early failures",
        "collect resumes an interrupted run, bad draft path",
        [*co, "--out", str(r / "interrupted"), "--draft", str(r / "nope")],
    )
    add(
        "early failures",
        "collect --force-new, bad target path",
        [*co, "--out", str(r / "interrupted"), "--force-new", "--target", str(r / "nope")],
    )
    add(
        "early failures",
        "evaluate --overwrite, unknown controller",
        [
            *ev,
            "--out",
            str(r / "owned_evaluate"),
            "--overwrite",
            "--methods",
            "target,adaptive",
            "--controller",
            "nope",
        ],
    )
    add(
        "early failures",
        "evaluate --overwrite, bad verifier spec",
        [*ev, "--out", str(r / "owned_evaluate"), "--overwrite", "--methods", "lr/v=llm_judge(fancy)"],
    )
    add(
        "early failures",
        "collect, no prompt fits",
        [*co, "--max-model-len", "40", "--max-new-tokens", "16", "--max-step-tokens", "16"],
    )
    add(
        "reading",
        "train verifier on a crash-staged dataset, too few pairs",
        ["train", "verifier", "--data", str(r / "ds_staged"), "--out", out, "--no-progress"],
    )
    add(
        "reading",
        "collect --stats, manifest names a file beside the dataset",
        ["collect", "--stats", str(r / "ds_escape")],
    )
    add(
        "reading",
        "train verifier, manifest names a file beside the dataset",
        ["train", "verifier", "--data", str(r / "ds_escape"), "--out", out, "--no-progress"],
    )
    add("late checks", "demo --collect-problems 2", ["demo", "--collect-problems", "2", "--out", out, *tiny])
    add(
        "late checks",
        "profile of a file task without its file",
        ["profile", "--task", "custom", "--data", str(r / "missing.jsonl"), "--out", str(r / "p.json"), *tiny],
    )
    add("late checks", "collect --config with a record it would replace", [*co, "--config", str(r / "record.yaml")])
    add("numbers", "profile --prefill-max 15", ["profile", "--prefill-max", "15", "--out", str(r / "p.json"), *tiny])
    add("config files", "a NUL delimiter", [*dec, "--max-new-tokens", "16", "--config", str(r / "nul.yaml")])
    _api_cases(add, w)
    _locale_secret_concurrency_cases(add, w, ev, tiny)
    for delay in INTERRUPT_DELAYS:
        add(
            "interrupt",
            f"Ctrl-C {delay} s into a decode",
            ["decode", "hi", *tiny, "--method", "lr", "--max-new-tokens", "300", "--max-step-tokens", "16"],
        )
    return c


INTERRUPT_DELAYS = (0.1, 0.4, 1.0, 2.0, 4.0)  # import, parse, model load, decode

# A Python API case: the snippet runs; an lrtune error that is a ValueError or TypeError, in one
# line, naming the argument (``word``) is printed as the command line would print it (exit 2);
# anything else escapes as a traceback (not clean).
API_WRAPPER = """
import sys
from lrtune.errors import LrtuneError
try:
{body}
except LrtuneError as e:
    if isinstance(e, (ValueError, TypeError)) and {word!r} in str(e) and "\\n" not in str(e):
        sys.stderr.write(f"lrtune: error: {{type(e).__name__}}: {{e}}\\n")
        sys.exit(2)
    raise
"""


def _api_cases(add, w: dict) -> None:
    """Misuse of the Python API at its public entry points: one ValueError/TypeError naming the
    argument, before or where the bad value enters."""
    load = (
        f"from lrtune import Decoder\n"
        f"dec = Decoder.from_pretrained({w['target']!r}, {w['draft']!r}, backend='transformers', device='cpu', "
        f"method='lr', gamma1=2, max_model_len=512, max_step_tokens=16, progress=False)\n"
    )
    snippets = [
        ("from_pretrained gamma1=1.5", "from lrtune import Decoder\nDecoder.from_pretrained(gamma1=1.5)", "gamma1"),
        (
            "from_pretrained unknown option",
            "from lrtune import Decoder\nDecoder.from_pretrained(kv_cache=2)",
            "kv_cache",
        ),
        ("ModelConfig kv_cache_gib=-1", "from lrtune import ModelConfig\nModelConfig(kv_cache_gib=-1)", "kv-cache-gib"),
        ("ModelConfig engine of the wrong type", "from lrtune import ModelConfig\nModelConfig(engine=3)", "engine"),
        ("DecodeConfig gamma1=99", "from lrtune import DecodeConfig\nDecodeConfig(gamma1=99)", "gamma1"),
        ("Pricing c1=-1", "from lrtune import Pricing\nPricing(c1=-1)", "c1"),
        ("generate([])", load + "dec.generate([])", "prompts"),
        ("generate(None)", load + "dec.generate(None)", "prompts"),
        ("generate([None])", load + "dec.generate([None])", "prompts[0]"),
        ("generate max_concurrent='2'", load + "dec.generate('hi', max_concurrent='2')", "max_concurrent"),
        ("generate on_step='x'", load + "dec.generate('hi', on_step='x')", "on_step"),
        ("generate gamma1='3'", load + "dec.generate('hi', gamma1='3')", "gamma1"),
        (
            "a controller choosing gamma1=1.5",
            "from lrtune import Decoder\n"
            "class C:\n    def choose(self, s): return (1.5, 0)\n    def update(self, o): pass\n"
            f"dec = Decoder.from_pretrained({w['target']!r}, {w['draft']!r}, backend='transformers', device='cpu', "
            "method='lr', gamma1=2, max_model_len=512, max_step_tokens=16, progress=False, controller=C())\n"
            "out = dec.generate('hi', max_new_tokens=16)\n"
            "raise out[0].error if getattr(out[0], 'error', None) is not None else SystemExit(0)",
            "controller",
        ),
        (
            "a verifier scoring NaN",
            "from lrtune import Decoder\n"
            "class V:\n    name = 'nan'\n    threshold = 0.5\n"
            "    def score(self, pairs): return [float('nan')] * len(pairs)\n"
            f"dec = Decoder.from_pretrained({w['target']!r}, {w['draft']!r}, backend='transformers', device='cpu', "
            "method='lr', gamma1=2, max_model_len=512, max_step_tokens=16, progress=False, verifier=V())\n"
            "out = dec.generate('hi', max_new_tokens=16)\n"
            "raise out[0].error if getattr(out[0], 'error', None) is not None else SystemExit(0)",
            "score",
        ),
    ]
    for name, body, word in snippets:
        code = API_WRAPPER.format(body="\n".join("    " + ln for ln in body.splitlines()), word=word)
        add("api misuse", name, [], python=code)


def _locale_secret_concurrency_cases(add, w: dict, ev: list[str], tiny: list[str]) -> None:
    """Valid non-ASCII input under the C locale, errors that never echo a file's contents, and
    two runs at once on one output directory."""
    r = w["root"]
    outside = str(Path(str(r) + "_outputs") / "out")  # valid runs write outside the watched workspace
    c_locale = {"LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONIOENCODING": ""}
    ok_ev = [*ev[: ev.index("--out")], "--out", outside, *tiny, "--data", str(r / "unicode.jsonl")]
    add("locale", "evaluate of a UTF-8 problem file under the C locale", ok_ev, env=c_locale, expect="ok")
    add(
        "locale",
        "a missing non-ASCII --data path under the C locale",
        [*ev, "--data", str(r / "données_ø.jsonl")],
        env=c_locale,
    )
    add(
        "secrets",
        "a problem field of the wrong type holding a token",
        [*ev, "--data", str(r / "secret.jsonl")],
        forbid="hf_SECRETabc123",
    )
    add("secrets", "a config value holding a token", [*ev, "--config", str(r / "secret.yaml")], forbid="SECRETxyz789")
    add(
        "concurrency",
        "two evaluates at once on one new --out",
        [*ev[: ev.index("--out")], "--out", outside, *tiny],
        twice=True,
    )


def run_case(
    argv: list[str], env: dict, interrupt_after: float | None = None, python: str | None = None
) -> tuple[int, str, float]:
    t0 = time.perf_counter()
    cmd = [sys.executable, "-c", python] if python is not None else [sys.executable, "-m", "lrtune", *argv]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    if interrupt_after is not None:
        time.sleep(interrupt_after)
        proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        return -9, (err or "") + "\n(timeout)", time.perf_counter() - t0
    return proc.returncode, err, time.perf_counter() - t0


def run_twice(argv: list[str], env: dict) -> tuple[list[int], list[str], float]:
    """Two copies of one command started together: (exit statuses, stderr texts, seconds)."""
    t0 = time.perf_counter()
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "lrtune", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True
        )
        for _ in range(2)
    ]
    errs = [p.communicate(timeout=600)[1] for p in procs]
    return [p.returncode for p in procs], errs, time.perf_counter() - t0


def _out_of(argv: list[str]) -> Path | None:
    """The value of the last ``--out`` of a command line (the one argparse keeps), or None."""
    if "--out" not in argv:
        return None
    last = len(argv) - 1 - argv[::-1].index("--out")
    return Path(argv[last + 1])


def run_one(kind: str, name: str, argv: list[str], options: dict, root: Path, env: dict) -> dict:
    """One case, judged: an error case is clean when it exits 2 (130 for Ctrl-C) with one
    ``lrtune: error:`` line (showing nothing ``forbid`` names) and the workspace unchanged; a
    valid control (``expect="ok"``) when it exits 0 with the workspace unchanged; a ``twice``
    case when one copy finishes, the other is refused in one line, and each record is written
    once."""
    env = {**env, **options.get("env", {})}
    before = snapshot(root)
    out = _out_of(argv)
    if out is not None and root not in out.parents:
        shutil.rmtree(out.parent, ignore_errors=True)
    if options.get("twice"):
        rcs, errs, secs = run_twice(argv, env)
        refused = [e for rc, e in zip(rcs, errs) if rc == 2]
        lines = [ln for e in refused for ln in e.strip().splitlines() if ln.strip()]
        recs = (out / "records.jsonl").read_text(encoding="utf-8").splitlines() if out and out.is_dir() else []
        keys = [(json.loads(x).get("problem"), json.loads(x).get("method")) for x in recs if x.strip()]
        rc = rcs
        clean = (
            sorted(rcs) == [0, 2]
            and len(lines) == 1
            and lines[0].startswith("lrtune: error:")
            and len(keys) == len(set(keys))
            and bool(keys)
        )
    else:
        delay = float(name.split()[1]) if kind == "interrupt" else None
        rc, err, secs = run_case(argv, env, interrupt_after=delay, python=options.get("python"))
        lines = [ln for ln in err.strip().splitlines() if ln.strip()]
        if options.get("expect") == "ok":
            clean = rc == 0 and out is not None and (out / "summary.json").is_file()
        else:
            want_rc, prefix = (130, "lrtune: interrupted") if kind == "interrupt" else (2, "lrtune: error:")
            clean = rc == want_rc and len(lines) == 1 and lines[0].startswith(prefix)
            clean = clean and not (options.get("forbid") and options["forbid"] in err)
    after = snapshot(root)
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    return {
        "kind": kind,
        "case": name,
        "rc": rc,
        "stderr": lines[-3:],
        "changed": changed[:5],
        "clean": bool(clean and not changed),
        "seconds": round(secs, 2),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="benchmarks/reliability/bad_input_catalogue.json")
    ap.add_argument("--only", default=None, help="run only cases whose name contains this ('|' between alternatives)")
    args = ap.parse_args()
    from lrtune.machine import machine_info

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    rows = []
    with tempfile.TemporaryDirectory(prefix="lrtune-bad-") as tmp:
        root = Path(tmp)
        w = workspace(root)
        todo = [c for c in cases(w) if args.only is None or any(o in c[1] for o in args.only.split("|"))]
        for kind, name, argv, options in todo:
            row = run_one(kind, name, argv, options, root, env)
            rows.append(row)
            last = row["stderr"][-1][:100] if row["stderr"] else ""
            print(f"{'clean' if row['clean'] else 'NOT CLEAN':9} {kind:15} {name:55} rc={row['rc']} {last}", flush=True)
    by_kind: dict[str, list[int]] = {}
    for row in rows:
        k = by_kind.setdefault(row["kind"], [0, 0])
        k[0] += row["clean"]
        k[1] += 1
    summary = {
        "clean": sum(r["clean"] for r in rows),
        "cases": len(rows),
        "by_kind": {k: {"clean": v[0], "cases": v[1]} for k, v in by_kind.items()},
    }
    print(
        f"{summary['clean']} of {summary['cases']} clean; "
        + ", ".join(f"{k} {v['clean']}/{v['cases']}" for k, v in summary["by_kind"].items())
    )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "summary": summary,
                "cases": rows,
                "machine": machine_info(),
                "command": "python -m benchmarks.bad_input_catalogue",
                "measured_at": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            },
            indent=1,
        )
        + "\n"
    )
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
