"""The limits of one run: one model for the harness, the loop, `solve`'s flags and the
worker, in the way mini-swe-agent's `AgentConfig` documents each field where it is.

The defaults are the configuration FrogNano was evaluated in (Leaf's evaluation presets,
docs/LEAF_CONTRACT.md §4: 150 steps, 131,072 tokens of context output included, 8,192
tokens a turn); Leaf's agent defaults (100 steps, 65,536 tokens) are the `agent` preset
(FROGNANO_LIMITS). The context is also the KV cache an in-process model allocates, so the
composition root cuts it to what the model host's memory holds (`choose_context`) unless
FROGNANO_N_CTX names one; `frognano doctor` shows the choice and why.

Layered, lowest first: the preset, `.github/frognano.yml`'s keys (`RepoConfig`), `solve`'s
flags (a `Limits` whose set fields are the flags given), then the operator's ceiling on the
wall time (FROGNANO_MAX_RUN_SECONDS).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

EVALUATION_CONTEXT = 131_072  # Leaf's evaluation presets (SWE-bench Verified/Pro, TB)
AGENT_CONTEXT = 65_536  # Leaf's agent defaults


class Limits(BaseModel):
    """The budgets of one run (`RunPlan.limits`; the transcript's `run_started` record)."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)

    max_steps: int = Field(default=150, ge=1)
    """Model turns in all, over every round; then the run ends `max_turns`."""
    max_rounds: int = Field(default=3, ge=1)
    """Agent rounds (each ends in a verdict run): one, plus one per verdict that sent the
    model back; then the run ends `max_rounds`."""
    max_seconds: float = Field(default=3600.0, gt=0)
    """Wall time of the whole run (setup, baseline, agent, verdicts); then `max_time`."""
    # Not bounded here: `solve --n-ctx 0` is refused by solve with the flag's name.
    max_context_tokens: int = EVALUATION_CONTEXT
    """Tokens of context, the turn's output included: a turn that reaches it ends the loop
    `max_context_len`. Also an in-process model's context (FROGNANO_N_CTX)."""
    max_tokens_per_turn: int = Field(default=8_192, gt=0)
    """Tokens one assistant turn may generate; a turn cut there runs none of its calls."""
    test_timeout: float = Field(default=900.0, gt=0)
    """Seconds one run of the repository's tests may take (baseline or verdict)."""
    setup_timeout: float = Field(default=1200.0, gt=0)
    """Seconds the setup command may take, at most `max_seconds`."""
    turn_timeout: float = Field(default=600.0, gt=0)
    """Seconds one model turn may take, at most what is left of `max_seconds`."""

    def over(self, values: Mapping[str, Any] | Limits) -> Limits:
        """These limits with `values` laid over them: a mapping's values that are not None,
        or another `Limits`' fields that were set (a flag given, not a default)."""
        if isinstance(values, Limits):
            values = {name: getattr(values, name) for name in values.model_fields_set}
        given = {name: value for name, value in values.items() if value is not None}
        return Limits.model_validate({**self.model_dump(), **given})

    def capped(self, max_seconds: float | None) -> Limits:
        """The wall time cut to an operator's ceiling (None: no ceiling)."""
        if max_seconds is None or self.max_seconds <= max_seconds:
            return self
        return self.over({"max_seconds": max_seconds})


# Fast rounds (solver/verdict/huge_suite.py): a baseline of this many tests, or one that
# ran this long, makes a huge suite; between the model's rounds only the tests that tell
# whether the change is worth it run, the whole suite once for the verdict. A smaller
# suite runs whole after every round, as it always did.
FAST_ROUNDS_MIN_TESTS = 5_000
FAST_ROUNDS_MIN_SECONDS = 120.0


def fast_rounds(tests: int, seconds: float) -> bool:
    """Whether a suite whose baseline ran `tests` tests in `seconds` gets fast rounds."""
    return tests >= FAST_ROUNDS_MIN_TESTS or seconds >= FAST_ROUNDS_MIN_SECONDS


PresetName = Literal["evaluation", "agent"]
PRESETS: dict[str, Limits] = {
    "evaluation": Limits(),
    "agent": Limits(max_steps=100, max_context_tokens=AGENT_CONTEXT),
}

# What the KV cache of FrogNano's shape costs per cached token (8 full-attention layers,
# 4 KV heads of 256, K and V; the linear-attention state does not grow with the context):
# 32 KiB in f16 (/work/shared/gpu-notes.md), q8_0 and q4_0 as llama.cpp stores blocks of 32.
KV_BYTES_PER_TOKEN = {"f16": 32 * 1024, "q8_0": 32 * 1024 * 34 // 64,
                      "q4_0": 32 * 1024 * 18 // 64}
# Left for llama.cpp's compute buffers, the CUDA context and the rest of the host.
MEMORY_HEADROOM = 0.10
SMALLEST_CONTEXT = 8_192  # below this a run cannot hold the prompt and a few turns


@dataclass(frozen=True)
class ModelHost:
    """Where an in-process model's weights and KV cache live, as the composition root
    measured it: the smallest GPU it runs on, or the host's memory on the CPU."""

    memory_bytes: int
    where: str  # e.g. "the smallest GPU (GPU 0, 8,192 MiB)"
    weights_bytes: int = 0
    copies: int = 1  # run workers each holding a model there (FROGNANO_RUN_WORKERS_PER_GPU)
    kv_cache_type: str = "f16"


@dataclass(frozen=True)
class ContextChoice:
    tokens: int
    reason: str  # one line, for the log and `frognano doctor`


def _gib(size: float) -> str:
    return f"{size / 2**30:.1f} GiB"


def choose_context(wanted: int, host: ModelHost | None, *, set_by: str | None = None
                   ) -> ContextChoice:
    """`wanted` (the preset's context) halved until each copy's KV cache fits the memory
    left after the weights and a headroom, down to SMALLEST_CONTEXT; `set_by` (the
    setting that named a context) or no measured host keeps `wanted` as it is."""
    if set_by is not None:
        return ContextChoice(wanted, f"{wanted:,} tokens, as {set_by} sets")
    if host is None:
        return ContextChoice(wanted, f"{wanted:,} tokens (the evaluated context): the model "
                                     "is not in this process, its memory is not measured")
    per_token = KV_BYTES_PER_TOKEN.get(host.kv_cache_type, KV_BYTES_PER_TOKEN["f16"])
    free = host.memory_bytes * (1 - MEMORY_HEADROOM) - host.copies * host.weights_bytes
    fits = int(max(free, 0) / host.copies // per_token)
    tokens = wanted
    while tokens > fits and tokens // 2 >= SMALLEST_CONTEXT:
        tokens //= 2
    need = f"{wanted:,} tokens need {_gib(wanted * per_token)} of KV cache " \
           f"({host.kv_cache_type}) per model"
    copies = f"{host.copies} × " if host.copies > 1 else ""
    left = f"{host.where} holds {copies}the weights ({_gib(host.weights_bytes)}) and " \
           f"{_gib(max(free, 0) / host.copies)} of cache each"
    if tokens == wanted:
        return ContextChoice(tokens, f"{tokens:,} tokens: {need}, and {left}")
    short = "" if tokens <= fits else "; even that does not fit, the model may not load"
    return ContextChoice(tokens, f"{tokens:,} tokens, cut from {wanted:,}: {need}, but "
                                 f"{left}{short} (FROGNANO_N_CTX sets one)")
