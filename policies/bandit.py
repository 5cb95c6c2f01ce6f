"""``bandit``: per-problem Beta posteriors on α1 and α2, (γ1, γ2) maximising the speedup model.

State per problem: α1 ~ Beta(a1, b1), α2 ~ Beta(a2, b2), starting from the prior (a
learned controller sets it from a prediction). After a round, every verdict updates α1
(success = accepted) and the SD passes update α2 (accepted tokens are successes; each pass
that stopped early is one failure — the i.i.d. model's likelihood). Before a round:

* ``thompson``: draw α̃1, α̃2 from the posteriors and pick argmax h(γ1, γ2; α̃1, c1, α̃2, c2, b)
  over the allowed arms;
* ``ucb``: use the posterior quantile 1 − 1/(t+1) of each α instead of a draw (optimism).

h is :func:`lrtune.speedup.h` with the measured c1, c2 and batch-cost curve b(n).

Round kinds: ``round_kinds`` names the rounds a γ1 > 0 arm may run, ``lr`` (the target
generates its own steps, priced by h) and ``score`` (one prefill of the chain judges the
draft steps, :func:`lrtune.speedup.h_score` with the prefill priced as
P(γ1) = (o + π·γ1·L) / L target steps: call overhead o and π per token from ``lrtune
profile``, L tokens per step); each arm is run as the kind that prices it higher, and
:meth:`round_kind` tells the decoder which. α1 is shared: the same verifier judges both.

``bandit-pooled`` (``pooled=True``): a new problem starts from the posterior the problems
before it left, shrunk to at most ``pool_strength`` (16) pseudo-observations per α, instead of
the flat prior. An answer of a few hundred tokens holds only a handful of rounds, too few for a
flat prior to learn what this verifier accepts; pooled, the controller learns it over the run.

Exploration the speedup model allows. The optimistic α1 is
α̂1 = min(q95(α1 posterior), max(α1_max, E[α1 | rounds seen])), where α1_max is the highest
acceptance the verifier's calibration admits (``pricing.alpha1_max``: a distilled checkpoint's
upper 95% bound on its test-split acceptance; 1 when unknown). When no γ1 > 0 arm beats the best
γ1 = 0 arm at α̂1, max_{γ1>0} h(γ1, γ2; α̂1, α2) <= max_{γ2} g(γ2), no γ1 > 0 arm is ever tried:
the controller picks the best γ1 = 0 arm from the first round and the round runs to the end of
the answer. Otherwise γ1 = 0 rounds teach nothing about α1, so the k-th consecutive one lasts
``horizon_tokens · 2^k`` tokens and k changes of mind cost O(log) engine calls.

The measured-rate guard. Exploration is per problem and optimistic, and the model can be
wrong about this machine (an LR round's batch may cost more than its profile says), so the
controller also keeps run-level evidence, shared by the copies a batched decode makes: every
verdict (the run's α1, Beta(1 + accepted, 1 + rejected)) and, per round r but a problem's first
(it holds the prompt's prefill), the committed tokens n_r, the seconds t_r and the model's speedup
h_r of the arm it ran at the posterior means it chose with. Per class (LR: γ1 > 0, SD: γ1 = 0)
Q = Σ n_r / Σ t_r·h_r is tokens per second per unit of modelled speedup, and ρ = Q_LR / Q_SD says
how much faster (> 1) or slower (< 1) LR rounds ran than the model said, next to SD rounds; ρ⁺
raises Q_LR by one standard error of the ratio estimator (a round's tokens vary with the steps
it happened to accept). Once ``rate_rounds`` (k = 3) LR rounds and one SD round are measured, a
γ1 > 0 arm is tried only while also min(ρ⁺, 1) · max_{γ1>0} h(γ1, γ2; α̃1, ᾱ2) > max_{γ2} g(γ2),
α̃1 the 0.8-quantile of the run's α1: at the acceptance the run has seen and the cost LR rounds
have measured, some LR arm must still beat SD. A measurement rules LR out, never in, and the arm
a round runs is still chosen by the model alone. Once LR is ruled out, SD runs to the end of
every later answer in one call, until a re-test: a few LR rounds can close the guard by bad
luck (three rounds that each rejected their first step), so a guard first found closed with the
run at N committed tokens opens again for ``rate_rounds`` more LR rounds once the run reaches 2N
tokens, and after each re-test that leaves it closed the next waits for twice the tokens again.
A run of N_end tokens re-tests at most log2(N_end / N) times, each re-test's rounds within the
exploration budget below; the evidence they add stays. ``rate_rounds=0`` turns the guard off.

The exploration budget (a conservative bandit, Wu et al. 2016, with SD as the baseline). With
T the run's seconds so far, N its committed tokens and R the rate its SD rounds ran at
(prefills included: the rate plain SD decodes whole answers at), an LR round of the arm the
controller chose starts only while slack = (1 + ε)·N/R − T ≥ w, w that round's worst case: the
model's time for the arm committing one step of L = ``horizon_tokens`` tokens at α1 = 0,
L·g / (R·h(γ1, γ2; 0, ᾱ2)), divided by min(ρ, 1) once measured, and no less than the longest
LR round measured. Counting every LR round a total loss, the run never takes more than
(1 + ε) times SD's time for its tokens; LR rounds that beat SD add to the slack, rounds that
lose spend it. Until the slack covers w (for the arm the draw chose, or the cheapest LR arm
when it chose SD), the controller runs SD at the run's α2 for ⌈(w − slack)·R/ε⌉ tokens (the
slack grows ε/R s per SD token), so a run where LR never pays makes one engine call per answer. No SD
rate yet: SD first. ``explore_budget`` is ε (0.01: half the 2% a user tolerates against
SD, the other half left to timing noise); None turns the budget off, and a run whose
rounds report no seconds (a test that times nothing) is not budgeted.
"""

