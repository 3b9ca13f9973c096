"""The tiny random-weight qwen35 GGUF fixture, its chat template, and what
llama-cpp-python 0.3.36 really does with a hybrid (recurrent + attention) model.

Template tests need only jinja2; everything touching a model is skipped when
llama_cpp is not importable.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.gguf_factory import (
    CONTROL_TOKENS,
    SPECIAL_TOKENS,
    USER_DEFINED_TOKENS,
    ChatTemplateError,
    default_chat_template,
    make_tiny_qwen35,
    render_chat_template,
    special_token_ids,
)

SYSTEM_PROMPT = (
    "You are a software-engineering agent working in a checked-out repository.\n"
    "Use the available tools to inspect files, make focused edits, and run commands.\n"
    "Solve the task, validate when practical, then give a brief final answer."
)

EDIT_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "Edit",
        "description": "Replace an exact string in a text file.",
        "parameters": {
            "type": "object",
            "properties": {
                "file_path": {"type": "string", "description": "Path to edit."},
                "old_string": {"type": "string", "description": "Exact text to replace."},
                "new_string": {"type": "string", "description": "Replacement text."},
                "replace_all": {
                    "type": "boolean",
                    "description": "Replace every occurrence instead of requiring one match.",
                },
            },
            "required": ["file_path", "old_string", "new_string"],
        },
    },
}
READ_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "Read",
        "description": "Read a text file. Returns numbered lines.",
        "parameters": {
            "type": "object",
            "properties": {
                "file_path": {"type": "string", "description": "Path to the file to read."},
                "offset": {"type": "integer", "description": "Optional 1-based starting line."},
                "limit": {"type": "integer", "description": "Optional maximum number of lines."},
            },
            "required": ["file_path"],
        },
    },
}
TOOLS = [READ_TOOL, EDIT_TOOL]


def agent_history() -> list[dict[str, Any]]:
    """Two user queries; the second is followed by a two-call turn and its results."""
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": "Fix the subtraction bug."},
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": "old reasoning, dropped on re-render",
            "tool_calls": [
                {
                    "id": "call_0",
                    "type": "function",
                    "function": {"name": "Read", "arguments": {"file_path": "src/app.py"}},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_0", "content": "src/app.py\n1. return a - b\n\n"},
        {"role": "user", "content": "Also replace everywhere."},
        {
            "role": "assistant",
            "content": "Editing now.",
            "reasoning_content": "\nnew reasoning\n",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {
                        "name": "Edit",
                        "arguments": {
                            "file_path": "src/app.py",
                            "old_string": "a - b",
                            "new_string": "a + b",
                            "replace_all": True,
                        },
                    },
                },
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {
                        "name": "Read",
                        "arguments": {"file_path": "src/app.py", "offset": 1, "limit": 5},
                    },
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "Edited src/app.py (1 replacement)."},
        {"role": "tool", "tool_call_id": "call_2", "content": "  src/app.py\n1. return a + b  "},
    ]


# --------------------------------------------------------------------------
# Factory (no llama_cpp needed)
# --------------------------------------------------------------------------


def test_factory_is_deterministic_tiny_and_hybrid(tmp_path: Path) -> None:
    from gguf import GGUFReader

    first = make_tiny_qwen35(tmp_path / "a.gguf", seed=7)
    second = make_tiny_qwen35(tmp_path / "b.gguf", seed=7)
    other = make_tiny_qwen35(tmp_path / "c.gguf", seed=8)
    assert first.read_bytes() == second.read_bytes()
    assert first.read_bytes() != other.read_bytes()
    assert first.stat().st_size < 2_000_000

    reader = GGUFReader(first)
    assert reader.fields["general.architecture"].contents() == "qwen35"
    assert reader.fields["qwen35.full_attention_interval"].contents() == 4
    assert reader.fields["tokenizer.chat_template"].contents() == default_chat_template()
    assert reader.fields["tokenizer.ggml.add_bos_token"].contents() is False
    names = {t.name for t in reader.tensors}
    # Layers 0-2 are Gated-DeltaNet, layer 3 is gated full attention.
    assert {"blk.0.attn_qkv.weight", "blk.0.ssm_a", "blk.2.ssm_out.weight"} <= names
    assert {"blk.3.attn_q.weight", "blk.3.attn_q_norm.weight"} <= names
    assert "blk.3.attn_qkv.weight" not in names


def test_factory_rejects_non_hybrid_layouts(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not hybrid"):
        make_tiny_qwen35(tmp_path / "x.gguf", n_layer=3, full_attention_interval=4)
    with pytest.raises(ValueError, match="not hybrid"):
        make_tiny_qwen35(tmp_path / "x.gguf", n_layer=4, full_attention_interval=1)
    with pytest.raises(ValueError, match="arch"):
        make_tiny_qwen35(tmp_path / "x.gguf", arch="llama")


# --------------------------------------------------------------------------
# Chat template (jinja2 only)
# --------------------------------------------------------------------------


def test_template_puts_tools_in_system_turn_before_prompt() -> None:
    text = render_chat_template(agent_history(), TOOLS)
    system_turn = text.split("<|im_end|>\n", 1)[0]
    assert system_turn.startswith("<|im_start|>system\n# Tools\n")
    tools_block = system_turn.split("<tools>\n", 1)[1].split("\n</tools>", 1)[0]
    # One JSON object per line, key order preserved, no HTML escaping.
    assert [json.loads(line) for line in tools_block.split("\n")] == TOOLS
    assert tools_block.split("\n")[0] == json.dumps(READ_TOOL)
    assert "<tool_call>\n<function=example_function_name>\n<parameter=" in system_turn
    assert system_turn.endswith("</IMPORTANT>\n\n" + SYSTEM_PROMPT)
    assert not text.startswith("<|endoftext|>")


def test_template_renders_history_in_qwen35_shapes() -> None:
    text = render_chat_template(agent_history(), TOOLS)
    after_system = text.split("<|im_end|>\n", 1)[1]
    assert after_system == (
        "<|im_start|>user\nFix the subtraction bug.<|im_end|>\n"
        # Before the last real user message: reasoning dropped, no <think> block.
        "<|im_start|>assistant\n"
        "<tool_call>\n<function=Read>\n<parameter=file_path>\nsrc/app.py\n</parameter>\n"
        "</function>\n</tool_call><|im_end|>\n"
        # Tool result: a user turn, content trimmed.
        "<|im_start|>user\n<tool_response>\nsrc/app.py\n1. return a - b\n</tool_response>"
        "<|im_end|>\n"
        "<|im_start|>user\nAlso replace everywhere.<|im_end|>\n"
        # After it: reasoning kept (trimmed), content, then calls; Python-style True.
        "<|im_start|>assistant\n<think>\nnew reasoning\n</think>\n\nEditing now.\n\n"
        "<tool_call>\n<function=Edit>\n"
        "<parameter=file_path>\nsrc/app.py\n</parameter>\n"
        "<parameter=old_string>\na - b\n</parameter>\n"
        "<parameter=new_string>\na + b\n</parameter>\n"
        "<parameter=replace_all>\nTrue\n</parameter>\n"
        "</function>\n</tool_call>\n"
        "<tool_call>\n<function=Read>\n"
        "<parameter=file_path>\nsrc/app.py\n</parameter>\n"
        "<parameter=offset>\n1\n</parameter>\n"
        "<parameter=limit>\n5\n</parameter>\n"
        "</function>\n</tool_call><|im_end|>\n"
        # Consecutive results share one user turn.
        "<|im_start|>user\n"
        "<tool_response>\nEdited src/app.py (1 replacement).\n</tool_response>\n"
        "<tool_response>\nsrc/app.py\n1. return a + b\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n<think>\n"
    )


def test_template_generation_prompt_variants_and_plain_system() -> None:
    messages = [{"role": "system", "content": " sys "}, {"role": "user", "content": "hi"}]
    base = "<|im_start|>system\nsys<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
    assert render_chat_template(messages) == base + "<|im_start|>assistant\n<think>\n"
    assert render_chat_template(messages, enable_thinking=True) == (
        base + "<|im_start|>assistant\n<think>\n"
    )
    assert render_chat_template(messages, enable_thinking=False) == (
        base + "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )
    assert render_chat_template(messages, add_generation_prompt=False) == base


def test_template_splits_inline_reasoning_and_renders_containers_as_json() -> None:
    messages = [
        {"role": "user", "content": "q"},
        {
            "role": "assistant",
            "content": "<think>\ninline\n</think>\n\nanswer",
            "tool_calls": [
                {"function": {"name": "X", "arguments": {"d": {"k": [1, "<a>"]}, "n": None}}}
            ],
        },
    ]
    text = render_chat_template(messages, add_generation_prompt=False)
    assert text.endswith(
        "<|im_start|>assistant\n<think>\ninline\n</think>\n\nanswer\n\n<tool_call>\n<function=X>\n"
        '<parameter=d>\n{"k": [1, "<a>"]}\n</parameter>\n<parameter=n>\nNone\n</parameter>\n'
        "</function>\n</tool_call><|im_end|>\n"
    )


@pytest.mark.parametrize(
    ("messages", "message"),
    [
        ([{"role": "user", "content": "x"}, {"role": "system", "content": "s"}], "beginning"),
        ([{"role": "user", "content": "x"}, {"role": "robot", "content": "y"}], "role"),
        ([{"role": "system", "content": "s"}], "No user query"),
        ([], "No messages"),
        (
            [
                {"role": "user", "content": "x"},
                {
                    "role": "assistant",
                    "tool_calls": [{"function": {"name": "A", "arguments": "{}"}}],
                },
            ],
            "mapping",
        ),
    ],
)
def test_template_raises_for_bad_conversations(
    messages: list[dict[str, Any]], message: str
) -> None:
    with pytest.raises(ChatTemplateError, match=message):
        render_chat_template(messages)


# --------------------------------------------------------------------------
# llama-cpp-python with the generated model
# --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def llama_cpp() -> Any:
    return pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")


@pytest.fixture
def load(llama_cpp: Any) -> Iterator[Callable[..., Any]]:
    """Fresh Llama instances (~50 ms each for the tiny model), closed afterwards,
    so cache tests never see another test's state."""
    opened: list[Any] = []

    from solver.models.llama_resident import LlamaSettings, _counting_llama_class, uses_cpu_repack

    # llama-cpp-python's Llama, with the one setting its constructor lacks: weight
    # repacking as the project's defaults have it (the AMX path crashes, BENCHMARKS.md).
    llama_class = _counting_llama_class()
    repack = uses_cpu_repack(LlamaSettings())

    def _load(path: Path, **kwargs: Any) -> Any:
        kwargs.setdefault("n_ctx", 2048)
        kwargs.setdefault("verbose", False)
        llm = llama_class(model_path=str(path), use_extra_bufts=repack,
                          flash_attn_type=llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED, **kwargs)
        opened.append(llm)
        return llm

    yield _load
    for llm in opened:
        llm.close()


