"""The checks of ``lrtune doctor`` (see :mod:`lrtune.doctor`); each returns
``(status, one-line detail, data)`` and may leave state on the run ``r`` for later checks."""

from __future__ import annotations

import os
import platform
from dataclasses import replace

from lrtune.errors import ConfigError

# tolerances of the prompt-score check (nats): float32 engines against a float32 forward
# differ by kernel order only; bf16/fp16 engines by their rounding
SCORE_TOL = {"exact": 2e-3, "half": 0.25}
# prompts for a real pair (the tiny and random pairs take their own corpus's questions)
QUESTIONS = (
    "A shop sells pens at 3 dollars each. Tom buys 7 pens and pays with a 50 dollar bill. How much change does he get?",
    "Anna reads 12 pages a day. How many days does she need for a 150-page book?",
)


def versions():
    from lrtune.version import __version__

    data = {"python": platform.python_version(), "lrtune": __version__}
    for mod in ("torch", "transformers", "vllm"):
        try:
            data[mod] = __import__(mod).__version__
        except Exception:  # noqa: BLE001 - optional; reported as missing
            data[mod] = None
    return "ok", ", ".join(f"{k} {v}" for k, v in data.items() if v is not None), data


def device():
    from lrtune.machine import cpu_flags, cpu_model, gpus, int8_dot, native_bf16

    flags = cpu_flags()
    data = {
        "cpu": cpu_model(),
        "cpus": os.cpu_count(),
        "cpu_flags": flags,
        "native_bf16": native_bf16(flags),
        "int8_dot": int8_dot(flags),
        "gpus": gpus(),
    }
    detail = (
        f"CPU {data['cpu']}, {data['cpus']} cores, flags {' '.join(flags) or 'none of note'}; native bf16 "
        f"{'yes' if data['native_bf16'] else 'no'}, int8 dot products {'yes' if data['int8_dot'] else 'no'}"
    )
    for g in data["gpus"]:
        detail += (
            f"; GPU {g['index']} {g['name']} (capability {g['capability']}, {g['memory_gib']} GiB, "
            f"bf16 {'yes' if g['bf16'] else 'no'})"
        )
    return "ok", detail, data


def _vllm_version() -> str | None:
    try:
        import vllm
    except ImportError:
        return None
    return str(getattr(vllm, "__version__", "unknown"))


def choose_backend(r):
    from lrtune.backends.vllm_patches import SUPPORTED_VLLM

    installed = _vllm_version()
    supported = installed is not None and installed.split("+")[0] == SUPPORTED_VLLM
    if r.opts.backend == "vllm" and not supported:
        raise ConfigError(f"--backend vllm needs vLLM {SUPPORTED_VLLM}; installed: {installed or 'none'}")
    r.backend = r.opts.backend if r.opts.backend != "auto" else ("vllm" if supported else "transformers")
    why = (
        ""
        if r.opts.backend != "auto"
        else (f" (vLLM {installed})" if supported else f" (no supported vLLM: {installed or 'not installed'})")
    )
    status = "warn" if installed and not supported else "ok"
    return status, f"{r.backend}{why}", {"backend": r.backend, "vllm": installed}


def plugin():
    from importlib.metadata import entry_points

    from lrtune.backends.vllm_patches import PLUGIN_NAME, register_plugin

    found = [e for e in entry_points(group="vllm.general_plugins") if e.name == PLUGIN_NAME]
    if not found:
        return (
            "fail",
            (
                f"no vllm.general_plugins entry point {PLUGIN_NAME!r}: install lrtune as a package (pip "
                "install -e .) so processes vLLM spawns are patched"
            ),
            {},
        )
    ok = found[0].load() is register_plugin
    allowed = os.environ.get("VLLM_PLUGINS")
    data = {"entry_point": found[0].value, "VLLM_PLUGINS": allowed}
    if not ok:
        return "fail", f"entry point {found[0].value} is not lrtune's register_plugin", data
    if allowed is not None and PLUGIN_NAME not in allowed.split(","):
        return "fail", f"VLLM_PLUGINS={allowed!r} leaves lrtune's plugin out", data
    return "ok", f"{found[0].value} (runs in every process vLLM starts)", data


