"""An accuracy budget for a lossy decoder: ``lrtune calibrate --max-accuracy-loss Δ``.

Decodes N calibration problems (templates the verifier never trained on) with a lossless
reference and with lr+sd at a ladder of verifier thresholds t1 > t2 > … (strict to permissive).
At threshold t, D(t) = the number of problems whose answer differs from the reference's, so D
counts what the verifier changed and nothing else. The reference is target-only greedy under
``--numerics exact`` (where lr+sd with the ``never`` verifier writes target-only's tokens);
otherwise it is the method's *lossless twin*, lr+sd with the same schedule and the ``never``
verifier, and target-only is decoded too: the twin's changed answers against it are the
numeric *floor* (lossless decodes that differ, ``benchmarks/lossless``), written into the
evidence beside D. The
null "P(answer differs) > Δ" is rejected when P(Bin(N, Δ) ≤ D(t)) ≤ δ (an exact binomial test,
equivalently the Clopper–Pearson bound on D(t)/N ≤ Δ). Fixed-sequence testing (Learn then
Test, Angelopoulos et al. 2021) goes down the ladder and stops at the first threshold it
cannot certify; the last certified one is kept, so with probability ≥ 1 − δ its rate of changed
answers on problems like these is ≤ Δ. Ladder positions are tested in order, so no correction
for the number of thresholds is needed.

N problems certify anything only when (1 − Δ)^N ≤ δ: :func:`problems_needed`. Each
threshold stops early once D(t) passes the most it may hold (:func:`max_differences`).
Progress is appended to ``<out>.progress.jsonl`` (one line per decode), so a rerun resumes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

TWIN = "never"  # the reference decode of the lossless twin (progress lines' threshold)
DEFAULT_LADDER = (1.0, 0.99, 0.97, 0.95, 0.9, 0.8, 0.7, 0.6, 0.5)


def max_differences(n: int, max_loss: float, confidence: float) -> int:
    """The most changed answers of ``n`` that still certify a change rate ≤ Δ at 1 − δ: the
    largest k with P(Bin(n, Δ) ≤ k) ≤ δ; −1 when even none of n would not."""
    from scipy.stats import binom

    delta, k = 1.0 - confidence, -1
    while k + 1 <= n and binom.cdf(k + 1, n, max_loss) <= delta:
        k += 1
    return k


def problems_needed(max_loss: float, confidence: float) -> int | None:
    """The fewest problems that can certify a change rate ≤ Δ (all answers unchanged):
    ⌈log δ / log(1 − Δ)⌉; None for Δ = 0."""
    if max_loss <= 0:
        return None
    if max_loss >= 1:
        return 0
    return math.ceil(math.log(1 - confidence) / math.log(1 - max_loss) - 1e-12)


def choose(steps: Sequence[dict]) -> dict | None:
    """The last certified step of a ladder walked strict to permissive (fixed-sequence
    testing: the walk ends at the first step that fails); None when the first fails."""
    chosen = None
    for s in steps:
        if not s["certified"]:
            break
        chosen = s
    return chosen


def parse_ladder(text: str) -> tuple[float, ...]:
    """``"1.0,0.95,0.9"`` -> thresholds, strictly decreasing, each in [0, 1]; ConfigError otherwise."""
    from lrtune.errors import ConfigError

    try:
        vals = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ConfigError(f"--thresholds: a comma list of numbers, got {text!r}") from None
    if not vals or any(not 0.0 <= v <= 1.0 for v in vals) or any(a <= b for a, b in zip(vals, vals[1:])):
        raise ConfigError(f"--thresholds: strictly decreasing numbers in [0, 1] (strict to permissive), got {text!r}")
    return vals


class AtThreshold:
    """``verifier`` judged at another threshold (everything else is the verifier's own)."""

    def __init__(self, verifier, threshold: float) -> None:
        self._v, self.threshold = verifier, threshold

    def score(self, pairs):
        return self._v.score(pairs)

    def __getattr__(self, name):
        return getattr(self._v, name)


def _progress(path: Path, key: str) -> dict[tuple, dict]:
    """Decodes already made with this configuration (``key``): (threshold or None, problem) -> line."""
    from lrtune.filekinds import CalibrateProgressLine
    from lrtune.runfiles import load_jsonl

    done = {}
    lines = load_jsonl(
        path, ("key", "problem", "threshold"), what="lrtune calibrate progress line", kinds=(CalibrateProgressLine,)
    )
    for r in lines:
        if r.get("key") == key:
            done[(r.get("threshold"), r.get("problem"))] = r
    return done


class _Decodes:
    """The ladder's decodes of one configuration (``key``): those in the progress file read
    back, the rest decoded with the loaded decoder and appended to the file as each ends."""

    def __init__(self, dec, verifier, task, dcfg, progress_path: Path, key: str, write: bool, max_concurrent: int):
        """Read back the decodes ``progress_path`` already holds for ``key``."""
        self.dec, self.verifier, self.task, self.dcfg = dec, verifier, task, dcfg
        self.progress_path, self.key, self.write, self.max_concurrent = progress_path, key, write, max_concurrent
        self.done = _progress(progress_path, key)

    def __call__(self, probs, threshold) -> list[dict]:  # None: target-only; TWIN: lr+sd with the never verifier
        """``probs``' decodes at ``threshold``: those in the progress file read back, the rest
        decoded ``max_concurrent`` at a time, each appended to the progress file as it ends."""
        import dataclasses

        from lrtune.verifiers import make_verifier

        todo = [p for p in probs if (threshold, p.id) not in self.done]
        cfg = dataclasses.replace(self.dcfg, method="target") if threshold is None else self.dcfg
        v = make_verifier(TWIN) if threshold == TWIN else None
        if threshold not in (None, TWIN):
            v = AtThreshold(self.verifier, threshold)
        if todo:
            prompts = [self.dec.encode(self.task.prompt(p)) for p in todo]
            self.dec.decoder.decode_many(
                prompts,
                cfg,
                max_concurrent=self.max_concurrent,
                verifier=v,
                on_done=lambda i, out: self._finished(todo[i], threshold, out),
            )
        return [self.done[(threshold, p.id)] for p in probs]

    def _finished(self, prob, threshold, out) -> None:
        """Keep (and append to the progress file) the decode ``out`` of ``prob``; raise its error."""
        from lrtune.runfiles import append_jsonl

        if not hasattr(out, "result"):
            raise out.error
        res, stats = out
        answer, ok = self.task.check(prob, res.text)
        line = {
            "key": self.key,
            "threshold": threshold,
            "problem": prob.id,
            "answer": answer,
            "correct": bool(ok),
            "finish": res.finish,
            "drafted": stats.drafted_steps,
            "accepted": stats.accepted_steps,
        }
        self.done[(threshold, prob.id)] = line
        if self.write:
            append_jsonl(self.progress_path, line)


def run_ladder(
    dec,
    verifier,
    task,
    problems: Sequence,
    ladder: Sequence[float],
    dcfg,
    max_loss: float,
    confidence: float,
    progress_path: Path,
    key: str,
    log=print,
    write: bool = True,
    numerics: str = "fast",
    max_concurrent: int = 1,
) -> dict:
    """Walk the ladder (see module docstring) with the loaded decoder ``dec``; returns the
    evidence: every step's threshold, changed answers, decodes, bound and verdict, the
    choice, and the target's answers. ``write``: append each decode to ``progress_path`` (a
    dry run reads what is there and writes nothing); ``numerics``: the engines' mode, which
    picks the reference (module docstring); ``max_concurrent``: problems decoded at once
    (calibration measures answers, not latency; batched greedy decodes equal decoding alone
    under ``--numerics exact``)."""
    n = len(problems)
    k_max = max_differences(n, max_loss, confidence)
    decode = _Decodes(dec, verifier, task, dcfg, progress_path, key, write, max_concurrent)
    exact = numerics == "exact"
    target_only, reference, floor = _references(decode, problems, exact)
    if floor:
        log(f"the lossless twin's answers differ from target-only's on {floor} of {n} problems (numeric floor)")
    named = "target-only" if exact else "the lossless twin (lr+sd, never)"
    steps = []
    for t in ladder:
        step = _ladder_step(decode, problems, t, reference, k_max, confidence, max_concurrent)
        steps.append(step)
        log(
            f"threshold {t:g}: {step['changed']} of {step['decoded']} answers differ from {named}"
            + (f" (bound {step['bound']:.3f})" if step["bound"] is not None else "")
            + (" certified" if step["certified"] else " NOT certified: the walk stops")
        )
        if not step["certified"]:
            break
    chosen = choose(steps)
    return {
        "max_accuracy_loss": max_loss,
        "confidence": confidence,
        "problems": n,
        "max_changed": k_max,
        "problems_needed": problems_needed(max_loss, confidence),
        "ladder": list(ladder),
        "steps": steps,
        "threshold": chosen["threshold"] if chosen else None,
        "certified": chosen is not None,
        "target_accuracy": sum(r["correct"] for r in target_only.values()) / n if n else None,
        "numerics": numerics,
        "reference": "target-only" if exact else "lossless twin",
        "floor": None if exact else {"changed": floor, "problems": n},
        "problem_ids": [p.id for p in problems],
        "method": "accuracy budget (LTT fixed-sequence, exact binomial)",
    }


def _references(decode: _Decodes, problems: Sequence, exact: bool) -> tuple[dict, dict, int | None]:
    """(target-only's decodes, the reference's, the numeric floor) by problem id: under exact
    numerics the reference is target-only and there is no floor; otherwise it is the lossless
    twin and the floor counts the answers where the twin differs from target-only."""
    ids = [p.id for p in problems]
    target_only = dict(zip(ids, decode(problems, None)))
    reference = target_only if exact else dict(zip(ids, decode(problems, TWIN)))
    floor = None if exact else sum(reference[i]["answer"] != target_only[i]["answer"] for i in reference)
    return target_only, reference, floor


def _ladder_step(
    decode: _Decodes, problems: Sequence, t: float, reference: dict, k_max: int, confidence: float, max_concurrent: int
) -> dict:
    """One ladder step: the answers at threshold ``t`` that differ from ``reference``, counted in
    problem order and stopped once more than ``k_max`` differ; its bound and verdict."""
    from lrtune.train.calibrate import false_accept_bound

    n = len(problems)
    changed = drafted = accepted = decoded = 0
    for start in range(0, n, max_concurrent):  # counted in problem order: the same walk at any batch size
        for got in decode(problems[start : start + max_concurrent], t):
            decoded += 1
            changed += got["answer"] != reference[got["problem"]]["answer"]
            drafted, accepted = drafted + got["drafted"], accepted + got["accepted"]
            if changed > k_max:
                break  # this step can no longer be certified
        if changed > k_max:
            break
    bound = false_accept_bound(changed, n, confidence) if decoded == n else None
    return {
        "threshold": t,
        "changed": changed,
        "decoded": decoded,
        "problems": n,
        "bound": bound,
        "certified": decoded == n and changed <= k_max,
        "alpha1": accepted / drafted if drafted else None,
    }


def budget_story(b: dict) -> str:
    """One clause: the promise an accuracy budget makes, or why it makes none."""
    if not b.get("certified"):
        return (
            f"no threshold of the ladder kept the answers within a {b['max_accuracy_loss']:g} change rate at "
            f"{b['confidence']:g} on {b['problems']} problems"
        )
    step = next(s for s in b["steps"] if s["threshold"] == b["threshold"])
    twin = b.get("reference") == "lossless twin"
    floor = b.get("floor") or {}
    return (
        f"answers differ from {'the lossless twin (lr+sd, never)' if twin else 'target-only'} on "
        f"<= {b['max_accuracy_loss']:g} of problems with probability "
        f"{b['confidence']:g} ({step['changed']} of {b['problems']} calibration problems changed, bound "
        f"{step['bound']:.3f}"
        + (f"; the twin itself differs from target-only on {floor['changed']} of {floor['problems']}" if twin else "")
        + ")"
    )