class EvalRecorder:
    """Records what Llama.eval is asked to decode and whether the state was reset:
    that is what llama-cpp-python's prefix reuse decides, independent of timing."""

    def __init__(self, llm: Any) -> None:
        self.evals: list[int] = []
        self.resets = 0
        original_eval, original_reset = llm.eval, llm.reset

        def eval_(tokens: Any) -> None:
            self.evals.append(len(tokens))
            original_eval(tokens)

        def reset() -> None:
            self.resets += 1
            original_reset()

        # generate() calls self.eval / self.reset, so instance attributes win.
        llm.eval, llm.reset = eval_, reset

    def clear(self) -> None:
        self.evals.clear()
        self.resets = 0

    @property
    def prompt_eval(self) -> int:
        """Tokens decoded before the first sample (the prompt part)."""
        return self.evals[0] if self.evals else 0


def first_token(llm: Any, tokens: list[int]) -> int:
    """Run generate() until its first sampled token: only the prompt is decoded."""
    for token in llm.generate(tokens, temp=0.0, top_k=1):
        return int(token)
    raise AssertionError("generate() produced nothing")


def test_tiny_qwen35_loads_with_metadata_and_template(
    load: Callable[..., Any], tiny_qwen35_gguf: Path, llama_cpp: Any
) -> None:
    started = time.perf_counter()
    llm = load(tiny_qwen35_gguf)
    assert time.perf_counter() - started < 5
    assert llm.metadata["general.architecture"] == "qwen35"
    assert llm.metadata["tokenizer.chat_template"] == default_chat_template()
    assert llama_cpp.llama_model_is_hybrid(llm.model)
    assert not llama_cpp.llama_model_is_recurrent(llm.model)
    assert llm.token_eos() == special_token_ids()["<|im_end|>"]
    # No BOS is ever added.
    assert llm.tokenize(b"hi", add_bos=True) == llm.tokenize(b"hi", add_bos=False) == [104, 105]


