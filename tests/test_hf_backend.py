"""Invariants (DESIGN §3.1) on the transformers backend with the tiny float32 pair."""

import json

import pytest
import torch

from lrtune.backends.base import GenParams
from lrtune.backends.hf import HFBackend
from lrtune.decoder import DecodeConfig, LookaheadDecoder
from lrtune.verifiers import StepPair, make_verifier
from tiny_models import get_tiny_pair, sample_questions

MAX_NEW = 96


@pytest.fixture(scope="module")
def models():
    torch.set_num_threads(1)
    pair = get_tiny_pair()
    draft = HFBackend(str(pair.draft), name="draft")
    target = HFBackend(str(pair.target), name="target", spec=draft)
    return target, draft


@pytest.fixture(scope="module")
def prompts(models):
    return [models[0].encode_prompt(q) for q in sample_questions(3)]


def reference_greedy(target, prompt, n=MAX_NEW):
    """transformers' own generate(), cut at EOS."""
    out = target.lm.generate(
        torch.tensor([prompt]), max_new_tokens=n, do_sample=False, eos_token_id=sorted(target.eos_ids), pad_token_id=0
    )[0, len(prompt) :].tolist()
    for i, t in enumerate(out):
        if t in target.eos_ids:
            return out[: i + 1]
    return out


def test_device_auto_picks_cpu_without_a_gpu(models):
    assert models[0].device.type == ("cuda" if torch.cuda.is_available() else "cpu")


def test_plain_decoding_equals_transformers_generate(models, prompts):
    target, _ = models
    dec = LookaheadDecoder(target, None, make_verifier("never"), DecodeConfig(method="target", max_new_tokens=MAX_NEW))
    for p in prompts:
        assert dec.decode(p)[0].token_ids == reference_greedy(target, p)


@pytest.mark.parametrize("method", ["sd", "lr", "lr+sd"])
def test_every_method_with_the_never_verifier_equals_target_greedy(models, prompts, method):
    target, draft = models
    cfg = DecodeConfig(method=method, gamma1=3, gamma2=3, max_new_tokens=MAX_NEW, max_step_tokens=24)
    for p in prompts:
        res, stats = LookaheadDecoder(target, draft, make_verifier("never"), cfg).decode(p)
        assert res.token_ids == reference_greedy(target, p)
        if "sd" in method:
            assert stats.drafted_tokens > 0 and 0 <= stats.alpha2 <= 1
            assert sum(stats.sd_accepted_by_pos) == stats.accepted_tokens


def test_sd_with_the_target_as_its_own_drafter_measures_alpha2_one_also_on_passes_cut_near_the_limit(prompts):
    pair = get_tiny_pair()
    same = HFBackend(str(pair.target), name="target", spec=HFBackend(str(pair.target), name="draft"))
    out = same.generate([prompts[0]], GenParams(max_tokens=8, stop_at_delimiter=False, num_speculative_tokens=4))
    sd = out.sd
    assert sd.drafted_tokens < 4 * sd.drafts  # a pass was cut to the room left (8 tokens: 4 + 1, then 2 + 1)
    assert sd.accepted_tokens == sd.drafted_tokens and sd.stopped == 0 and sd.alpha == 1.0


def test_identical_draft_with_exact_verifier_accepts_every_step(models, prompts):
    target, _ = models
    cfg = DecodeConfig(method="lr+sd", gamma1=3, gamma2=3, max_new_tokens=MAX_NEW, max_step_tokens=24)
    for p in prompts:
        res, stats = LookaheadDecoder(target, target, make_verifier("exact"), cfg).decode(p)
        assert res.token_ids == reference_greedy(target, p) and stats.alpha1 == 1.0


def test_batched_left_padded_steps_equal_one_by_one(models, prompts):
    target, _ = models
    params = GenParams(max_tokens=20)
    batch = target.generate(prompts, params).outputs
    single = [target.generate([p], params).outputs[0] for p in prompts]
    assert [b.token_ids for b in batch] == [s.token_ids for s in single]
    for b in batch:
        assert b.finish in ("delimiter", "eos", "length")


def test_committed_prefix_is_not_recomputed_across_rounds(models, prompts):
    target, draft = models
    p = prompts[1]
    before = target.prefill_tokens
    cfg = DecodeConfig(method="lr", gamma1=2, max_new_tokens=MAX_NEW, max_step_tokens=24)
    res, stats = LookaheadDecoder(target, draft, make_verifier("random(0.5)"), cfg).decode(p)
    # without reuse every round would prefill the prompt again: rounds x len(prompt) tokens
    computed = target.prefill_tokens - before
    assert stats.rounds >= 3
    assert computed < len(p) + len(res.token_ids) + stats.rounds * 2 * 24
    assert computed < stats.rounds * len(p)


