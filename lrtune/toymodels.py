"""Small models built on the spot, with no hub and no network (tests and ``lrtune doctor``).

* :func:`get_tiny_pair`: a tiny, deterministic draft/target pair **trained** in about 20 s
  on a 2-core CPU. A synthetic "reasoning" corpus is generated in code, a byte-level BPE
  tokenizer is trained on it with ``tokenizers`` and a tiny ``LlamaForCausalLM`` target
  (hidden 128, 2 layers, 2 heads of 64) is trained on it for a few hundred steps, so that
  generations contain the step delimiter ``"\\n\\n"`` every 5-20 tokens and end with
  ``<|endoftext|>`` after ~5-8 steps. The draft is the target plus weight noise, so its
  greedy steps match the target's on some steps but not all (:func:`_perturbed_copy`). A
  third model (``other_vocab``, 1 layer, barely trained) has another vocabulary.
* :func:`lrtune.randommodels.build_random_pair`: random-weight Qwen2 models **shaped like the default pair**
  (1.5B target, 0.5B draft, vocabulary 151,936) with the tiny tokenizer: what a GPU machine
  without network can run to check engines, code paths and timings (not text quality).

Usage::

    from lrtune.toymodels import get_tiny_pair
    pair = get_tiny_pair()           # cached under $LRTUNE_TEST_CACHE or ~/.cache/lrtune/test-models
    pair.target, pair.draft, pair.other_vocab   # HF model directories (config, safetensors, tokenizer)
    pair.info["delimiter_token_id"]              # id of the "\\n\\n" token

Tokenizer facts (checked at build time, recorded in ``info``):

* ``"\\n\\n"`` is a single token (``delimiter_token_id``);
* several merged tokens contain the delimiter, e.g. ``".\\n\\n"``; some may
  also contain text after it (``"\\n\\n\\n"``) -- see ``merged_delimiter_tokens``.

Builds are cached in ``root/<hash>`` where the hash covers the builder's
parameters, this file's source and the torch/transformers/tokenizers versions;
the directory is built in a temporary sibling and renamed into place.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import random
import shutil
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

BUILDER_VERSION = 1
DELIMITER = "\n\n"
EOS_TOKEN = "<|endoftext|>"
SPECIAL_TOKENS = [EOS_TOKEN, "<|system|>", "<|user|>", "<|assistant|>", "<think>", "</think>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
# Qwen2 / Llama-3 style split: punctuation absorbs following newlines, so ".\n\n"
# can become one token, while "\n\n" after a digit or letter stands alone.
PRETOKENIZE_REGEX = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"""
    r"""| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)

_MODEL_DIRS = ("target", "draft", "other_vocab")


@dataclasses.dataclass(frozen=True)
class TinyPair:
    """Paths of the tiny model directories (each loadable by transformers and vLLM)."""

    target: Path
    draft: Path
    other_vocab: Path

    @property
    def root(self) -> Path:
        return self.target.parent

    @property
    def info(self) -> dict[str, Any]:
        """The build manifest (token ids, parameters, build time)."""
        return json.loads((self.root / "manifest.json").read_text())


# --------------------------------------------------------------------------- corpus

_NAMES = ["Tom", "Anna", "Ben", "Lisa", "Sam", "Mia", "Leo", "Nora", "Max", "Ella", "Omar", "Zoe"]
_PRONOUN = {
    "Tom": "He",
    "Ben": "He",
    "Sam": "He",
    "Leo": "He",
    "Max": "He",
    "Omar": "He",
    "Anna": "She",
    "Lisa": "She",
    "Mia": "She",
    "Nora": "She",
    "Ella": "She",
    "Zoe": "She",
}
_ITEMS = ["apple", "book", "pencil", "coin", "card", "marble", "cookie", "stamp", "shell", "ball"]
_BOXES = ["box", "bag", "jar", "basket", "pack"]


def _problem(rng: random.Random) -> tuple[str, list[str], int]:
    """One synthetic word problem: (question, reasoning steps, answer)."""
    name = rng.choice(_NAMES)
    he = _PRONOUN[name]
    item = rng.choice(_ITEMS)
    kind = rng.randrange(6)
    if kind == 0:  # addition
        a, b = rng.randint(2, 60), rng.randint(2, 40)
        q = f"{name} has {a} {item}s and gets {b} more. How many {item}s does {name} have now?"
        steps = [
            f"{name} starts with {a} {item}s.",
            f"{he} gets {b} more {item}s.",
            f"We add them: {a} + {b} = {a + b}",
            f"So {name} has {a + b} {item}s now.",
        ]
        ans = a + b
    elif kind == 1:  # subtraction
        a = rng.randint(10, 90)
        b = rng.randint(1, a - 1)
        q = f"{name} had {a} {item}s and gave away {b}. How many {item}s are left?"
        steps = [
            f"{name} had {a} {item}s at first.",
            f"{he} gave away {b} of them.",
            f"We subtract: {a} - {b} = {a - b}",
            f"So {a - b} {item}s are left.",
        ]
        ans = a - b
    elif kind == 2:  # multiplication
        box = rng.choice(_BOXES)
        a, b = rng.randint(2, 12), rng.randint(2, 12)
        q = f"{name} buys {a} {box}s with {b} {item}s in each {box}. How many {item}s is that?"
        steps = [
            f"There are {a} {box}s.",
            f"Each {box} holds {b} {item}s.",
            f"We multiply: {a} * {b} = {a * b}",
            f"So that is {a * b} {item}s in total.",
        ]
        ans = a * b
    elif kind == 3:  # division
        k, per = rng.randint(2, 9), rng.randint(2, 12)
        a = k * per
        q = f"{name} shares {a} {item}s equally among {k} friends. How many does each friend get?"
        steps = [
            f"{name} has {a} {item}s to share.",
            f"There are {k} friends.",
            f"We divide: {a} / {k} = {per}",
            f"So each friend gets {per} {item}s.",
        ]
        ans = per
    elif kind == 4:  # two-step
        a, b, c = rng.randint(5, 40), rng.randint(2, 30), rng.randint(1, 20)
        c = min(c, a + b - 1)
        q = f"{name} has {a} {item}s, finds {b} more and then loses {c}. How many {item}s are left?"
        steps = [
            f"{name} starts with {a} {item}s.",
            f"After finding {b} more, {he.lower()} has {a} + {b} = {a + b}",
            f"Then {he.lower()} loses {c} {item}s.",
            f"We subtract: {a + b} - {c} = {a + b - c}",
            f"So {a + b - c} {item}s are left.",
        ]
        ans = a + b - c
    else:  # price
        a, p = rng.randint(2, 9), rng.randint(2, 15)
        q = f"One {item} costs {p} dollars. How much do {a} {item}s cost?"
        steps = [
            f"One {item} costs {p} dollars.",
            f"We need {a} {item}s.",
            f"We multiply: {a} * {p} = {a * p}",
            f"So {a} {item}s cost {a * p} dollars.",
        ]
        ans = a * p
    if rng.random() < 0.3:
        steps.insert(
            0, rng.choice(["Let me think step by step.", "Let me read the problem.", "Okay, let me solve this."])
        )
    if rng.random() < 0.3:
        steps.append(rng.choice(["Let me check the answer.", "That looks right.", "The numbers add up."]))
    return q, steps, ans


def make_corpus(n: int, seed: int, triple_newline_frac: float = 0.15) -> list[str]:
    """``n`` chat-formatted reasoning texts; steps joined by ``"\\n\\n"``, ending with EOS."""
    rng = random.Random(seed)
    texts = []
    for _ in range(n):
        q, steps, ans = _problem(rng)
        sep = "\n\n\n" if rng.random() < triple_newline_frac else DELIMITER
        body = DELIMITER.join(steps) + sep + f"Answer: {ans}"
        texts.append(f"<|user|>\n{q}\n<|assistant|>\n{body}{EOS_TOKEN}")
    return texts


def sample_questions(n: int, seed: int = 12345) -> list[str]:
    """Fresh questions from the corpus generator (a seed not used for training)."""
    rng = random.Random(seed)
    return [_problem(rng)[0] for _ in range(n)]


def chat_prompt(question: str) -> str:
    """The chat template applied to one user message, with the generation prompt."""
    return f"<|user|>\n{question}\n<|assistant|>\n"


# --------------------------------------------------------------------------- tokenizer


def _train_tokenizer(texts: list[str], vocab_size: int):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def _save_tokenizer(tok, out: Path) -> None:
    from transformers import PreTrainedTokenizerFast

    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=EOS_TOKEN,
        pad_token=EOS_TOKEN,
        additional_special_tokens=SPECIAL_TOKENS[1:],
        model_max_length=2048,
        clean_up_tokenization_spaces=False,
    )
    hf.chat_template = CHAT_TEMPLATE
    hf.save_pretrained(str(out))


def _delimiter_facts(tok) -> dict[str, Any]:
    """Check the delimiter tokens; raise if the tokenizer lacks them."""
    delim_ids = tok.encode(DELIMITER).ids
    if len(delim_ids) != 1:
        raise RuntimeError(f"tiny tokenizer: {DELIMITER!r} is not a single token: {delim_ids}")
    merged = {}
    for tid in range(tok.get_vocab_size()):
        s = tok.decode([tid], skip_special_tokens=False)
        if DELIMITER in s and s != DELIMITER:
            merged[s] = tid
    if not any(s.endswith(DELIMITER) and len(s) > 2 for s in merged):
        raise RuntimeError(f"tiny tokenizer: no merged token ends with {DELIMITER!r}: {sorted(merged)}")
    return {
        "delimiter_token_id": delim_ids[0],
        "merged_delimiter_tokens": dict(sorted(merged.items(), key=lambda kv: kv[1])),
    }


# --------------------------------------------------------------------------- models


def _train_model(
    ids: list[int],
    *,
    vocab_size: int,
    eos_id: int,
    num_layers: int,
    steps: int,
    seed: int,
    seq_len: int,
    batch_size: int,
    lr: float,
):
    """Train a tiny Llama on random windows of ``ids``.

    Returns ``(model, losses)``.
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=num_layers,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=64,
        max_position_embeddings=2048,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        bos_token_id=eos_id,
        eos_token_id=eos_id,
        pad_token_id=eos_id,
    )
    model = LlamaForCausalLM(config)
    model.train()
    data = torch.tensor(ids, dtype=torch.long)
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, betas=(0.9, 0.98))
    warmup = max(1, steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt,
        lambda s: min(1.0, (s + 1) / warmup) * max(0.1, 1.0 - s / steps),
    )
    losses = []
    for _ in range(steps):
        starts = torch.randint(0, len(data) - seq_len - 1, (batch_size,), generator=gen)
        batch = torch.stack([data[s : s + seq_len] for s in starts.tolist()])
        out = model(input_ids=batch, labels=batch)
        opt.zero_grad(set_to_none=True)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(out.loss.item())
    model.eval()
    return model, losses


