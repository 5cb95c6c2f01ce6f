"""Decode statistics (pure bookkeeping, no logging).

Conventions (DESIGN §3.2, §4):

* A *round* drafts ``d`` steps (``d <= γ1``); if the first ``j`` are accepted the round
  commits those ``j`` draft steps plus one target step. Per draft position ``i`` (0-based)
  we count how often a step was drafted there and how often it was accepted, so
  ``α1[i] = accepted[i] / drafted[i]``. Every drafted step is compared with its target
  step, also those after the first rejection (their verdicts do not change what is
  committed but are unbiased samples of the acceptance rate).
* ``mean_accepted_steps_per_round = (accepted draft steps + target steps) / rounds``,
  i.e. it *includes* the target's step, as vLLM does for tokens.
* Token-level SD: α2 is the per-token acceptance probability of the speedup model's g(γ2),
  estimated censoring-aware from the engine's counters: ``accepted / (accepted + passes
  stopped by a rejection)`` (a fully accepted pass only bounds it). ``sd_acceptance_rate =
  accepted / drafted`` is the engine's rate, which is lower (records before ``sd_stopped``
  was counted reported that rate as α2).
* Times are wall seconds; ``other_s = wall_s - draft_s - target_s - verify_s``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from lrtune.backends.base import SDCounters


@dataclass
class DecodeStats:
    """Counters and timings of one decode (or a sum of decodes, see :meth:`merge`)."""

    wall_s: float = 0.0
    draft_s: float = 0.0
    target_s: float = 0.0
    verify_s: float = 0.0
    prefill_s: float = 0.0  # part of target_s: prefills of draft chains (score rounds, draft-prefix reuse)
    overlap_s: float = 0.0  # async LR: draft + target busy time beyond wall time (work done in parallel)
    prompt_tokens: int = 0
    generated_tokens: int = 0
    rounds: int = 0
    draft_calls: int = 0
    target_calls: int = 0
    verifier_calls: int = 0
    committed_draft_steps: int = 0
    committed_target_steps: int = 0
    drafted_by_pos: list[int] = field(default_factory=list)
    accepted_by_pos: list[int] = field(default_factory=list)
    draft_step_tokens: int = 0
    target_step_tokens: int = 0
    aborted_target_rows: int = 0  # early abort: target rows stopped after a rejection
    reused_target_tokens: int = 0  # draft-prefix reuse: target-step tokens read off the prefill, not generated
    draft_stops: int = 0  # draft chains ended early by --draft-stop (the draft doubted its step)
    target_tokens_at_drafts: int = 0  # target-step tokens at drafted positions (bonus and stopped rows excluded)
    sd: SDCounters = field(default_factory=SDCounters)  # token-level SD, summed over the target calls
    # rounds by kind (a controller may pick per round): lr (the target generates its own steps),
    # score (a prefill judges the draft steps), sd (γ1 = 0: no draft steps); and their seconds
    # (draft + target + verify of the round)
    lr_rounds: int = 0
    score_rounds: int = 0
    sd_rounds: int = 0
    lr_round_s: float = 0.0
    score_round_s: float = 0.0
    sd_round_s: float = 0.0
    lr_round_tokens: int = 0  # tokens the rounds of each kind committed
    score_round_tokens: int = 0
    sd_round_tokens: int = 0

    # ---- observation -------------------------------------------------------------
    def observe_round(self, accepted: list[bool], *, committed_target_steps: int = 1) -> None:
        """Record one LR round: ``accepted[i]`` is the verdict on drafted position ``i``.

        The committed prefix is the leading run of ``True``; the target's step follows it
        unless the round ended on an accepted EOS (``committed_target_steps=0``); a γ1 = 0
        round commits every step the target ran to its horizon.
        """
        self.rounds += 1
        _grow(self.drafted_by_pos, len(accepted))
        _grow(self.accepted_by_pos, len(accepted))
        for i, ok in enumerate(accepted):
            self.drafted_by_pos[i] += 1
            self.accepted_by_pos[i] += int(ok)
        self.committed_draft_steps += leading_accepts(accepted)
        self.committed_target_steps += committed_target_steps

    def observe_round_kind(self, kind: str, seconds: float, tokens: int = 0) -> None:
        """Count one round of ``kind`` (lr | score | sd) that took ``seconds`` and committed ``tokens``."""
        setattr(self, f"{kind}_rounds", getattr(self, f"{kind}_rounds") + 1)
        setattr(self, f"{kind}_round_s", getattr(self, f"{kind}_round_s") + seconds)
        setattr(self, f"{kind}_round_tokens", getattr(self, f"{kind}_round_tokens") + tokens)

    @property
    def exploration_s(self) -> float | None:
        """Seconds the rounds of the slower kinds took beyond what the kind this prompt found
        fastest would have needed for their tokens: Σ_k (s_k − n_k / r*), r* = max_k n_k / s_k
        over the kinds that ran (s_k seconds, n_k committed tokens); what a controller paid to
        find out. 0 when one kind ran; None without rounds. Per prompt: rates of different
        prompts are not compared (sum it over prompts, never over merged stats)."""
        kinds = [(getattr(self, f"{k}_round_s"), getattr(self, f"{k}_round_tokens")) for k in ("lr", "score", "sd")]
        kinds = [(s, n) for s, n in kinds if s > 0]
        if not kinds:
            return None
        best = max(n / s for s, n in kinds)
        if best <= 0:
            return 0.0
        return sum(max(0.0, s - n / best) for s, n in kinds)

    def observe_sd(self, sd: SDCounters | None) -> None:
        """Add one call's token-level SD counters (None: the call ran no SD)."""
        if sd is not None:
            self.sd.add(sd)

    def observe_target_call(self, seconds: float, sd: SDCounters | None) -> None:
        """One target engine call of this prompt: its (share of the) seconds and SD counters."""
        self.target_calls += 1
        self.target_s += seconds
        self.observe_sd(sd)

    # ---- derived -----------------------------------------------------------------
    @property
    def drafted_tokens(self) -> int:
        return self.sd.drafted_tokens

    @property
    def accepted_tokens(self) -> int:
        return self.sd.accepted_tokens

    @property
    def sd_drafts(self) -> int:
        """Verifications of a token draft (engine steps that proposed at least one token)."""
        return self.sd.drafts

    @property
    def sd_accepted_by_pos(self) -> list[int]:
        return self.sd.accepted_by_pos

    @property
    def other_s(self) -> float:
        return max(0.0, self.wall_s - self.draft_s - self.target_s - self.verify_s + self.overlap_s)

    @property
    def drafted_steps(self) -> int:
        return sum(self.drafted_by_pos)

    @property
    def accepted_steps(self) -> int:
        return sum(self.accepted_by_pos)

    @property
    def alpha1(self) -> float | None:
        """Step acceptance over all compared draft steps, or None if none were drafted."""
        return _ratio(self.accepted_steps, self.drafted_steps)

    @property
    def alpha1_by_pos(self) -> list[float | None]:
        return [_ratio(a, d) for a, d in zip(self.accepted_by_pos, self.drafted_by_pos)]

    @property
    def alpha2(self) -> float | None:
        """Per-token acceptance α2 of speculative decoding, censoring-aware (accepted tokens /
        (accepted tokens + passes stopped by a rejection): :attr:`SDCounters.alpha`, the α the
        speedup model's g(γ2) takes), or None without SD."""
        return self.sd.alpha

    @property
    def sd_acceptance_rate(self) -> float | None:
        """Accepted / drafted tokens (lower than α2: a pass accepts at most γ2), or None without SD."""
        return self.sd.acceptance_rate

    @property
    def mean_accepted_steps_per_round(self) -> float | None:
        """(committed draft steps + committed target steps) / rounds."""
        return _ratio(self.committed_draft_steps + self.committed_target_steps, self.rounds)

    @property
    def mean_accepted_tokens_per_draft(self) -> float | None:
        """SD: 1 + accepted tokens per verification (vLLM's *mean acceptance length*)."""
        r = _ratio(self.accepted_tokens, self.sd_drafts)
        return None if r is None else 1.0 + r

    @property
    def tokens_per_s(self) -> float | None:
        return _ratio(self.generated_tokens, self.wall_s)

    # ---- aggregation ---------------------------------------------------------------
    def merge(self, other: DecodeStats) -> DecodeStats:
        """Return the sum of two stats (counters and times add; per-position lists add)."""
        out = DecodeStats()
        for name in self.__dataclass_fields__:
            value, theirs = getattr(self, name), getattr(other, name)
            if isinstance(value, SDCounters):
                value = value.copy()
                value.add(theirs)
                setattr(out, name, value)
            elif isinstance(value, list):
                n = max(len(value), len(theirs))
                setattr(
                    out,
                    name,
                    [(value[i] if i < len(value) else 0) + (theirs[i] if i < len(theirs) else 0) for i in range(n)],
                )
            else:
                setattr(out, name, value + theirs)
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DecodeStats:
        """Inverse of :meth:`to_dict` (derived rates are ignored and recomputed)."""
        names = set(cls.__dataclass_fields__) - {"sd"}
        out = cls(**{k: (list(v) if isinstance(v, list) else v) for k, v in d.items() if k in names})
        stopped = d.get("sd_stopped")  # records before it was counted: derived from passes of one length
        out.sd = SDCounters(
            int(d.get("sd_drafts", 0)),
            int(d.get("drafted_tokens", 0)),
            int(d.get("accepted_tokens", 0)),
            list(d.get("sd_accepted_by_pos", [])),
            None if stopped is None else int(stopped),
        )
        return out

    def to_dict(self) -> dict[str, Any]:
        """All counters plus the derived rates (JSON-ready; the SD counters as flat
        ``sd_drafts``/``drafted_tokens``/``accepted_tokens``/``sd_accepted_by_pos``/``sd_stopped``)."""
        d = asdict(self)
        del d["sd"]
        d.update(
            sd_drafts=self.sd.drafts,
            drafted_tokens=self.sd.drafted_tokens,
            accepted_tokens=self.sd.accepted_tokens,
            sd_accepted_by_pos=list(self.sd.accepted_by_pos),
            sd_stopped=self.sd.stopped,
            other_s=self.other_s,
            drafted_steps=self.drafted_steps,
            accepted_steps=self.accepted_steps,
            alpha1=self.alpha1,
            alpha1_by_pos=self.alpha1_by_pos,
            alpha2=self.alpha2,
            sd_acceptance_rate=self.sd_acceptance_rate,
            mean_accepted_steps_per_round=self.mean_accepted_steps_per_round,
            mean_accepted_tokens_per_draft=self.mean_accepted_tokens_per_draft,
            tokens_per_s=self.tokens_per_s,
            exploration_s=self.exploration_s,
        )
        return d


