"""lrtune: Lookahead Reasoning + speculative decoding for reasoning models.

Public API (imported lazily so ``import lrtune`` stays cheap)::

    from lrtune import Decoder
    dec = Decoder.from_pretrained(target="default", draft="default", method="lr+sd")
    out = dec.generate(["What is 2+2?"], max_new_tokens=128)
    out[0].text, out[0].token_ids, out[0].stats
"""

from __future__ import annotations

from lrtune.version import __version__  # noqa: F401 - the public version

__all__ = ["Decoder", "DecodeOutput", "DecodeConfig", "DecodeStats", "LookaheadDecoder", "LrtuneError"]


def __getattr__(name: str):
    if name in ("Decoder", "DecodeOutput"):
        from lrtune import decoding

        return getattr(decoding, name)
    if name in ("DecodeConfig", "LookaheadDecoder"):
        from lrtune import decoder

        return getattr(decoder, name)
    if name == "DecodeStats":
        from lrtune.stats import DecodeStats

        return DecodeStats
    if name == "LrtuneError":
        from lrtune.errors import LrtuneError

        return LrtuneError
    raise AttributeError(f"module 'lrtune' has no attribute {name!r}")
