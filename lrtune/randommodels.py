"""Random-weight Qwen2 models shaped like the default pair (1.5B target, 0.5B draft,
vocabulary 151,936) with the tiny tokenizer (:mod:`lrtune.toymodels`): what a GPU machine
without network runs to check engines, code paths and timings (``lrtune doctor --models
random``). Their text means nothing."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

from lrtune.toymodels import TinyPair, library_versions, default_cache_root, get_tiny_pair


# Qwen2.5-Coder-Instruct 1.5B / 0.5B as lrtune's default pair has them (untied embeddings)
DEFAULT_SHAPES: dict[str, dict[str, Any]] = {
    "target": dict(
        hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2
    ),
    "draft": dict(
        hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2
    ),
}


DEFAULT_VOCAB = 151936


def _random_qwen2(shape: dict[str, Any], vocab_size: int, tokens: int, eos_id: int, seed: int, dtype: str):
    """A random-weight Qwen2 model of ``shape`` whose vocabulary is ``vocab_size`` but whose
    ``lm_head`` rows past the tokenizer's ``tokens`` ids are zero: their logit is 0 while a
    real id's is N(0, ~0.8), so greedy decoding never writes an id the tokenizer lacks, and
    the head still costs what the full vocabulary costs."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
    config = Qwen2Config(
        vocab_size=vocab_size,
        max_position_embeddings=32768,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        bos_token_id=eos_id,
        eos_token_id=eos_id,
        pad_token_id=eos_id,
        rope_theta=1000000.0,
        **shape,
    )
    model = Qwen2ForCausalLM(config).to(torch_dtype)
    with torch.no_grad():
        model.lm_head.weight[tokens:] = 0
    return model.eval()


def build_random_pair(
    root: Path | None = None,
    *,
    dtype: str = "bfloat16",
    vocab_size: int = DEFAULT_VOCAB,
    shapes: dict[str, dict[str, Any]] | None = None,
    seed: int = 0,
) -> TinyPair:
    """Random-weight target and draft shaped like the default pair (``shapes``, default
    :data:`DEFAULT_SHAPES`), with the tiny tokenizer, cached under ``root/random-<hash>``
    (``other_vocab`` is the tiny pair's). For engines, code paths and timings on a machine
    with no network; their text means nothing. Building the default shapes takes about a
    minute and 7 GB of RAM in bfloat16."""
    shapes = shapes or DEFAULT_SHAPES
    root = Path(root).expanduser() if root is not None else default_cache_root()
    key = hashlib.sha256(
        json.dumps(
            {
                "shapes": shapes,
                "vocab": vocab_size,
                "dtype": dtype,
                "seed": seed,
                "source": hashlib.sha256(Path(__file__).read_bytes()).hexdigest(),
                "versions": library_versions(),
            },
            sort_keys=True,
        ).encode()
    ).hexdigest()[:16]
    final = root / f"random-{key}"
    if (final / "manifest.json").is_file():
        return TinyPair(final / "target", final / "draft", final / "other_vocab")
    tiny = get_tiny_pair(root=root)
    from lrtune.runfiles import building_dir

    with building_dir(final) as tmp:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(tiny.target))
        for i, role in enumerate(("target", "draft")):
            model = _random_qwen2(shapes[role], vocab_size, len(tok), tok.eos_token_id, seed + i, dtype)
            model.generation_config.eos_token_id = tok.eos_token_id
            model.save_pretrained(str(tmp / role))
            tok.save_pretrained(str(tmp / role))
            del model
        shutil.copytree(tiny.other_vocab, tmp / "other_vocab")
        (tmp / "manifest.json").write_text(
            json.dumps(
                {
                    "kind": "random",
                    "shapes": shapes,
                    "vocab_size": vocab_size,
                    "tokenizer_tokens": len(tok),
                    "dtype": dtype,
                    "seed": seed,
                },
                indent=2,
            )
        )
    return TinyPair(final / "target", final / "draft", final / "other_vocab")