@dataclass
class BatchStats:
    """A set of prompts decoded together (``LookaheadDecoder.decode_many``): throughput.

    ``wall_s`` covers the whole set; ``prompts`` counts the decoded prompts (``failed``: those
    that could not run); per engine kind (draft, target, verify) the number of calls and
    the rows (prefixes, or verifier pairs) they carried, so ``rows_per_call(kind)`` is the
    batch the engine saw.
    """

    wall_s: float = 0.0
    prompts: int = 0
    failed: int = 0
    max_concurrent: int = 1
    generated_tokens: int = 0
    calls: dict[str, int] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=dict)

    def observe_call(self, kind: str, rows: int) -> None:
        self.calls[kind] = self.calls.get(kind, 0) + 1
        self.rows[kind] = self.rows.get(kind, 0) + rows

    def rows_per_call(self, kind: str) -> float | None:
        return _ratio(self.rows.get(kind, 0), self.calls.get(kind, 0))

    @property
    def tokens_per_s(self) -> float | None:
        return _ratio(self.generated_tokens, self.wall_s)

    @property
    def problems_per_hour(self) -> float | None:
        r = _ratio(self.prompts, self.wall_s)
        return None if r is None else 3600.0 * r

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.update(
            tokens_per_s=self.tokens_per_s,
            problems_per_hour=self.problems_per_hour,
            rows_per_call={k: self.rows_per_call(k) for k in self.calls},
        )
        return d


def leading_accepts(accepted: list[bool]) -> int:
    """Length of the leading run of accepted verdicts (the committed draft prefix)."""
    n = 0
    for ok in accepted:
        if not ok:
            break
        n += 1
    return n


def _grow(xs: list[int], n: int) -> None:
    if len(xs) < n:
        xs.extend([0] * (n - len(xs)))


def _ratio(a: float, b: float) -> float | None:
    return None if b == 0 else a / b
