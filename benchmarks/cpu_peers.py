"""lrtune against llama.cpp on a CPU: the same pair, the same prompt, one run (the CPU-peer issue).

    python -m benchmarks.cpu_peers --llama-cpp ../peers/build/bin --out benchmarks/cpu_peers/avx2.json

Greedy decoding of one chat prompt (a gsm_symbolic problem through the target's chat template),
``--tokens`` new tokens at most, 2 threads, one job at a time. Rows:

- llama.cpp target-only (``llama-completion``) and draft-model speculative decoding
  (``llama-speculative-simple``, ``--draft-max`` tokens) on the default pair's own GGUF files
  (:func:`lrtune.default_pair.default_gguf`), each with the kernels it reported (its
  ``system_info`` line and CPU buffer types: ``CPU_REPACK`` is weight repacking);
- lrtune ``target`` and ``sd`` (γ2 = ``--gamma2``) for each target format in ``--formats``
  (``none``: the converted checkpoint as saved, in the dtype vLLM runs it here; ``int8`` and
  ``int8-weights``: ``--target-quantization``'s W8A8 and weight-only copies; ``none:bfloat16``
  forces a dtype), each method in its own child process; ``--draft-quantization`` gives the
  sd rows a copy of the draft.

Per row: tokens made, tokens/s (wall time of the generation, prefill included; llama.cpp's own
decode-only rate beside it), peak resident memory of the row's process tree (PSS, sampled;
GiB = 2^30 bytes), and whether its text is identical to the reference row's (lrtune target as
saved) and to llama.cpp target-only's, with the first differing character. llama.cpp is built from its PyPI source
distribution (``docs/guides/cpu_peers.md``); without ``--llama-cpp`` its rows are skipped with
one line. Resumable: rows already in ``--out`` with the same settings are kept.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import time
from pathlib import Path

THREADS = 2
# what llama.cpp prints about a run: a pattern and the (name, type) of each of its groups
FIGURES = (
    (r"prompt eval time =\s*([\d.]+) ms /\s*(\d+) tokens", (("prompt_ms", float), ("prompt_tokens", int))),
    (r"\s eval time =\s*([\d.]+) ms /\s*(\d+) runs", (("eval_ms", float), ("eval_runs", int))),
    (r"encoded\s+(\d+) tokens in\s+([\d.]+) seconds", (("encoded_tokens", int), ("encoded_s", float))),
    (r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds", (("decoded_tokens", int), ("decoded_s", float))),
    (r"accept\s*=\s*([\d.]+)%", (("accept_pct", float),)),
)


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--llama-cpp", default=None, help="folder holding llama-completion and llama-speculative-simple")
    p.add_argument(
        "--formats", default="none,int8", help="lrtune target formats: none | int8 | int8-weights | none:DTYPE, ..."
    )
    p.add_argument("--methods", default="target,sd", help="lrtune methods: target, sd")
    p.add_argument(
        "--draft-quantization", default="none", choices=("none", "int8", "int8-weights"), help="the sd rows' draft"
    )
    p.add_argument("--tokens", type=int, default=256, help="new tokens at most")
    p.add_argument("--gamma2", type=int, default=4, help="draft tokens per SD pass (llama.cpp: --draft-max)")
    p.add_argument("--problem", type=int, default=0, help="index of the gsm_symbolic problem (task seed 0)")
    p.add_argument("--out", default="benchmarks/cpu_peers/run.json")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)  # internal: one lrtune row
    return p


def first_difference(a: str, b: str) -> int | None:
    """Index of the first character where ``a`` and ``b`` differ; None when identical."""
    if a == b:
        return None
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)


def strip_echo(text: str, prompt: str) -> str:
    """``text`` after the echo of ``prompt`` (llama-speculative-simple prints the prompt, special
    tokens included, before the generation); ``text`` itself when it holds no echo."""
    tail = prompt.rstrip()[-40:]  # it prints the prompt's last newline token with the generation, or not at all
    return text[text.index(tail) + len(tail) :].lstrip("\n") if tail and tail in text else text


def llama_figures(stderr: str) -> dict:
    """What llama.cpp printed about a run: prompt and generated tokens with their milliseconds
    (``llama_perf_context_print``), speculative acceptance, and the kernel lines."""
    out: dict = {}
    for pattern, names in FIGURES:
        m = re.search(pattern, stderr)
        if m:
            out.update((name, cast(v)) for (name, cast), v in zip(names, m.groups()))
    keys = ("system_info", "file type", "buffer size", "CPU_REPACK", "n_accept", "n_drafted")
    out["kernels"] = [ln.strip()[:300] for ln in stderr.splitlines() if any(k in ln for k in keys)][:24]
    return out


def _watched(
    cmd: list[str], env: dict | None = None, timeout: float = 1800
) -> tuple[subprocess.CompletedProcess, float, float]:
    """Run ``cmd``; (the finished process, wall seconds, peak GiB of its process tree by PSS)."""
    from lrtune.peakmem import PeakMemory, tree_rss_bytes

    base = tree_rss_bytes()
    t0 = time.perf_counter()
    with PeakMemory(interval=0.25) as pm:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    return proc, time.perf_counter() - t0, max(0.0, (pm.peak_bytes - base) / 2**30)


def llama_row(kind: str, bin_dir: Path, prompt_file: Path, gguf: dict, args) -> dict:
    """One llama.cpp row: ``target`` (llama-completion) or ``speculative`` (llama-speculative-simple)."""
    common = ["-f", str(prompt_file), "-n", str(args.tokens), "--temp", "0", "-t", str(THREADS), "-c", "1024", "-v"]
    if kind == "target":
        cmd = [str(bin_dir / "llama-completion"), "-m", str(gguf["target"]), *common, "-no-cnv", "--no-display-prompt"]
    else:
        cmd = [
            str(bin_dir / "llama-speculative-simple"), "-m", str(gguf["target"]), "-md", str(gguf["draft"]),
            *common, "--spec-draft-n-max", str(args.gamma2), "--spec-type", "draft-simple",
        ]  # fmt: skip
    proc, wall, peak = _watched(cmd)
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["no output"])[-1][:300], "peak_gib": peak}
    fig = llama_figures(proc.stderr)
    text = strip_echo(proc.stdout, prompt_file.read_text()) if kind == "speculative" else proc.stdout
    if kind == "speculative":
        made, secs = fig.get("decoded_tokens", 0), fig.get("encoded_s", 0) + fig.get("decoded_s", 0)
    else:
        made, secs = fig.get("eval_runs", 0), (fig.get("prompt_ms", 0) + fig.get("eval_ms", 0)) / 1000
    return {
        "engine": "llama.cpp",
        "tokens": made,
        "tokens_per_s": made / secs if secs else None,
        "decode_only_tokens_per_s": fig["eval_runs"] / (fig["eval_ms"] / 1000) if fig.get("eval_ms") else None,
        "process_wall_s": wall,
        "peak_gib": peak,
        "text": text.strip(),
        **fig,
    }


def child(spec: dict) -> dict:
    """One lrtune row, in this (child) process: the default pair, the prompt's ids, one method."""
    from lrtune.decodeconfig import DecodeConfig
    from lrtune.decoding import Decoder
    from lrtune.modelconfig import ModelConfig

    models = ModelConfig(
        verifier="never",
        max_model_len=1024,
        kv_cache_gib=0.25,
        target_quantization=spec["quantization"],
        draft_quantization=spec["draft_quantization"],
        dtype=spec["dtype"],
    )
    cfg = DecodeConfig(method=spec["method"], gamma2=spec["gamma2"], max_new_tokens=spec["tokens"])
    with Decoder.from_configs(models, cfg, progress=False) as dec:
        dec.generate([spec["ids"]], max_new_tokens=8)  # warm-up
        t0 = time.perf_counter()
        out = dec.generate([spec["ids"]])[0]
        wall = time.perf_counter() - t0
        sd = out.stats.sd
    import torch

    return {
        # vLLM-CPU's 4-bit weight-only GEMM (compressed-tensors W4A16): in the build this CPU loaded?
        "w4a16_kernel": hasattr(torch.ops._C, "cpu_gemm_wna16"),
        "engine": "lrtune",
        "tokens": len(out.token_ids),
        "tokens_per_s": len(out.token_ids) / wall,
        "generate_s": wall,
        "text": out.text.strip(),
        "token_ids": list(out.token_ids),
        "alpha2": sd.accepted_tokens / sd.drafted_tokens if sd is not None and sd.drafted_tokens else None,
    }


