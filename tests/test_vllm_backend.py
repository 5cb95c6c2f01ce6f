"""Algorithm invariants (DESIGN §3.1) on real vLLM engines with the tiny float32 pair.

Greedy equality is exact here because the tiny models are float32 (bf16 batched
verification may flip near-ties; see shared/notes/vllm-cpu.md).
"""

import pytest

pytest.importorskip("vllm")

from lrtune.backends.base import GenParams  # noqa: E402
from lrtune.backends.vllm import VLLMBackend, VLLMConfig  # noqa: E402
from lrtune.decoder import DecodeConfig, LookaheadDecoder  # noqa: E402
from lrtune.verifiers import make_verifier  # noqa: E402
from tiny_models import get_tiny_pair, sample_questions  # noqa: E402

GAMMA2 = 3
MAX_NEW = 96


@pytest.fixture(scope="module")
def pair():
    return get_tiny_pair()


@pytest.fixture(scope="module")
def engines(pair):
    # tiny models: 0.25 GiB of KV holds every test on CPU; on a GPU each engine takes a 0.2 share
    cfg = dict(dtype="float32", max_model_len=1024, seed=0, kv_cache_gib=0.25, gpu_memory_utilization=0.2)
    target = VLLMBackend(str(pair.target), VLLMConfig(spec_model=str(pair.draft), **cfg), name="target")
    draft = VLLMBackend(str(pair.draft), VLLMConfig(**cfg), name="draft")
    yield target, draft
    target.close()
    draft.close()


@pytest.fixture(scope="module")
def prompts(engines):
    target, _ = engines
    return [target.encode_prompt(q) for q in sample_questions(4)]


def greedy(target, prompt, max_new=MAX_NEW):
    dec = LookaheadDecoder(target, None, make_verifier("never"), DecodeConfig(method="target", max_new_tokens=max_new))
    return dec.decode(prompt)[0].token_ids


def test_every_engine_runs_the_v1_runner_with_sync_scheduling_and_lrtune_patches(engines, prompts):
    """The post-start check of the code path (vllm_patches.check_engine) on real engines:
    each worker answers the probe with the runner class it really runs."""
    from lrtune.backends.vllm_internals import internals_problems

    target, draft = engines
    target.generate(prompts[:1], GenParams(max_tokens=2, num_speculative_tokens=GAMMA2))
    draft.generate(prompts[:1], GenParams(max_tokens=2))
    for backend, k in ((target, GAMMA2), (draft, 0)):
        (probe,) = backend.probes[k]
        assert probe["v1_runner"] and not probe["async_scheduling"] and probe["patches"]["no_spec"]
        assert internals_problems(backend.engine(k)) == []


def test_cpu_engines_hold_each_weight_once_and_decode_as_before(engines, prompts):
    """vLLM-CPU keeps a loaded output head beside its oneDNN-packed copy (patch_cpu_lm_head_release
    drops it), and two engines of one process each load the draft (vllm_shared: the second takes
    the first one's tensors). Neither changes a logit: greedy tokens of the target and of the
    draft's own engine equal the transformers reference."""
    import torch
    from transformers import AutoModelForCausalLM

    from lrtune.backends.vllm import on_cpu_platform

    if not on_cpu_platform():
        pytest.skip("both serve vLLM's CPU engines")
    target, draft = engines
    for backend in (target, draft):  # engines start on first use: this order is the fixture's own
        backend.generate(
            prompts[:1], GenParams(max_tokens=2, num_speculative_tokens=GAMMA2 if backend is target else 0)
        )
    (tp,), (dp,) = target.probes[GAMMA2], draft.probes[0]
    for probe in (tp, dp):
        assert probe["patches"]["cpu_lm_head_release"] and probe["lm_heads_kept"] == 0
    # one of the two took the other's draft (the target may share too, where an earlier engine of
    # this process loaded the same checkpoint, as in a full test run)
    assert tp["shared_weights"].get("drafter") or dp["shared_weights"].get("model"), (tp, dp)
    for backend in (target, draft):
        ids = greedy(backend, prompts[0], 24)
        ref = AutoModelForCausalLM.from_pretrained(str(backend.model), dtype=torch.float32)
        want = ref.generate(torch.tensor([prompts[0]]), max_new_tokens=24, do_sample=False)[0, len(prompts[0]) :]
        assert ids == want.tolist()[: len(ids)] and len(ids) > 0, backend.name