def _on_gpu(r) -> bool:
    if r.backend == "vllm":
        from lrtune.backends.vllm import gpu_device_bytes

        return gpu_device_bytes() is not None
    import torch

    return r.opts.device.startswith("cuda") or (r.opts.device == "auto" and torch.cuda.is_available())


def models(r):
    from lrtune.memory import weight_bytes

    o = r.opts
    if o.target is not None:
        r.target_dir, r.draft_dir, kind = o.target, o.draft, "given"
    elif o.models == "tiny":
        from lrtune.toymodels import get_tiny_pair

        pair = get_tiny_pair()
        r.target_dir, r.draft_dir, kind = str(pair.target), str(pair.draft), "tiny (trained, float32)"
    elif o.models == "random":
        from lrtune.randommodels import build_random_pair

        pair = build_random_pair(dtype="bfloat16" if _on_gpu(r) else "float32")
        r.target_dir, r.draft_dir, kind = str(pair.target), str(pair.draft), "random weights, default-pair shapes"
    else:
        from lrtune.models import check_tokenizers_compatible, resolve_model

        r.target_dir = resolve_model("default", "target", cache_dir=o.cache_dir, progress=True)
        r.draft_dir = resolve_model("default", "draft", cache_dir=o.cache_dir, progress=True)
        check_tokenizers_compatible(r.target_dir, r.draft_dir)
        kind = "the offline default pair"
    sizes = {
        "target_gib": round(weight_bytes(r.target_dir) / 2**30, 3),
        "draft_gib": round(weight_bytes(r.draft_dir) / 2**30, 3),
    }
    return (
        "ok",
        f"{kind}: target {r.target_dir} ({sizes['target_gib']} GiB), draft ({sizes['draft_gib']} GiB)",
        {"kind": kind, "target": r.target_dir, "draft": r.draft_dir, **sizes},
    )


def dtype(r):
    """The dtype the started engines really compute in (vLLM's "auto" turns a float32
    checkpoint into bf16, for one), which sets how exact the later checks must be."""
    if r.backend == "vllm":
        chosen = {
            role: str(b.engine(k).llm_engine.vllm_config.model_config.dtype).replace("torch.", "")
            for role, b, k in (("target", r.target, r.opts.gamma2), ("draft", r.draft, 0))
        }
    else:
        chosen = {role: str(b.lm.dtype).replace("torch.", "") for role, b in (("target", r.target), ("draft", r.draft))}
    r.exact = all(v == "float32" for v in chosen.values())
    note = "" if r.exact else " (not float32: greedy equality may diverge on near-ties, scores differ by rounding)"
    return "ok", f"target {chosen['target']}, draft {chosen['draft']}{note}", chosen


def memory(r):
    from lrtune.memory import GiB, plan_gpu_memory, weight_bytes

    sizes = {"target": weight_bytes(r.target_dir) + weight_bytes(r.draft_dir), "draft": weight_bytes(r.draft_dir)}
    if r.backend == "vllm":
        from lrtune.backends.vllm import gpu_device_bytes

        dev = gpu_device_bytes()
        if dev is not None:
            engines = {}
            if r.opts.timing:  # the plain reference engine and the int8 child's two engines run beside these
                from lrtune.quantize import quantized_source

                sizes["plain_target"] = weight_bytes(r.target_dir)
                if not quantized_source(r.draft_dir):
                    sizes["int8_timing"], engines["int8_timing"] = weight_bytes(r.draft_dir), 2
            r.plan = plan_gpu_memory(sizes, cap=r.opts.gpu_memory_utilization, device_bytes=dev, engines=engines)
            return "ok", r.plan.describe(), r.plan.as_dict()
    r.plan = None
    avail = _mem_available()
    # a bf16 checkpoint runs in float32 on CPUs without native bf16 (and in the transformers backend)
    from lrtune.machine import cpu_flags, native_bf16
    from lrtune.memory import held_weight_bytes

    float32 = r.backend == "transformers" or not native_bf16(cpu_flags())
    from lrtune import cpumemory

    t, d = (held_weight_bytes(p, float32=float32) for p in (r.target_dir, r.draft_dir))
    cpu = (
        cpumemory.plan_vllm(
            t,
            d,
            target_engines=(1,),
            draft_engine=True,
            spec_bytes=d,
            kv_cache_gib=r.opts.kv_cache_gib,
            draft_shared=True,  # lrtune's default (share_weights): the draft engine takes the drafter's weights
        )
        if r.backend == "vllm"
        else cpumemory.plan_torch(t, d)
    )
    need = cpu.total_gib
    data = {
        "weights_gib": round(sum(sizes.values()) / GiB, 2),
        "kv_cache_gib_per_engine": r.opts.kv_cache_gib if r.backend == "vllm" else None,
        "need_gib": round(need, 2),
        "plan": cpu.to_dict(),
        "available_gib": avail,
    }
    status = "warn" if avail is not None and need > avail else "ok"
    return status, f"CPU memory plan: {cpu.describe()}; {avail} GiB available", data


