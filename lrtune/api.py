"""Public Python API: one of the core's faces (with ``cli.py`` and ``pipeline.py``). It holds
no code of its own: it names what a user builds and calls. Inside lrtune nothing imports it;
the core and the stages import the modules below.

>>> from lrtune import Decoder                                   # doctest: +SKIP
>>> dec = Decoder.from_pretrained(target="default", draft="default", method="lr+sd")
>>> out = dec.generate(["Tom has 3 apples and buys 4 more. How many?"], max_new_tokens=256)
>>> out[0].text, out[0].token_ids[:5], out[0].stats.alpha1
"""

from __future__ import annotations

import lrtune
from lrtune.build import (
    ResolvedModels,
    build_controller,
    check_configs,
    encode_prompts,
    judge_path,
    prompt_list,
    require_a_prompt_that_fits,
    shared_spec_tokens,
    verifier_device,
)
from lrtune.decodeconfig import DecodeConfig
from lrtune.decoder import LookaheadDecoder
from lrtune.decoding import Decoder, DecodeOutput, Outputs
from lrtune.errors import ConfigError, ConfigTypeError, LrtuneError
from lrtune.modelconfig import BACKENDS, ControlConfig, EngineConfig, GpuMemoryConfig, ModelConfig, VerifierConfig
from lrtune.pricing import Pricing
from lrtune.stats import BatchStats, DecodeStats

# the names `from lrtune import ...` gives are listed once, in lrtune/__init__.py; this face adds the builders
__all__ = sorted(
    {
        *lrtune.__all__,
        "BACKENDS",
        "BatchStats",
        "ConfigError",
        "ConfigTypeError",
        "Outputs",
        "ResolvedModels",
        "build_controller",
        "check_configs",
        "encode_prompts",
        "judge_path",
        "prompt_list",
        "require_a_prompt_that_fits",
        "shared_spec_tokens",
        "verifier_device",
    }
)