def test_seeded_sampling_reproduces_and_seeds_matter(models, prompts):
    target, draft = models

    def run(seed, method):
        cfg = DecodeConfig(
            method=method, gamma1=2, gamma2=2, temperature=0.9, seed=seed, max_new_tokens=40, max_step_tokens=16
        )
        return (
            LookaheadDecoder(target, draft, make_verifier("random(0.5)", seed=seed), cfg)
            .decode(prompts[2])[0]
            .token_ids
        )

    for method in ("target", "lr+sd"):
        assert run(3, method) == run(3, method)
    assert run(3, "target") != run(4, "target")


def test_logprobs_and_top_logprobs_per_generated_token(models, prompts):
    target, _ = models
    for k in (0, 2):
        out = target.generate(prompts[:2], GenParams(max_tokens=12, top_logprobs=3, num_speculative_tokens=k)).outputs
        for o in out:
            assert len(o.logprobs) == len(o.top_logprobs) == len(o.token_ids)
            for tok, lp, top in zip(o.token_ids, o.logprobs, o.top_logprobs):
                assert lp <= 0 and tok in top and len(top) >= 3


@pytest.mark.parametrize("method", ["lr", "lr+sd"])
def test_two_branches_with_the_never_verifier_equal_target_greedy(models, prompts, method):
    target, draft = models
    cfg = DecodeConfig(method=method, gamma1=2, gamma2=2, width=2, max_new_tokens=64, max_step_tokens=16)
    for p in prompts[:2]:
        res, _ = LookaheadDecoder(target, draft, make_verifier("never"), cfg).decode(p)
        assert res.token_ids == reference_greedy(target, p, 64)


def test_decoder_api_and_judge_verifier_run_on_the_transformers_backend():
    from lrtune import Decoder

    pair = get_tiny_pair()
    dec = Decoder.from_pretrained(
        target=str(pair.target),
        draft=str(pair.draft),
        backend="transformers",
        method="lr+sd",
        verifier="llm_judge",
        gamma1=2,
        gamma2=2,
        max_step_tokens=16,
        max_model_len=1024,
        progress=False,
    )
    out = dec.generate(sample_questions(1), max_new_tokens=32)[0]
    assert 0 < len(out.token_ids) <= 32 and out.stats.verifier_calls == out.stats.rounds >= 1
    assert dec.decoder.verifier.calls <= out.stats.verifier_calls  # identical steps need no model call
    before = dec.decoder.verifier.calls
    scores = dec.decoder.verifier.score([StepPair("c", "x = 1", "x = 2")])
    assert 0.0 <= scores[0] <= 1.0 and dec.decoder.verifier.calls == before + 1


@pytest.mark.parametrize("method", ["lr", "lr+sd"])
def test_async_lr_with_the_never_verifier_equals_target_greedy(models, prompts, method):
    target, draft = models
    cfg = DecodeConfig(method=method, gamma1=2, gamma2=2, max_new_tokens=64, max_step_tokens=16, schedule="async")
    for p in prompts[:2]:
        res, stats = LookaheadDecoder(target, draft, make_verifier("never"), cfg).decode(p)
        assert res.token_ids == reference_greedy(target, p, 64)
        assert stats.overlap_s >= 0.0


def test_judge_model_loads_a_separate_judge_backend():
    from lrtune import Decoder

    pair = get_tiny_pair()
    dec = Decoder.from_pretrained(
        target=str(pair.target),
        draft=str(pair.draft),
        backend="transformers",
        method="lr",
        verifier="target_score",
        judge_model=str(pair.target),
        progress=False,
    )
    judge = dec.decoder.verifier.backend
    assert judge is not dec.decoder.target and judge.name == "judge"
    assert 0.0 <= dec.decoder.verifier.score([StepPair("c", "x = 1", "x = 1")])[0] <= 1.0