def _loss_summary(loss: list[float]) -> dict[str, float]:
    return {"first": round(loss[0], 3), "last10": round(sum(loss[-10:]) / min(10, len(loss)), 3)}


def _perturbed_copy(model, sigma: float, seed: int):
    """The draft: the target plus Gaussian noise of ``sigma`` x each weight's std.

    Two separately trained tiny models almost never agree on whole steps (the
    numbers in the corpus are random, so each model's greedy pick among them is
    arbitrary: 5-25% step agreement measured), while a noisy copy agrees on a
    tunable share of steps (sigma 0.1 -> ~60%, 0.2 -> ~35% of greedy steps).
    Norm weights are left as they are.
    """
    import copy

    import torch

    draft = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in draft.named_parameters():
            if "norm" not in name:
                param.add_(torch.randn(param.shape, generator=gen) * (param.std() * sigma))
    return draft


def _save_model(model, tok, out: Path, dtype: str, eos_id: int) -> None:
    import torch
    from transformers import GenerationConfig

    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # quiet logs: no "Writing model shards" bar per model
    torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
    model = model.to(torch_dtype)
    model.config.dtype = dtype
    model.generation_config = GenerationConfig(bos_token_id=eos_id, eos_token_id=eos_id, pad_token_id=eos_id)
    model.save_pretrained(str(out))
    _save_tokenizer(tok, out)


