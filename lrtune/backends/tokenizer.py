"""Tokenizer side of a backend, shared by the vLLM and transformers backends."""

from __future__ import annotations

from collections.abc import Sequence

from lrtune.errors import ModelError


class TokenizerMixin:
    """``encode_prompt`` (chat template once, up front), ``decode`` and ``eos_ids``."""

    model: str

    def _load_tokenizer(self) -> None:
        from transformers import AutoTokenizer

        try:
            self.tokenizer = AutoTokenizer.from_pretrained(self.model)
        except (OSError, ValueError) as e:
            raise ModelError(f"cannot load tokenizer of {self.model}: {str(e).splitlines()[0]}") from None
        from lrtune.modeldir import generation_eos_ids

        eos = {self.tokenizer.eos_token_id, *generation_eos_ids(self.model)}
        self.eos_ids = frozenset(i for i in eos if i is not None)

    def encode_prompt(self, prompt: str, *, chat: bool = True) -> list[int]:
        """Token ids of ``prompt``, through the chat template when the model has one."""
        if chat and getattr(self.tokenizer, "chat_template", None):
            ids = self.tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=True
            )
            if isinstance(ids, dict) or hasattr(ids, "keys"):
                ids = ids["input_ids"]
            return list(ids)
        return list(self.tokenizer.encode(prompt, add_special_tokens=True))

    def encode_messages(self, messages: Sequence[dict], *, prefill: str = "") -> list[int]:
        """Token ids of a chat (``[{"role", "content"}, ...]``) with the generation prompt,
        then ``prefill`` (the start of the assistant's answer); without a chat template, the
        contents joined by blank lines."""
        if getattr(self.tokenizer, "chat_template", None):
            ids = self.tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=True)
            if isinstance(ids, dict) or hasattr(ids, "keys"):
                ids = ids["input_ids"]
            ids = list(ids)
        else:
            ids = list(self.tokenizer.encode("\n\n".join(m["content"] for m in messages), add_special_tokens=True))
        return ids + (list(self.tokenizer.encode(prefill, add_special_tokens=False)) if prefill else [])

    def decode(self, token_ids: Sequence[int], *, skip_special_tokens: bool = False) -> str:
        return self.tokenizer.decode(list(token_ids), skip_special_tokens=skip_special_tokens)

    @property
    def vocab_size(self) -> int:
        """Ids the tokenizer knows (a token-id prompt may hold no other)."""
        return len(self.tokenizer)
