"""Run-level evidence of the bandit: what its rounds measured over a whole run (one object shared
by every copy of a controller, as a batched decode or a :class:`~lrtune.decoding.Decoder` makes
them), for the measured-rate guard and the exploration budget (:mod:`lrtune.policies.bandit`)."""

from __future__ import annotations

import math

RETEST_GROWTH = 2  # a closed guard re-tests once the run has this many times the tokens it had


def beta_quantile(a: float, b: float, q: float) -> float:
    """The q-quantile of Beta(a, b) (the inverse of the regularised incomplete beta)."""
    from scipy.special import betaincinv

    return float(betaincinv(a, b, q))


class MeasuredRates:
    """The run-level evidence (:mod:`lrtune.policies.bandit`'s docstring): the run's step verdicts
    (α1) and SD passes (α2); per round class (LR: γ1 > 0, SD: γ1 = 0) running sums over the
    measured rounds of the committed tokens n_r, the seconds t_r, m_r = t_r·h_r, n_r², m_r² and
    n_r·m_r; and every timed round's seconds and tokens, for the exploration budget."""

    _SUMS = ("rounds", "n", "t", "m", "nn", "mm", "nm")

    def __init__(self) -> None:
        self.sums = {cls: dict.fromkeys(self._SUMS, 0.0) for cls in ("lr", "sd")}
        self.verdicts = [0, 0]  # accepted, rejected draft steps over every round of the run
        self.tokens_judged = [0, 0]  # accepted draft tokens, stopped SD passes over the run
        # every timed round, first rounds (prefills) included: seconds and tokens per class, and
        # the longest LR round's seconds (the exploration budget's worst case)
        self.spent = {cls: [0.0, 0] for cls in ("lr", "sd")}
        self.longest_lr = 0.0
        self.untimed = 0  # rounds reported without seconds (a simulation or test that times nothing)
        # the guard's re-tests: the run's committed tokens at which a closed guard opens again
        # (None: not scheduled), the LR round count a re-test lasts until, and how many started
        self.retest_at: int | None = None
        self.retest_until: int | None = None
        self.retests = 0

    def timed(self, lr: bool, tokens: int, seconds: float) -> None:
        """One round of the run, whichever it was (a problem's first included)."""
        if seconds <= 0:
            self.untimed += 1
        else:
            slot = self.spent["lr" if lr else "sd"]
            slot[0] += seconds
            slot[1] += tokens
            if lr:
                self.longest_lr = max(self.longest_lr, seconds)

    def sd_rate_with_prefills(self) -> float | None:
        """Tokens per second of every SD round of the run, first rounds (prefills) included: the
        rate plain SD decodes a whole answer at; None before any SD round committed a token."""
        t, n = self.spent["sd"]
        return n / t if t and n else None

    def never_timed(self) -> bool:
        """Whether rounds were reported and none with seconds: no budget can be judged."""
        return self.untimed > 0 and not (self.spent["lr"][0] or self.spent["sd"][0])

    def budget_slack(self, eps: float) -> float | None:
        """(1 + ε)·N / R − T in seconds: how far the run is inside (1 + ε) times the time SD would
        have taken for its N tokens at its measured rate R (:meth:`sd_rate_with_prefills`), T
        the run's seconds so far; None before R is measured."""
        r = self.sd_rate_with_prefills()
        if r is None:
            return None
        t = self.spent["lr"][0] + self.spent["sd"][0]
        return (1 + eps) * self.tokens() / r - t

    def tokens(self) -> int:
        """Tokens every timed round of the run committed, first rounds included."""
        return self.spent["lr"][1] + self.spent["sd"][1]

    def retesting(self) -> bool:
        """Whether a re-test of the guard is under way (it has not measured its LR rounds yet)."""
        return self.retest_until is not None and self.sums["lr"]["rounds"] < self.retest_until

    def closed(self, k: int) -> None:
        """The guard found LR closed with the run at N committed tokens. The first time (and the
        first time after a re-test), schedule a re-test at 2N tokens; at or past it, start one:
        the guard stays open until k more LR rounds are measured. A run of N_end tokens re-tests
        at most log2(N_end / N_closed) times."""
        n = self.tokens()
        if self.retest_at is None:
            self.retest_at = RETEST_GROWTH * max(n, 1)
        elif n >= self.retest_at:
            self.retest_at, self.retests = None, self.retests + 1
            self.retest_until = int(self.sums["lr"]["rounds"]) + k

    def opened(self) -> None:
        """The evidence leaves LR open: no re-test is scheduled."""
        self.retest_at = None

    def passes(self, accepted: int, stopped: int) -> None:
        self.tokens_judged[0] += accepted
        self.tokens_judged[1] += stopped

    def judged(self, accepted: int, rejected: int) -> None:
        self.verdicts[0] += accepted
        self.verdicts[1] += rejected

    def alpha1_quantile(self, q: float) -> float:
        """The q-quantile of Beta(1 + accepted, 1 + rejected) over the run's verdicts."""
        return beta_quantile(1 + self.verdicts[0], 1 + self.verdicts[1], q)

    def measured(self, k: int) -> bool:
        """Whether max(k, 2) LR rounds and one SD round that committed tokens are measured."""
        lr, sd = self.sums["lr"], self.sums["sd"]
        return lr["rounds"] >= max(k, 2) and bool(sd["n"]) and bool(lr["m"])

    @property
    def rounds(self) -> dict[str, int]:
        return {cls: int(s["rounds"]) for cls, s in self.sums.items()}

    def add(self, lr: bool, tokens: int, seconds: float, modelled: float) -> None:
        if seconds > 0 and modelled > 0:  # a round with no time measured (a unit test's fake) is no rate
            s, m = self.sums["lr" if lr else "sd"], seconds * modelled
            for key, value in zip(self._SUMS, (1, tokens, seconds, m, tokens * tokens, m * m, tokens * m)):
                s[key] += value

    def rate(self, cls: str) -> float | None:
        """Σ n_r / Σ t_r: the class's measured tokens per second; None before any round."""
        s = self.sums[cls]
        return s["n"] / s["t"] if s["rounds"] else None

    def rho(self, k: int, z: float = 0.0) -> float:
        """ρ = Q_LR / Q_SD, Q = Σ n_r / Σ m_r (a ratio estimator), with Q_LR raised by z standard
        errors, SE = sqrt(Σ (n_r − Q·m_r)² / (k(k − 1))) / mean(m_r) over the k LR rounds;
        1 until max(k, 2) LR rounds and one SD round that committed tokens are measured."""
        if not self.measured(k):
            return 1.0
        lr, sd = self.sums["lr"], self.sums["sd"]
        k_lr = lr["rounds"]
        q = lr["n"] / lr["m"]
        resid = max(lr["nn"] - 2 * q * lr["nm"] + q * q * lr["mm"], 0.0)
        se = math.sqrt(resid / (k_lr * (k_lr - 1))) / (lr["m"] / k_lr)
        return (q + z * se) / (sd["n"] / sd["m"])