def test_profile_measures_c_and_a_normalised_batch_cost_curve(tmp_path):
    from lrtune.eval.profile import ProfileOptions, run
    from lrtune.api import ModelConfig
    from tiny_models import get_tiny_pair

    pair = get_tiny_pair()
    out = tmp_path / "profile.json"
    prof = run(
        ProfileOptions(
            out=str(out),
            gamma1_max=2,
            tokens=8,
            repeats=1,
            task="gsm_symbolic",
            sd_tokens=12,
            sd_prompts=2,
            prefill_max=32,
        ),
        ModelConfig(
            target=str(pair.target), draft=str(pair.draft), backend="transformers", device="cpu", max_model_len=1024
        ),
    )
    data = json.loads(out.read_text())
    assert data["batch_cost"][0] == 1.0 and len(data["batch_cost"]) == 3
    assert all(v > 0 for v in data["batch_cost"]) and data["c1"] == pytest.approx(prof["c1"]) and data["c1"] > 0
    # c2 from the SD run: the g(γ2) inverse of its measured speedup and acceptance
    from lrtune.speedup import g

    sd = data["sd"]
    assert (
        (sd["gamma2"], sd["tokens"], sd["prompts"]) == (4, 12, 2) and 0 < sd["alpha2"] <= 1 and data["c2"] == sd["c2"]
    )
    if sd["c2"] > 1e-3:
        assert g(min(sd["alpha2"], 0.999), sd["c2"], 4) == pytest.approx(sd["speedup"], rel=1e-6)
    # a score round's prefill of 16 and 32 draft tokens after the cached prompt, against decoding them
    pre = data["prefill"]
    assert set(pre["seconds"]) == {"0", "16", "32"} and pre["overhead_tokens"] > 0
    for n in ("16", "32"):
        assert pre["seconds"][n] > 0 and pre["ratio_per_token"][n] == pytest.approx(
            (pre["seconds"][n] - pre["seconds"]["0"]) / (int(n) * data["target_s_per_token"])
        )


def test_prefill_lengths_double_up_to_the_maximum():
    from lrtune.profiling import prefill_lengths

    assert prefill_lengths(0) == [] and prefill_lengths(15) == [] and prefill_lengths(100) == [16, 32, 64]


@pytest.mark.parametrize("controller", ["heuristic", "bandit", "bandit with no budget"])
def test_api_with_a_controller_keeps_greedy_equality(controller):
    """Decoder.from_pretrained(..., controller=...) on transformers: depths change per round,
    output stays the target's greedy output (never verifier: every draft is rejected). The
    default bandit runs SD until its exploration budget admits an LR round (here: never)."""
    from lrtune import Decoder
    from lrtune.policies import BanditController

    pair = get_tiny_pair()
    dec = Decoder.from_pretrained(
        str(pair.target),
        str(pair.draft),
        backend="transformers",
        device="cpu",
        method="lr+sd",
        verifier="never",
        controller=BanditController(explore_budget=None) if controller == "bandit with no budget" else controller,
        gamma1=2,
        gamma2=2,
        max_step_tokens=12,
        max_model_len=512,
        progress=False,
    )
    assert dec.decoder.controller.name == controller.split()[0]
    q = sample_questions(1, seed=5)[0]
    out = dec.generate([q], max_new_tokens=40)[0]
    ref = dec.generate([q], max_new_tokens=40, method="target")[0]
    assert out.token_ids == ref.token_ids
    assert out.stats.rounds > 1 or controller == "bandit"


def test_onednn_linears_route_every_float32_linear_and_keep_outputs():
    import torch

    from lrtune.backends.hf import onednn_linears

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8, bias=False))
    x = torch.randn(3, 5, 16)
    with torch.inference_mode():
        before = model(x)
        routed = onednn_linears(model)
        after = model(x)
    if not torch.backends.mkldnn.is_available():
        pytest.skip("this torch has no oneDNN")
    assert routed == 2
    assert torch.allclose(before, after, atol=1e-5)


@pytest.mark.parametrize("method,width", [("target", 1), ("sd", 1), ("lr", 1), ("lr+sd", 1), ("lr", 2), ("lr+sd", 2)])
def test_batched_prompts_get_the_tokens_they_get_alone(models, prompts, method, width):
    """DESIGN §3.7 on transformers: prompts of different lengths, 2 in flight, each equal to
    transformers' own greedy generate()."""
    target, draft = models
    cfg = DecodeConfig(method=method, gamma1=2, gamma2=3, width=width, max_new_tokens=64, max_step_tokens=16)
    dec = LookaheadDecoder(target, draft, make_verifier("never"), cfg)
    outs, batch = dec.decode_many(prompts, cfg, max_concurrent=2)
    for p, (res, stats) in zip(prompts, outs):
        assert res.token_ids == reference_greedy(target, p, 64)
        if "sd" in method:  # exact per-row SD counters on this backend
            assert stats.drafted_tokens > 0 and sum(stats.sd_accepted_by_pos) == stats.accepted_tokens