def test_tiny_qwen3_twin_loads(load: Callable[..., Any], tiny_qwen3_gguf: Path) -> None:
    llm = load(tiny_qwen3_gguf)
    assert llm.metadata["general.architecture"] == "qwen3"
    assert not llm._is_hybrid
    assert len(llm.create_completion("abc", max_tokens=3, temperature=0.0)["choices"]) == 1


def test_special_tokens_are_single_tokens(
    load: Callable[..., Any], tiny_qwen35_gguf: Path
) -> None:
    llm = load(tiny_qwen35_gguf)
    ids = special_token_ids()
    for text in SPECIAL_TOKENS:
        assert llm.tokenize(text.encode(), add_bos=False, special=True) == [ids[text]], text
    # Like the real Qwen vocab: think/tool tags are user-defined (always parsed,
    # always printed); ChatML tokens are control (parsed and printed only on request).
    for text in USER_DEFINED_TOKENS:
        assert llm.tokenize(text.encode(), add_bos=False, special=False) == [ids[text]]
        assert llm.detokenize([ids[text]]) == text.encode()
    for text in CONTROL_TOKENS:
        assert len(llm.tokenize(text.encode(), add_bos=False, special=False)) > 1
        assert llm.detokenize([ids[text]]) == b""
        assert llm.detokenize([ids[text]], special=True) == text.encode()