def test_tiny_target_writes_several_steps(engines, prompts):
    target, _ = engines
    text = target.decode(greedy(target, prompts[0], 200))
    assert text.count("\n\n") >= 2


def test_step_generation_stops_at_the_delimiter_and_keeps_its_token(engines, prompts):
    target, _ = engines
    out = target.generate(prompts[:2], GenParams(max_tokens=64)).outputs
    for o in out:
        assert o.finish in ("delimiter", "eos", "length")
        if o.finish == "delimiter":
            assert "\n\n" in o.text and "\n\n" not in target.decode(o.token_ids[:-1])


@pytest.mark.parametrize("method", ["lr", "lr+sd"])
def test_never_verifier_output_equals_target_greedy(engines, prompts, method):
    target, draft = engines
    cfg = DecodeConfig(method=method, gamma1=3, gamma2=GAMMA2, max_new_tokens=MAX_NEW, max_step_tokens=24)
    dec = LookaheadDecoder(target, draft, make_verifier("never"), cfg)
    for p in prompts:
        res, stats = dec.decode(p)
        assert res.token_ids == greedy(target, p)
        assert stats.rounds >= 2 and stats.committed_draft_steps == 0


def test_token_level_sd_output_equals_target_greedy_and_reports_acceptance(engines, prompts):
    target, draft = engines
    dec = LookaheadDecoder(
        target, draft, make_verifier("never"), DecodeConfig(method="sd", gamma2=GAMMA2, max_new_tokens=MAX_NEW)
    )
    for p in prompts:
        res, stats = dec.decode(p)
        assert res.token_ids == greedy(target, p)
        assert stats.drafted_tokens > 0 and 0.0 <= stats.alpha2 <= 1.0
        assert len(stats.sd_accepted_by_pos) == GAMMA2


def test_identical_draft_with_exact_verifier_accepts_every_step_and_equals_target(engines, prompts):
    target, _ = engines
    for method in ("lr", "lr+sd"):
        cfg = DecodeConfig(method=method, gamma1=3, gamma2=GAMMA2, max_new_tokens=MAX_NEW, max_step_tokens=24)
        dec = LookaheadDecoder(target, target, make_verifier("exact"), cfg)  # the target drafts for itself
        for p in prompts:
            res, stats = dec.decode(p)
            assert res.token_ids == greedy(target, p)
            assert stats.alpha1 == 1.0
            assert stats.committed_draft_steps > 0


def test_lr_sd_with_a_real_draft_commits_a_consistent_sequence(engines, prompts):
    target, draft = engines
    rounds = []
    cfg = DecodeConfig(method="lr+sd", gamma1=2, gamma2=GAMMA2, max_new_tokens=MAX_NEW, max_step_tokens=24)
    res, stats = LookaheadDecoder(target, draft, make_verifier("random(0.5)"), cfg).decode(
        prompts[1], on_round=rounds.append
    )
    rebuilt = []
    for r in rounds:
        assert len(r.drafts) <= 2
        rebuilt += [t for d in r.drafts[: r.committed_drafts] for t in d.token_ids]
        if r.committed_drafts < len(r.targets):
            rebuilt += r.targets[r.committed_drafts].token_ids
    assert rebuilt[: len(res.token_ids)] == res.token_ids and len(res.token_ids) <= MAX_NEW
    assert stats.drafted_tokens > 0 and stats.target_calls == stats.rounds


def test_seeded_sampling_is_reproducible_and_seeds_matter(engines, prompts):
    target, draft = engines

    def run(seed):
        cfg = DecodeConfig(method="lr", gamma1=2, temperature=0.9, seed=seed, max_new_tokens=48, max_step_tokens=16)
        return (
            LookaheadDecoder(target, draft, make_verifier("random(0.5)", seed=seed), cfg)
            .decode(prompts[2])[0]
            .token_ids
        )

    a, b, c = run(1), run(1), run(2)
    assert a == b
    assert a != c


