"""Async (pipelined) LR: correct commits under randomised completion order."""

import pytest

from fake_backend import FakeBackend, SlowFakeBackend, chain
from lrtune.decoder import DecodeConfig, LookaheadDecoder
from lrtune.errors import ConfigError
from lrtune.verifiers import make_verifier

PROMPTS = [[5, 7, 9], [11], [3, 4, 5, 6, 7, 8], [20, 21]]


def target_only(table, prompt, max_new):
    dec = LookaheadDecoder(
        FakeBackend(table), None, make_verifier("never"), DecodeConfig(method="target", max_new_tokens=max_new)
    )
    return dec.decode(prompt)[0].token_ids


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("method", ["lr", "lr+sd"])
def test_async_never_verifier_equals_target_greedy_under_random_delays(seed, method):
    target, draft = SlowFakeBackend(chain(seed), seed=seed), SlowFakeBackend(chain(seed + 100), seed=seed + 7)
    for prompt in PROMPTS:
        cfg = DecodeConfig(method=method, gamma1=3, gamma2=2, max_new_tokens=40, max_step_tokens=6, schedule="async")
        res, stats = LookaheadDecoder(target, draft, make_verifier("never"), cfg).decode(prompt)
        assert res.token_ids == target_only(chain(seed), prompt, 40)
        assert stats.committed_draft_steps == 0


@pytest.mark.parametrize("seed", range(5))
def test_async_commits_each_step_once_in_order_and_identical_drafts_are_all_accepted(seed):
    table = chain(seed)
    target, draft = SlowFakeBackend(table, seed=seed), SlowFakeBackend(table, seed=seed + 1)
    for prompt in PROMPTS:
        committed = []
        cfg = DecodeConfig(method="lr", gamma1=3, max_new_tokens=50, max_step_tokens=6, schedule="async")
        res, stats = LookaheadDecoder(target, draft, make_verifier("exact"), cfg).decode(
            prompt, on_commit=lambda src, ids: committed.append((src, list(ids)))
        )
        assert [t for _, ids in committed for t in ids] == res.token_ids  # no step twice, none out of order
        assert res.token_ids == target_only(table, prompt, 50)
        assert stats.alpha1 in (None, 1.0)


@pytest.mark.parametrize("seed", range(4))
def test_async_with_a_random_verifier_commits_a_consistent_sequence(seed):
    target, draft = SlowFakeBackend(chain(seed), seed=seed), SlowFakeBackend(chain(seed + 50), seed=seed + 3)
    committed = []
    cfg = DecodeConfig(method="lr", gamma1=3, max_new_tokens=60, max_step_tokens=6, schedule="async")
    res, stats = LookaheadDecoder(target, draft, make_verifier("random(0.6)", seed=seed), cfg).decode(
        [5, 7, 9], on_commit=lambda src, ids: committed.append((src, list(ids)))
    )
    assert [t for _, ids in committed for t in ids] == res.token_ids and len(res.token_ids) <= 60
    assert stats.committed_target_steps == sum(src == "target" for src, _ in committed)
    assert stats.committed_draft_steps == sum(src == "draft" for src, _ in committed)
    assert stats.rounds == stats.committed_target_steps + (committed[-1][0] == "draft")


def test_async_with_several_branches_is_refused():
    with pytest.raises(ConfigError, match="async"):
        DecodeConfig(method="lr", width=2, schedule="async").validate()


def test_backends_that_cannot_run_concurrently_never_overlap():
    import threading

    active, most, lock = [0], [0], threading.Lock()

    class Serial(SlowFakeBackend):
        concurrent_safe = False

        def generate(self, prefixes, params, max_concurrent=None):
            with lock:  # calls in flight across both engines
                active[0] += 1
                most[0] = max(most[0], active[0])
            try:
                return super().generate(prefixes, params)
            finally:
                with lock:
                    active[0] -= 1

    target, draft = Serial(chain(1), seed=1), Serial(chain(101), seed=2)
    cfg = DecodeConfig(method="lr", gamma1=3, max_new_tokens=40, max_step_tokens=6, schedule="async")
    LookaheadDecoder(target, draft, make_verifier("random(0.5)", seed=1), cfg).decode([5, 7, 9])
    assert most[0] == 1  # calls take one lock: never two in flight
