"""The speedup model of score rounds (lrtune.speedup.h_score) against Monte-Carlo: of the
round's own process (lrtune.simulate.simulate_score) and of the implemented decoder."""

from __future__ import annotations

import pytest

from lrtune.simulate import simulate_score
from lrtune.speedup import g, h_score


@pytest.mark.parametrize("alpha", [0.2, 0.5, 0.8, 0.95])
@pytest.mark.parametrize("gamma", [1, 3, 6])
@pytest.mark.parametrize("c,prefill,step", [(0.3, 0.15, 1.0), (0.5, 0.4, 0.7)])
def test_the_closed_form_matches_the_simulated_round_within_1_percent(alpha, gamma, c, prefill, step):
    sim = simulate_score(alpha, c, prefill, gamma, step, rounds=400_000, rng=1)
    exact = (1 - alpha ** (gamma + 1)) / ((1 - alpha) * (c * gamma + prefill + step))
    assert sim == pytest.approx(exact, rel=0.01)
    gg = 1.0 / step
    assert h_score(gamma, 0, alpha, c, prefill) == pytest.approx(
        (1 - alpha ** (gamma + 1)) / ((1 - alpha) * (c * gamma + prefill + 1.0))
    )
    assert h_score(0, 3, alpha, c, prefill, 0.8, 0.3) == pytest.approx(g(0.8, 0.3, 3))  # γ1 = 0: SD alone
    assert gg > 0


def test_the_implemented_round_commits_what_the_model_counts():
    """Score rounds on the fake backend with keyed random verdicts (accept with p): committed
    steps per round match E[J + 1] = Σ_{j≤γ1} p^j within 1%, and each round makes one step
    call and no prefill (random reads no target score), as h_score prices it with P = 0."""
    from fake_backend import FakeBackend, chain
    from lrtune.decoder import DecodeConfig, LookaheadDecoder
    from lrtune.verifiers import make_verifier

    p, gamma = 0.6, 3
    target, draft = FakeBackend(chain(3, eos_rate=0.0)), FakeBackend(chain(9, eos_rate=0.0))
    cfg = DecodeConfig(method="lr", gamma1=gamma, max_new_tokens=6000, max_step_tokens=4, schedule="score")
    dec = LookaheadDecoder(target, draft, make_verifier(f"random({p})", seed=7), cfg)
    rounds = []
    prompts = [[5 + i, 7, 9] for i in range(16)]
    outs, _ = dec.decode_many(prompts, cfg, max_concurrent=16, on_round=lambda i, r: rounds.append(r))
    full = [r for r in rounds if len(r.drafts) == gamma]  # the last round of a prompt may draft fewer
    committed = sum(r.committed_drafts + 1 for r in full) / len(full)
    assert len(full) > 10_000
    assert committed == pytest.approx((1 - p ** (gamma + 1)) / (1 - p), rel=0.01)
    stats = [o.stats for o in outs]
    assert all(
        s.rounds - 1 <= s.target_calls <= s.rounds for s in stats
    )  # a step per round (the last may end the budget)
    assert all(s.prefill_s == 0 for s in stats)