def test_rendered_prompt_round_trips_through_the_tokenizer(
    load: Callable[..., Any], tiny_qwen35_gguf: Path
) -> None:
    llm = load(tiny_qwen35_gguf)
    text = render_chat_template(agent_history(), TOOLS)
    tokens = llm.tokenize(text.encode(), add_bos=False, special=True)
    assert llm.detokenize(tokens, special=True).decode() == text
    ids = special_token_ids()
    assert tokens[0] == ids["<|im_start|>"]
    assert tokens[-3:] == [10, ids["<think>"], 10]
    assert tokens.count(ids["<tool_response>"]) == 3


def test_llama_cpp_jinja_formatter_matches_reference_rendering(llama_cpp: Any) -> None:
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    formatter = Jinja2ChatFormatter(
        template=default_chat_template(), eos_token="<|im_end|>", bos_token=""
    )
    prompt = formatter(messages=agent_history(), tools=TOOLS).prompt
    assert prompt == render_chat_template(agent_history(), TOOLS)


def test_generation_and_stop_at_im_end(
    load: Callable[..., Any], tiny_qwen35_gguf: Path
) -> None:
    import numpy as np

    llm = load(tiny_qwen35_gguf)
    im_end = special_token_ids()["<|im_end|>"]
    prompt = render_chat_template([{"role": "user", "content": "Hello"}])
    tokens = llm.tokenize(prompt.encode(), add_bos=False, special=True)

    out = llm.create_completion(tokens, max_tokens=8, temperature=0.0, logit_bias={im_end: -100})
    assert out["choices"][0]["finish_reason"] == "length"
    assert out["usage"]["completion_tokens"] == 8

    # <|im_end|> is EOG: generation stops on it and it is not part of the text.
    out = llm.create_completion(tokens, max_tokens=8, temperature=0.0, logit_bias={im_end: 100})
    assert out["choices"][0]["finish_reason"] == "stop"
    assert out["choices"][0]["text"] == ""

    # Force it after three tokens instead, through the raw token generator.
    generated: list[int] = []

    def force_after_three(input_ids: Any, scores: Any) -> Any:
        if len(generated) >= 3:
            scores = np.full_like(scores, -np.inf)
            scores[im_end] = 0.0
        return scores

    for token in llm.generate(tokens, temp=0.0, top_k=1, logits_processor=[force_after_three]):
        generated.append(int(token))
        if token == im_end:
            break
    assert len(generated) == 4
    assert generated[-1] == im_end


