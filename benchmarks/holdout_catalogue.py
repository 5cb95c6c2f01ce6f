"""Held-out bad-input catalogue for lrtune (independent of benchmarks/bad_input_catalogue.py).

    python -m benchmarks.holdout_catalogue [--workdir DIR] [--only SUBSTR|SUBSTR] [--keep]
        [--out benchmarks/reliability/holdout_catalogue.json]

Written by a tester who saw the project's own catalogue only to learn the workspace format,
never its cases, as a held-out check of the mechanisms (outputs on inputs, reading that
writes, every file kind, API misuse, late checks, locale, secrets, concurrency).

Builds a workspace under a temp dir (tiny model pair copies, a real tiny collect dataset, a
real rollout dataset + labels-vote dir, a real features-verifier checkpoint, a real learned
controller, a real evaluate run, and corrupted copies of each), runs every case in a fresh
process, and writes ``--out``.

Verdicts: clean (bad input refused per contract), ok (valid control succeeded, nothing changed),
silent (bad input accepted, exit 0), internal (exit 1 'unexpected', traceback, or timeout/hang),
changed-data (a workspace file changed/moved/added/deleted), unclear-api (API error not a
one-line ValueError/TypeError naming the argument), late (refused only after model weights
loaded), multi-line (more than one stderr line), valid-refused (valid control failed),
echoed-secret (a file's secret appears in output).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PY = sys.executable
WORK = Path(os.environ.get("LRTUNE_HOLDOUT_DIR", Path(tempfile.gettempdir()) / "lrtune-holdout"))
BASE = WORK / "base"  # real artifacts made once by the real commands (see build_base)
HOOK = str(WORK / "hook")  # sitecustomize: records model-weight loads outside the workspace
SECRET = "sk-HOLDOUT-SECRET-123"
RESULTS = Path("benchmarks/reliability/holdout_catalogue.json")
HOOK_SOURCE = """# holdout: record (outside the workspace) when transformers loads model weights
import os, sys
_MARK = os.environ.get("HOLDOUT_LOADMARK")
if _MARK:
    import importlib.abc, importlib.machinery
    class _Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name != "transformers.modeling_utils":
                return None
            spec = importlib.machinery.PathFinder.find_spec(name, path)
            if spec is None or spec.loader is None:
                return spec
            orig = spec.loader.exec_module
            def exec_module(module, _orig=orig):
                _orig(module)
                cls = module.PreTrainedModel
                fp = cls.from_pretrained.__func__
                def from_pretrained(c, *a, **k):
                    with open(_MARK, "a") as f:
                        f.write(f"load {a[0] if a else k.get('pretrained_model_name_or_path')}\\n")
                    return fp(c, *a, **k)
                cls.from_pretrained = classmethod(from_pretrained)
            spec.loader.exec_module = exec_module
            return spec
    sys.meta_path.insert(0, _Finder())