def test_batched_controllers_choose_depths_per_prompt_and_keep_greedy_equality(models, prompts):
    from lrtune.control import Bounds, ProblemInfo

    class ByProblem:
        bounds = Bounds(gamma1_min=0, gamma1_max=3, gamma2_min=0, gamma2_max=3, M=9.0)

        def choose(self, problem, state):
            self.p = problem
            return int(problem.id[-1]), 1 + int(problem.id[-1]) % 3  # (γ1, γ2) = (i, 1 + i % 3)

        def horizon(self):
            return None

        def update(self, outcome):
            assert (outcome.gamma1, outcome.gamma2) == (int(self.p.id[-1]), 1 + int(self.p.id[-1]) % 3)

    target, draft = models
    cfg = DecodeConfig(method="lr+sd", gamma1=2, gamma2=3, max_new_tokens=48, max_step_tokens=12)
    problems = [ProblemInfo(id=f"p{i}") for i in range(len(prompts))]
    outs, _ = LookaheadDecoder(target, draft, make_verifier("never"), cfg).decode_many(
        prompts, cfg, max_concurrent=3, controller=ByProblem(), problems=problems
    )
    for i, (p, (res, stats)) in enumerate(zip(prompts, outs)):
        assert res.token_ids == reference_greedy(target, p, 48)
        assert len(stats.drafted_by_pos) == i  # γ1 = i drafted positions (0: SD only)


def test_block_acceptance_greedy_keeps_the_longest_argmax_prefix_and_the_targets_token():
    import torch

    from lrtune.backends.base import GenParams
    from lrtune.backends.hf_sampling import accept_block

    logits = torch.tensor([[0.0, 5.0, 0.0], [5.0, 0.0, 0.0], [0.0, 0.0, 5.0], [0.0, 5.0, 0.0]])
    params = GenParams(max_tokens=8, logprobs=True)
    assert accept_block([1, 0, 1], [None] * 3, logits, params, None)[:2] == (2, [1, 0, 2])  # rejected at 2
    n, toks, infos = accept_block([1, 0, 2], [None] * 3, logits, params, None)
    assert (n, toks) == (3, [1, 0, 2, 1])  # all accepted: the target's bonus token follows
    assert [i[0] for i in infos] == toks and infos[0][1] == pytest.approx(float(torch.log_softmax(logits[0], -1)[1]))
    assert accept_block([], [], logits, params, None)[:2] == (0, [1])


def test_block_acceptance_sampled_commits_tokens_distributed_as_the_target():
    """Speculative sampling is lossless: whatever q proposed, the first committed token is
    distributed as p = softmax(target logits / T)."""
    import torch

    from lrtune.backends.base import GenParams
    from lrtune.backends.hf_sampling import accept_block, probs

    params = GenParams(max_tokens=8, temperature=1.0)
    logits = torch.tensor([[1.0, 0.2, -1.0, 0.5], [0.0, 0.0, 0.0, 0.0]])
    q = torch.tensor([0.1, 0.6, 0.2, 0.1])
    gen = torch.Generator().manual_seed(0)
    counts = torch.zeros(4)
    n_trials = 20000
    for _ in range(n_trials):
        d = int(torch.multinomial(q, 1, generator=gen))
        counts[accept_block([d], [q], logits, params, gen)[1][0]] += 1
    assert torch.allclose(counts / n_trials, probs(logits[0], params), atol=0.015)


@pytest.mark.parametrize("method", ["lr", "lr+sd"])
def test_early_abort_stops_rows_in_the_batched_loop_and_keeps_the_committed_tokens(models, prompts, method):
    from tiny_models import check_early_abort

    target, draft = models
    check_early_abort(target, draft, prompts[:2], lambda p: reference_greedy(target, p), method, 3, MAX_NEW)


@pytest.mark.parametrize("method", ["lr", "lr+sd"])
def test_draft_prefix_reuse_keeps_greedy_equality_and_the_committed_steps(models, prompts, method):
    from tiny_models import check_reuse

    target, draft = models
    check_reuse(target, draft, prompts[:2], lambda p: reference_greedy(target, p), method, 3, MAX_NEW)


def test_prompt_scores_equal_a_plain_forward_even_past_a_longer_stored_prefix(models, prompts):
    from tiny_models import check_draft_scores

    check_draft_scores(models[0], get_tiny_pair().target, prompts[0], cached_tokens_score_none=False)


@pytest.mark.parametrize("method", ["lr", "lr+sd"])
def test_scored_lr_rounds_keep_greedy_equality_and_score_every_followed_draft_step(models, prompts, method):
    from tiny_models import check_scored_lr_rounds

    target, draft = models
    check_scored_lr_rounds(target, draft, prompts[:2], lambda p: reference_greedy(target, p), method, 3, MAX_NEW)


@pytest.mark.parametrize("method", ["lr", "lr+sd"])
def test_score_rounds_on_transformers_keep_greedy_equality_and_read_the_prefill(models, prompts, method):
    from tiny_models import check_score_rounds

    target, draft = models
    check_score_rounds(target, draft, prompts[:2], lambda p: reference_greedy(target, p), method, 3, MAX_NEW)
