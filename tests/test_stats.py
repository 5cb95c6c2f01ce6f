"""DecodeStats accounting rules."""

import pytest

from lrtune.backends.base import SDCounters
from lrtune.stats import DecodeStats, leading_accepts


@pytest.mark.parametrize(
    "verdicts, j", [([], 0), ([True], 1), ([False, True], 0), ([True, True, False], 2), ([True] * 4, 4)]
)
def test_leading_accepts_is_the_committed_draft_prefix(verdicts, j):
    assert leading_accepts(verdicts) == j


def test_rounds_count_target_step_in_mean_accepted_steps():
    s = DecodeStats()
    s.observe_round([True, True, False])  # commits 2 drafts + 1 target step
    s.observe_round([False, True, True])  # commits 0 drafts + 1 target step
    assert s.rounds == 2
    assert s.committed_draft_steps == 2 and s.committed_target_steps == 2
    assert s.mean_accepted_steps_per_round == pytest.approx(2.0)
    assert s.alpha1 == pytest.approx(4 / 6)
    assert s.alpha1_by_pos == [pytest.approx(0.5), pytest.approx(1.0), pytest.approx(0.5)]


def test_alpha2_counts_only_passes_stopped_by_a_rejection_as_failures_and_the_rate_stays_beside_it():
    s = DecodeStats()
    # 10 passes of 4 drafts, 6 accepted all 4: 4 stopped at a rejection; 30 tokens accepted
    s.observe_sd(SDCounters(drafts=10, drafted_tokens=40, accepted_tokens=30, accepted_by_pos=[9, 8, 7, 6]))
    assert s.sd.stopped == 4
    assert s.alpha2 == pytest.approx(30 / 34) and s.sd_acceptance_rate == pytest.approx(0.75)
    assert s.mean_accepted_tokens_per_draft == pytest.approx(4.0)


def test_alpha2_estimates_the_per_token_acceptance_of_the_iid_model_that_g_takes():
    import random

    rng, alpha, k = random.Random(0), 0.8, 4
    s = DecodeStats()
    for _ in range(20000):  # one pass: accept each draft with probability alpha until the first rejection
        n = 0
        while n < k and rng.random() < alpha:
            n += 1
        s.observe_sd(SDCounters(1, k, n, [1] * n + [0] * (k - n)))
    assert s.alpha2 == pytest.approx(alpha, abs=0.01)
    # the accepted/drafted rate is E[min(X, k)] / k = alpha (1 - alpha^k) / ((1 - alpha) k), not alpha
    assert s.sd_acceptance_rate == pytest.approx(alpha * (1 - alpha**k) / ((1 - alpha) * k), abs=0.01)


def test_a_pass_shortened_by_the_engine_that_accepted_all_it_drafted_is_no_failure():
    c = SDCounters()
    c.observe(1, 2, 2, [1, 1], stopped=0)  # gamma2 = 4 cut to 2 drafts near the row's limit, both accepted
    c.observe(1, 4, 1, [1], stopped=1)
    assert c.stopped == 1 and c.alpha == pytest.approx(3 / 4)


def test_records_without_sd_stopped_derive_it_from_passes_of_one_length():
    d = DecodeStats()
    d.observe_sd(SDCounters(drafts=5, drafted_tokens=20, accepted_tokens=14, accepted_by_pos=[5, 4, 3, 2]))
    rec = d.to_dict()
    assert rec["sd_stopped"] == 3
    del rec["sd_stopped"]
    assert DecodeStats.from_dict(rec).sd.stopped == 3 and DecodeStats.from_dict(rec).alpha2 == pytest.approx(14 / 17)


def test_merge_adds_counters_and_per_position_lists():
    a, b = DecodeStats(wall_s=1.0, generated_tokens=5), DecodeStats(wall_s=2.0, generated_tokens=7)
    a.observe_round([True, False])
    b.observe_round([True, True, True])
    m = a.merge(b)
    assert m.wall_s == 3.0 and m.generated_tokens == 12
    assert m.drafted_by_pos == [2, 2, 1] and m.accepted_by_pos == [2, 1, 1]


def test_other_time_is_wall_minus_parts_and_dict_has_derived_rates():
    s = DecodeStats(wall_s=10.0, draft_s=2.0, target_s=6.0, verify_s=1.0, generated_tokens=50)
    d = s.to_dict()
    assert d["other_s"] == pytest.approx(1.0)
    assert d["tokens_per_s"] == pytest.approx(5.0)
    assert d["alpha1"] is None and d["alpha2"] is None


def test_sd_counters_live_in_one_object_that_merges_and_round_trips_through_a_record():
    a, b = DecodeStats(), DecodeStats()
    a.observe_target_call(1.0, SDCounters(drafts=2, drafted_tokens=8, accepted_tokens=5, accepted_by_pos=[2, 2, 1]))
    b.observe_target_call(2.0, SDCounters(drafts=1, drafted_tokens=4, accepted_tokens=4, accepted_by_pos=[1, 1, 1, 1]))
    m = a.merge(b)
    assert m.sd == SDCounters(3, 12, 9, [3, 3, 2, 1]) and a.sd == SDCounters(2, 8, 5, [2, 2, 1])
    d = m.to_dict()
    assert (d["sd_drafts"], d["drafted_tokens"], d["accepted_tokens"], d["sd_accepted_by_pos"]) == (
        3,
        12,
        9,
        [3, 3, 2, 1],
    )
    assert "sd" not in d  # records keep the flat keys they always had
    back = DecodeStats.from_dict(d)
    assert back.sd == m.sd and back.to_dict() == d


def test_exploration_is_the_time_slower_round_kinds_took_beyond_the_fastest_kinds_rate():
    from lrtune.stats import DecodeStats

    st = DecodeStats()
    assert st.exploration_s is None  # no rounds
    st.observe_round_kind("sd", 2.0, 40)  # 20 tokens/s: the fastest kind of this prompt
    assert st.exploration_s == 0.0
    st.observe_round_kind("lr", 3.0, 30)  # 10 tokens/s: needed 1.5 s at SD's rate
    st.observe_round_kind("score", 1.0, 10)  # needed 0.5 s
    assert st.exploration_s == pytest.approx(1.5 + 0.5)
    assert DecodeStats.from_dict(st.to_dict()).exploration_s == pytest.approx(2.0)  # round trip keeps tokens


def test_the_summary_sums_exploration_per_problem_never_over_merged_stats():
    from lrtune.eval.metrics import summarize_method
    from lrtune.stats import DecodeStats

    fast_lr, fast_sd = DecodeStats(), DecodeStats()
    fast_lr.observe_round_kind("lr", 1.0, 40)
    fast_lr.observe_round_kind("sd", 1.0, 20)  # this problem: sd cost 0.5 s extra
    fast_sd.observe_round_kind("sd", 1.0, 40)
    fast_sd.observe_round_kind("lr", 1.0, 20)  # this one: lr cost 0.5 s extra
    recs = [
        {"problem": p, "correct": True, "finish": "eos", "wall_s": 2.0, "stats": st.to_dict()}
        for p, st in (("a", fast_lr), ("b", fast_sd))
    ]
    row = summarize_method(recs, None)
    assert row["exploration_s"] == pytest.approx(1.0) and row["exploration_share"] == pytest.approx(0.25)
