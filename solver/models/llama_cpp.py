"""FrogNano in process with llama-cpp-python.

Why the prompt is handled at the token level (docs/LEAF_CONTRACT.md §6): FrogNano is a
hybrid recurrent model, and llama.cpp cannot roll a recurrent state back. A
prompt that diverges from the cached tokens anywhere before their end is
re-evaluated from scratch, so re-rendering the template every turn costs O(n²)
over a run. Instead the next prompt is the previous prompt + the tokens as
generated + the new suffix (end of turn, tool results, next assistant header),
which the model only has to evaluate the suffix of. The suffix text comes from
the GGUF's own template, never from a hand-written copy of it.
"""

from __future__ import annotations

import codecs
import json
import random
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from solver.models.base import (
    ContextOverflow,
    ModelLoadError,
    ModelQueryError,
    Sampling,
    Turn,
    TurnBudget,
    TurnCutOff,
    Usage,
)
from solver.models.chat_template import ChatTemplateError, normalize_messages, render_chat_template
from solver.models.llama_resident import (
    LlamaSettings,
    RecoveryMode,
    ResidentModel,
    SamplerChain,
    Snapshot,
    load_resident,
)
from solver.models.qwen3coder import new_call_id, parse_assistant_text

__all__ = ["LlamaCppModel", "LlamaSettings"]

PromptPath = str  # "first" | "append" | "retry" | "full"


@dataclass
class _Conversation:
    """What the previous `complete` call sent and produced, to extend it next time."""

    messages: list[dict[str, Any]]
    key: str  # tools and thinking mode: a change means a different system turn
    prompt: list[int]
    snapshot: Snapshot | None  # the context holding prompt[:-1]
    generated: list[int] | None = None  # None until the turn succeeded; stop token excluded
    stop_token: int | None = None
    assistant: dict[str, Any] | None = None


@dataclass
class _Plan:
    tokens: list[int]
    path: PromptPath
    continuation: bool  # the conversation already holds an assistant turn
    notes: list[str] = field(default_factory=list)


@dataclass
class _Generation:
    tokens: list[int]
    text: str
    stop_token: int | None
    evaluated: int
    prompt_seconds: float
    completion_seconds: float
    reset: bool
    notes: list[str]
    timed_out: bool = False  # the turn's time ran out before its end-of-turn token


