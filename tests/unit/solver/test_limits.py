"""The one limits model (solver/limits.py): its documented fields, the presets, how the
config, the flags and the operator's ceiling lay over them, and the context cut to what
the model host's memory holds."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from solver.limits import (
    AGENT_CONTEXT,
    EVALUATION_CONTEXT,
    KV_BYTES_PER_TOKEN,
    PRESETS,
    SMALLEST_CONTEXT,
    Limits,
    ModelHost,
    choose_context,
)
from solver.repo_config import parse_repo_config

GIB = 2**30
WEIGHTS = 2_900_000_000  # FrogNano-4B Q4_K_M


def test_the_defaults_are_the_evaluated_configuration_and_each_field_says_what_it_is(
        ) -> None:
    limits = Limits()
    assert (limits.max_steps, limits.max_context_tokens, limits.max_tokens_per_turn) == \
        (150, 131_072, 8_192)
    assert PRESETS["evaluation"] == limits
    agent = PRESETS["agent"]
    assert (agent.max_steps, agent.max_context_tokens) == (100, 65_536) == \
        (100, AGENT_CONTEXT)
    undocumented = [name for name, field in Limits.model_fields.items()
                    if not (field.description or "").strip()]
    assert undocumented == []
    assert "max_turns" in (Limits.model_fields["max_steps"].description or "")


def test_the_config_then_the_flags_then_the_ceiling() -> None:
    config = parse_repo_config("max_steps: 7\ntimeout_minutes: 30\ntest_timeout_minutes: 2\n")
    from_config = config.limits_over(PRESETS["agent"])
    assert (from_config.max_steps, from_config.max_seconds, from_config.test_timeout) == \
        (7, 1800, 120)
    assert from_config.max_context_tokens == AGENT_CONTEXT, "the preset's where unset"
    flags = Limits(max_steps=3)  # `solve --max-steps 3`: only the set field counts
    assert flags.model_fields_set == {"max_steps"}
    flagged = from_config.over(flags)
    assert (flagged.max_steps, flagged.max_seconds) == (3, 1800)
    assert flagged.capped(600).max_seconds == 600 and flagged.capped(None) is flagged
    assert flagged.capped(7200) is flagged, "a ceiling only ever lowers the wall time"
    with pytest.raises(ValidationError):
        Limits().over({"max_steps": 0})


def test_a_host_that_holds_the_evaluated_context_gets_it() -> None:
    h200 = ModelHost(143_771 * 2**20, "the smallest GPU (GPU 0)", WEIGHTS)
    choice = choose_context(EVALUATION_CONTEXT, h200)
    assert choice.tokens == 131_072
    assert choice.reason.startswith("131,072 tokens: 131,072 tokens need 4.0 GiB of KV "
                                    "cache (f16) per model")
    assert "the smallest GPU (GPU 0)" in choice.reason and "cut" not in choice.reason


def test_little_memory_halves_the_context_until_it_fits() -> None:
    """32 KiB a token: 131,072 tokens are 4 GiB of cache. A 6 GiB GPU keeps 2.7 GiB after
    the weights and a tenth of headroom: 65,536 tokens (2 GiB). Two run workers each
    holding the weights on an 8 GiB GPU leave 0.9 GiB each: 16,384 tokens."""
    small = ModelHost(6 * GIB, "the smallest GPU (GPU 0, 6,144 MiB)", WEIGHTS)
    choice = choose_context(EVALUATION_CONTEXT, small)
    assert choice.tokens == 65_536
    assert choice.reason.startswith("65,536 tokens, cut from 131,072: 131,072 tokens need "
                                    "4.0 GiB of KV cache (f16) per model, but the smallest "
                                    "GPU (GPU 0, 6,144 MiB) holds the weights (2.7 GiB)")
    two = ModelHost(8 * GIB, "the smallest GPU", WEIGHTS, copies=2)
    assert choose_context(EVALUATION_CONTEXT, two).tokens == 16_384
    assert "holds 2 × the weights" in choose_context(EVALUATION_CONTEXT, two).reason
    # A q8_0 cache costs 17 KiB a token: 7 GiB holds the evaluated context with it, and
    # only half of it in f16.
    assert KV_BYTES_PER_TOKEN["q8_0"] == 17 * 1024
    q8 = ModelHost(7 * GIB, "the smallest GPU", WEIGHTS, kv_cache_type="q8_0")
    assert choose_context(EVALUATION_CONTEXT, q8).tokens == 131_072
    assert choose_context(EVALUATION_CONTEXT, ModelHost(7 * GIB, "gpu", WEIGHTS)).tokens \
        == 65_536


def test_a_context_too_large_for_any_cut_says_so_and_a_set_one_is_kept() -> None:
    tiny = ModelHost(3 * GIB, "this host's memory (3.0 GiB, no GPU)", WEIGHTS)
    choice = choose_context(EVALUATION_CONTEXT, tiny)
    assert choice.tokens == SMALLEST_CONTEXT and "may not load" in choice.reason
    kept = choose_context(200_000, tiny, set_by="FROGNANO_N_CTX")
    assert (kept.tokens, kept.reason) == (200_000, "200,000 tokens, as FROGNANO_N_CTX sets")
    server = choose_context(EVALUATION_CONTEXT, None)
    assert server.tokens == EVALUATION_CONTEXT and "not measured" in server.reason
