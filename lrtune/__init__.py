"""lrtune: Lookahead Reasoning + speculative decoding for reasoning models.

Public API (imported lazily so ``import lrtune`` stays cheap)::

    from lrtune import Decoder
    dec = Decoder.from_pretrained(target="default", draft="default", method="lr+sd")
    out = dec.generate(["What is 2+2?"], max_new_tokens=128)
    out[0].text, out[0].token_ids, out[0].stats
"""

from __future__ import annotations

from lrtune.version import __version__  # noqa: F401 - the public version

__all__ = [
    "ControlConfig",
    "DecodeConfig",
    "DecodeOutput",
    "DecodeStats",
    "Decoder",
    "EngineConfig",
    "GpuMemoryConfig",
    "LookaheadDecoder",
    "LrtuneError",
    "ModelConfig",
    "Pricing",
    "VerifierConfig",
]


def __getattr__(name: str):
    if name == "LookaheadDecoder":
        from lrtune.decoder import LookaheadDecoder

        return LookaheadDecoder
    if name in __all__:
        from lrtune import api  # the public face (lrtune/api.py)

        return getattr(api, name)
    raise AttributeError(f"module 'lrtune' has no attribute {name!r}")