"""


def write_hook() -> None:
    Path(HOOK).mkdir(parents=True, exist_ok=True)
    (Path(HOOK) / "sitecustomize.py").write_text(HOOK_SOURCE)


# ---------------------------------------------------------------- base artifacts (real commands)
def lrtune(*argv, timeout=600):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    r = subprocess.run([PY, "-m", "lrtune", *argv], capture_output=True, text=True, env=env, timeout=timeout)
    if r.returncode != 0:
        raise SystemExit(f"base build failed: lrtune {' '.join(argv)}\n{r.stderr[-2000:]}")
    return r


def build_base():
    """Real lrtune outputs on the tiny pair, made once into BASE."""
    if (BASE / "DONE").is_file():
        return
    import random

    from lrtune.toymodels import get_tiny_pair, sample_questions

    BASE.mkdir(parents=True, exist_ok=True)
    p = get_tiny_pair()
    for n, src in (("target", p.target), ("draft", p.draft), ("other", p.other_vocab)):
        if not (BASE / "models" / n).exists():
            shutil.copytree(src, BASE / "models" / n)
    qs = sample_questions(8, seed=7)
    (BASE / "good.jsonl").write_text(
        "".join(json.dumps({"id": f"q{i}", "question": q, "answer": "1"}) + "\n" for i, q in enumerate(qs))
    )
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng, rows = random.Random(0), []
    for pi in range(12):
        ctx = f"Question {pi}: Sam has {rng.randint(2, 9)} bags of apples. How many apples in total?"
        for k in range(6):
            a, c = rng.randint(2, 40), rng.randint(2, 40)
            same = rng.random() < 0.5
            t = f"Sam has {a} bags with {c} apples each, so {a} * {c} = {a * c} apples."
            cc = c if same else c + 3
            d = f"Multiplying {a} by {cc} gives {a * cc} apples in total."
            rows.append(
                dict(
                    problem_id=f"p{pi}",
                    task="synthetic",
                    round=k,
                    position=0,
                    branch=0,
                    context=ctx,
                    draft_step=d,
                    target_step=t,
                    teacher="llm_judge",
                    teacher_score=min(1.0, max(0.0, (0.85 if same else 0.15) + rng.uniform(-0.1, 0.1))),
                    label=same,
                    judge_s=1.5,
                    embedding_cosine=None,
                    exact_match=False,
                )
            )
    s = BASE / "syn"
    s.mkdir(exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), s / "pairs.parquet")
    pq.write_table(
        pa.Table.from_pylist([{"problem_id": f"p{i}", "task": "synthetic"} for i in range(12)]), s / "problems.parquet"
    )
    B = str(BASE)
    tiny = [
        "--target",
        f"{B}/models/target",
        "--draft",
        f"{B}/models/draft",
        "--backend",
        "transformers",
        "--device",
        "cpu",
        "--max-model-len",
        "512",
    ]
    lrtune(
        "collect",
        "--task",
        "custom",
        "--data",
        f"{B}/good.jsonl",
        "--limit",
        "4",
        "--teacher",
        "exact",
        "--method",
        "lr",
        "--gamma1",
        "2",
        "--max-new-tokens",
        "32",
        "--max-step-tokens",
        "8",
        "--no-embedding-feature",
        "--no-progress",
        "--out",
        f"{B}/ds",
        *tiny,
    )
    lrtune(
        "collect",
        "--task",
        "custom",
        "--data",
        f"{B}/good.jsonl",
        "--limit",
        "6",
        "--teacher",
        "exact",
        "--method",
        "lr+sd",
        "--gamma1",
        "2",
        "--gamma2",
        "2",
        "--max-new-tokens",
        "32",
        "--max-step-tokens",
        "8",
        "--no-embedding-feature",
        "--no-progress",
        "--out",
        f"{B}/ds2",
        *tiny,
    )
    lrtune(
        "collect",
        "--task",
        "custom",
        "--data",
        f"{B}/good.jsonl",
        "--limit",
        "2",
        "--teacher",
        "rollout",
        "--verifier",
        "exact",
        "--rollout-tokens",
        "8",
        "--method",
        "lr",
        "--gamma1",
        "2",
        "--max-new-tokens",
        "24",
        "--max-step-tokens",
        "8",
        "--no-embedding-feature",
        "--no-target-score-feature",
        "--no-progress",
        "--out",
        f"{B}/dsr",
        *tiny,
    )
    lrtune(
        "labels",
        "vote",
        "--data",
        f"{B}/dsr",
        "--out",
        f"{B}/vo",
        "--samples",
        "1",
        "--max-problems",
        "1",
        "--problems",
        "8",
    )
    lrtune(
        "train",
        "verifier",
        "--data",
        f"{B}/syn",
        "--student",
        "features",
        "--out",
        f"{B}/ckpt",
        "--no-progress",
        "--latency-pairs",
        "4",
        "--epochs",
        "2",
    )
    lrtune("train", "controller", "--data", f"{B}/ds2", "--encoder", "none", "--out", f"{B}/ctl", "--folds", "2")
    lrtune(*EV_ARGS(B))
    (BASE / "DONE").write_text("ok")


def EV_ARGS(root: str) -> list[str]:
    """The evaluate run of BASE/ev (rerun in the workspace: it resumes, everything done)."""
    return [
        "evaluate",
        "--task",
        "custom",
        "--data",
        f"{root}/good.jsonl",
        "--limit",
        "2",
        "--methods",
        f"target,lr/v={root}/ckpt",
        "--max-new-tokens",
        "16",
        "--max-step-tokens",
        "8",
        "--gamma1",
        "2",
        "--no-progress",
        "--no-plots",
        "--warmup-tokens",
        "0",
        "--out",
        f"{root}/ev",
        "--target",
        f"{root}/models/target",
        "--draft",
        f"{root}/models/draft",
        "--backend",
        "transformers",
        "--device",
        "cpu",
        "--max-model-len",
        "512",
    ]


# ---------------------------------------------------------------- workspace (copies + corruptions)
def rewrite_paths(root: Path):
    for f in root.rglob("*"):
        if f.is_file() and not f.is_symlink() and f.suffix in (".json", ".jsonl", ".md"):
            t = f.read_text(encoding="utf-8")
            if str(BASE) in t:
                f.write_text(t.replace(str(BASE), str(root)), encoding="utf-8")


def jload(p: Path):
    return json.loads(p.read_text())


def jdump(p: Path, data, raw: str | None = None):
    p.write_text(raw if raw is not None else json.dumps(data, indent=1))


def variant(ws: Path, src: str, name: str) -> Path:
    d = ws / name
    shutil.copytree(ws / src, d, symlinks=True)
    return d


def build_workspace(ws: Path):
    for n in ("models", "syn", "ds", "ds2", "dsr", "vo", "ckpt", "ctl", "ev"):
        shutil.copytree(BASE / n, ws / n, symlinks=True)
    shutil.copy(BASE / "good.jsonl", ws / "good.jsonl")
    rewrite_paths(ws)
    # the rollout dataset's absolute source path lives in votes.jsonl: rewritten above
    os.mkfifo(ws / "fifo")
    os.mkfifo(ws / "fifo.json")
    (ws / "link_conf.json").symlink_to(ws / "ds" / "collect_config.json")
    (ws / "ds_link").symlink_to(ws / "ds")
    (ws / "unicode_ok.jsonl").write_text(
        "".join(
            json.dumps(
                {"id": f"u{i}", "question": f"Zoë a {i + 2} crêpes — 東京 ½ ?", "answer": "1"}, ensure_ascii=False
            )
            + "\n"
            for i in range(2)
        ),
        encoding="utf-8",
    )
    shutil.copytree(ws / "ds", ws / "données_ds")
    (ws / "secret_answer.jsonl").write_text(
        json.dumps({"id": "s1", "question": "2+2?", "answer": {"token": SECRET}}) + "\n"
    )
    (ws / "secret_verifier.yaml").write_text(f"verifier: {SECRET}\n")
    (ws / "secret_profile.json").write_text(json.dumps({"c1": 0.3, "batch_cost": {"1": 1.0, "2": SECRET}}))
    (ws / "secret_ctl_profile.json").write_text(json.dumps({"c1": SECRET, "c2": 0.4, "batch_cost": {"1": 1.0}}))

    # ---- verifier checkpoint metadata
    def ver(name, change, raw=None):
        d = variant(ws, "ckpt", name)
        m = jload(d / "lrtune_verifier.json")
        out = change(m)
        jdump(d / "lrtune_verifier.json", m if out is None else out, raw(m) if raw else None)

    ver("v_thr_nan", lambda m: None, raw=lambda m: json.dumps({**m, "threshold": float("nan")}))
    ver("v_thr_inf", lambda m: None, raw=lambda m: json.dumps({**m, "threshold": 1e999}))
    ver("v_thr_bool", lambda m: m.update(threshold=True))
    ver("v_version_true", lambda m: m.update(version=True))
    ver("v_feat_str", lambda m: m.update(features="embedding_cosine"))
    ver("v_feat_empty", lambda m: m.update(features=[]))
    ver("v_feat_dup", lambda m: m.update(features=[m["features"][0]] * len(m["features"])))
    ver("v_metrics_str", lambda m: m.update(metrics="oops"))
    ver("v_metrics_test_list", lambda m: m.update(metrics={**m["metrics"], "test": [1, 2]}))
    ver("v_calib_secret", lambda m: m.update(calibration=SECRET))
    ver("v_hist_int", lambda m: m.update(calibration_history=5))
    ver("v_ctx_float", lambda m: m.update(context_chars=1e30))
    ver("v_base_secret", lambda m: m.update(base_model={"token": SECRET}))
    ver("v_enc_int", lambda m: m.update(encoder=7))
    ver("v_meta_list", lambda m: [m])
    ver("v_accbudget_str", lambda m: m.update(accuracy_budget="big"))
    ver("v_ci_weird", lambda m: m["metrics"]["test"].update(acceptance_ci95=[0.1, float("inf")]))
    d = variant(ws, "ckpt", "v_weights_trunc")
    (d / "features.safetensors").write_bytes((d / "features.safetensors").read_bytes()[:100])
    d = variant(ws, "ckpt", "v_weights_nan")
    from safetensors.numpy import load_file, save_file
    import numpy as np

    w = load_file(str(d / "features.safetensors"))
    save_file(
        {k: np.full_like(v, np.nan) if v.dtype.kind == "f" else v for k, v in w.items()},
        str(d / "features.safetensors"),
    )
    d = variant(ws, "ckpt", "v_extra_pickle")
    (d / "sub").mkdir()
    (d / "sub" / "notes.PKL").write_bytes(b"")
    d = variant(ws, "ckpt", "v_trainconf_list")
    jdump(d / "train_config.json", [1, 2])
    d = variant(ws, "ckpt", "v_trainconf_secret")
    tc = jload(d / "train_config.json")
    tc["options"]["epochs"] = SECRET
    jdump(d / "train_config.json", tc)

    # ---- controller metadata
    def ctl(name, change):
        d = variant(ws, "ctl", name)
        m = jload(d / "lrtune_controller.json")
        change(m)
        jdump(d / "lrtune_controller.json", m)

    ctl("c_xscale0", lambda m: m["model"].update(x_scale=[0.0] * len(m["model"]["x_scale"])))
    ctl("c_alpha_secret", lambda m: m["model"].update(alpha=SECRET))
    ctl("c_bounds_secret", lambda m: m["bounds"].update(gamma1_max=SECRET))
    ctl("c_bounds_inverted", lambda m: m["bounds"].update(gamma1_min=5, gamma1_max=2))
    ctl("c_bounds_huge", lambda m: m["bounds"].update(gamma1_max=10**6, M=10**9))
    ctl("c_bounds_list", lambda m: m.update(bounds=[1, 2, 3]))
    ctl("c_coef_nested", lambda m: m["model"].update(coef=[[[1.0, 2.0]], [[0.0, 0.0]]]))
    ctl("c_bestfixed_big", lambda m: m.setdefault("metrics", {}).update(best_fixed=[99, 99]))
    ctl("c_profile_list", lambda m: m.update(profile=[0.3, 0.3]))

    # ---- collect datasets
    d = variant(ws, "ds", "d_conf_list")
    jdump(d / "collect_config.json", [])
    d = variant(ws, "ds", "d_conf_secret")
    c = jload(d / "collect_config.json")
    c["options"]["task"] = SECRET
    jdump(d / "collect_config.json", c)
    d = variant(ws, "ds", "d_conf_types")
    c = jload(d / "collect_config.json")
    c["decode"]["gamma1"] = "two"
    c["options"]["limit"] = None
    jdump(d / "collect_config.json", c)
    d = variant(ws, "ds", "d_manifest_torn")
    m = (d / "manifest-s000.json").read_bytes()
    (d / "manifest-s000.json").write_bytes(m[: len(m) // 2])
    d = variant(ws, "ds", "d_part_trunc")
    part = sorted((d / "pairs").glob("*.parquet"))[0]
    part.write_bytes(part.read_bytes()[:64])
    d = variant(ws, "ds", "d_manifest_types")
    m = jload(d / "manifest-s000.json")
    k0 = next(iter(m["finished"]))
    m["finished"][k0]["pairs"] = [SECRET]
    jdump(d / "manifest-s000.json", m)

    # ---- evaluate runs
    def ev(name, change):
        d = variant(ws, "ev", name)
        change(d)
        rewrite_ev_paths(d, ws / "ev", d)

    ev("e_summary_list", lambda d: jdump(d / "summary.json", [1]))
    ev(
        "e_summary_secret",
        lambda d: jdump(d / "summary.json", {**jload(d / "summary.json"), "batch_cost": {SECRET: 1.0}}),
    )
    ev("e_summary_timing", lambda d: jdump(d / "summary.json", {**jload(d / "summary.json"), "timing": "slow"}))
    ev("e_config_list", lambda d: jdump(d / "config.json", []))
    ev("e_config_opts_str", lambda d: jdump(d / "config.json", {**jload(d / "config.json"), "options": "x"}))

    def rec_types(d):
        lines = (d / "records.jsonl").read_text().splitlines()
        r = json.loads(lines[0])
        r["wall_s"] = "slow"
        r["tokens"] = None
        lines[0] = json.dumps(r)
        (d / "records.jsonl").write_text("\n".join(lines) + "\n")

    ev("e_rec_types", rec_types)

    def rec_torn_mid(d):
        lines = (d / "records.jsonl").read_text().splitlines()
        lines.insert(1, lines[1][:40])
        (d / "records.jsonl").write_text("\n".join(lines) + "\n")

    ev("e_rec_torn_mid", rec_torn_mid)

    def rec_symlink(d):
        (d / "records.jsonl").unlink()
        (d / "config.json").unlink()
        (d / "summary.json").unlink()
        (d / "report.md").unlink()
        (d / "records.jsonl").symlink_to(ws / "good.jsonl")

    ev("e_rec_symlink", rec_symlink)

    # ---- labels vote dirs
    def vo(name, change):
        d = variant(ws, "vo", name)
        lines = [json.loads(x) for x in (d / "votes.jsonl").read_text().splitlines() if x.strip()]
        change(lines)
        (d / "votes.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))

    vo("vo_secret", lambda ls: ls[0]["config"].update(note=SECRET))
    vo("vo_nolabel", lambda ls: [x.pop("vote_label", None) for x in ls[1:]])
    vo("vo_seconds", lambda ls: [x.update(seconds="slow") for x in ls[1:]])

    # ---- model side files
    def model(name, fname, change):
        d = variant(ws, "models/target", "models/" + name)
        p = d / fname
        data = jload(p)
        out = change(data)
        jdump(p, data if out is None else out)

    model("m_gen_eos_str", "generation_config.json", lambda c: c.update(eos_token_id="end"))
    model("m_gen_list", "generation_config.json", lambda c: [c])
    model("m_tok_template_int", "tokenizer_config.json", lambda c: c.update(chat_template=5))
    model("m_tok_maxlen_str", "tokenizer_config.json", lambda c: c.update(model_max_length="huge"))
    model("m_cfg_vocab_str", "config.json", lambda c: c.update(vocab_size="big"))
    model("m_cfg_maxpos_neg", "config.json", lambda c: c.update(max_position_embeddings=-5))
    model("m_cfg_list", "config.json", lambda c: [c])
    model("m_cfg_secret_arch", "config.json", lambda c: c.update(architectures=[SECRET]))


def rewrite_ev_paths(d: Path, old: Path, new: Path):
    """An evaluate copy's config.json names its own --out? (no: out is resume-free); nothing to do."""
    return None