from __future__ import annotations

import math
import random

from lrtune.control import Bounds, ControlState, ProblemInfo, RoundOutcome
from lrtune.errors import ConfigError
from lrtune.pricing import ROUND_KINDS, Prefill, Pricing
from lrtune.policies.measured import MeasuredRates, beta_quantile as _beta_quantile

_LEGACY_PRICES = ("c1", "c2", "batch_cost", "prefill")
ALPHA1_Q = 0.8  # the guard prices LR at this quantile of the run's α1
RHO_Z = 1.0  # the guard uses ρ's upper bound: Q_LR raised by this many standard errors


class BanditController:
    """Hyperparameters are fixed here; the costs come in one :class:`~lrtune.pricing.Pricing`
    (``pricing``), and :meth:`derive` builds a new controller with other settings."""

    name = "bandit"

    def __init__(
        self,
        bounds: Bounds | None = None,
        pricing: Pricing | None = None,
        prior: tuple[float, float, float, float] = (1.0, 1.0, 1.0, 1.0),
        mode: str = "thompson",
        seed: int = 0,
        horizon_tokens: int = 64,
        round_kinds: tuple[str, ...] = ("lr",),
        pooled: bool = False,
        pool_strength: float = 16.0,
        rate_rounds: int = 3,
        explore_budget: float | None = 0.01,
        **legacy,
    ) -> None:
        pricing = _legacy_pricing(pricing, legacy)
        if mode not in ("thompson", "ucb"):
            raise ConfigError(f"bandit mode must be thompson or ucb, got {mode!r}")
        if horizon_tokens < 1:
            raise ConfigError(f"horizon_tokens must be >= 1, got {horizon_tokens}")
        if isinstance(rate_rounds, bool) or not isinstance(rate_rounds, int) or rate_rounds < 0:
            raise ConfigError(f"rate_rounds must be an integer >= 0 (0: no measured-rate guard), got {rate_rounds!r}")
        number = isinstance(explore_budget, (int, float)) and not isinstance(explore_budget, bool)
        if explore_budget is not None and not (number and 0 <= explore_budget <= 1):
            raise ConfigError(f"explore_budget must be a number in [0, 1] or None (no budget), got {explore_budget!r}")
        kinds = tuple(round_kinds)
        if not kinds or set(kinds) - set(ROUND_KINDS):
            raise ConfigError(f"round kinds must be some of {', '.join(ROUND_KINDS)}, got {kinds!r}")
        self.pricing = pricing
        # a γ2 above the shared SD engine's would start another engine mid-decode: stop there
        self.bounds = pricing.cap(bounds or Bounds())
        self.prior = prior
        self.mode = mode
        self.seed = seed
        self.horizon_tokens = horizon_tokens
        self.pooled, self.pool_strength = pooled, float(pool_strength)
        self.rate_rounds = rate_rounds
        self.explore_budget = explore_budget
        self.round_kinds = kinds
        self._given = {
            "bounds": bounds,
            "pricing": pricing,
            "prior": prior,
            "mode": mode,
            "seed": seed,
            "horizon_tokens": horizon_tokens,
            "round_kinds": kinds,
            "pooled": pooled,
            "pool_strength": pool_strength,
            "rate_rounds": rate_rounds,
            "explore_budget": explore_budget,
        }
        self._kind = kinds[0]  # the kind of the arm chosen last
        self._wanted = None  # the LR arm the exploration budget deferred in the last choice
        self.sd_rounds = 0  # consecutive γ1 = 0 rounds just before this one
        self._rng = random.Random(seed)
        self._problem: str | None = None
        self.post = list(prior)
        # pooled: the posterior of the latest round of any problem, shared with every copy of this
        # controller (a batched decode gives each prompt in flight a copy.copy of it)
        self._pool = _Pool(list(prior))
        # the guard's run-level evidence (verdicts, SD passes, per-class rates), shared with every copy
        self.rates = MeasuredRates()
        self.rounds = 0
        if not self._arms:
            raise ConfigError(f"no (γ1, γ2) satisfies {self.bounds}")

    def derive(self, **changes):
        """A new controller of this class with these settings and ``changes`` (e.g. ``pricing``,
        ``round_kinds``); this one is left as it is."""
        return type(self)(**{**self._given, **changes})

    # the plan's costs, read where a caller used to read the controller's own attributes
    c1 = property(lambda self: self.pricing.c1)
    c2 = property(lambda self: self.pricing.c2)
    batch_cost = property(lambda self: self.pricing.batch_cost)
    engine_drafts = property(lambda self: self.pricing.engine_drafts)

    @property
    def _arms(self) -> list[tuple[int, int]]:
        """The allowed (γ1, γ2), from the current bounds (narrowed e.g. to γ2 = 0 without SD)."""
        return self.bounds.arms()

    def reset(self, prior: tuple[float, float, float, float] | None = None) -> None:
        self.post = list(prior or self.prior)
        self.rounds = 0
        self.sd_rounds = 0

    def prefill_cost(self, g1: int) -> float:
        """P(γ1): a score round's prefill of γ1 draft steps, in target steps (the plan's)."""
        return self.pricing.score_prefill(g1)

    def _priced(self, g1: int, g2: int, a1: float, a2: float) -> tuple[float, str]:
        """(modelled speedup, round kind) of (γ1, γ2) at (α1, α2) on this controller's engine:
        the best of the allowed kinds (γ1 = 0 is SD alone, the same for every kind)."""
        return self.pricing.best(g1, g2, a1, a2, self.round_kinds)

    def lr_correction(self, z: float = 0.0) -> float:
        """ρ = Q_LR / Q_SD once ``rate_rounds`` LR rounds and one SD round are measured, else 1;
        ``z`` > 0 gives its upper bound, Q_LR raised by z standard errors."""
        return self.rates.rho(self.rate_rounds, z) if self.rate_rounds > 0 else 1.0

    def _h(self, g1: int, g2: int, a1: float, a2: float) -> float:
        """The modelled speedup of (γ1, γ2) at (α1, α2) on this controller's engine (best kind)."""
        return self._priced(g1, g2, a1, a2)[0]

    def _value(self, a1: float, a2: float, arms: list[tuple[int, int]] | None = None) -> tuple[int, int]:
        """The arm of ``arms`` (default: every allowed one) the speedup model prices highest at
        (α1, α2); ties go to the first."""
        arms = arms or self._arms
        best, arg, kind = -math.inf, arms[0], self.round_kinds[0]
        for g1, g2 in arms:
            v, k = self._priced(g1, g2, a1, a2)
            if v > best * (1 + 1e-12):
                best, arg, kind = v, (g1, g2), k
        self._kind = kind
        return arg

    def round_kind(self) -> str:
        """The kind of round the last chosen arm runs as (``lr`` or ``score``)."""
        return self._kind

    def estimate(self) -> tuple[float, float]:
        """Posterior means of (α1, α2)."""
        a1, b1, a2, b2 = self.post
        return a1 / (a1 + b1), a2 / (a2 + b2)

    def choose(self, problem: ProblemInfo, state: ControlState) -> tuple[int, int]:
        if problem.id != self._problem or state.round == 0:
            self._problem = problem.id
            self._rng = random.Random(f"{self.seed}:{problem.id}")
            self.reset(self.problem_prior(problem))
        self._wanted = None
        if not self._lr_can_win():  # no γ1 > 0 arm is worth trying: SD alone, never explored
            return self._sd_arm()
        a1, b1, a2, b2 = self.post
        if self.mode == "thompson":
            x1, x2 = self._rng.betavariate(a1, b1), self._rng.betavariate(a2, b2)
        else:
            q = 1.0 - 1.0 / (self.rounds + 2)
            x1, x2 = _beta_quantile(a1, b1, q), _beta_quantile(a2, b2, q)
        arm = self._value(min(x1, 0.999), min(x2, 0.999))
        if not self._budget_allows(arm if arm[0] > 0 else self._cheapest_lr_arm()):
            # the exploration budget admits no LR round yet: SD at the run's α2 until it does
            self._wanted = arm if arm[0] > 0 else None
            return self._sd_arm()
        return arm

    def _sd_arm(self) -> tuple[int, int]:
        """The best γ1 = 0 arm at the run's α2 (:meth:`_sd_alpha2`)."""
        return self._value(0.0, self._sd_alpha2(), [arm for arm in self._arms if arm[0] == 0])

    def horizon(self) -> int | None:
        """Tokens of a γ1 = 0 round (module docstring): None when LR cannot win even at the
        optimistic α1, else ``horizon_tokens · 2^k`` after k consecutive γ1 = 0 rounds, and no
        less than the exploration budget's wait for the LR arm the controller wanted (the one
        whose worst case is the least when it chose SD itself): no LR round could start sooner."""
        if not self._lr_can_win():
            return None
        usual = self.horizon_tokens * 2 ** min(self.sd_rounds, 20)
        wait = self._budget_wait(self._wanted or self._cheapest_lr_arm())
        return usual if wait is None else max(wait, usual)

    def _cheapest_lr_arm(self) -> tuple[int, int]:
        """The γ1 > 0 arm whose worst-case round (:meth:`_worst_lr_round`) is the shortest."""
        m2 = self._sd_alpha2()
        return max((arm for arm in self._arms if arm[0] > 0), key=lambda arm: self._h(*arm, 0.0, m2))

    def _worst_lr_round(self, arm: tuple[int, int]) -> float:
        """Seconds an LR round of ``arm`` may take, worst case: the model's time for it committing
        one step of L = ``horizon_tokens`` tokens at α1 = 0, L·g / (R·h(γ1, γ2; 0, ᾱ2)) (SD makes L
        tokens in L/R s at speedup g), slowed by min(ρ, 1) once LR rounds are measured, and no less
        than the longest LR round measured. Needs the SD rate R."""
        m2 = self._sd_alpha2()
        g = max((self._h(0, g2, 0.0, m2) for g1, g2 in self._arms if g1 == 0), default=1.0)
        modelled = self.horizon_tokens * g / (self.rates.sd_rate_with_prefills() * self._h(*arm, 0.0, m2))
        return max(modelled / min(self.lr_correction(), 1.0), self.rates.longest_lr)

    def _budget_allows(self, arm: tuple[int, int]) -> bool:
        """The exploration budget ε (``explore_budget``): an LR round of ``arm`` starts only when
        the run, with that round counted a total loss, stays within (1 + ε) times the time SD
        would have taken for the same tokens: slack = (1 + ε)·N/R − T ≥ its worst case (module
        docstring). No SD rate measured yet: no LR round. ``explore_budget=None``, or rounds
        reported with no seconds at all (nothing to judge a budget by): always."""
        gap = self._budget_gap(arm)
        return gap is not None and gap <= 0

    def _budget_gap(self, arm: tuple[int, int]) -> float | None:
        """w − slack in seconds for ``arm`` (≤ 0: admitted); 0 when no budget applies; None while
        no SD rate is measured."""
        if self.explore_budget is None or self.rates.never_timed():
            return 0.0
        slack = self.rates.budget_slack(self.explore_budget)
        return None if slack is None else self._worst_lr_round(arm) - slack

    def _budget_wait(self, arm: tuple[int, int]) -> int | None:
        """SD tokens until the budget admits ``arm``: the slack grows by ε/R s per SD token, so
        ⌈(w − slack)·R/ε⌉; None when it admits it now, when no budget applies, or while no SD
        rate is measured (the round runs the usual horizon)."""
        gap = self._budget_gap(arm)
        if gap is None or gap <= 0:
            return None
        if self.explore_budget == 0:
            return 1 << 30
        return max(1, math.ceil(gap * self.rates.sd_rate_with_prefills() / self.explore_budget))

    def optimistic_alpha1(self) -> float:
        """The most α1 exploration assumes: the posterior's 95% quantile, but no more than what
        the verifier's calibration admits (``pricing.alpha1_max``) unless the rounds seen so far
        put the posterior mean above it: min(q95, max(α1_max, mean))."""
        a1, b1 = self.post[:2]
        cap = max(self.pricing.alpha1_max, a1 / (a1 + b1))
        return min(_beta_quantile(a1, b1, 0.95), cap, 0.999)

    def _sd_alpha2(self) -> float:
        """α2 for an SD-alone choice, which may run to the end of the answer: the posterior mean
        of the run's SD passes once it holds more than this problem's (a problem's posterior
        starts from the prior again, and an SD round to the end would never correct a prior's
        γ2); before the run has measured any SD pass, the posterior's 95% quantile (optimism: a
        prior that prices SD below the target alone would pick γ2 = 0 and never measure α2)."""
        a2, b2 = self.post[2:]
        r2 = self.rates.tokens_judged
        if not any(r2):
            return min(_beta_quantile(a2, b2, 0.95), 0.999)
        if sum(r2) > a2 + b2:
            a2, b2 = 1 + r2[0], 1 + r2[1]
        return min(a2 / (a2 + b2), 0.999)

    def measured(self) -> dict:
        """The measured-rate guard's state over the run: measured rounds and tokens/s per class,
        ρ and ρ⁺ (1 until measured), and whether a γ1 > 0 arm may still be tried (``lr_open``)."""
        rounds = self.rates.rounds
        return {
            "lr_rounds": rounds["lr"],
            "sd_rounds": rounds["sd"],
            "lr_tokens_per_s": self.rates.rate("lr"),
            "sd_tokens_per_s": self.rates.rate("sd"),
            "rho": self.lr_correction(),
            "rho_upper": self.lr_correction(RHO_Z),
            "alpha1_q": self.rates.alpha1_quantile(ALPHA1_Q),
            "budget_slack_s": None if self.explore_budget is None else self.rates.budget_slack(self.explore_budget),
            "lr_open": self._lr_can_win(),
            "guard_retests": self.rates.retests,
        }

    def _lr_can_win(self) -> bool:
        """Whether a γ1 > 0 arm may be tried: the model's rule (some γ1 > 0 arm beats the best
        γ1 = 0 arm at the optimistic α1 and the posterior mean of α2) and the measured-rate guard
        (:meth:`_guard_open`)."""
        return self._lr_beats_sd(self.optimistic_alpha1(), self._mean_alpha2(), 1.0) and self._guard_open()

    def _mean_alpha2(self) -> float:
        """This problem's posterior mean of α2, below 1 (the guard and the model's rule price SD
        with it)."""
        return min(self.estimate()[1], 0.999)

    def _guard_open(self) -> bool:
        """The measured-rate guard (module docstring): open until ``rate_rounds`` LR rounds and an
        SD round are measured and while a re-test runs; otherwise open while some γ1 > 0 arm,
        scaled by min(ρ⁺, 1), beats the best γ1 = 0 arm at the 0.8-quantile of the run's α1 and
        the posterior mean of α2. Finding it closed advances the re-test schedule."""
        if self.rate_rounds == 0 or not self.rates.measured(self.rate_rounds) or self.rates.retesting():
            return True
        rho = min(self.lr_correction(RHO_Z), 1.0)
        if self._lr_beats_sd(self.rates.alpha1_quantile(ALPHA1_Q), self._mean_alpha2(), rho):
            self.rates.opened()
            return True
        self.rates.closed(self.rate_rounds)
        return self.rates.retesting()

    def _lr_beats_sd(self, a1: float, a2: float, rho: float) -> bool:
        """max_{γ1>0} ρ·h(γ1, γ2; α1, α2) > max_{γ2} g(γ2; α2) over the allowed arms."""
        a1 = min(a1, 0.999)
        lr = [rho * self._h(g1, g2, a1, a2) for g1, g2 in self._arms if g1 > 0]
        sd = [self._h(0, g2, a1, a2) for g1, g2 in self._arms if g1 == 0]
        return bool(lr) and (not sd or max(lr) > max(sd))

    def problem_prior(self, problem: ProblemInfo) -> tuple[float, float, float, float]:
        """The prior of a new problem (a learned controller overrides this): ``prior``, or with
        ``pooled`` the posterior the problems before it left, each Beta shrunk to at most
        ``pool_strength`` pseudo-observations (a + b) so that the new problem's own rounds
        still move it."""
        if not self.pooled:
            return self.prior
        out = []
        post = self._pool.post
        for a, b in (post[:2], post[2:]):
            k = min(1.0, self.pool_strength / (a + b))
            out += [a * k, b * k]
        return tuple(out)

    def update(self, o: RoundOutcome) -> None:
        self.rates.judged(*o.step_successes)
        if o.gamma2 > 0:
            self.rates.passes(*o.token_successes)
        seconds = o.draft_s + o.target_s + o.verify_s
        self.rates.timed(o.gamma1 > 0, o.committed_tokens, seconds)
        if self.rounds > 0:  # a problem's first round holds the prompt's prefill: not a rate
            m1, m2 = self.estimate()  # what the controller believed when it chose this arm
            modelled = self._h(o.gamma1, o.gamma2, min(m1, 0.999), min(m2, 0.999))
            self.rates.add(o.gamma1 > 0, o.committed_tokens, seconds, modelled)
        acc, rej = o.step_successes
        self.post[0] += acc
        self.post[1] += rej
        if o.gamma2 > 0:
            tacc, trej = o.token_successes
            self.post[2] += tacc
            self.post[3] += trej
        self.rounds += 1
        self.sd_rounds = self.sd_rounds + 1 if o.gamma1 == 0 else 0
        if self.pooled:
            self._pool.post = list(self.post)