def lrtune_row(fmt: str, method: str, ids: list[int], args) -> dict:
    from benchmarks import run_child
    from lrtune.peakmem import PeakMemory, tree_rss_bytes

    quant, _, dtype = fmt.partition(":")
    spec = {"quantization": quant, "dtype": dtype or "auto", "method": method, "gamma2": args.gamma2}
    spec["draft_quantization"] = args.draft_quantization if method != "target" else "none"
    spec.update(tokens=args.tokens, ids=ids)
    base, t0 = tree_rss_bytes(), time.perf_counter()
    with PeakMemory(interval=0.25) as pm:
        _, result, why = run_child("benchmarks.cpu_peers", spec)
    wall, peak = time.perf_counter() - t0, max(0.0, (pm.peak_bytes - base) / 2**30)
    if result is None:
        return {"error": why[:300], "peak_gib": peak}
    return {**result, "process_wall_s": wall, "peak_gib": peak, "format": fmt}


def main(args: argparse.Namespace) -> dict:
    from transformers import AutoTokenizer

    from lrtune.default_pair import default_gguf
    from lrtune.machine import machine_info
    from lrtune.models import resolve_model
    from lrtune.runfiles import write_atomic
    from lrtune.tasks import get_task

    out = Path(args.out)
    settings = {k: v for k, v in vars(args).items() if k in ("tokens", "gamma2", "problem")}
    res = json.loads(out.read_text()) if out.is_file() else {}
    if res.get("settings") != settings:
        res = {"settings": settings, "rows": {}}
    res["machine"] = machine_info()
    task = get_task("gsm_symbolic")
    problem = task.load(limit=args.problem + 1, seed=0)[args.problem]
    tok = AutoTokenizer.from_pretrained(resolve_model("default", "target", progress=True))
    enc = tok.apply_chat_template([{"role": "user", "content": task.prompt(problem)}], add_generation_prompt=True)
    ids = list(enc["input_ids"] if hasattr(enc, "keys") else enc)  # as lrtune's encode_prompt
    res["prompt"] = {"tokens": len(ids), "text": tok.decode(ids)}
    out.parent.mkdir(parents=True, exist_ok=True)

    def save(name: str, row: dict) -> None:
        res["rows"][name] = row
        shown = f"{row['tokens_per_s']:.2f} tok/s" if row.get("tokens_per_s") else row.get("error", "no rate")
        print(f"{name}: {shown}, peak {row.get('peak_gib', 0):.2f} GiB", flush=True)
        write_atomic(out, json.dumps(res, indent=1))

    if args.llama_cpp and (Path(args.llama_cpp) / "llama-completion").is_file():
        gguf = {r: default_gguf(r) for r in ("target", "draft")}
        prompt_file = out.parent / ".cpu_peers_prompt.txt"
        prompt_file.write_text(res["prompt"]["text"])
        for kind in ("target", "speculative"):
            if f"llama.cpp/{kind}" not in res["rows"]:
                save(f"llama.cpp/{kind}", llama_row(kind, Path(args.llama_cpp), prompt_file, gguf, args))
        prompt_file.unlink(missing_ok=True)
    else:
        print(f"cpu_peers: llama.cpp rows skipped (no llama-completion under {args.llama_cpp!r})", flush=True)
    for fmt in [f for f in args.formats.split(",") if f]:
        for method in [m for m in args.methods.split(",") if m]:
            dq = args.draft_quantization if method != "target" else "none"
            name = f"lrtune/{method}/{fmt}" + (f"/draft-{dq}" if dq != "none" else "")
            if name not in res["rows"]:
                save(name, lrtune_row(fmt, method, ids, args))
    spec = res["rows"].get("llama.cpp/speculative", {})
    if "text" in spec:
        spec["text"] = strip_echo(spec["text"], res["prompt"]["text"]).strip()
    ref = res["rows"].get("lrtune/target/none", {}).get("text")
    peer = res["rows"].get("llama.cpp/target", {}).get("text")
    for row in res["rows"].values():
        if ref is not None and "text" in row:
            row["first_difference_from_reference"] = first_difference(ref, row["text"])
            row["identical_to_reference"] = row["first_difference_from_reference"] is None
        if peer is not None and "text" in row:
            row["first_difference_from_llama_cpp"] = first_difference(peer, row["text"])
    write_atomic(out, json.dumps(res, indent=1))
    return res


if __name__ == "__main__":
    from benchmarks import child_or_main

    child_or_main(make_parser(), main, child)