def test_a_cpu_engine_never_splits_a_prompt_so_seeded_sampling_of_many_long_prompts_runs(engines, prompts):
    """vllm_platform rule F: on a CPU an engine takes max_model_len tokens per step with
    chunked prefill off (vLLM's CPU runner crashes when it splits a seeded prefill), checked on
    the started engine, and seeded rows whose prompts need many steps (more than 16384 tokens,
    lrtune's former budget, so that a split would have happened) sample reproducibly."""
    from lrtune.backends.vllm import on_cpu_platform

    if not on_cpu_platform():
        pytest.skip("the CPU's step budget")
    target, _ = engines
    sched = target.engine(0).llm_engine.vllm_config.scheduler_config
    assert sched.enable_chunked_prefill is False and sched.max_num_batched_tokens == target.config.max_model_len
    long = [(p * 60)[:900] for p in prompts]
    # 60 distinct prompts (no shared cached prefix past the first token): 54,000 prompt tokens
    rows = [long[i % len(long)][:1] + [10 + i] + long[i % len(long)][1:] for i in range(60)]
    assert sum(map(len, rows)) > 16384
    params = GenParams(max_tokens=6, temperature=0.9, seeds=tuple(range(60)), stop_at_delimiter=False)
    first, again = target.generate(rows, params), target.generate(rows, params)
    assert all(len(o.token_ids) == 6 for o in first.outputs)
    assert [o.token_ids for o in first.outputs] == [o.token_ids for o in again.outputs]


def test_ngram_sd_output_equals_target_greedy(pair, engines, prompts):
    target, _ = engines
    ngram = VLLMBackend(
        str(pair.target),
        VLLMConfig(
            dtype="float32", max_model_len=1024, spec_method="ngram", kv_cache_gib=0.25, gpu_memory_utilization=0.1
        ),
        name="ngram",
    )
    try:
        dec = LookaheadDecoder(
            ngram, None, make_verifier("never"), DecodeConfig(method="sd", gamma2=2, max_new_tokens=MAX_NEW)
        )
        for p in prompts[:2]:
            assert dec.decode(p)[0].token_ids == greedy(target, p)
    finally:
        ngram.close()


def test_lr_sd_counts_speculative_tokens_of_steps_that_end_at_the_delimiter(engines, prompts):
    target, draft = engines
    cfg = DecodeConfig(method="lr+sd", gamma1=2, gamma2=GAMMA2, max_new_tokens=MAX_NEW, max_step_tokens=24)
    rounds = []
    _, stats = LookaheadDecoder(target, draft, make_verifier("never"), cfg).decode(prompts[0], on_round=rounds.append)
    assert sum(t.finish == "delimiter" for r in rounds for t in r.targets) >= 2
    assert stats.sd_drafts >= stats.rounds
    assert 0 < stats.accepted_tokens <= stats.drafted_tokens <= stats.sd_drafts * GAMMA2
    assert sum(stats.sd_accepted_by_pos) == stats.accepted_tokens


def test_seeded_sampling_with_token_level_sd_is_reproducible(engines, prompts):
    target, draft = engines

    def run(seed):
        cfg = DecodeConfig(
            method="lr+sd", gamma1=2, gamma2=GAMMA2, temperature=0.9, seed=seed, max_new_tokens=48, max_step_tokens=16
        )
        return (
            LookaheadDecoder(target, draft, make_verifier("random(0.5)", seed=seed), cfg)
            .decode(prompts[3])[0]
            .token_ids
        )

    assert run(5) == run(5)


def test_logprobs_are_returned_per_generated_token(engines, prompts):
    target, _ = engines
    for k in (0, GAMMA2):
        out = target.generate(prompts[:2], GenParams(max_tokens=20, logprobs=True, num_speculative_tokens=k)).outputs
        for o in out:
            assert o.logprobs is not None and len(o.logprobs) == len(o.token_ids)
            assert all(lp <= 0.0 for lp in o.logprobs)