def _mem_available() -> float | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return None


def engines(r):
    o = r.opts
    if r.backend == "vllm":
        from lrtune.backends.vllm import VLLMBackend, VLLMConfig

        from lrtune.models import needs_heterogeneous_vocab

        common = dict(dtype=o.dtype, max_model_len=1024, kv_cache_gib=o.kv_cache_gib, seed=0, numerics=o.numerics)
        padded = needs_heterogeneous_vocab(r.target_dir, r.draft_dir)
        r.target = VLLMBackend(
            r.target_dir,
            VLLMConfig(
                spec_model=r.draft_dir,
                shared_spec_tokens=o.gamma2,
                heterogeneous_vocab=padded,
                gpu_memory_utilization=_share(r, "target"),
                **common,
            ),
            name="target",
        )
        r.draft = VLLMBackend(
            r.draft_dir, VLLMConfig(gpu_memory_utilization=_share(r, "draft"), **common), name="draft"
        )
        r.target.start(o.gamma2)
        r.draft.start(0)
        data = {role: engine_facts(b, k) for role, b, k in (("target", r.target, o.gamma2), ("draft", r.draft, 0))}
        return "ok", "; ".join(f"{role}: {describe_engine(d)}" for role, d in data.items()), data
    from lrtune.backends.hf import HFBackend, HFConfig

    cfg = HFConfig(device=o.device, dtype=o.dtype, seed=0)
    r.draft = HFBackend(r.draft_dir, cfg, name="draft")
    r.target = HFBackend(r.target_dir, cfg, name="target", spec=r.draft)
    data = {"device": str(r.target.device), "dtype": str(r.target.lm.dtype)}
    return "ok", f"transformers on {data['device']} ({data['dtype']}), SD with the draft model", data


def _share(r, role: str) -> float | None:
    from lrtune.memory import engine_share

    return engine_share(r.plan, role)


def engine_facts(backend, k: int) -> dict:
    """What vLLM chose for one started engine: its workers' probes (runner, patches, pid),
    where its engine core runs, scheduling, graph kind, speculation and vocab mapping."""
    import os

    cfg = backend.engine(k).llm_engine.vllm_config
    probes = backend.probes[k]
    spec = cfg.speculative_config
    return {
        "workers": probes,
        "async_scheduling": bool(cfg.scheduler_config.async_scheduling),
        "engine_process": "in-process" if probes and probes[0].get("pid") == os.getpid() else "own process",
        "enforce_eager": bool(cfg.model_config.enforce_eager),
        "cudagraph_mode": str(getattr(cfg.compilation_config, "cudagraph_mode", None)),
        "speculative": spec is not None,
        "heterogeneous_vocab": bool(getattr(spec, "use_heterogeneous_vocab", False)),
    }


def describe_engine(d: dict) -> str:
    """One clause of the engines check: runner×workers, process, scheduling, patches, graphs."""
    w = d["workers"][0]
    graphs = "eager" if d["enforce_eager"] else "CUDA graphs " + d["cudagraph_mode"].rsplit(".", 1)[-1]
    vocab = ", padded vocab mapped" if d["heterogeneous_vocab"] else ""
    return (
        f"{w['runner'].rsplit('.', 1)[-1]}×{len(d['workers'])}, {d['engine_process']}, sync scheduling, "
        f"patches by {w['patches']['applied_by']}, {graphs}{vocab}"
    )