def test_chat_completion_uses_embedded_template(
    load: Callable[..., Any], tiny_qwen35_gguf: Path
) -> None:
    llm = load(tiny_qwen35_gguf)
    assert llm.chat_format == "chat_template.default"
    im_end = special_token_ids()["<|im_end|>"]
    out = llm.create_chat_completion(
        messages=[{"role": "user", "content": "Hello"}],
        max_tokens=4,
        temperature=0.0,
        logit_bias={im_end: -100},
    )
    assert out["choices"][0]["finish_reason"] == "length"
    prompt = render_chat_template([{"role": "user", "content": "Hello"}])
    assert out["usage"]["prompt_tokens"] == len(
        llm.tokenize(prompt.encode(), add_bos=False, special=True)
    )


# --------------------------------------------------------------------------
# Contract §6: prefix reuse with the hybrid model
# --------------------------------------------------------------------------


def long_prompt(llm: Any) -> list[int]:
    return llm.tokenize(("hello world " * 40).encode(), add_bos=False)


def test_hybrid_cache_reuses_strict_extensions_only(
    load: Callable[..., Any], tiny_qwen35_gguf: Path
) -> None:
    llm = load(tiny_qwen35_gguf)
    recorder = EvalRecorder(llm)
    prefix = long_prompt(llm)
    suffix = llm.tokenize(b" and more text", add_bos=False)
    llm.eval(prefix)
    assert llm.n_tokens == len(prefix)

    # Strict extension: only the suffix is decoded, no reset.
    recorder.clear()
    first_token(llm, prefix + suffix)
    assert (recorder.resets, recorder.prompt_eval) == (0, len(suffix))
    assert llm.n_tokens == len(prefix) + len(suffix)

    # Previous prompt + the sampled token + a new suffix: still an extension (the
    # agent-loop case: append tokens instead of re-rendering the template).
    recorder.clear()
    cached = list(llm._input_ids)
    first_token(llm, [*cached, 1, *suffix])
    assert (recorder.resets, recorder.prompt_eval) == (0, 1 + len(suffix))

    # Diverging five tokens before the end: the recurrent state cannot roll back,
    # llama_memory_seq_rm fails, and generate() resets and re-decodes everything.
    recorder.clear()
    cached = list(llm._input_ids)
    diverged = cached[:-5] + suffix
    first_token(llm, diverged)
    assert (recorder.resets, recorder.prompt_eval) == (1, len(diverged))

    # The exact cached prompt with live logits samples without decoding anything.
    recorder.clear()
    llm.eval(suffix)
    cached = list(llm._input_ids)
    recorder.clear()
    first_token(llm, cached)
    assert (recorder.resets, recorder.prompt_eval) == (0, 0)


def test_completion_turns_that_append_tokens_only_decode_the_new_part(
    load: Callable[..., Any], tiny_qwen35_gguf: Path
) -> None:
    import numpy as np

    llm = load(tiny_qwen35_gguf)
    recorder = EvalRecorder(llm)
    im_end = special_token_ids()["<|im_end|>"]
    produced = 0

    def stop_after_three(input_ids: Any, scores: Any) -> Any:
        nonlocal produced
        produced += 1
        if produced > 3:
            scores = np.full_like(scores, -np.inf)
            scores[im_end] = 0.0
        return scores

    prompt = render_chat_template([{"role": "user", "content": "Fix it. " * 50}])
    history = llm.tokenize(prompt.encode(), add_bos=False, special=True)
    tool_turn = llm.tokenize(
        b"\n<|im_start|>user\n<tool_response>\nok\n</tool_response><|im_end|>\n"
        b"<|im_start|>assistant\n<think>\n",
        add_bos=False,
        special=True,
    )
    prompt_evals = []
    for _ in range(3):
        produced = 0
        recorder.clear()
        out = llm.create_completion(
            history, max_tokens=16, temperature=0.0, logits_processor=[stop_after_three]
        )
        assert out["choices"][0]["finish_reason"] == "stop"
        prompt_evals.append((recorder.resets, recorder.prompt_eval))
        # The cache holds prompt + generated tokens except the final <|im_end|>,
        # which was sampled but never decoded; the next prompt appends it.
        assert len(llm._input_ids) == len(history) + 3
        history = [*llm._input_ids, im_end, *tool_turn]
    first = len(llm.tokenize(prompt.encode(), add_bos=False, special=True))
    # (A fresh context is reset once before the first prompt.)
    assert prompt_evals == [(1, first), (0, 1 + len(tool_turn)), (0, 1 + len(tool_turn))]