def test_shared_speculative_engine_serves_plain_requests_without_drafting(pair, engines, prompts):
    """γ2 = 0 on the shared SD engine: same greedy tokens as a plain engine, no drafts run."""
    target, draft = engines
    shared = VLLMBackend(
        str(pair.target),
        VLLMConfig(
            dtype="float32",
            max_model_len=1024,
            kv_cache_gib=0.25,
            gpu_memory_utilization=0.1,
            spec_model=str(pair.draft),
            shared_spec_tokens=GAMMA2,
        ),
        name="shared",
    )
    try:
        assert shared.engine(0) is shared.engine(GAMMA2)
        counter = shared._counters[GAMMA2]
        for p in prompts[:2]:
            before = counter.totals.copy()
            plain = LookaheadDecoder(
                shared, None, make_verifier("never"), DecodeConfig(method="target", max_new_tokens=MAX_NEW)
            ).decode(p)[0]
            assert plain.token_ids == greedy(target, p)
            assert counter.totals.minus(before).drafts == 0
            # then speculative requests on the same engine still draft and stay exact
            res, stats = LookaheadDecoder(
                shared,
                draft,
                make_verifier("never"),
                DecodeConfig(method="lr+sd", gamma1=2, gamma2=GAMMA2, max_new_tokens=MAX_NEW, max_step_tokens=24),
            ).decode(p)
            assert res.token_ids == plain.token_ids
            assert stats.drafted_tokens > 0
            lr, lr_stats = LookaheadDecoder(
                shared,
                draft,
                make_verifier("never"),
                DecodeConfig(method="lr", gamma1=2, max_new_tokens=MAX_NEW, max_step_tokens=24),
            ).decode(p)
            assert lr.token_ids == plain.token_ids and lr_stats.drafted_tokens == 0
    finally:
        shared.close()


def test_shared_engine_honours_a_smaller_gamma2_per_request(pair, engines, prompts):
    """γ2 = 1 on an engine started with γ2 = 3: drafts are cut per request (at most 1
    verified draft token per pass) and greedy output stays the target's."""
    target, draft = engines
    shared = VLLMBackend(
        str(pair.target),
        VLLMConfig(
            dtype="float32",
            max_model_len=1024,
            kv_cache_gib=0.25,
            gpu_memory_utilization=0.1,
            spec_model=str(pair.draft),
            shared_spec_tokens=GAMMA2,
        ),
        name="shared",
    )
    try:
        assert shared.engine(1) is shared.engine(GAMMA2)
        for p in prompts[:2]:
            res, stats = LookaheadDecoder(
                shared,
                draft,
                make_verifier("never"),
                DecodeConfig(method="lr+sd", gamma1=2, gamma2=1, max_new_tokens=MAX_NEW, max_step_tokens=24),
            ).decode(p)
            assert res.token_ids == greedy(target, p)
            assert stats.sd_drafts > 0 and stats.drafted_tokens <= stats.sd_drafts  # ≤ 1 draft token per pass
            full, _ = LookaheadDecoder(
                shared,
                draft,
                make_verifier("never"),
                DecodeConfig(method="lr+sd", gamma1=2, gamma2=GAMMA2, max_new_tokens=MAX_NEW, max_step_tokens=24),
            ).decode(p)
            assert full.token_ids == res.token_ids
    finally:
        shared.close()


@pytest.mark.parametrize("method", ["lr", "lr+sd"])
def test_two_branches_with_the_never_verifier_equal_target_greedy(engines, prompts, method):
    target, draft = engines
    cfg = DecodeConfig(method=method, gamma1=2, gamma2=GAMMA2, width=2, max_new_tokens=64, max_step_tokens=16)
    for p in prompts[:2]:
        res, _ = LookaheadDecoder(target, draft, make_verifier("never"), cfg).decode(p)
        assert res.token_ids == greedy(target, p, 64)


def test_top_logprobs_and_the_llm_judge_on_a_real_engine(engines, prompts):
    from lrtune.verifiers import StepPair

    target, _ = engines
    out = target.generate(prompts[:2], GenParams(max_tokens=6, top_logprobs=4)).outputs
    for o in out:
        assert len(o.top_logprobs) == len(o.token_ids)
        assert all(tok in top and len(top) >= 4 for tok, top in zip(o.token_ids, o.top_logprobs))
    for kind in ("llm_judge", "target_score"):
        ver = make_verifier(kind, backend=target)
        scores = ver.score([StepPair("Q: 2+2?", "2 + 2 = 4.", "2 + 2 = 4."), StepPair("Q: 2+2?", "x", "2 + 2 = 4.")])
        assert len(scores) == 2 and all(0.0 <= s <= 1.0 for s in scores) and ver.calls == 1


@pytest.mark.parametrize("method", ["lr", "lr+sd"])
def test_async_lr_with_the_never_verifier_equals_target_greedy(engines, prompts, method):
    target, draft = engines
    cfg = DecodeConfig(method=method, gamma1=2, gamma2=GAMMA2, max_new_tokens=64, max_step_tokens=16, schedule="async")
    for p in prompts[:2]:
        res, _ = LookaheadDecoder(target, draft, make_verifier("never"), cfg).decode(p)
        assert res.token_ids == greedy(target, p, 64)