def _prompts(r, n: int) -> list[list[int]]:
    if r.opts.models == "default" or r.opts.target is not None:
        questions = list(QUESTIONS)
    else:
        from lrtune.toymodels import sample_questions

        questions = sample_questions(max(n, 2))
    while len(questions) < n:
        questions.append(questions[len(questions) % 2] + f" (variant {len(questions)})")
    return [r.target.encode_prompt(q) for q in questions[:n]]


def per_request_speculation(r):
    from lrtune.backends.base import GenParams

    k = r.opts.gamma2
    prompt = _prompts(r, 1)[0]
    rows = {}
    for gamma2 in (0, 1, k):
        params = GenParams(max_tokens=24, stop_at_delimiter=False, num_speculative_tokens=gamma2)
        if r.backend == "vllm":
            before = r.target.engine_sd_totals(k)
            out = r.target.generate([prompt], params)
            d = r.target.engine_sd_totals(k).minus(before)
        else:
            out = r.target.generate([prompt], params)
            from lrtune.backends.base import SDCounters

            d = out.sd or SDCounters()
        rows[gamma2] = {
            "tokens": len(out.outputs[0].token_ids),
            "passes": d.drafts,
            "drafted": d.drafted_tokens,
            "accepted": d.accepted_tokens,
        }
    problems = []
    if rows[0]["drafted"] or rows[0]["passes"]:
        problems.append(f"a γ2 = 0 request drafted {rows[0]['drafted']} tokens")
    if not rows[1]["passes"] or rows[1]["drafted"] > rows[1]["passes"]:
        problems.append(f"a γ2 = 1 request drafted {rows[1]['drafted']} tokens in {rows[1]['passes']} passes")
    if not rows[k]["passes"] or rows[k]["drafted"] > k * rows[k]["passes"]:
        problems.append(f"a γ2 = {k} request drafted {rows[k]['drafted']} tokens in {rows[k]['passes']} passes")
    detail = (
        f"γ2 = 0: {rows[0]['drafted']} drafted; γ2 = 1: {rows[1]['drafted']} in {rows[1]['passes']} passes; "
        f"γ2 = {k}: {rows[k]['drafted']} in {rows[k]['passes']} passes (engine counters)"
    )
    return ("fail", "; ".join(problems), rows) if problems else ("ok", detail, {str(g): v for g, v in rows.items()})


def greedy_equality(r):
    from lrtune.decoder import DecodeConfig, LookaheadDecoder
    from lrtune.drift import first_difference
    from lrtune.verifiers import make_verifier

    o = r.opts
    r.prompts = _prompts(r, 2)
    base = DecodeConfig(method="target", gamma1=2, gamma2=o.gamma2, max_new_tokens=o.max_new_tokens, max_step_tokens=16)
    results: dict[str, list[list[int]]] = {}
    for method in ("target", "sd", "lr", "lr+sd"):
        dec = LookaheadDecoder(r.target, r.draft, make_verifier("never"), replace(base, method=method))
        results[method] = [dec.decode(p)[0].token_ids for p in r.prompts]
    r.greedy = results["target"]
    diverged = {}
    for method in ("sd", "lr", "lr+sd"):
        for i, (a, b) in enumerate(zip(results["target"], results[method])):
            first = first_difference(a, b)
            if first is not None:
                diverged.setdefault(method, []).append({"prompt": i, "first_divergence": first})
    tokens = [len(t) for t in results["target"]]
    data = {"tokens": tokens, "diverged": diverged}
    if not diverged:
        return "ok", f"target = sd = lr = lr+sd on {len(r.prompts)} prompts ({sum(tokens)} tokens)", data
    spelled = ", ".join(f"{m} at token {v[0]['first_divergence']}" for m, v in diverged.items())
    if r.opts.numerics == "exact":
        return "fail", f"diverged from target greedy under --numerics exact: {spelled}", data
    return "warn", f"diverged from target greedy: {spelled} (a near tie? rerun with --numerics exact)", data