class _Pool:
    """The posterior a pooled bandit's next problem starts from (one object, shared by copies)."""

    def __init__(self, post: list[float]) -> None:
        self.post = post


def _legacy_pricing(pricing: Pricing | None, legacy: dict) -> Pricing:
    """``pricing``, or one built from the keyword costs of lrtune 0.1 (``c1``, ``c2``,
    ``batch_cost``, ``prefill``; deprecated, removed in 0.3.0)."""
    unknown = set(legacy) - set(_LEGACY_PRICES)
    if unknown:
        raise TypeError(f"unexpected keyword argument(s): {', '.join(sorted(unknown))}")
    if not legacy:
        return pricing or Pricing()
    import warnings
    from dataclasses import replace

    from lrtune.decodeconfig import LEGACY_REMOVED_IN

    warnings.warn(
        f"{', '.join(sorted(legacy))}= on a controller is deprecated and will be removed in "
        f"{LEGACY_REMOVED_IN}: pass pricing=lrtune.pricing.Pricing(...)",
        DeprecationWarning,
        stacklevel=3,
    )
    if pricing is not None:
        raise ConfigError("give the costs either in pricing= or as c1/c2/batch_cost/prefill, not both")
    kw = dict(legacy)
    if kw.get("prefill") is not None:
        kw["prefill"] = Prefill(**kw["prefill"])
    return replace(Pricing(), **{k: v for k, v in kw.items() if v is not None})
