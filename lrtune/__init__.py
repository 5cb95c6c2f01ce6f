"""lrtune: Lookahead Reasoning + speculative decoding for reasoning models.

Public API (imported lazily so ``import lrtune`` stays cheap)::

    from lrtune import Decoder
    dec = Decoder.from_pretrained(target="default", draft="default", method="lr+sd")
    out = dec.generate(["What is 2+2?"], max_new_tokens=128)
    out[0].text, out[0].token_ids, out[0].stats
"""

from __future__ import annotations

from lrtune.version import __version__  # noqa: F401 - the public version


_HOMES = {  # where each public name lives (lrtune/api.py re-exports the same names)
    "ControlConfig": "lrtune.modelconfig",
    "DecodeConfig": "lrtune.decodeconfig",
    "DecodeOutput": "lrtune.decoding",
    "DecodeStats": "lrtune.stats",
    "Decoder": "lrtune.decoding",
    "EngineConfig": "lrtune.modelconfig",
    "GpuMemoryConfig": "lrtune.modelconfig",
    "LookaheadDecoder": "lrtune.decoder",
    "LrtuneError": "lrtune.errors",
    "ModelConfig": "lrtune.modelconfig",
    "Pricing": "lrtune.pricing",
    "VerifierConfig": "lrtune.modelconfig",
}
__all__ = sorted(_HOMES)  # the public names: one list


def __getattr__(name: str):
    if name in _HOMES:
        import importlib

        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module 'lrtune' has no attribute {name!r}")