# ---------------------------------------------------------------- judging
def snapshot(root: Path) -> dict:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            p = Path(dirpath) / n
            rel = str(p.relative_to(root))
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = "link:" + os.readlink(p)
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = "dir"
            elif stat.S_ISREG(st.st_mode):
                out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
            else:
                out[rel] = f"special:{stat.S_IFMT(st.st_mode)}"
    return out


def run_proc(cmd, env, timeout):
    t0 = time.perf_counter()
    p = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        out, err = p.communicate(timeout=timeout)
        rc = p.returncode
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, 9)
        out, err = p.communicate()
        rc = "timeout"
    return rc, out or "", err or "", time.perf_counter() - t0


API_WRAPPER = """
import sys
from lrtune.errors import LrtuneError
try:
{body}
except Exception as e:
    msg = str(e)
    if isinstance(e, LrtuneError) and isinstance(e, (ValueError, TypeError)) and ({word!r} in msg or {word!r}.replace("_", "-") in msg) and "\\n" not in msg:
        sys.stderr.write(f"lrtune: error: {{type(e).__name__}}: {{msg}}\\n")
        sys.exit(2)
    sys.stderr.write(f"API-UNCLEAR {{type(e).__module__}}.{{type(e).__name__}}: {{msg[:300]!r}}\\n")
    sys.exit(3)
sys.exit(0)
"""