def test_plain_transformer_reuses_prefix_on_divergence(
    load: Callable[..., Any], tiny_qwen3_gguf: Path
) -> None:
    llm = load(tiny_qwen3_gguf)
    recorder = EvalRecorder(llm)
    prefix = long_prompt(llm)
    suffix = llm.tokenize(b" and more text", add_bos=False)
    llm.eval(prefix)
    recorder.clear()
    first_token(llm, prefix[:-5] + suffix)
    # The KV cache is truncated at the divergence point instead.
    assert (recorder.resets, recorder.prompt_eval) == (0, len(suffix))


def test_hybrid_state_snapshot_one_token_before_the_end(
    load: Callable[..., Any], tiny_qwen35_gguf: Path, llama_cpp: Any
) -> None:
    import numpy as np

    llm = load(tiny_qwen35_gguf)
    n_vocab = llm.n_vocab()

    def last_logits() -> Any:
        return np.ctypeslib.as_array(
            llama_cpp.llama_get_logits_ith(llm.ctx, -1), shape=(n_vocab,)
        ).copy()

    prompt = long_prompt(llm)
    llm.eval(prompt)
    reference = last_logits()

    llm.reset()
    llm.eval(prompt[:-1])
    before_end = llm.save_state()
    llm.eval(prompt[-1:])
    at_end = llm.save_state()
    # Hybrid state = attention KV cells + recurrent conv/ssm states; tiny here.
    assert before_end.llama_state_size < 1_000_000

    # Pollute the context, then restore: the snapshot is complete.
    llm.reset()
    llm.eval(llm.tokenize(b"something else entirely", add_bos=False))
    llm.load_state(before_end)
    llm.eval(prompt[-1:])
    # Same maths up to float summation order (479 + 1 tokens vs one batch of 480).
    assert np.allclose(last_logits(), reference, atol=1e-4)

    recorder = EvalRecorder(llm)
    # Retrying the turn from the "one before the end" snapshot: 1 token decoded.
    llm.load_state(before_end)
    recorder.clear()
    first_token(llm, prompt)
    assert (recorder.resets, recorder.prompt_eval) == (0, 1)

    # From a snapshot AT the end, generate() has no live logits, wants to replay the
    # last token, needs a 1-token rollback, cannot do it: full re-evaluation.
    llm.load_state(at_end)
    recorder.clear()
    first_token(llm, prompt)
    assert (recorder.resets, recorder.prompt_eval) == (1, len(prompt))


# --------------------------------------------------------------------------
# The real (non-Qwen) Gemma GGUF
# --------------------------------------------------------------------------


def test_real_gemma_gguf_loads_and_generates(
    load: Callable[..., Any], gemma_gguf: Path
) -> None:
    started = time.perf_counter()
    llm = load(gemma_gguf, n_ctx=512)
    loaded = time.perf_counter()
    out = llm.create_completion("The capital of France is", max_tokens=8, temperature=0.0)
    finished = time.perf_counter()
    assert llm.metadata["general.architecture"] == "gemma3"
    assert "tokenizer.chat_template" not in llm.metadata
    assert out["usage"]["completion_tokens"] >= 1
    assert out["choices"][0]["text"].strip()
    timings = f"load {loaded - started:.1f}s, generate {finished - loaded:.1f}s"
    assert finished - started < 20, timings