def prompt_scores(r):
    from lrtune.backends.base import GenParams

    prompt, cont = r.prompts[0], r.greedy[0] or r.target.encode_prompt("x", chat=False)
    seq = list(prompt) + list(cont)
    ref = reference_prompt_scores(r.target_dir, seq, len(prompt))
    params = GenParams(max_tokens=1, stop_at_delimiter=False, score_from=len(prompt))
    if hasattr(r.target, "reset_prefix_cache"):
        r.target.reset_prefix_cache()
    first = r.target.generate([seq], params).outputs[0].prompt_scores
    again = r.target.generate([seq], params).outputs[0].prompt_scores
    tol = SCORE_TOL["exact" if r.exact else "half"]
    scored = [(a, b) for a, b in zip(first, ref) if a is not None]
    diff = [abs(a[0] - b[0]) for a, b in scored]
    shifted = [abs(a[0] - b[0]) for a, b in zip(first[1:], ref[:-1]) if a is not None]
    agree = sum(a[1] == b[1] for a, b in scored) / max(1, len(scored))
    repeat = [abs(a[0] - b[0]) for a, b in zip(again, first) if a is not None and b is not None]
    data = {
        "tokens": len(ref),
        "scored_fresh": len(scored),
        "scored_cached": len(repeat),
        "max_abs_diff": max(diff, default=None),
        "mean_abs_diff_shifted_by_one": sum(shifted) / max(1, len(shifted)),
        "argmax_agreement": agree,
        "max_abs_diff_cached_vs_fresh": max(repeat, default=None),
        "tolerance": tol,
    }
    problems = []
    if len(scored) < len(ref):
        problems.append(f"only {len(scored)} of {len(ref)} tokens scored from a fresh prefix")
    if diff and max(diff) > tol:
        problems.append(f"log-probs differ from a plain forward by up to {max(diff):.3g} nats (tolerance {tol})")
    if repeat and max(repeat) > tol:
        problems.append(f"scores read beside the prefix cache differ by up to {max(repeat):.3g} nats")
    if problems:
        return "fail", "; ".join(problems), data
    return (
        "ok",
        (
            f"{len(scored)} tokens within {max(diff, default=0):.2g} nats of a plain forward (shifted by one: "
            f"{data['mean_abs_diff_shifted_by_one']:.2g}); argmax agreement {agree:.2f}; "
            f"{len(repeat)} re-scored beside the prefix cache"
        ),
        data,
    )


def reference_prompt_scores(model_dir, prefix: list[int], score_from: int) -> list[tuple[float, bool]]:
    """(log p(x_t | x_<t), x_t is the argmax) for t >= ``score_from`` from one plain
    transformers forward over the whole prefix (float32, CPU): what a backend's prompt
    scores must equal."""
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # quiet logs
    lm = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    with torch.inference_mode():
        logits = lm(input_ids=torch.tensor([prefix])).logits[0].float()
    lps = torch.log_softmax(logits, dim=-1)
    return [
        (float(lps[t - 1, prefix[t]]), int(logits[t - 1].argmax()) == prefix[t]) for t in range(score_from, len(prefix))
    ]


def timing(r):
    from lrtune.profiling import ProfileOptions, measure

    opts = ProfileOptions(
        gamma1_max=3,
        tokens=r.opts.timing_tokens,
        repeats=2,
        sd_gamma2=r.opts.gamma2,
        sd_tokens=r.opts.timing_tokens,
        sd_prompts=2,
    )
    prompts = _prompts(r, 4)
    prof = measure(r.target, r.draft, prompts, opts)
    b = ", ".join(f"{v:.2f}" for v in prof["batch_cost"])
    detail = (
        f"target {prof['target_s_per_token'] * 1000:.1f} ms/token ({1 / prof['target_s_per_token']:.0f} tok/s), "
        f"draft {prof['draft_s_per_token'] * 1000:.1f} ms/token; c1 {prof['c1']:.3f}, c2 {prof['c2']:.3f}, "
        f"α2 {prof['sd']['alpha2']:.2f}; b(1..4) {b}"
    )
    status = "ok"
    if r.backend == "vllm":
        prof["baseline"] = shared_vs_plain(r, prompts[0])
        ratio = prof["baseline"]["ratio"]
        detail += f"; γ2 = 0 on the shared SD engine {ratio:.2f}× a plain vLLM engine's time per token"
        if ratio > BASELINE_SLOWER:
            status = "warn"
            why = (
                "cause D: CUDA-graph kinds"
                if _on_gpu(r)
                else "no graphs on a CPU: the SD engine's per-step bookkeeping, largest where a step is cheapest"
            )
            detail += (
                f" (over {BASELINE_SLOWER}: the target-only baseline runs slower than plain vLLM, so speedups "
                f"against it are larger than against plain vLLM; {why})"
            )
    return status, detail, prof