def judge(case, rc, out, err, changed, loaded, secs):
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    text = out + err
    expect = case.get("expect", "error")
    forbid = case.get("forbid")
    if changed:
        return "changed-data"
    if forbid and forbid in text:
        return "echoed-secret"
    if rc == "timeout":
        return "internal"
    if expect == "ok":
        return "ok" if rc == 0 else "valid-refused"
    if expect == "any" and rc == 0:
        return "ok"
    if case.get("python") is not None:
        if rc == 3:
            return "unclear-api"
        if rc == 0:
            return "silent"
        if rc == 2 and len(lines) == 1:
            return "late" if (case.get("preload") and loaded) else "clean"
        return "internal"
    if rc == 0:
        return "silent"
    if "Traceback" in err or (rc == 1 and any("unexpected" in ln for ln in lines)) or rc not in (1, 2):
        return "internal"
    if rc == 1:
        return "internal"
    if len(lines) != 1 or not lines[0].startswith("lrtune: error:"):
        return "multi-line"
    if case.get("preload", True) and loaded:
        return "late"
    return "clean"


def run_case(case, ws, ws_out, base_env, markdir):
    env = {**base_env, **case.get("env", {})}
    mark = markdir / (str(abs(hash(case["name"]))) + ".mark")
    mark.unlink(missing_ok=True)
    env["HOLDOUT_LOADMARK"] = str(mark)
    env["PYTHONPATH"] = HOOK
    if ws_out.exists():
        shutil.rmtree(ws_out)
    ws_out.mkdir()
    for pre in case.get("pre", []):
        pre()
    before = snapshot(ws)
    if case.get("python") is not None:
        code = API_WRAPPER.format(
            body="\n".join("    " + ln for ln in case["python"].splitlines()), word=case.get("word", "")
        )
        cmd = [PY, "-c", code]
    else:
        cmd = [PY, "-m", "lrtune", *case["argv"]]
    if case.get("twice"):
        t0 = time.perf_counter()
        procs = [
            subprocess.Popen(
                cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True, stdin=subprocess.DEVNULL
            )
            for _ in range(2)
        ]
        res = [p.communicate(timeout=600) for p in procs]
        rcs = [p.returncode for p in procs]
        secs = time.perf_counter() - t0
        errs = [e for _, e in res]
        rc, out, err = rcs, "", "\n---\n".join(errs)
        after = snapshot(ws)
        changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
        ok_check = case["twice_check"]()
        refused = [e for r, e in zip(rcs, errs) if r == 2]
        ref_lines = [ln for e in refused for ln in e.strip().splitlines() if ln.strip()]
        if changed:
            verdict = "changed-data"
        elif sorted(rcs) == [0, 0] and ok_check is True:
            verdict = "clean"  # both finished, output intact
        elif (
            sorted(rcs) == [0, 2]
            and len(ref_lines) == 1
            and ref_lines[0].startswith("lrtune: error:")
            and ok_check is True
        ):
            verdict = "clean"
        elif any(r == 1 for r in rcs) or any("Traceback" in e for e in errs):
            verdict = "internal"
        elif ok_check is not True:
            verdict = "changed-data"
        else:
            verdict = "multi-line"
        details = f"rcs={rcs}; output check: {ok_check}"
        loaded = False
    else:
        rc, out, err, secs = run_proc(cmd, env, case.get("timeout", 240))
        after = snapshot(ws)
        changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
        loaded_lines = mark.read_text().splitlines() if mark.exists() else []
        loaded = [ln for ln in loaded_lines if str(ws) in ln or str(ws_out) in ln]
        verdict = judge(case, rc, out, err, changed, loaded, secs)
        details = ""
        if changed:
            details += f"changed: {changed[:6]}; "
        if loaded:
            details += f"weights loaded: {len(loaded)}; "
        if case.get("forbid") and case["forbid"] in out + err:
            details += "secret shown; "
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    return {
        "kind": case["kind"],
        "name": case["name"],
        "argv": case.get("argv"),
        "snippet": case.get("python"),
        "env": case.get("env"),
        "exit": rc,
        "stderr": [ln[:400] for ln in lines[:3]],
        "stderr_last": lines[-1][:400] if lines else "",
        "verdict": verdict,
        "details": details + case.get("note", ""),
        "seconds": round(secs, 1),
        "changed": changed[:10],
    }


