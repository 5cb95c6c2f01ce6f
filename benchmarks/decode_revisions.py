"""Decode speed and tokens of two revisions of lrtune, side by side, on the same machine and models.

Each revision is ``git archive``d into a temporary tree; each run is a fresh child process that
imports lrtune from its revision's tree, loads the default pair once (vLLM, this machine's dtype),
decodes one warm-up prompt, then decodes ``--problems`` gsm_symbolic prompts ``--concurrent`` at a
time with ``--method`` and the ``exact`` verifier (greedy), and reports tokens/s of that call and
the token ids. Runs alternate (A, B, A, B, ...) so a drift of the machine touches both. The figure
is the median tokens/s per revision and their ratio; the token ids of the two revisions are
compared problem by problem.

    python -m benchmarks.decode_revisions --before 31d4484 --after HEAD \\
        --out benchmarks/code_structure/decode_revisions.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks import extract_revision, parse, tree_env

CHILD = r"""
import json, sys, time
a = json.loads(sys.argv[1])
sys.path.insert(0, a["root"])
from lrtune.decoding import Decoder
from lrtune.tasks import get_task
t0 = time.perf_counter()
dec = Decoder.from_pretrained(method=a["method"], verifier="exact", gamma1=a["gamma1"], gamma2=a["gamma2"],
                              max_step_tokens=a["max_step_tokens"], progress=False)
load_s = time.perf_counter() - t0
task = get_task("gsm_symbolic")
probs = task.load(limit=a["problems"] + 1, seed=0)
dec.generate([task.prompt(probs[-1])], max_new_tokens=32)  # warm-up
prompts = [task.prompt(p) for p in probs[: a["problems"]]]
t0 = time.perf_counter()
outs = dec.generate(prompts, max_new_tokens=a["max_new_tokens"], max_concurrent=a["concurrent"])
wall = time.perf_counter() - t0
tokens = sum(len(o.token_ids) for o in outs)
print(json.dumps({"load_s": load_s, "wall_s": wall, "tokens": tokens, "tokens_per_s": tokens / wall,
                  "token_ids": [list(o.token_ids) for o in outs]}))
"""


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", required=True, help="git revision A")
    p.add_argument("--after", default="HEAD", help="git revision B")
    p.add_argument("--rounds", type=int, default=2, help="runs per revision (alternating)")
    p.add_argument("--method", default="lr+sd")
    p.add_argument("--problems", type=int, default=4)
    p.add_argument("--concurrent", type=int, default=4)
    p.add_argument("--gamma1", type=int, default=3)
    p.add_argument("--gamma2", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--max-step-tokens", type=int, default=96)
    p.add_argument("--out", default="benchmarks/code_structure/decode_revisions.json")
    return p


def run_child(root: Path, args: argparse.Namespace) -> dict:
    """One fresh process decoding with the lrtune of ``root``."""
    spec = {
        "root": str(root),
        **{k: getattr(args, k) for k in ("method", "problems", "concurrent", "gamma1", "gamma2")},
        "max_new_tokens": args.max_new_tokens,
        "max_step_tokens": args.max_step_tokens,
    }
    env = tree_env(root)
    got = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(spec)], capture_output=True, text=True, env=env, cwd=root
    )
    if got.returncode != 0:
        raise SystemExit(f"decode_revisions: the child of {root} failed:\n{got.stderr[-3000:]}")
    return json.loads(got.stdout.strip().splitlines()[-1])


def main(args: argparse.Namespace) -> dict:
    from lrtune.machine import machine_info

    revs = {"before": args.before, "after": args.after}
    out: dict = {"settings": {k: v for k, v in vars(args).items() if k != "out"}, "machine": machine_info()}
    with tempfile.TemporaryDirectory() as tmp:
        roots = {}
        for key, rev in revs.items():
            (Path(tmp) / key).mkdir()
            roots[key] = extract_revision(rev, Path(tmp) / key)
            sha = subprocess.run(["git", "rev-parse", "--short", rev], capture_output=True, text=True, check=True)
            out[key] = {"revision": sha.stdout.strip(), "runs": []}
        for r in range(args.rounds):
            for key in revs:
                got = run_child(roots[key], args)
                out[key]["runs"].append(got)
                print(f"{key} run {r + 1}: {got['tokens_per_s']:.2f} tokens/s ({got['tokens']} tokens)", flush=True)
    for key in revs:
        out[key]["tokens_per_s_median"] = statistics.median(x["tokens_per_s"] for x in out[key]["runs"])
    out["ratio_after_over_before"] = out["after"]["tokens_per_s_median"] / out["before"]["tokens_per_s_median"]
    a, b = out["before"]["runs"][0]["token_ids"], out["after"]["runs"][0]["token_ids"]
    out["identical_problems"] = sum(x == y for x, y in zip(a, b))
    out["problems"] = len(a)
    for key in revs:
        for run in out[key]["runs"]:
            run["token_ids"] = None if run is not out[key]["runs"][0] else run["token_ids"]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(
        f"after/before tokens/s {out['ratio_after_over_before']:.3f}; "
        f"identical tokens {out['identical_problems']}/{out['problems']}"
    )
    return out


if __name__ == "__main__":
    main(parse(make_parser()))