@pytest.mark.parametrize("method,width", [("target", 1), ("sd", 1), ("lr", 1), ("lr+sd", 1), ("lr", 2), ("lr+sd", 2)])
def test_batched_prompts_get_the_tokens_they_get_alone(engines, prompts, method, width):
    """DESIGN §3.7 on real engines: 4 prompts of different lengths, 3 in flight (a finished
    prompt's slot takes the waiting one), each equal to its target greedy decode alone."""
    target, draft = engines
    cfg = DecodeConfig(method=method, gamma1=2, gamma2=GAMMA2, width=width, max_new_tokens=64, max_step_tokens=16)
    dec = LookaheadDecoder(target, draft, make_verifier("never"), cfg)
    assert len({len(p) for p in prompts}) > 1
    outs, batch = dec.decode_many(prompts, cfg, max_concurrent=3)
    for p, (res, stats) in zip(prompts, outs):
        assert res.token_ids == greedy(target, p, 64)
        assert stats.wall_s > 0 and stats.target_s > 0
    if "lr" in method:
        assert len({s.rounds for _, s in outs}) > 1  # prompts finish at different rounds
        assert batch.rows_per_call("target") > cfg.gamma1 + 1 - 1e-9
    if "sd" in method:
        assert sum(s.drafted_tokens for _, s in outs) > 0


def test_batched_identical_draft_with_exact_verifier_equals_alone(engines, prompts):
    target, _ = engines
    cfg = DecodeConfig(method="lr+sd", gamma1=3, gamma2=GAMMA2, max_new_tokens=MAX_NEW, max_step_tokens=24)
    dec = LookaheadDecoder(target, target, make_verifier("exact"), cfg)  # the target drafts for itself
    outs, _ = dec.decode_many(prompts, cfg, max_concurrent=4)
    for p, (res, stats) in zip(prompts, outs):
        assert res.token_ids == greedy(target, p)
        assert stats.alpha1 == 1.0 and stats.committed_draft_steps > 0


FREE_ONE_ENGINE = """
import gc, sys
sys.path.insert(0, {tests!r})
from tiny_models import get_tiny_pair
import lrtune.backends.vllm as vb
from lrtune.backends.base import GenParams
pair = get_tiny_pair()
cfg = vb.VLLMConfig(max_model_len=256, kv_cache_gib=0.05)
a, b = vb.VLLMBackend(str(pair.target), cfg, name="a"), vb.VLLMBackend(str(pair.draft), cfg, name="b")
p = GenParams(max_tokens=4, stop_at_delimiter=False)
a.generate([[5, 6, 7]], p), b.generate([[5, 6, 7]], p)
engine = b._engines.pop(0)
vb._KEEP_ALIVE.remove(engine)
del engine
gc.collect()
try:
    a.generate([[5, 6, 7]], p)
    print("FREED-OK")
except Exception as e:
    print("BROKEN", type(e).__name__, e)
"""


@pytest.mark.slow
def test_freeing_one_vllm_engine_breaks_the_others_so_close_keeps_them():
    """Why ``VLLMBackend.close`` keeps its engines alive: on the pinned vLLM, garbage-collecting
    one in-process engine tears down process-global state every other engine needs. If a
    vLLM upgrade fixes this, this test fails and close() should free its engines. On an AMX CPU
    the next generate does not even raise: the process dies of SIGILL."""
    import subprocess
    import sys
    from pathlib import Path

    code = FREE_ONE_ENGINE.format(tests=str(Path(__file__).parent))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert "FREED-OK" not in out.stdout, out.stdout[-2000:]
    # an error naming the torn-down group, or (AMX CPUs) the process killed by a signal (SIGILL)
    broken = "BROKEN" in out.stdout and "model parallel group is not initialized" in out.stdout
    assert broken or out.returncode < 0, (out.returncode, out.stdout[-2000:] + out.stderr[-2000:])


@pytest.mark.parametrize("method", ["lr", "lr+sd"])
def test_early_abort_aborts_engine_requests_and_keeps_the_committed_tokens(engines, prompts, method):
    from tiny_models import check_early_abort

    target, draft = engines
    check_early_abort(target, draft, prompts[:2], lambda p: greedy(target, p), method, GAMMA2, MAX_NEW)