# --------------------------------------------------------------------------- build + cache

DEFAULT_PARAMS: dict[str, Any] = {
    "corpus_size": 800,
    "corpus_seed": 0,
    "triple_newline_frac": 0.15,
    "vocab_size": 512,
    "other_vocab_size": 400,
    "seq_len": 128,
    "batch_size": 8,
    "lr": 3e-3,
    "target_layers": 2,
    "target_steps": 300,
    "target_seed": 1,
    "draft_noise": 0.15,
    "draft_seed": 2,
    "other_steps": 20,
    "other_seed": 3,
}


def library_versions() -> dict[str, str]:
    import tokenizers
    import torch
    import transformers

    return {"torch": torch.__version__, "transformers": transformers.__version__, "tokenizers": tokenizers.__version__}


def cache_key(dtype: str = "float32", **overrides: Any) -> str:
    params = {**DEFAULT_PARAMS, **overrides, "dtype": dtype}
    blob = json.dumps(
        {
            "builder_version": BUILDER_VERSION,
            "source": hashlib.sha256(Path(__file__).read_bytes()).hexdigest(),
            "params": params,
            "versions": library_versions(),
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _pair_at(d: Path) -> TinyPair:
    return TinyPair(*(d / name for name in _MODEL_DIRS))


def _is_complete(d: Path) -> bool:
    return (d / "manifest.json").is_file() and all((d / n / "model.safetensors").is_file() for n in _MODEL_DIRS)


@contextlib.contextmanager
def _torch_threads(n: int) -> Iterator[None]:
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def _build_into(out: Path, params: dict[str, Any], dtype: str) -> dict[str, Any]:
    import torch

    t0 = time.perf_counter()
    p = params
    texts = make_corpus(p["corpus_size"], p["corpus_seed"], p["triple_newline_frac"])
    (out / "corpus.txt").write_text("\n<|doc|>\n".join(texts))

    tok = _train_tokenizer(texts, p["vocab_size"])
    facts = _delimiter_facts(tok)
    eos_id = tok.token_to_id(EOS_TOKEN)
    ids = [i for enc in tok.encode_batch(texts) for i in enc.ids]
    t_tok = time.perf_counter()

    other_tok = _train_tokenizer(texts, p["other_vocab_size"])
    other_eos = other_tok.token_to_id(EOS_TOKEN)
    other_ids = [i for enc in other_tok.encode_batch(texts) for i in enc.ids]
    if other_tok.get_vocab_size() == tok.get_vocab_size():
        raise RuntimeError("tiny tokenizer: other_vocab tokenizer has the same vocabulary size")

    common = dict(seq_len=p["seq_len"], batch_size=p["batch_size"], lr=p["lr"])
    timings = {"tokenizers_s": round(t_tok - t0, 2)}
    losses = {}

    t1 = time.perf_counter()
    target, loss = _train_model(
        ids,
        vocab_size=tok.get_vocab_size(),
        eos_id=eos_id,
        num_layers=p["target_layers"],
        steps=p["target_steps"],
        seed=p["target_seed"],
        **common,
    )
    losses["target"] = _loss_summary(loss)
    draft = _perturbed_copy(target, p["draft_noise"], p["draft_seed"])
    _save_model(target, tok, out / "target", dtype, eos_id)
    _save_model(draft, tok, out / "draft", dtype, eos_id)
    timings["target_and_draft_s"] = round(time.perf_counter() - t1, 2)

    t1 = time.perf_counter()
    other, loss = _train_model(
        other_ids,
        vocab_size=other_tok.get_vocab_size(),
        eos_id=other_eos,
        num_layers=1,
        steps=p["other_steps"],
        seed=p["other_seed"],
        **common,
    )
    losses["other_vocab"] = _loss_summary(loss)
    _save_model(other, other_tok, out / "other_vocab", dtype, other_eos)
    timings["other_vocab_s"] = round(time.perf_counter() - t1, 2)

    timings["total_s"] = round(time.perf_counter() - t0, 2)
    timings["torch_threads"] = torch.get_num_threads()
    manifest = {
        "builder_version": BUILDER_VERSION,
        "params": p,
        "dtype": dtype,
        "versions": library_versions(),
        "vocab_size": tok.get_vocab_size(),
        "other_vocab_size": other_tok.get_vocab_size(),
        "eos_token_id": eos_id,
        "delimiter": DELIMITER,
        **facts,
        "losses": losses,
        "timings": timings,
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return manifest


def build_threads() -> int:
    """Torch threads for building: 2, or 1 when the machine is already busy.

    On a 2-core box shared with other processes, 2 OpenMP threads were measured
    10-40x slower per training step than 1 thread (barrier spinning), so fall
    back to 1 when the load average says the cores are taken.
    ``$LRTUNE_TEST_BUILD_THREADS`` overrides.
    """
    env = os.environ.get("LRTUNE_TEST_BUILD_THREADS")
    if env:
        return max(1, int(env))
    cpus = os.cpu_count() or 1
    try:
        busy = os.getloadavg()[0] > max(0.5, cpus - 1.5)
    except OSError:
        busy = False
    return 1 if busy or cpus < 2 else 2


def build_tiny_pair(root: Path, *, dtype: str = "float32", threads: int | None = None, **overrides: Any) -> TinyPair:
    """Build (or reuse) the tiny pair under ``root/<hash>`` and return its paths.

    The build happens in a temporary sibling directory that is renamed into
    place, so a crashed build never leaves a half-written cache entry.  Callers
    that may race (parallel test workers) should use :func:`get_tiny_pair`,
    which also takes a file lock.
    """
    if dtype not in ("float32", "bfloat16", "float16"):
        raise ValueError(f"unsupported dtype {dtype!r}")
    unknown = set(overrides) - set(DEFAULT_PARAMS)
    if unknown:
        raise TypeError(f"unknown build parameters: {sorted(unknown)}")
    root = Path(root).expanduser()
    final = root / cache_key(dtype, **overrides)
    if _is_complete(final):
        return _pair_at(final)
    root.mkdir(parents=True, exist_ok=True)
    params = {**DEFAULT_PARAMS, **overrides}
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-{uuid.uuid4().hex[:8]}-", dir=root))
    try:
        with _torch_threads(threads or build_threads()):
            _build_into(tmp, params, dtype)
        if final.exists():  # incomplete leftover, or a concurrent builder won the race
            if _is_complete(final):
                return _pair_at(final)
            shutil.rmtree(final)
        tmp.chmod(0o755)  # mkdtemp makes it 0700
        os.rename(tmp, final)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return _pair_at(final)


def default_cache_root() -> Path:
    env = os.environ.get("LRTUNE_TEST_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "lrtune" / "test-models"


def get_tiny_pair(*, dtype: str = "float32", root: Path | None = None) -> TinyPair:
    """The cached tiny pair (built on first use, under a file lock)."""
    from filelock import FileLock

    root = Path(root) if root is not None else default_cache_root()
    final = root / cache_key(dtype)
    if _is_complete(final):
        return _pair_at(final)
    root.mkdir(parents=True, exist_ok=True)
    with FileLock(str(root / f"{final.name}.lock")):
        return build_tiny_pair(root, dtype=dtype)


# --------------------------------------------------------------------------- random pair shaped like the default
