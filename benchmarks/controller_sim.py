"""Does the adaptive controller reach the best fixed setting? A Monte-Carlo of decoding rounds.

The controller is the one ``--method auto`` and adaptive decoding build
(:func:`lrtune.build.build_controller` with ``bandit``, a run's default γ1 3 and γ2 4, so the
default bounds γ1 <= 6, γ2 <= 8, γ1·γ2 <= 24, LR rounds only), priced with each profile's
:class:`lrtune.pricing.Pricing`. For each scenario (a profile and the true α1, α2) it decodes
``--problems`` problems of ``steps`` steps of L tokens, each with a copy of one controller (what
the decoder does: the bandit starts every problem from its prior, while its run-level evidence,
the measured-rate guard's and the exploration budget's, is shared by the copies), and the same simulator
decodes them with ``bandit-pooled`` (one controller over the problems in order, each problem
starting from the posterior the ones before it left) and with two fixed settings:

* oracle: the (γ1, γ2) the speedup model prices highest at the true α over the controller's arms,
  max :meth:`Pricing.speedup` (``lr`` rounds);
* sd: γ1 = 0 with the γ2 the model prices highest (SD alone, one run to the end of the answer).

A round, as the decoder runs it and reports it to ``controller.update``
(:class:`lrtune.control.RoundOutcome`), with times in T (one plain target step):

* γ1 > 0: the draft writes γ1 steps (γ1·c1); the target decodes γ1 + 1 rows of L tokens in one
  batch with SD inside, b(γ1 + 1) × the SD passes one row needs × (c2·γ2 + 1)/L. The verifier
  judges every drafted position (γ1 verdicts, each accepted with α1); the round commits the J
  leading accepts and the target's step after them, (J + 1)·L tokens. The SD counters are every
  row's passes (each pass accepts its γ2 drafts one by one with α2 and stops at the first
  rejection).
* γ1 = 0: SD alone (γ2 > 0) or the target alone runs ``controller.horizon()`` tokens (to the end
  of the answer when None), passes × (c2·γ2 + 1)/L; no verdicts.

A round reports its committed tokens as the decoder does, before the answer's token budget cuts
the last round's steps (the run's time counts what the round cost, its tokens what was kept).

The priced row is one token stream per problem whose tokens beyond a round's L carry to the next
round (:func:`lrtune.simulate.simulate_combined`'s stream), so a fixed arm's long-run speedup is
the closed form :func:`lrtune.speedup.h`. Speedup = committed steps / time (the target alone: 1).
Outcomes are i.i.d.; each problem's draws come from a generator seeded by (seed, scenario,
problem), the same for the four policies; the bandit seeds itself by problem id. Same seed,
same output.

    python -m benchmarks.controller_sim --out benchmarks/controller_sim/sim.json
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lrtune.backends.base import SDCounters
from lrtune.control import ControlState, ProblemInfo, RoundOutcome
from lrtune.pricing import Pricing
from lrtune.speedup import b_at, sample_leading_accepts

ROOT = Path(__file__).resolve().parents[1]
STEP_TOKENS = 40  # L: eval_balanced's lr+sd row drafted 10315 tokens in 87 rounds of 3 steps (39.5 per step)
STEPS = 200  # committed steps per problem (8000 tokens at L = 40)
SHORT_STEPS = 13  # a 512-token answer at L = 40, what the measured runs decode
PROBLEMS = 200
BOOT = 2000
TARGET_RATIO = 0.95

GPU_BATCH = tuple(1.0 + 0.02 * (n - 1) for n in range(1, 17))  # b(n) = 1 + 0.02(n − 1), n <= 16
EVAL = "benchmarks/adaptive_depths/eval_balanced/summary.json"
ROUTER = "benchmarks/score_rounds/heldout_16_512_int8/summary.json"


@dataclass(frozen=True)
class Scenario:
    """A profile's prices and the true acceptances; ``target``: the ratio the study holds it to
    (``oracle`` or ``sd``), None for a sensitivity row."""

    name: str
    pricing: Pricing
    alpha1: float
    alpha2: float
    steps: int
    profile_source: str
    alpha_source: str
    target: str | None = None
    note: str = ""


def gpu_pricing(c2: float) -> Pricing:
    """A GPU-like plan: a draft step costs 0.05 of a target step, b(n) = 1 + 0.02(n − 1)."""
    return Pricing(c1=0.05, c2=c2, batch_cost=GPU_BATCH)


def _read(rel: str) -> dict:
    return json.loads((ROOT / rel).read_text(encoding="utf-8"))


def scenarios(steps: int = STEPS, short_steps: int = SHORT_STEPS) -> list[Scenario]:
    """The GPU-like profile (c2 = c1 = 0.05: the draft that writes the steps drafts SD's tokens
    too, at the same cost per token; c2 = 0.1 as a sensitivity row) and this machine's measured
    profiles with α1, α2 of the balanced evaluate run's lr+sd row (and α1 0.74, the router's
    acceptance on HumanEval in the score-round run, where an LR round would beat SD here)."""
    from lrtune.pricing import from_profile

    run = _read(EVAL)["methods"]["lr+sd"]
    a1, a2 = round(run["alpha1"], 4), round(run["alpha2"], 4)
    hi1 = _read(ROUTER)["by_task"]["humaneval"]["score+sd/v=results/router"]["alpha1"]
    here = f'{EVAL} .methods["lr+sd"] (alpha1, alpha2: 24 problems at 512 tokens)'
    gpu = "GPU-like: c1 = 0.05, b(n) = 1 + 0.02(n − 1); α1 = 0.6, α2 = 0.8 (given)"
    why_c2 = (
        "c2 = c1 = 0.05: the draft that writes the steps also drafts SD's tokens, at the same cost per "
        "token (lrtune profile sets c2 = c1 when it runs no SD); c2 = 0.1 prices SD's drafting twice as high"
    )
    short = f"{short_steps} steps of {STEP_TOKENS} tokens: a 512-token answer, what the measured runs decode"
    default = "benchmarks/engine_costs/profile_default.json"
    sd_prof = "benchmarks/engine_costs/profile_sd.json"
    p_default = from_profile(_read(default))
    p_sd = from_profile(_read(sd_prof))
    return [
        Scenario("gpu_like", gpu_pricing(0.05), 0.6, 0.8, steps, gpu + ", c2 = 0.05", "given", "oracle", why_c2),
        Scenario("gpu_like_c2_0.1", gpu_pricing(0.1), 0.6, 0.8, steps, gpu + ", c2 = 0.1", "given", None, why_c2),
        Scenario("gpu_like_short", gpu_pricing(0.05), 0.6, 0.8, short_steps, gpu + ", c2 = 0.05", "given", None, short),
        Scenario("cpu_default", p_default, a1, a2, steps, default, here, "sd", "c2 = c1: the profile ran no SD"),
        Scenario("cpu_default_short", p_default, a1, a2, short_steps, default, here, None, short),
        Scenario(
            "cpu_profile_sd",
            p_sd,
            a1,
            a2,
            steps,
            sd_prof,
            here,
            None,
            "c2 fitted from SD runs: the profile the balanced run priced its controller with",
        ),
        Scenario(
            "cpu_default_alpha1_0.74",
            p_default,
            hi1,
            a2,
            steps,
            default,
            f'alpha1 {ROUTER} .by_task.humaneval["score+sd/v=results/router"]; alpha2 {EVAL}',
            None,
            "an α1 at which an LR round beats SD on this profile",
        ),
    ]


def build_bandit(pricing: Pricing, seed: int = 0, policy: str = "bandit"):
    """The controller adaptive decoding and ``--method auto`` build (``policy`` bandit) for a
    run at the default depths (γ1 3, γ2 4) with this plan."""
    from lrtune.build import build_controller
    from lrtune.decodeconfig import DecodeConfig

    return build_controller(policy, DecodeConfig(method="lr+sd", gamma1=3, gamma2=4, seed=seed), pricing)


def arm_speedup(pricing: Pricing, arm: tuple[int, int], a1: float, a2: float) -> float:
    return pricing.speedup("lr", arm[0], arm[1], a1, a2)


def oracle_arm(pricing: Pricing, arms: list[tuple[int, int]], a1: float, a2: float) -> tuple[int, int]:
    """The arm the model prices highest at the true α (ties: the first)."""
    return max(arms, key=lambda arm: arm_speedup(pricing, arm, a1, a2))


def sd_arm(pricing: Pricing, arms: list[tuple[int, int]], a2: float) -> tuple[int, int]:
    return oracle_arm(pricing, [a for a in arms if a[0] == 0], 0.0, a2)


# ---- the rounds -----------------------------------------------------------------------------
def _passes(rng: np.random.Generator, a2: float, g2: int, need: int) -> np.ndarray:
    """J2 (leading accepts among γ2 drafts) of the SD passes until they emit >= ``need`` tokens
    (each pass emits J2 + 1)."""
    if need <= 0:
        return np.zeros(0, dtype=np.int64)
    mean = float(np.sum(a2 ** np.arange(g2 + 1)))
    out: list[np.ndarray] = []
    total = 0
    while total < need:
        j = sample_leading_accepts(a2, g2, int((need - total) / mean * 1.2) + 4, rng)
        cum = total + np.cumsum(j + 1)
        k = int(np.searchsorted(cum, need, side="left"))
        if k < len(j):
            out.append(j[: k + 1])
            break
        out.append(j)
        total = int(cum[-1])
    return np.concatenate(out)


def _counters(js: list[np.ndarray], g2: int) -> SDCounters:
    if not g2:
        return SDCounters()
    j = np.concatenate(js) if js else np.zeros(0, dtype=np.int64)
    return SDCounters(
        drafts=len(j),
        drafted_tokens=len(j) * g2,
        accepted_tokens=int(j.sum()),
        accepted_by_pos=[int((j > k).sum()) for k in range(g2)],
        stopped=int((j < g2).sum()),
    )


@dataclass
class ProblemRun:
    steps: float = 0.0
    time: float = 0.0
    rounds: int = 0
    by_arm: dict | None = None  # "γ1,γ2" -> [rounds, time]

    @property
    def speedup(self) -> float:
        return self.steps / self.time


def decode_problem(controller, problem: str, sc: Scenario, rng: np.random.Generator, L: int = STEP_TOKENS):
    """One problem of ``sc.steps`` steps decoded round by round under ``controller`` (choose,
    horizon, round_kind, update as the decoder calls them)."""
    p, a1, a2 = sc.pricing, sc.alpha1, sc.alpha2
    budget = sc.steps * L
    info = ProblemInfo(id=problem)
    gen, carry, run = 0, 0, ProblemRun(by_arm={})
    while gen < budget:
        g1, g2 = controller.choose(info, ControlState(round=run.rounds, generated_tokens=gen, budget_left=budget - gen))
        if not controller.bounds.allows(g1, g2):
            raise RuntimeError(f"controller chose ({g1}, {g2}) outside {controller.bounds}")
        drafted = max(g2, p.engine_drafts) if g2 else 0
        pass_time = (p.c2 * drafted + 1.0) / L
        if g1 == 0:
            h = controller.horizon()
            need = budget - gen if h is None else max(1, min(h, budget - gen))
            new = need - carry
            if g2 == 0:
                js, n_pass, carry = [], max(new, 0), max(-new, 0)
            else:
                j = _passes(rng, a2, g2, new)
                js, n_pass = [j], len(j)
                carry = int((j + 1).sum()) - new if len(j) else carry - need
            verdicts, acc_steps, kind = (), 0, "sd"
            draft_s, target_s = 0.0, n_pass * pass_time
            tokens = need
        else:
            kind = controller.round_kind() if callable(getattr(controller, "round_kind", None)) else "lr"
            if kind != "lr":
                raise RuntimeError(f"only lr rounds are simulated, the controller chose {kind!r}")
            verdicts = tuple(bool(x) for x in rng.random(g1) < a1)
            acc_steps = next((i for i, v in enumerate(verdicts) if not v), g1)
            new = L - carry  # the priced row: the stream carries its overshoot to the next round
            if g2 == 0:
                js, n_pass, carry = [], max(new, 0), max(-new, 0)
            else:
                j0 = _passes(rng, a2, g2, new)
                carry = int((j0 + 1).sum()) - new if len(j0) else carry - L
                js = [j0] + [_passes(rng, a2, g2, L) for _ in range(g1)]  # the other rows: counters only
                n_pass = len(j0)
            draft_s, target_s = g1 * p.c1, b_at(p.batch_cost, g1 + 1) * n_pass * pass_time
            tokens = (acc_steps + 1) * L
        controller.update(
            RoundOutcome(
                gamma1=g1,
                gamma2=g2,
                verdicts=verdicts,
                accepted_steps=acc_steps,
                committed_tokens=tokens,  # as the decoder reports it: before the answer's budget cuts it
                sd=_counters(js, g2),
                draft_s=draft_s,
                target_s=target_s,
                extra={"kind": kind},
            )
        )
        gen += min(tokens, budget - gen)
        secs = draft_s + target_s
        run.time += secs
        run.rounds += 1
        slot = run.by_arm.setdefault(f"{g1},{g2}", [0, 0.0])
        slot[0] += 1
        slot[1] += secs
    run.steps = gen / L
    return run


def decode_all(make, sc: Scenario, index: int, problems: int, seed: int) -> list[ProblemRun]:
    """``problems`` problems, each with the controller ``make()`` gives it and the generator
    seeded by (seed, scenario index, problem)."""
    return [decode_problem(make(), f"p{i}", sc, np.random.default_rng([seed, index, i])) for i in range(problems)]


# ---- summaries ------------------------------------------------------------------------------
def _ci(values: np.ndarray) -> list[float]:
    return [float(np.percentile(values, 2.5)), float(np.percentile(values, 97.5))]


LEARNERS = ("controller", "pooled")


def summarize(runs: dict[str, list[ProblemRun]], seed: int, boot: int = BOOT) -> dict:
    """Per policy: total and per-problem mean speedup with 95% bootstrap intervals (problems
    resampled, paired across policies); ratios of each learner to oracle and sd."""
    steps = {k: np.array([r.steps for r in v]) for k, v in runs.items()}
    time = {k: np.array([r.time for r in v]) for k, v in runs.items()}
    n = len(runs["oracle"])
    idx = np.random.default_rng([seed, 99]).integers(0, n, size=(boot, n))
    tot = {k: steps[k][idx].sum(1) / time[k][idx].sum(1) for k in runs}
    per = {k: steps[k] / time[k] for k in runs}
    out: dict = {}
    for k in runs:
        out[k] = {
            "speedup_total": float(steps[k].sum() / time[k].sum()),
            "speedup_total_ci95": _ci(tot[k]),
            "speedup_mean": float(per[k].mean()),
            "speedup_mean_ci95": _ci(per[k][idx].mean(1)),
            "rounds_per_problem": float(np.mean([r.rounds for r in runs[k]])),
        }
    for k in LEARNERS:
        if k not in runs:
            continue
        ratios = {}
        for ref in ("oracle", "sd"):
            ratios[f"over_{ref}"] = out[k]["speedup_total"] / out[ref]["speedup_total"]
            ratios[f"over_{ref}_ci95"] = _ci(tot[k] / tot[ref])
            ratios[f"over_{ref}_per_problem_mean"] = float((per[k] / per[ref]).mean())
            ratios[f"over_{ref}_per_problem_mean_ci95"] = _ci((per[k] / per[ref])[idx].mean(1))
        out[k]["ratios"] = ratios
    return out


def arm_shares(runs: list[ProblemRun], oracle: tuple[int, int], price) -> dict:
    """Where a learner's time went: the share outside the oracle's arm (exploration and wrong
    picks), the share in γ1 > 0 rounds, the model's loss Σ_arm time share × (1 − h(arm)/h(oracle))
    (what those rounds cost against the oracle's; ``price(arm)`` = h at the true α), and the
    arms it spent the most time in."""
    time = sum(r.time for r in runs)
    rounds = sum(r.rounds for r in runs)
    arms: dict[str, list[float]] = {}
    for r in runs:
        for a, (k, t) in r.by_arm.items():
            slot = arms.setdefault(a, [0, 0.0])
            slot[0] += k
            slot[1] += t
    key = f"{oracle[0]},{oracle[1]}"
    best = price(oracle)
    h = {a: price(tuple(int(x) for x in a.split(","))) for a in arms}
    top = sorted(arms.items(), key=lambda kv: -kv[1][1])
    return {
        "exploration_time_share": 1.0 - arms.get(key, [0, 0.0])[1] / time,
        "lr_time_share": sum(t for a, (_, t) in arms.items() if not a.startswith("0,")) / time,
        "model_loss_share": sum(t / time * (1.0 - h[a] / best) for a, (_, t) in arms.items()),
        "arms_tried": len(arms),
        "top_arms": [
            {
                "arm": a,
                "time_share": t / time,
                "round_share": k / rounds,
                "rounds_per_problem": k / len(runs),
                "model_over_oracle": h[a] / best,
            }
            for a, (k, t) in top[:6]
        ],
    }


def run_scenario(sc: Scenario, index: int, problems: int, seed: int, boot: int = BOOT) -> dict:
    """The scenario decoded by the controller (a copy of one per problem), by ``bandit-pooled`` (one
    controller over the problems in order, its posterior carried), by the oracle and by sd."""
    from lrtune.policies import FixedController

    base = build_bandit(sc.pricing, seed)
    pooled = build_bandit(sc.pricing, seed, "bandit-pooled")
    arms = base.bounds.arms()
    best, sd = oracle_arm(sc.pricing, arms, sc.alpha1, sc.alpha2), sd_arm(sc.pricing, arms, sc.alpha2)
    runs = {
        "controller": decode_all(lambda: copy.copy(base), sc, index, problems, seed),
        "pooled": decode_all(lambda: pooled, sc, index, problems, seed),
        "oracle": decode_all(lambda: FixedController(*best, base.bounds), sc, index, problems, seed),
        "sd": decode_all(lambda: FixedController(*sd, base.bounds), sc, index, problems, seed),
    }
    out = summarize(runs, seed, boot)

    def price(arm):
        return arm_speedup(sc.pricing, arm, sc.alpha1, sc.alpha2)

    for k in LEARNERS:
        out[k].update(arm_shares(runs[k], best, price))
    for name, arm in (("oracle", best), ("sd", sd)):
        model = price(arm)
        out[name].update(
            gamma1=arm[0],
            gamma2=arm[1],
            kind="lr" if arm[0] else "sd",
            model_speedup=model,
            simulated_over_model=out[name]["speedup_total"] / model,
        )
    res = {
        "profile": {
            "source": sc.profile_source,
            "c1": sc.pricing.c1,
            "c2": sc.pricing.c2,
            "batch_cost": list(sc.pricing.batch_cost) if sc.pricing.batch_cost else None,
        },
        "alpha1": sc.alpha1,
        "alpha2": sc.alpha2,
        "alpha_source": sc.alpha_source,
        "note": sc.note,
        "steps_per_problem": sc.steps,
        "problems": problems,
        **out,
    }
    if sc.target:
        r = out["controller"]["ratios"]
        value, lo = r[f"over_{sc.target}"], r[f"over_{sc.target}_ci95"][0]
        res["target"] = {
            "rule": f"controller / {sc.target} >= {TARGET_RATIO}",
            "value": value,
            "ci95": r[f"over_{sc.target}_ci95"],
            "pass": bool(value >= TARGET_RATIO),
            "ci95_low_passes": bool(lo >= TARGET_RATIO),
        }
    return res


def simulate(problems: int = PROBLEMS, seed: int = 0, only: list[str] | None = None, boot: int = BOOT) -> dict:
    """Every scenario (or those named in ``only``); deterministic in ``seed``."""
    scs = scenarios()
    out = {}
    for i, sc in enumerate(scs):
        if only and sc.name not in only:
            continue
        out[sc.name] = run_scenario(sc, i, problems, seed, boot)
    return out


def describe_controller() -> dict:
    c = build_bandit(gpu_pricing(0.05))
    b = c.bounds
    return {
        "built_by": "lrtune.build.build_controller('bandit', DecodeConfig(method='lr+sd', gamma1=3, gamma2=4), "
        "pricing)",
        "class": type(c).__name__,
        "mode": c.mode,
        "pooled": c.pooled,
        "horizon_tokens": c.horizon_tokens,
        "round_kinds": list(c.round_kinds),
        "prior": list(c.prior),
        "bounds": {"gamma1_max": b.gamma1_max, "gamma2_max": b.gamma2_max, "M": b.M},
        "per_problem": "a copy of one controller (its own posterior from the prior; run-level evidence shared)",
        "explore_budget": c.explore_budget,
        "rate_rounds": c.rate_rounds,
    }


def table(result: dict) -> str:
    def ratio(r: dict, ref: str) -> str:
        lo, hi = r[f"over_{ref}_ci95"]
        return f"{r[f'over_{ref}']:.3f} [{lo:.3f}, {hi:.3f}]"

    lines = [
        f"{'scenario':<24} {'steps':>5} {'oracle':>11} {'sd':>11} {'ctl':>6} {'ctl/oracle [95%]':>21} "
        f"{'ctl/sd [95%]':>21} {'explore':>7} {'pooled/oracle':>13}"
    ]
    for name, s in result["scenarios"].items():
        o, c = s["oracle"], s["controller"]
        lines.append(
            f"{name:<24} {s['steps_per_problem']:>5} {o['speedup_total']:>5.3f} ({o['gamma1']},{o['gamma2']}) "
            f"{s['sd']['speedup_total']:>5.3f} (0,{s['sd']['gamma2']}) {c['speedup_total']:>6.3f} "
            f"{ratio(c['ratios'], 'oracle'):>21} {ratio(c['ratios'], 'sd'):>21} "
            f"{c['exploration_time_share']:>7.1%} {s['pooled']['ratios']['over_oracle']:>13.3f}"
        )
    for rule, t in result["targets"].items():
        lines.append(
            f"{rule}: {t['value']:.3f} [{t['ci95'][0]:.3f}, {t['ci95'][1]:.3f}] {'PASS' if t['pass'] else 'FAIL'}"
        )
    return "\n".join(lines)


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="JSON file to write")
    p.add_argument("--problems", type=int, default=PROBLEMS)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--only", default="", help="comma-separated scenario names (default: all)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    from lrtune.machine import machine_info

    only = [x for x in args.only.split(",") if x] or None
    sims = simulate(args.problems, args.seed, only)
    targets = {f"{name}: {s['target']['rule']}": s["target"] for name, s in sims.items() if s.get("target") is not None}
    command = f"python -m benchmarks.controller_sim --out {args.out}"
    if args.problems != PROBLEMS:
        command += f" --problems {args.problems}"
    if args.seed:
        command += f" --seed {args.seed}"
    if only:
        command += f" --only {args.only}"
    result = {
        "command": command,
        "seed": args.seed,
        "problems": args.problems,
        "step_tokens": STEP_TOKENS,
        "bootstrap_resamples": BOOT,
        "time_unit": "T, one plain target step (L tokens); round times are in T",
        "controller": describe_controller(),
        "targets": targets,
        "scenarios": sims,
        "machine": machine_info(),
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(table(result))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