@pytest.mark.parametrize("method", ["lr", "lr+sd"])
def test_draft_prefix_reuse_reads_the_engine_prefill_and_keeps_the_committed_tokens(engines, prompts, method):
    from tiny_models import check_reuse

    target, draft = engines
    check_reuse(target, draft, prompts[:2], lambda p: greedy(target, p), method, GAMMA2, MAX_NEW)


def test_a_controller_mixing_sd_runs_and_lr_rounds_keeps_greedy_equality(engines, prompts):
    """γ1 = 0 rounds run the target with SD uninterrupted to the horizon (no delimiter stop),
    LR rounds in between use another γ2 on the same engine."""
    from lrtune.control import Bounds

    class Alternating:
        bounds = Bounds(gamma1_max=3, gamma2_max=GAMMA2, M=12)

        def choose(self, problem, state):
            return (0, GAMMA2) if state.round % 2 == 0 else (2, 1)

        def horizon(self):
            return 20

        def update(self, outcome):
            pass

    target, draft = engines
    cfg = DecodeConfig(method="lr+sd", gamma1=2, gamma2=GAMMA2, max_new_tokens=MAX_NEW, max_step_tokens=24)
    dec = LookaheadDecoder(target, draft, make_verifier("never"), cfg)
    for p in prompts[:2]:
        rounds = []
        res, stats = dec.decode(p, controller=Alternating(), on_round=rounds.append)
        assert res.token_ids == greedy(target, p)
        sd_runs = [r for r in rounds if not r.drafts]
        assert sd_runs and all(len(r.targets[0].token_ids) <= 20 for r in sd_runs)
        assert all(r.targets[0].finish in ("length", "eos") for r in sd_runs)  # never cut at a step end
        assert sum(len(r.targets[0].token_ids) == 20 for r in sd_runs) >= 1


def test_an_error_in_on_done_aborts_the_requests_in_flight_and_the_engine_serves_the_next_call(engines, prompts):
    target, _ = engines

    def boom(i, out):
        raise RuntimeError("verifier failed")

    with pytest.raises(RuntimeError, match="verifier failed"):
        target.generate(prompts[:3], GenParams(max_tokens=40, stop_at_delimiter=False), on_done=boom)
    alone = target.generate(prompts[:1], GenParams(max_tokens=12, stop_at_delimiter=False)).outputs
    assert len(alone) == 1 and alone[0].token_ids == greedy(target, prompts[0], 12)


def test_prompt_scores_equal_a_plain_forward_and_reused_cache_blocks_score_none(pair, engines, prompts):
    from tiny_models import check_draft_scores

    check_draft_scores(engines[0], pair.target, prompts[0], cached_tokens_score_none=True)


def test_reset_prefix_cache_makes_the_engine_compute_and_score_a_cached_prefix_again(engines, prompts):
    target, _ = engines
    prefix = list(prompts[1]) + list(reversed(prompts[1]))  # a tail no other test's request held
    scored = GenParams(max_tokens=1, stop_at_delimiter=False, score_from=len(prompts[1]))
    first = target.generate([prefix], scored).outputs[0].prompt_scores
    again = target.generate([prefix], scored).outputs[0].prompt_scores
    target.reset_prefix_cache()
    fresh = target.generate([prefix], scored).outputs[0].prompt_scores
    assert all(s is not None for s in first) and any(s is None for s in again)
    assert fresh == first


@pytest.mark.parametrize("method", ["lr", "lr+sd"])
def test_scored_lr_rounds_keep_greedy_equality_and_score_every_followed_draft_step(engines, prompts, method):
    from tiny_models import check_scored_lr_rounds

    target, draft = engines
    check_scored_lr_rounds(
        target, draft, prompts[:2], lambda p: greedy(target, p), method, GAMMA2, MAX_NEW, every_token=False
    )


@pytest.mark.parametrize("method", ["lr", "lr+sd"])
def test_score_rounds_on_a_real_engine_keep_greedy_equality_and_read_the_prefill(engines, prompts, method):
    from tiny_models import check_score_rounds

    target, draft = engines
    check_score_rounds(target, draft, prompts[:2], lambda p: greedy(target, p), method, GAMMA2, MAX_NEW)