class LlamaCppModel:
    """A `ModelClient` running a GGUF in this process.

    `seed` is the seed actually used (drawn when `sampling.seed` is None), for the
    transcript. `chat_template` overrides the GGUF's embedded one (for GGUFs that
    carry none); `grammar` (GBNF) and `logit_bias` constrain decoding. `recovery` is what
    each turn keeps to retry a failed decode (`ResidentModel.snapshot`): "partial" (the
    recurrent state only), "full" (the whole context state, for comparison) or None.
    """

    def __init__(self, model_path: str | Path, *, settings: LlamaSettings | None = None,
                 sampling: Sampling | None = None, chat_template: str | None = None,
                 grammar: str | None = None, logit_bias: Mapping[int, float] | None = None,
                 recovery: RecoveryMode | None = "partial") -> None:
        self.settings = settings or LlamaSettings()
        self.sampling = sampling or Sampling()
        self.seed = (self.sampling.seed if self.sampling.seed is not None
                     else random.SystemRandom().randrange(2**31))
        self.resident: ResidentModel = load_resident(model_path, self.settings)
        self.name = f"llama-cpp:{self.resident.path.name}"
        template = chat_template or self.resident.llm.metadata.get("tokenizer.chat_template")
        if not template:
            raise ModelLoadError(
                f"{self.resident.path} has no chat template (tokenizer.chat_template); the prompt "
                "format of the model is unknown. Pass a Jinja template file (frognano solve "
                "--chat-template FILE, or FROGNANO_CHAT_TEMPLATE), use a GGUF converted with its "
                "template, or serve it with a server that has one and pass the server URL")
        self.chat_template = template
        self.recovery = recovery
        self.last_prompt_path: PromptPath | None = None
        self._grammar_text = grammar
        self._logit_bias = dict(logit_bias or {})
        self._conversation: _Conversation | None = None
        self._turns = 0

    # --- the seam ------------------------------------------------------------------------------

    def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                 budget: TurnBudget) -> Turn:
        with self.resident.lock:
            return self._complete(normalize_messages(messages), tools, budget)

    def _complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                  budget: TurnBudget) -> Turn:
        key = json.dumps([tools, self.sampling.enable_thinking], sort_keys=True)
        plan = self._plan(messages, tools, key)
        n_ctx = self.resident.n_ctx
        if len(plan.tokens) >= n_ctx:
            raise ContextOverflow(
                f"the prompt has {len(plan.tokens)} tokens and the context window holds {n_ctx}")
        self.last_prompt_path = plan.path
        started = time.perf_counter()
        resets_before = self.resident.llm.resets
        evaluated_before = self.resident.llm.tokens_evaluated
        snapshot = self._prepare_context(plan)
        prepared = time.perf_counter()
        prepared_evaluated = self.resident.llm.tokens_evaluated - evaluated_before
        self._conversation = _Conversation(messages, key, plan.tokens, snapshot)
        generation = self._generate_with_retry(plan.tokens, budget, n_ctx - len(plan.tokens))

        parsed = parse_assistant_text(generation.text, tools, new_call_id,
                                      thinking=self.sampling.enable_thinking)
        capped = generation.stop_token is None
        turn = Turn(
            content=parsed.content,
            reasoning=parsed.reasoning,
            tool_calls=parsed.tool_calls,
            usage=Usage(
                prompt_tokens=len(plan.tokens),
                prompt_tokens_evaluated=prepared_evaluated + generation.evaluated,
                completion_tokens=len(generation.tokens) + (0 if capped else 1),
                prompt_seconds=(prepared - started) + generation.prompt_seconds,
                completion_seconds=generation.completion_seconds,
                full_reevaluation=plan.continuation and (
                    self.resident.llm.resets > resets_before or generation.reset),
            ),
            finish_reason="length" if capped else ("tool_calls" if parsed.tool_calls else "stop"),
            raw_text=generation.text,
            errors=parsed.errors,
            notes=plan.notes + generation.notes,
        )
        conversation = self._conversation
        conversation.generated = generation.tokens
        conversation.stop_token = generation.stop_token
        conversation.assistant = normalize_messages([turn.to_message()])[0]
        if generation.timed_out:
            # The partial text goes with the error: it is what tells a template that does
            # not fit (thousands of tokens, never an end of turn) from a slow model.
            raise TurnCutOff(f"generation timed out after {budget.timeout:g}s "
                             f"({len(generation.tokens)} tokens)", partial=turn)
        return turn

    # --- the prompt ----------------------------------------------------------------------------

    def _plan(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
              key: str) -> _Plan:
        continuation = any(message.get("role") == "assistant" for message in messages)
        previous = self._conversation
        notes: list[str] = []
        if previous is not None and previous.key == key:
            if messages == previous.messages:
                return _Plan(previous.prompt, "retry", continuation)
            if previous.generated is not None:
                suffix = self._suffix_tokens(messages, tools, previous)
                if suffix is not None:
                    tokens = previous.prompt + previous.generated + suffix
                    return _Plan(tokens, "append", continuation)
                notes.append("the history does not extend the previous turn: "
                             "prompt re-rendered in full")
        elif previous is not None:
            notes.append("the tools or thinking mode changed: prompt re-rendered in full")
        text = self._render(messages, tools)
        return _Plan(self.tokenize(text), "full" if continuation else "first", continuation, notes)

    def _suffix_tokens(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                       previous: _Conversation) -> list[int] | None:
        """The tokens after the generated ones, or None when `messages` do not extend the
        previous call by its own assistant turn plus non-assistant messages."""
        n = len(previous.messages)
        new = messages[n + 1:]
        if (len(messages) <= n + 1 or messages[:n] != previous.messages
                or not _same_assistant(messages[n], previous.assistant or {})
                or any(message.get("role") == "assistant" for message in new)):
            return None
        # Render the new messages behind a placeholder assistant turn: whatever the
        # template writes after the placeholder is the suffix, end of turn included.
        marker = f"FROGNANO-TURN-{uuid.uuid4().hex}"
        placeholder = {"role": "assistant", "content": marker}
        text = self._render([*messages[:n], placeholder, *new], tools)
        at = text.find(marker)
        if at < 0 or text.count(marker) != 1:
            return None
        suffix = self.tokenize(text[at + len(marker):])
        if not suffix:
            return None
        expected_end = previous.stop_token
        if expected_end is not None and suffix[0] != expected_end:
            return None
        if expected_end is None and not self.resident.is_end_of_generation(suffix[0]):
            return None  # a capped turn must be closed by the template's end-of-turn token
        return suffix

    def render_prompt(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
        """The whole prompt as the template renders it (what a first turn sends)."""
        return self._render(normalize_messages(messages), tools)

    def _render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
        try:
            return render_chat_template(
                self.chat_template, messages, tools or None, add_generation_prompt=True,
                bos_token=self.resident.bos_text, eos_token=self.resident.eos_text,
                enable_thinking=self.sampling.enable_thinking)
        except ChatTemplateError as exc:
            raise ModelQueryError(f"the chat template rejected the conversation: {exc}") from None

    def tokenize(self, text: str) -> list[int]:
        # The template writes the BOS text itself where the model wants one.
        return self.resident.llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)

    def _prepare_context(self, plan: _Plan) -> Snapshot | None:
        """Bring the context to the prompt minus its last token, and snapshot it there:
        a snapshot at the very end would leave no live logits, and llama-cpp-python
        would then re-evaluate everything to get them."""
        target = plan.tokens[:-1]
        previous = self._conversation
        resident = self.resident
        if (plan.path == "retry" and previous is not None and previous.snapshot is not None
                and previous.snapshot.tokens == target):
            resident.restore(previous.snapshot)
            return previous.snapshot
        resident.extend_to(target)
        return resident.snapshot(self.recovery) if self.recovery else None

    # --- generation ----------------------------------------------------------------------------

    def _generate_with_retry(self, prompt: list[int], budget: TurnBudget,
                             room: int) -> _Generation:
        snapshot = self._conversation.snapshot if self._conversation else None
        try:
            return self._generate(prompt, budget, room)
        except RuntimeError as exc:  # llama_decode failed (out of memory, a backend error)
            if snapshot is None:
                raise ModelQueryError(f"llama.cpp failed while generating: {exc}") from None
            first_error = str(exc)
        self.resident.restore(snapshot)
        try:
            generation = self._generate(prompt, budget, room)
        except RuntimeError as exc:
            raise ModelQueryError(
                f"llama.cpp failed twice while generating: {first_error}; then {exc}") from None
        generation.notes.append(f"retried from the state snapshot after: {first_error}")
        return generation

    def _generate(self, prompt: list[int], budget: TurnBudget, room: int) -> _Generation:
        llm = self.resident.llm
        sampling = self.sampling
        self._turns += 1
        seed = (self.seed + self._turns - 1) % 2**32
        llm.set_seed(seed)
        resets_before = llm.resets
        limit = min(budget.max_tokens, room)
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        raw = bytearray()
        pieces: list[str] = []
        generated: list[int] = []
        stop_token: int | None = None
        started = time.perf_counter()
        first_token_at: float | None = None
        evaluated_before = llm.tokens_evaluated
        evaluated = 0
        timed_out = False
        report = budget.on_tokens or (lambda count: None)
        # Every knob explicit, in the evaluation engine's order: llama-cpp-python's
        # defaults and its temperature-last chain differ (docs/LEAF_CONTRACT.md §4).
        llm.sampler_chain = SamplerChain(
            temperature=sampling.temperature, top_k=sampling.top_k, top_p=sampling.top_p,
            min_p=sampling.min_p, seed=seed,
            repetition_penalty=sampling.repetition_penalty,
            logit_bias=tuple(self._logit_bias.items()), grammar=self._grammar())
        tokens = llm.generate(prompt)  # its sampler is built from llm.sampler_chain
        try:
            for token in tokens:
                if first_token_at is None:
                    first_token_at = time.perf_counter()
                    evaluated = llm.tokens_evaluated - evaluated_before
                if self.resident.is_end_of_generation(token):
                    stop_token = int(token)
                    break
                generated.append(int(token))
                piece = self.resident.token_bytes(int(token))
                raw += piece
                pieces.append(decoder.decode(piece))
                report(len(generated))
                if len(generated) >= limit:
                    break
                if time.perf_counter() - started > budget.timeout:
                    timed_out = True
                    break
        finally:
            tokens.close()
            llm.sampler_chain = None
        pieces.append(decoder.decode(b"", final=True))
        finished = time.perf_counter()
        notes = _utf8_notes(bytes(raw))
        if stop_token is None and limit < budget.max_tokens and len(generated) >= limit:
            notes.append(f"the context window ({self.resident.n_ctx} tokens) is full")
        first = first_token_at if first_token_at is not None else finished
        return _Generation(tokens=generated, text="".join(pieces), stop_token=stop_token,
                           evaluated=evaluated, prompt_seconds=first - started,
                           completion_seconds=finished - first,
                           reset=llm.resets > resets_before, notes=notes, timed_out=timed_out)

    def _grammar(self) -> Any:
        if self._grammar_text is None:
            return None
        from llama_cpp import LlamaGrammar

        return LlamaGrammar.from_string(self._grammar_text, verbose=False)


def _utf8_notes(raw: bytes) -> list[str]:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return [f"the generated text is not valid UTF-8 ({exc.reason} at byte "
                f"{exc.start}); invalid bytes were replaced with U+FFFD"]
    return []


def _same_assistant(message: Mapping[str, Any], ours: Mapping[str, Any]) -> bool:
    """Whether the harness sent back the turn we generated (ids may differ)."""
    def calls(m: Mapping[str, Any]) -> list[tuple[Any, Any]]:
        return [((c.get("function") or {}).get("name"), (c.get("function") or {}).get("arguments"))
                for c in m.get("tool_calls") or []]

    return (message.get("role") == "assistant"
            and (message.get("content") or "").strip() == (ours.get("content") or "").strip()
            and (message.get("reasoning_content") or "").strip()
            == (ours.get("reasoning_content") or "").strip()
            and calls(message) == calls(ours))