# ---------------------------------------------------------------- cases
def cases(ws: Path, ws_out: Path) -> list[dict]:
    W, O = str(ws), str(ws_out)
    T, D = f"{W}/models/target", f"{W}/models/draft"
    tiny = ["--target", T, "--draft", D, "--backend", "transformers", "--device", "cpu", "--max-model-len", "512"]
    dec = ["decode", "What is 2+3?", *tiny, "--max-new-tokens", "8", "--max-step-tokens", "8", "--gamma1", "2"]
    ev_small = [
        "evaluate",
        "--task",
        "custom",
        "--data",
        f"{W}/good.jsonl",
        "--limit",
        "1",
        "--methods",
        "target",
        "--max-new-tokens",
        "8",
        "--no-progress",
        "--no-plots",
        "--warmup-tokens",
        "0",
        *tiny,
    ]
    c: list[dict] = []

    def add(kind, name, argv=None, **kw):
        c.append({"kind": kind, "name": name, "argv": argv, **kw})

    C_LOCALE = {"LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONIOENCODING": ""}

    # (1) outputs landing on inputs or special files
    add(
        "out-on-input",
        "calibrate --out = its --data's collect_config.json",
        ["calibrate", "--verifier", "exact", "--data", f"{W}/ds", "--out", f"{W}/ds/collect_config.json"],
    )
    add(
        "out-on-input",
        "calibrate --out = its --data's manifest-s000.json",
        ["calibrate", "--verifier", "exact", "--data", f"{W}/ds", "--out", f"{W}/ds/manifest-s000.json"],
    )
    add(
        "out-on-input",
        "calibrate --out via ds/../ds/collect_config.json",
        ["calibrate", "--verifier", "exact", "--data", f"{W}/ds", "--out", f"{W}/ds/../ds/collect_config.json"],
    )
    add(
        "out-on-input",
        "calibrate --out a symlink to the dataset's config",
        ["calibrate", "--verifier", "exact", "--data", f"{W}/ds", "--out", f"{W}/link_conf.json"],
    )
    add(
        "out-on-input",
        "calibrate --out a checkpoint's lrtune_verifier.json",
        ["calibrate", "--verifier", "exact", "--data", f"{W}/syn", "--out", f"{W}/ckpt/lrtune_verifier.json"],
    )
    add(
        "out-on-input",
        "calibrate --out a model's config.json",
        ["calibrate", "--verifier", "exact", "--data", f"{W}/ds", "--out", f"{T}/config.json"],
    )
    add(
        "out-on-input",
        "calibrate --out a FIFO named .json",
        ["calibrate", "--verifier", "exact", "--data", f"{W}/ds", "--out", f"{W}/fifo.json"],
        timeout=60,
    )
    add(
        "out-on-input",
        "profile --out = its own --data problem file (JSONL)",
        [
            "profile",
            "--task",
            "custom",
            "--data",
            f"{W}/good.jsonl",
            "--out",
            f"{W}/good.jsonl",
            "--gamma1-max",
            "1",
            "--tokens",
            "2",
            "--repeats",
            "1",
            "--sd-gamma2",
            "0",
            "--prefill-max",
            "0",
            *tiny,
        ],
    )
    add(
        "out-on-input",
        "profile --out the target's generation_config.json",
        [
            "profile",
            "--out",
            f"{T}/generation_config.json",
            "--gamma1-max",
            "1",
            "--tokens",
            "2",
            "--repeats",
            "1",
            "--sd-gamma2",
            "0",
            "--prefill-max",
            "0",
            *tiny,
        ],
    )
    add(
        "out-on-input",
        "profile --out a FIFO",
        [
            "profile",
            "--out",
            f"{W}/fifo",
            "--gamma1-max",
            "1",
            "--tokens",
            "2",
            "--repeats",
            "1",
            "--sd-gamma2",
            "0",
            *tiny,
        ],
        timeout=90,
    )
    add(
        "out-on-input",
        "doctor --json the target's tokenizer_config.json",
        [
            "doctor",
            "--target",
            T,
            "--draft",
            D,
            "--backend",
            "transformers",
            "--max-new-tokens",
            "8",
            "--json",
            f"{T}/tokenizer_config.json",
        ],
        timeout=300,
    )
    add(
        "out-on-input",
        "doctor --json a FIFO",
        ["doctor", "--target", T, "--draft", D, "--backend", "transformers", "--json", f"{W}/fifo"],
        timeout=90,
    )
    add(
        "out-on-input",
        "labels judge-probe --out = its --data's collect_config.json",
        [
            "labels",
            "judge-probe",
            "--data",
            f"{W}/ds",
            "--target",
            T,
            "--limit",
            "1",
            "--specs",
            "llm_judge(paper)",
            "--backend",
            "transformers",
            "--max-model-len",
            "512",
            "--out",
            f"{W}/ds/collect_config.json",
        ],
    )
    add(
        "out-on-input",
        "labels vote --summary = its --data's collect_config.json (all voted)",
        [
            "labels",
            "vote",
            "--data",
            f"{W}/dsr",
            "--out",
            f"{W}/vo",
            "--samples",
            "1",
            "--max-problems",
            "1",
            "--problems",
            "8",
            "--summary",
            f"{W}/dsr/collect_config.json",
        ],
    )
    add(
        "out-on-input",
        "labels vote --greedy-out = --out",
        [
            "labels",
            "vote",
            "--data",
            f"{W}/dsr",
            "--out",
            f"{W}/vo",
            "--samples",
            "1",
            "--max-problems",
            "1",
            "--problems",
            "8",
            "--greedy-out",
            f"{W}/vo",
        ],
    )
    add("out-on-input", "evaluate --out a symlink to a collect dataset", [*ev_small, "--out", f"{W}/ds_link"])
    add("out-on-input", "evaluate --out ev/../ds (a dataset via ..)", [*ev_small, "--out", f"{W}/ev/../ds"])
    add("out-on-input", "evaluate --out the models folder (parent of the models)", [*ev_small, "--out", f"{W}/models"])
    add(
        "out-on-input",
        "train verifier --out a real controller dir",
        ["train", "verifier", "--data", f"{W}/syn", "--student", "features", "--out", f"{W}/ctl", "--no-progress"],
    )
    add("out-on-input", "collect --merge a dataset into itself", ["collect", "--merge", f"{W}/ds", "--out", f"{W}/ds"])
    add(
        "out-on-input",
        "train controller --out = its own --data",
        ["train", "controller", "--data", f"{W}/ds2", "--encoder", "none", "--out", f"{W}/ds2"],
    )

    # (2) reading must not write
    add("reading", "collect --stats of a real dataset (control)", ["collect", "--stats", f"{W}/ds"], expect="ok")
    add(
        "reading",
        "collect --stats of a dataset with a truncated part file",
        ["collect", "--stats", f"{W}/d_part_trunc"],
    )
    add("reading", "collect --stats of a torn manifest", ["collect", "--stats", f"{W}/d_manifest_torn"])
    add(
        "reading",
        "calibrate --dry-run on a checkpoint (control)",
        ["calibrate", "--verifier", f"{W}/ckpt", "--data", f"{W}/ds", "--dry-run"],
        expect="ok",
    )
    add(
        "reading",
        "calibrate --max-accuracy-loss --dry-run on a checkpoint (control; must write nothing)",
        [
            "calibrate",
            "--verifier",
            f"{W}/ckpt",
            "--max-accuracy-loss",
            "0.5",
            "--limit",
            "4",
            "--task",
            "custom",
            "--task-data",
            f"{W}/good.jsonl",
            "--thresholds",
            "1,0.5",
            "--dry-run",
            "--max-new-tokens",
            "8",
            "--max-step-tokens",
            "8",
            "--gamma1",
            "2",
            "--heldout-from",
            f"{W}/ds",
            *tiny,
        ],
        expect="ok",
        timeout=300,
    )
    add(
        "reading",
        "decode with a real checkpoint verifier (control)",
        [*dec, "--method", "lr", "--verifier", f"{W}/ckpt"],
        expect="ok",
    )
    add(
        "reading",
        "decode with a real learned controller (control)",
        [*dec, "--method", "lr+sd", "--gamma2", "2", "--controller", f"{W}/ctl"],
        expect="ok",
    )
    add(
        "reading",
        "train verifier rerun, same config (up to date; control)",
        [
            "train",
            "verifier",
            "--data",
            f"{W}/syn",
            "--student",
            "features",
            "--out",
            f"{W}/ckpt",
            "--no-progress",
            "--latency-pairs",
            "4",
            "--epochs",
            "2",
        ],
        expect="ok",
    )
    add(
        "reading",
        "evaluate into a finished run with another --max-new-tokens",
        [
            *EV_ARGS(W)[: EV_ARGS(W).index("--max-new-tokens")],
            "--max-new-tokens",
            "9",
            *EV_ARGS(W)[EV_ARGS(W).index("--max-new-tokens") + 2 :],
        ],
    )
    add(
        "reading",
        "labels judge-probe of a dataset (control, out elsewhere)",
        [
            "labels",
            "judge-probe",
            "--data",
            f"{W}/ds",
            "--target",
            T,
            "--limit",
            "1",
            "--specs",
            "llm_judge(paper)",
            "--backend",
            "transformers",
            "--max-model-len",
            "512",
            "--out",
            f"{O}/probe.json",
        ],
        expect="ok",
    )
    add(
        "reading",
        "evaluate --heldout-from a dataset (control, out elsewhere)",
        [*ev_small, "--heldout-from", f"{W}/ds", "--out", f"{O}/ev"],
        expect="ok",
        note="good.jsonl has 8 problems, ds holds 4",
    )

    # (3) lrtune-owned files corrupted
    for v, note in (
        ("v_thr_nan", ""),
        ("v_thr_inf", ""),
        ("v_thr_bool", "threshold true (a JSON bool)"),
        ("v_version_true", "version true"),
        ("v_feat_str", ""),
        ("v_feat_empty", ""),
        ("v_feat_dup", "features list repeats one name"),
        ("v_metrics_str", ""),
        ("v_ctx_float", ""),
        ("v_enc_int", ""),
        ("v_meta_list", ""),
        ("v_weights_trunc", ""),
        ("v_weights_nan", "all weights NaN"),
        ("v_extra_pickle", "sub/notes.PKL"),
    ):
        add("corrupt-verifier", f"decode --verifier {v}", [*dec, "--method", "lr", "--verifier", f"{W}/{v}"], note=note)
    add(
        "corrupt-verifier",
        "evaluate lr/v=v_metrics_test_list",
        [*ev_small, "--methods", f"target,lr/v={W}/v_metrics_test_list", "--out", f"{O}/ev"],
    )
    add(
        "corrupt-verifier",
        "evaluate lr/v=v_accbudget_str (late?)",
        [*ev_small, "--methods", f"target,lr/v={W}/v_accbudget_str", "--out", f"{O}/ev"],
    )
    add(
        "corrupt-verifier",
        "evaluate lr/v=v_ci_weird (acceptance_ci95 upper inf)",
        [*ev_small, "--methods", f"target,lr/v={W}/v_ci_weird", "--out", f"{O}/ev"],
    )
    add(
        "corrupt-verifier",
        "calibrate a checkpoint whose calibration_history is 5",
        ["calibrate", "--verifier", f"{W}/v_hist_int", "--data", f"{W}/ds"],
    )
    add(
        "corrupt-verifier",
        "train verifier resume, train_config.json is a list",
        [
            "train",
            "verifier",
            "--data",
            f"{W}/syn",
            "--student",
            "features",
            "--out",
            f"{W}/v_trainconf_list",
            "--no-progress",
            "--latency-pairs",
            "4",
            "--epochs",
            "2",
        ],
    )
    for cdir, note in (
        ("c_xscale0", "x_scale all 0 -> NaN alpha prediction"),
        ("c_bounds_inverted", ""),
        ("c_bounds_huge", "gamma1_max 1e6, M 1e9"),
        ("c_bounds_list", ""),
        ("c_coef_nested", "coef 3-d"),
        ("c_bestfixed_big", "best_fixed [99, 99]"),
        ("c_profile_list", "profile is a list"),
    ):
        add(
            "corrupt-controller",
            f"decode --controller {cdir}",
            [*dec, "--method", "lr+sd", "--gamma2", "2", "--controller", f"{W}/{cdir}"],
            note=note,
        )
    add(
        "corrupt-controller",
        "evaluate adaptive --controller c_xscale0",
        [
            *ev_small,
            "--methods",
            "target,adaptive",
            "--controller",
            f"{W}/c_xscale0",
            "--gamma2",
            "2",
            "--out",
            f"{O}/ev",
        ],
    )
    add("corrupt-dataset", "collect --stats, collect_config.json is []", ["collect", "--stats", f"{W}/d_conf_list"])
    add(
        "corrupt-dataset",
        "train verifier --data, collect_config.json is []",
        [
            "train",
            "verifier",
            "--data",
            f"{W}/d_conf_list",
            "--student",
            "features",
            "--out",
            f"{O}/v",
            "--no-progress",
            "--min-train-pairs",
            "1",
        ],
    )
    add(
        "corrupt-dataset",
        "collect resume into a dataset whose config has gamma1 'two'",
        [
            "collect",
            "--task",
            "custom",
            "--data",
            f"{W}/good.jsonl",
            "--limit",
            "4",
            "--teacher",
            "exact",
            "--method",
            "lr",
            "--gamma1",
            "2",
            "--max-new-tokens",
            "32",
            "--max-step-tokens",
            "8",
            "--no-embedding-feature",
            "--no-progress",
            "--out",
            f"{W}/d_conf_types",
            *tiny,
        ],
    )
    add(
        "corrupt-dataset",
        "calibrate --data, manifest entry's pairs is a list",
        ["calibrate", "--verifier", "exact", "--data", f"{W}/d_manifest_types", "--out", f"{O}/c.json"],
        forbid=SECRET,
    )
    add(
        "corrupt-dataset",
        "labels vote --data, collect_config.json is []",
        ["labels", "vote", "--data", f"{W}/d_conf_list", "--out", f"{O}/vo"],
    )
    for e, note in (
        ("e_summary_list", ""),
        ("e_summary_timing", "summary timing 'slow'"),
        ("e_config_list", ""),
        ("e_config_opts_str", ""),
        ("e_rec_types", "record wall_s 'slow', tokens null"),
        ("e_rec_torn_mid", "torn middle line"),
        ("e_rec_symlink", "records.jsonl -> the problem file; no config.json"),
    ):
        args = EV_ARGS(W)
        args[args.index("--out") + 1] = f"{W}/{e}"
        add("corrupt-evaluate", f"evaluate resume, {e}", args, note=note)
    add(
        "corrupt-votes",
        "labels vote resume, vote lines lack vote_label",
        [
            "labels",
            "vote",
            "--data",
            f"{W}/dsr",
            "--out",
            f"{W}/vo_nolabel",
            "--samples",
            "1",
            "--max-problems",
            "1",
            "--problems",
            "8",
        ],
    )
    add(
        "corrupt-votes",
        "labels vote resume, vote seconds 'slow'",
        [
            "labels",
            "vote",
            "--data",
            f"{W}/dsr",
            "--out",
            f"{W}/vo_seconds",
            "--samples",
            "1",
            "--max-problems",
            "1",
            "--problems",
            "8",
        ],
    )
    for m, note in (
        ("m_gen_eos_str", ""),
        ("m_gen_list", ""),
        ("m_tok_template_int", ""),
        ("m_tok_maxlen_str", ""),
        ("m_cfg_vocab_str", ""),
        ("m_cfg_maxpos_neg", ""),
        ("m_cfg_list", ""),
    ):
        add(
            "corrupt-model",
            f"decode --target {m}",
            [
                "decode",
                "hi",
                *tiny,
                "--target",
                f"{W}/models/{m}",
                "--method",
                "sd",
                "--gamma2",
                "2",
                "--max-new-tokens",
                "4",
            ],
            note=note,
        )

    # (4) Python API misuse
    load = (
        f"from lrtune import Decoder\n"
        f"dec = Decoder.from_pretrained({T!r}, {D!r}, backend='transformers', device='cpu', method='lr', "
        f"gamma1=2, max_model_len=512, max_step_tokens=8, progress=False, verifier='exact')\n"
    )

    def api(name, body, word, **kw):
        add("api", name, None, python=body, word=word, **kw)

    api("generate after close()", load + "dec.close()\ndec.generate('hi', max_new_tokens=4)", "close")
    api("generate max_new_tokens=nan", load + "dec.generate('hi', max_new_tokens=float('nan'))", "max_new_tokens")
    api("generate temperature='0.5'", load + "dec.generate('hi', temperature='0.5')", "temperature")
    api("generate([[]]) empty token list", load + "dec.generate([[]], max_new_tokens=4)", "prompt")
    api("generate token id beyond the vocabulary", load + "dec.generate([[10**9, 5]], max_new_tokens=4)", "prompt")
    api("generate negative token id", load + "dec.generate([[-3, 5]], max_new_tokens=4)", "prompt")
    api("generate a generator of prompts", load + "dec.generate((p for p in ['hi']), max_new_tokens=4)", "prompts")
    api("generate prompts of mixed ids and floats", load + "dec.generate([[1, 2.5]], max_new_tokens=4)", "prompt")
    api("from_pretrained target=123", "from lrtune import Decoder\nDecoder.from_pretrained(123, 'x')", "target")
    api(
        "from_pretrained verifier without score()",
        f"from lrtune import Decoder\nDecoder.from_pretrained({T!r}, {D!r}, backend='transformers', device='cpu', "
        "method='lr', max_model_len=512, progress=False, verifier=object())",
        "verifier",
    )
    api(
        "from_pretrained verifier_threshold=nan",
        "from lrtune import Decoder\nDecoder.from_pretrained(verifier_threshold=float('nan'))",
        "verifier_threshold",
    )
    api("DecodeConfig(delimiter='')", "from lrtune import DecodeConfig\nDecodeConfig(delimiter='')", "delimiter")
    api(
        "Pricing(batch_cost={1: 1.0, 2: nan})",
        "from lrtune import Pricing\nPricing(batch_cost={1: 1.0, 2: float('nan')})",
        "batch_cost",
    )
    api("Pricing(batch_cost=[])", "from lrtune import Pricing\nPricing(batch_cost=[])", "batch_cost")
    api(
        "ModelConfig(max_model_len=True)",
        "from lrtune import ModelConfig\nModelConfig(max_model_len=True)",
        "max_model_len",
    )
    vbad = (
        "class V:\n    name = 'bad'\n    threshold = 0.5\n    def score(self, pairs): return {ret}\n"
        f"dec = Decoder.from_pretrained({T!r}, {D!r}, backend='transformers', device='cpu', method='lr', "
        "gamma1=2, max_model_len=512, max_step_tokens=8, progress=False, verifier=V())\n"
        "out = dec.generate('What is 2+3?', max_new_tokens=24)\n"
        "raise out[0].error if getattr(out[0], 'error', None) else SystemExit(0)"
    )
    for ret, nm in (
        ("[0.5]", "a verifier returning one score for many pairs"),
        ("['yes'] * len(pairs)", "a verifier returning strings"),
        ("None", "a verifier returning None"),
        ("[2.0] * len(pairs)", "a verifier returning scores above 1"),
    ):
        api(nm, "from lrtune import Decoder\n" + vbad.format(ret=ret), "score")
    cbad = (
        "from lrtune.control import Bounds\nclass C:\n    bounds = Bounds()\n"
        "    def choose(self, problem, state): return {ret}\n    def update(self, o): pass\n"
        f"dec = Decoder.from_pretrained({T!r}, {D!r}, backend='transformers', device='cpu', method='lr', "
        "gamma1=2, max_model_len=512, max_step_tokens=8, progress=False, verifier='exact', controller=C())\n"
        "out = dec.generate('What is 2+3?', max_new_tokens=24)\n"
        "raise out[0].error if getattr(out[0], 'error', None) else SystemExit(0)"
    )
    for ret, nm in (
        ("None", "a controller choosing None"),
        ("(0, 0)", "a controller choosing (0, 0)"),
        ("(99, 0)", "a controller choosing gamma1 99"),
        ("'3,4'", "a controller choosing a string"),
    ):
        api(nm, "from lrtune import Decoder\n" + cbad.format(ret=ret), "controller")
    api(
        "a controller object without update()",
        "from lrtune import Decoder\nclass C:\n    def choose(self, s): return (2, 0)\n"
        f"Decoder.from_pretrained({T!r}, {D!r}, backend='transformers', device='cpu', method='lr', "
        "max_model_len=512, progress=False, verifier='exact', controller=C())",
        "controller",
    )

    # (5) late checks (see also corrupt-* cases marked late by the load marker)
    add(
        "late",
        "evaluate lr/v=checkpoint whose calibration is a secret string",
        [*ev_small, "--methods", f"target,lr/v={W}/v_calib_secret", "--out", f"{O}/ev"],
        forbid=SECRET,
    )
    add(
        "late",
        "decode --controller dir with a secret bound",
        [*dec, "--method", "lr+sd", "--gamma2", "2", "--controller", f"{W}/c_bounds_secret"],
        forbid=SECRET,
    )
    add(
        "late",
        "evaluate --methods adaptive/c=<a checkpoint dir, not a controller>",
        [*ev_small, "--methods", f"target,adaptive/c={W}/ckpt", "--out", f"{O}/ev"],
    )
    add(
        "late",
        "collect --teacher <checkpoint whose weights are truncated>",
        [
            "collect",
            "--task",
            "custom",
            "--data",
            f"{W}/good.jsonl",
            "--limit",
            "1",
            "--teacher",
            f"{W}/v_weights_trunc",
            "--method",
            "lr",
            "--gamma1",
            "2",
            "--max-new-tokens",
            "8",
            "--no-progress",
            "--no-embedding-feature",
            "--out",
            f"{O}/co",
            *tiny,
        ],
    )

    # (6) locale
    add(
        "locale",
        "decode a non-ASCII prompt under the C locale (control)",
        ["decode", "Zoë a 3 crêpes — 東京 ½ ?", *tiny, "--method", "target", "--max-new-tokens", "4"],
        env=C_LOCALE,
        expect="ok",
    )
    add(
        "locale",
        "collect --stats of a non-ASCII dataset path under the C locale (control)",
        ["collect", "--stats", f"{W}/données_ds"],
        env=C_LOCALE,
        expect="ok",
    )
    add(
        "locale",
        "calibrate --out a non-ASCII path under the C locale (control)",
        ["calibrate", "--verifier", "exact", "--data", f"{W}/données_ds", "--out", f"{O}/résultat_ø.json"],
        env=C_LOCALE,
        expect="ok",
    )
    add(
        "locale",
        "evaluate a UTF-8 problem file with --methods lr under the C locale (control)",
        [*ev_small, "--data", f"{W}/unicode_ok.jsonl", "--methods", "target,lr/v=exact", "--out", f"{O}/évàl"],
        env=C_LOCALE,
        expect="ok",
    )
    add(
        "locale",
        "train verifier --data a missing non-ASCII dir under the C locale",
        ["train", "verifier", "--data", f"{W}/nöpe_数据", "--out", f"{O}/v", "--no-progress"],
        env=C_LOCALE,
    )
    add(
        "locale",
        "decode --verifier a missing non-ASCII checkpoint under the C locale",
        [*dec, "--method", "lr", "--verifier", f"{W}/vérif_ø"],
        env=C_LOCALE,
    )

    # (7) secrets
    add(
        "secrets",
        "decode --controller whose model alpha is a secret string",
        [*dec, "--method", "lr+sd", "--gamma2", "2", "--controller", f"{W}/c_alpha_secret"],
        forbid=SECRET,
    )
    add(
        "secrets",
        "decode --verifier whose base_model holds a secret",
        [*dec, "--method", "lr", "--verifier", f"{W}/v_base_secret"],
        forbid=SECRET,
    )
    add(
        "secrets",
        "collect --stats of a dataset whose config task is a secret",
        ["collect", "--stats", f"{W}/d_conf_secret"],
        forbid=SECRET,
        expect="any",
    )
    add(
        "secrets",
        "train verifier --data dataset whose config task is a secret",
        ["train", "verifier", "--data", f"{W}/d_conf_secret", "--out", f"{O}/v", "--no-progress"],
        forbid=SECRET,
    )
    add(
        "secrets",
        "evaluate resume, summary.json batch_cost key is a secret",
        [*EV_ARGS(W)[: -len(tiny) - 2], "--out", f"{W}/e_summary_secret", *tiny],
        forbid=SECRET,
    )
    add(
        "secrets",
        "labels vote resume, votes config holds a secret",
        [
            "labels",
            "vote",
            "--data",
            f"{W}/dsr",
            "--out",
            f"{W}/vo_secret",
            "--samples",
            "1",
            "--max-problems",
            "1",
            "--problems",
            "8",
        ],
        forbid=SECRET,
    )
    add(
        "secrets",
        "evaluate a problem whose answer is an object holding a secret",
        [*ev_small, "--data", f"{W}/secret_answer.jsonl", "--out", f"{O}/ev"],
        forbid=SECRET,
    )
    add(
        "secrets",
        "decode --config whose verifier is a secret",
        [*dec, "--config", f"{W}/secret_verifier.yaml"],
        forbid=SECRET,
    )
    add(
        "secrets",
        "evaluate --profile whose batch_cost value is a secret",
        [*ev_small, "--profile", f"{W}/secret_profile.json", "--out", f"{O}/ev"],
        forbid=SECRET,
    )
    add(
        "secrets",
        "train controller --profile whose c1 is a secret",
        [
            "train",
            "controller",
            "--data",
            f"{W}/ds2",
            "--encoder",
            "none",
            "--profile",
            f"{W}/secret_ctl_profile.json",
            "--out",
            f"{O}/ctl",
        ],
        forbid=SECRET,
    )
    add(
        "secrets",
        "train verifier resume, train_config epochs is a secret",
        [
            "train",
            "verifier",
            "--data",
            f"{W}/syn",
            "--student",
            "features",
            "--out",
            f"{W}/v_trainconf_secret",
            "--no-progress",
            "--latency-pairs",
            "4",
            "--epochs",
            "2",
        ],
        forbid=SECRET,
    )

    # (8) two runs at once on one --out
    def json_ok(p):
        def check():
            try:
                json.loads(Path(p).read_text())
                return True
            except Exception as e:  # noqa: BLE001
                return f"{p}: {e}"

        return check

    def dir_file_ok(p, name):
        def check():
            f = Path(p) / name
            if not f.is_file():
                return f"{f} missing"
            try:
                json.loads(f.read_text())
            except Exception as e:  # noqa: BLE001
                return f"{f}: {e}"
            return True

        return check

    add(
        "concurrency",
        "two calibrates at once on one --out JSON",
        ["calibrate", "--verifier", "exact", "--data", f"{W}/ds", "--out", f"{O}/cal.json"],
        twice=True,
        twice_check=json_ok(f"{O}/cal.json"),
    )
    add(
        "concurrency",
        "two train verifier at once on one new --out",
        [
            "train",
            "verifier",
            "--data",
            f"{W}/syn",
            "--student",
            "features",
            "--out",
            f"{O}/tv",
            "--no-progress",
            "--latency-pairs",
            "4",
            "--epochs",
            "2",
        ],
        twice=True,
        twice_check=dir_file_ok(f"{O}/tv", "lrtune_verifier.json"),
    )
    add(
        "concurrency",
        "two train controller at once on one new --out",
        ["train", "controller", "--data", f"{W}/ds2", "--encoder", "none", "--folds", "2", "--out", f"{O}/tc"],
        twice=True,
        twice_check=dir_file_ok(f"{O}/tc", "lrtune_controller.json"),
    )
    add(
        "concurrency",
        "two profiles at once on one --out JSON",
        [
            "profile",
            "--out",
            f"{O}/prof.json",
            "--gamma1-max",
            "1",
            "--tokens",
            "2",
            "--repeats",
            "1",
            "--sd-gamma2",
            "0",
            "--prefill-max",
            "0",
            *tiny,
        ],
        twice=True,
        twice_check=json_ok(f"{O}/prof.json"),
    )
    add(
        "concurrency",
        "two judge-probes at once on one --out JSON",
        [
            "labels",
            "judge-probe",
            "--data",
            f"{W}/ds",
            "--target",
            T,
            "--limit",
            "1",
            "--backend",
            "transformers",
            "--max-model-len",
            "512",
            "--specs",
            "llm_judge(paper)",
            "--backend",
            "transformers",
            "--max-model-len",
            "512",
            "--out",
            f"{O}/jp.json",
        ],
        twice=True,
        twice_check=json_ok(f"{O}/jp.json"),
    )
    return c


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default=None)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--workdir", default=None, help="where the base artifacts and workspaces live")
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args()
    global WORK, BASE, HOOK
    if args.workdir:
        WORK = Path(args.workdir)
        BASE, HOOK = WORK / "base", str(WORK / "hook")
    WORK.mkdir(parents=True, exist_ok=True)
    write_hook()
    build_base()
    tmp = Path(tempfile.mkdtemp(prefix="ws-", dir=str(WORK)))
    pristine, ws, ws_out, markdir = tmp / "pristine", tmp / "ws", tmp / "ws_out", tmp / "marks"
    markdir.mkdir()
    ws.mkdir()
    build_workspace(ws)
    subprocess.run(["cp", "-a", str(ws), str(pristine)], check=True)
    # pristine's files name ws paths (as they should: they are restored over ws)
    base_env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    base_env.pop("LRTUNE_DEBUG", None)
    todo = cases(ws, ws_out)
    if args.only:
        todo = [c for c in todo if any(o in c["name"] for o in args.only.split("|"))]
    rows = []
    for case in todo:
        row = run_case(case, ws, ws_out, base_env, markdir)
        rows.append(row)
        print(
            f"{row['verdict']:14} {row['kind']:18} {row['name'][:70]:70} rc={row['exit']} "
            f"{row['seconds']}s {row['stderr_last'][:120]}",
            flush=True,
        )
        if row["changed"]:  # restore the workspace for the next case
            shutil.rmtree(ws)
            subprocess.run(["cp", "-a", str(pristine), str(ws)], check=True)
    totals: dict[str, int] = {}
    for r in rows:
        totals[r["verdict"]] = totals.get(r["verdict"], 0) + 1
    out = {"totals": totals, "cases": len(rows), "workspace": str(ws), "results": rows}
    path = Path(args.out)
    path.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    print(json.dumps(totals), f"of {len(rows)}; wrote {path}")
    if not args.keep:
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        print("kept", tmp)


if __name__ == "__main__":
    main()