BASELINE_SLOWER = 1.10  # the doctor warns when lrtune's target-only baseline costs this much more than plain vLLM's


def shared_vs_plain(r, prompt: list[int], tokens: int = 64, repeats: int = 3) -> dict:
    """Seconds per token of greedy batch-1 decoding with γ2 = 0 on the shared SD engine (the
    target-only baseline of every lrtune run) and on a plain vLLM engine of the target with
    vLLM's own defaults (graph kind included: what a user of plain vLLM gets), timed
    alternately, best of ``repeats``; ``ratio`` = shared / plain (vllm_platform rule D)."""
    from lrtune.backends.vllm import VLLMBackend, VLLMConfig
    from lrtune.profiling import time_alternately

    o = r.opts
    plain = VLLMBackend(
        r.target_dir,
        VLLMConfig(
            dtype=o.dtype,
            max_model_len=1024,
            kv_cache_gib=o.kv_cache_gib,
            seed=0,
            plain_graphs=True,
            gpu_memory_utilization=_share(r, "plain_target"),
        ),
        name="plain target",
    )
    best = time_alternately({"shared": r.target, "plain": plain}, prompt, tokens, repeats)
    (shared_s, shared_n), (plain_s, plain_n) = best["shared"], best["plain"]
    facts = engine_facts(plain, 0)
    return {
        "shared_s_per_token": shared_s,
        "plain_s_per_token": plain_s,
        "ratio": shared_s / plain_s,
        "tokens": {"shared": shared_n, "plain": plain_n},
        "plain_cudagraph_mode": facts["cudagraph_mode"],
        "plain_enforce_eager": facts["enforce_eager"],
    }


def draft_int8(r):
    """The draft as saved against its W8A8 copy (``--draft-quantization``), timed alternately
    in a child process; the result is what ``--draft-quantization auto`` reads on this machine."""
    from lrtune.machine import cpu_flags, int8_dot
    from lrtune.quantize import (
        check_int8_runs,
        ensure_copy,
        measure_in_subprocess,
        quantized_source,
        record_measurement,
    )

    if r.backend != "vllm":
        return "skip", "int8 drafts need vLLM", {}
    if quantized_source(r.draft_dir):
        return "skip", "the draft is already quantized", {}
    check_int8_runs("vllm")
    q = ensure_copy(r.draft_dir, r.opts.cache_dir, progress=True)
    speeds = measure_in_subprocess(r.draft_dir, str(q), r.opts.dtype, gpu_share=_share(r, "int8_timing"))
    entry = record_measurement(r.draft_dir, speeds["plain_tok_s"], speeds["int8_tok_s"], r.opts.cache_dir, r.opts.dtype)
    ratio = speeds["int8_tok_s"] / speeds["plain_tok_s"]
    units = "int8 dot-product units" if int8_dot(cpu_flags()) else "no int8 dot-product units"
    detail = (
        f"draft {speeds['plain_tok_s']:.1f} tok/s, int8 copy {speeds['int8_tok_s']:.1f} tok/s ({ratio:.2f}x; "
        f"{units if not _on_gpu(r) else 'GPU'}): --draft-quantization auto "
        f"{'uses int8' if entry['int8_faster'] else 'keeps the draft as saved'}"
    )
    return "ok", detail, {**speeds, "int8_faster": entry["int8_faster"], "int8_dir": str(q)}
