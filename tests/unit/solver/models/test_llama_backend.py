"""The in-process llama-cpp-python backend, with real inference (no mocks of llama.cpp).

The tiny random-weight qwen35 GGUF (hybrid, like FrogNano) exercises loading,
the embedded template, stop tokens, token-level history and state snapshots; a
GBNF grammar makes its otherwise random output a well-formed Qwen3-Coder tool
call, so parsing is tested on text that really came out of the sampler. The
real Gemma 270M GGUF shows that a production model loads and generates.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import os
import re
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.support.paths import FIXTURES

pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")

from solver.models import ModelSpec, ModelSpecError, build_model
from solver.models.base import (
    ContextOverflow,
    ModelLoadError,
    ModelQueryError,
    Sampling,
    TurnBudget,
)
from solver.models.chat_template import load_chat_template
from solver.models.llama_cpp import LlamaCppModel, LlamaSettings
from solver.models.llama_resident import load_resident, resident_models, unload_all
from tests.support.gguf_factory import make_tiny_qwen35, render_chat_template, special_token_ids
from tests.unit.solver.models.test_tiny_gguf import SYSTEM_PROMPT, TOOLS

SETTINGS = LlamaSettings(n_ctx=4096, n_threads=2)
READ_CALL_TEXT = (
    "Let me read it.\n</think>\n\n<tool_call>\n<function=Read>\n"
    "<parameter=file_path>\nsrc/app.py\n</parameter>\n<parameter=limit>\n5\n</parameter>\n"
    "</function>\n</tool_call>"
)
READ_CALL_GRAMMAR = "root ::= " + '"' + READ_CALL_TEXT.replace("\n", "\\n") + '"'
IM_END = special_token_ids()["<|im_end|>"]


def task() -> list[dict[str, Any]]:
    return [{"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": "Fix the subtraction bug in src/app.py."}]


def reading_model(path: Path, seed: int = 1) -> LlamaCppModel:
    return LlamaCppModel(path, settings=SETTINGS, sampling=Sampling(seed=seed),
                         grammar=READ_CALL_GRAMMAR)


def run_session(model: LlamaCppModel, turns: int) -> tuple[list[dict[str, Any]], list[Any]]:
    """An agent loop: each turn's call is answered by a tool result."""
    messages, results = task(), []
    for index in range(turns):
        turn = model.complete(messages, TOOLS, TurnBudget(max_tokens=400))
        results.append(turn)
        messages += [turn.to_message(),
                     {"role": "tool", "tool_call_id": turn.tool_calls[0].id,
                      "content": f"src/app.py\n{index + 1}. return a - b"}]
    return messages, results


# --- template, parsing, stop ---------------------------------------------------------------


def test_prompt_is_the_embedded_template_with_tools(tiny_qwen35_gguf: Path) -> None:
    model = LlamaCppModel(tiny_qwen35_gguf, settings=SETTINGS, sampling=Sampling(seed=3),
                          logit_bias={IM_END: 100.0})
    assert model.name == "llama-cpp:tiny-qwen35.gguf"
    assert model.seed == 3
    text = model.render_prompt(task(), TOOLS)
    assert text == render_chat_template(task(), TOOLS)
    assert '{"type": "function", "function": {"name": "Read"' in text
    turn = model.complete(task(), TOOLS, TurnBudget(max_tokens=8))
    assert turn.usage.prompt_tokens == len(model.tokenize(text))
    no_thinking = LlamaCppModel(tiny_qwen35_gguf, settings=SETTINGS,
                                sampling=Sampling(enable_thinking=False))
    assert no_thinking.render_prompt(task(), TOOLS).endswith("<think>\n\n</think>\n\n")
    assert isinstance(no_thinking.seed, int)  # drawn, to be written to the transcript


def test_stops_at_im_end_and_caps_at_max_tokens(tiny_qwen35_gguf: Path) -> None:
    stopping = LlamaCppModel(tiny_qwen35_gguf, settings=SETTINGS, logit_bias={IM_END: 100.0})
    turn = stopping.complete(task(), TOOLS, TurnBudget(max_tokens=8))
    assert (turn.finish_reason, turn.usage.completion_tokens, turn.raw_text) == ("stop", 1, "")

    capped = LlamaCppModel(tiny_qwen35_gguf, settings=SETTINGS, logit_bias={IM_END: -100.0})
    turn = capped.complete(task(), TOOLS, TurnBudget(max_tokens=5))
    assert (turn.finish_reason, turn.usage.completion_tokens) == ("length", 5)
    assert turn.usage.completion_seconds > 0 and turn.usage.prompt_seconds > 0


def test_generated_tool_call_is_parsed_with_schema_types(tiny_qwen35_gguf: Path) -> None:
    turn = reading_model(tiny_qwen35_gguf).complete(task(), TOOLS, TurnBudget(max_tokens=400))
    assert turn.raw_text == READ_CALL_TEXT
    assert turn.finish_reason == "tool_calls"
    assert turn.reasoning == "Let me read it."
    assert [(call.name, call.arguments) for call in turn.tool_calls] == [
        ("Read", {"file_path": "src/app.py", "limit": 5})]
    assert turn.errors == [] and turn.notes == []


def test_invalid_utf8_is_replaced_and_noted(tiny_qwen35_gguf: Path) -> None:
    # Token 255 is the lone byte 0xFF, which no UTF-8 text contains.
    model = LlamaCppModel(tiny_qwen35_gguf, settings=SETTINGS, logit_bias={255: 100.0})
    turn = model.complete(task(), TOOLS, TurnBudget(max_tokens=3))
    assert turn.raw_text == "\ufffd" * 3
    assert any("not valid UTF-8" in note for note in turn.notes)


# --- sampling order ------------------------------------------------------------------------

DRAWS = 2000
A, B = ord("a"), ord("b")  # byte tokens: id == byte value


def two_token_bias(path: Path, p_a: float) -> dict[int, float]:
    """A logit bias that turns the model's next-token distribution after `task()` into
    exactly {a: p_a, b: 1 - p_a}: the raw logits are measured, then shifted."""
    import llama_cpp
    import numpy as np

    model = LlamaCppModel(path, settings=SETTINGS)
    llm = model.resident.llm
    model.resident.extend_to(model.tokenize(model.render_prompt(task(), TOOLS)))
    logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, -1),
                                   shape=(llm.n_vocab(),))
    bias = dict.fromkeys(range(llm.n_vocab()), -1e4)
    bias[A] = math.log(p_a) - float(logits[A])
    bias[B] = math.log(1 - p_a) - float(logits[B])
    return bias


def draw_first_tokens(path: Path, bias: dict[int, float]) -> Counter[str]:
    """`DRAWS` first tokens through the backend (each draw a retry of the same turn)."""
    model = LlamaCppModel(path, settings=SETTINGS, sampling=Sampling(seed=11), logit_bias=bias)
    return Counter(model.complete(task(), TOOLS, TurnBudget(max_tokens=1)).raw_text
                   for _ in range(DRAWS))


def draw_with_stock_chain(path: Path, bias: dict[int, float]) -> Counter[str]:
    """The same draws with llama-cpp-python's own chain: top-k, top-p, min-p, then T."""
    import llama_cpp

    stock = llama_cpp.Llama(model_path=str(path), n_ctx=4096, n_threads=2, verbose=False)
    ids = list(bias)
    shift = [bias[i] for i in ids]

    def add_bias(_ids: Any, scores: Any) -> Any:
        scores[ids] += shift
        return scores

    prompt = stock.tokenize(render_chat_template(task(), TOOLS).encode(), add_bos=False,
                            special=True)
    counts: Counter[str] = Counter()
    for draw in range(DRAWS):
        stock.set_seed(draw)
        tokens = stock.generate(prompt, temp=0.6, top_p=0.95, top_k=20, min_p=0.0,
                                logits_processor=[add_bias])
        counts[stock.detokenize([next(tokens)]).decode()] += 1
        tokens.close()
    stock.close()
    return counts


def test_temperature_comes_before_top_p_as_in_vllm(tiny_qwen35_gguf: Path) -> None:
    # p = .947/.053 at T = 0.6 is .9919/.0081: vLLM's nucleus (top_p .95) keeps `a` alone.
    bias = two_token_bias(tiny_qwen35_gguf, 0.947)
    assert draw_first_tokens(tiny_qwen35_gguf, bias) == {"a": DRAWS}
    # llama-cpp-python's order cuts the nucleus before the temperature: both survive,
    # and `b` comes up at its tempered rate (expected 16 of 2000).
    stock = draw_with_stock_chain(tiny_qwen35_gguf, bias)
    assert set(stock) == {"a", "b"}
    assert 4 <= stock["b"] <= 35


def test_temperature_shapes_the_distribution(tiny_qwen35_gguf: Path) -> None:
    # p = .7/.3 at T = 0.6 is .804/.196 (both inside the nucleus); at T = 1 it would stay .7.
    counts = draw_first_tokens(tiny_qwen35_gguf, two_token_bias(tiny_qwen35_gguf, 0.7))
    tempered = 0.7 ** (1 / 0.6) / (0.7 ** (1 / 0.6) + 0.3 ** (1 / 0.6))
    sigma = math.sqrt(DRAWS * tempered * (1 - tempered))
    assert set(counts) == {"a", "b"}
    assert abs(counts["a"] - DRAWS * tempered) < 4.5 * sigma


# --- token-level history -------------------------------------------------------------------


def test_append_only_history_evaluates_only_the_new_suffix(tiny_qwen35_gguf: Path) -> None:
    model = reading_model(tiny_qwen35_gguf)
    messages, turns = run_session(model, 5)
    first = turns[0].usage
    assert first.prompt_tokens_evaluated == first.prompt_tokens
    for previous, turn in itertools.pairwise(turns):
        usage = turn.usage
        # Cached: the previous prompt and every generated token but the final
        # <|im_end|>, which was sampled and never decoded.
        cached = previous.usage.prompt_tokens + previous.usage.completion_tokens - 1
        assert usage.prompt_tokens_evaluated == usage.prompt_tokens - cached
        assert usage.prompt_tokens_evaluated < 60 < usage.prompt_tokens
        assert not usage.full_reevaluation
    assert model.last_prompt_path == "append"

    # The appended prompt ends exactly as the template renders the new messages.
    rendered = model.render_prompt(messages[:-2], TOOLS)
    tail = rendered[rendered.rindex("<|im_end|>\n<|im_start|>user"):]
    appended = model.resident.llm.detokenize(_last_prompt(model), special=True).decode()
    assert appended.endswith(tail)

    # A new instance must re-render the history: everything is evaluated again.
    fresh = reading_model(tiny_qwen35_gguf)
    turn = fresh.complete(messages, TOOLS, TurnBudget(max_tokens=400))
    assert fresh.last_prompt_path == "full"
    assert turn.usage.prompt_tokens_evaluated == turn.usage.prompt_tokens
    assert turn.usage.full_reevaluation


def _last_prompt(model: LlamaCppModel) -> list[int]:
    conversation = model._conversation
    assert conversation is not None
    return conversation.prompt


def test_history_that_does_not_extend_falls_back_to_a_full_render(
        tiny_qwen35_gguf: Path) -> None:
    model = reading_model(tiny_qwen35_gguf)
    messages, _ = run_session(model, 2)
    edited = [dict(message) for message in messages]
    edited[3]["content"] = "src/app.py\n1. something else"  # an old tool result changed
    turn = model.complete(edited, TOOLS, TurnBudget(max_tokens=400))
    assert model.last_prompt_path == "full"
    assert turn.usage.full_reevaluation
    assert turn.usage.prompt_tokens_evaluated == turn.usage.prompt_tokens
    assert any("re-rendered" in note for note in turn.notes)


def test_retry_restores_the_snapshot_instead_of_re_evaluating(tiny_qwen35_gguf: Path) -> None:
    model = reading_model(tiny_qwen35_gguf)
    messages, _ = run_session(model, 2)
    with pytest.raises(ModelQueryError, match="timed out"):
        model.complete(messages, TOOLS, TurnBudget(max_tokens=400, timeout=0.0))
    # The context now holds a half-generated turn; the retry starts from the
    # snapshot one token before the prompt end: one token evaluated, no reset.
    turn = model.complete(messages, TOOLS, TurnBudget(max_tokens=400))
    assert model.last_prompt_path == "retry"
    assert turn.usage.prompt_tokens_evaluated == 1
    assert not turn.usage.full_reevaluation
    assert turn.tool_calls[0].arguments == {"file_path": "src/app.py", "limit": 5}
    # Asking again for the same turn (the harness discarded it) is a retry too.
    again = model.complete(messages, TOOLS, TurnBudget(max_tokens=400))
    assert (model.last_prompt_path, again.usage.prompt_tokens_evaluated) == ("retry", 1)


def test_model_stays_resident_across_instances(tiny_qwen35_gguf: Path) -> None:
    first = LlamaCppModel(tiny_qwen35_gguf, settings=SETTINGS)
    count = len(resident_models())
    second = LlamaCppModel(tiny_qwen35_gguf, settings=SETTINGS)
    assert second.resident is first.resident
    assert second.resident.llm is first.resident.llm
    assert len(resident_models()) == count
    other = LlamaCppModel(tiny_qwen35_gguf, settings=LlamaSettings(n_ctx=2048, n_threads=2))
    assert other.resident is not first.resident  # other settings, another context


# --- bad input -----------------------------------------------------------------------------


def test_missing_directory_and_non_gguf_files(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="model file not found"):
        LlamaCppModel(tmp_path / "absent.gguf", settings=SETTINGS)
    with pytest.raises(ModelLoadError, match="is a directory"):
        LlamaCppModel(tmp_path, settings=SETTINGS)
    text = tmp_path / "notes.gguf"
    text.write_text("not a model\n")
    with pytest.raises(ModelLoadError, match="is not a GGUF file"):
        LlamaCppModel(text, settings=SETTINGS)


def test_unreadable_file(tmp_path: Path) -> None:
    # Reading /proc/self/mem at offset 0 fails with EIO for every user, root included
    # (a chmod 0 file would not stop root).
    path = tmp_path / "locked.gguf"
    path.symlink_to("/proc/self/mem")
    with pytest.raises(ModelLoadError, match=r"cannot read the model file .*: Input/output"):
        LlamaCppModel(path, settings=SETTINGS)


def test_unknown_architecture(tmp_path: Path) -> None:
    import gguf
    import numpy as np

    path = tmp_path / "frog.gguf"
    writer = gguf.GGUFWriter(str(path), "frogarch")
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.zeros((4, 4), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(ModelLoadError, match=r"cannot load .*'frogarch'"):
        LlamaCppModel(path, settings=SETTINGS)


def test_gguf_without_chat_template(tmp_path: Path) -> None:
    path = make_tiny_qwen35(tmp_path / "bare.gguf", chat_template="")
    with pytest.raises(ModelLoadError, match="no chat template"):
        LlamaCppModel(path, settings=SETTINGS)


def test_context_overflow_is_raised_before_llama_cpp_fails(tiny_qwen35_gguf: Path) -> None:
    model = LlamaCppModel(tiny_qwen35_gguf, settings=LlamaSettings(n_ctx=1024, n_threads=2))
    with pytest.raises(ContextOverflow, match="context window holds 1024"):
        model.complete(task(), TOOLS, TurnBudget(max_tokens=8))


def test_conversation_the_template_rejects(tiny_qwen35_gguf: Path) -> None:
    model = LlamaCppModel(tiny_qwen35_gguf, settings=SETTINGS)
    with pytest.raises(ModelQueryError, match="No user query"):
        model.complete([{"role": "system", "content": "alone"}], TOOLS, TurnBudget())


# --- the real Gemma 270M GGUF --------------------------------------------------------------

GEMMA_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<start_of_turn>"
    "{{ 'model' if m.role == 'assistant' else 'user' }}\n{{ m.content }}<end_of_turn>\n"
    "{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)


def test_real_gemma_loads_generates_and_stops(gemma_gguf: Path) -> None:
    settings = LlamaSettings(n_ctx=512, n_threads=2)
    with pytest.raises(ModelLoadError, match="no chat template"):
        LlamaCppModel(gemma_gguf, settings=settings)
    llm = load_resident(gemma_gguf, settings).llm  # the model itself is fine
    out = llm.create_completion("The capital of France is", max_tokens=4, temperature=0.0)
    assert out["choices"][0]["text"].strip()

    sampling = Sampling(seed=0, enable_thinking=False)
    model = LlamaCppModel(gemma_gguf, settings=settings, sampling=sampling,
                          chat_template=GEMMA_TEMPLATE)
    question = [{"role": "user", "content": "Say hello."}]
    turn = model.complete(question, [], TurnBudget(max_tokens=6))
    assert (turn.finish_reason, turn.usage.completion_tokens) == ("length", 6)
    assert turn.content.strip()
    end_of_turn = llm.tokenize(b"<end_of_turn>", add_bos=False, special=True)[0]
    stopping = LlamaCppModel(gemma_gguf, settings=settings, sampling=sampling,
                             chat_template=GEMMA_TEMPLATE, logit_bias={end_of_turn: 100.0})
    turn = stopping.complete(question, [], TurnBudget(max_tokens=6))
    assert (turn.finish_reason, turn.usage.completion_tokens, turn.content) == ("stop", 1, "")


# --- a chat template for a GGUF that carries none ------------------------------------------

FIXTURE_TEMPLATE = FIXTURES / "qwen35_chat_template.jinja"


def test_gemma_takes_a_template_file(gemma_gguf: Path) -> None:
    # The Gemma GGUF carries no template; the file's is rendered and tokenized by it.
    # (No generation here: see test_a_bare_gguf_generates_with_a_template_file.)
    template = load_chat_template(FIXTURE_TEMPLATE)
    assert template == FIXTURE_TEMPLATE.read_text(encoding="utf-8")
    model = LlamaCppModel(gemma_gguf, settings=LlamaSettings(n_ctx=4096, n_threads=2),
                          chat_template=template)
    text = model.render_prompt(task(), TOOLS)
    assert text == render_chat_template(task(), TOOLS)
    assert text.endswith("<|im_start|>assistant\n<think>\n")
    assert len(model.tokenize(text)) > 100


def test_a_bare_gguf_generates_with_a_template_file(tmp_path: Path) -> None:
    bare = make_tiny_qwen35(tmp_path / "bare.gguf", chat_template="")
    with pytest.raises(ModelLoadError, match="no chat template"):
        LlamaCppModel(bare, settings=SETTINGS)
    model = LlamaCppModel(bare, settings=SETTINGS, sampling=Sampling(seed=1),
                          chat_template=load_chat_template(FIXTURE_TEMPLATE),
                          grammar=READ_CALL_GRAMMAR)
    assert model.render_prompt(task(), TOOLS) == render_chat_template(task(), TOOLS)
    turn = model.complete(task(), TOOLS, TurnBudget(max_tokens=400))
    assert [(call.name, call.arguments) for call in turn.tool_calls] == [
        ("Read", {"file_path": "src/app.py", "limit": 5})]


def test_build_model_with_a_template_file(gemma_gguf: Path, tmp_path: Path) -> None:
    settings = LlamaSettings(n_ctx=512, n_threads=2)
    gguf = ModelSpec.parse(str(gemma_gguf))
    model = build_model(gguf, Sampling(), settings, chat_template=FIXTURE_TEMPLATE)
    assert isinstance(model, LlamaCppModel)
    assert model.chat_template == FIXTURE_TEMPLATE.read_text(encoding="utf-8")
    with pytest.raises(ModelSpecError, match=r"no chat template.*--chat-template FILE"):
        build_model(gguf, Sampling(), settings)
    with pytest.raises(ModelSpecError, match=r"applies only to a \.gguf"):
        build_model(ModelSpec.parse("http://127.0.0.1:9/v1"), Sampling(),
                    chat_template=FIXTURE_TEMPLATE)


@pytest.mark.parametrize(("content", "error"), [
    (None, "chat template file not found: .*missing.jinja"),
    ("", "is empty"),
    ("{% for m in messages %}", "cannot render a conversation: the chat template does not "
                                "compile"),
    ("{{ raise_exception('tools are required') }}", "cannot render a conversation: tools are "
                                                    "required"),
    ("{{ messages[5].content }}", "cannot render a conversation"),
    ("Hello, no messages here.", "renders no message text"),
    (b"\xff\xfe", "is not UTF-8 text"),
])
def test_unusable_template_files(tmp_path: Path, content: str | bytes | None,
                                 error: str) -> None:
    path = tmp_path / "missing.jinja"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content, encoding="utf-8")
    with pytest.raises(ModelLoadError, match=error):
        load_chat_template(path)


def test_solve_takes_the_template_from_the_flag_or_the_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        ) -> None:
    from frognano.cli import _parser, _solve_options, load_settings, main

    def chosen(*flags: str) -> Path | None:
        args = _parser().parse_args([*base, *flags])
        settings = load_settings()
        assert settings is not None
        return _solve_options(args, "x", settings).chat_template

    monkeypatch.chdir(tmp_path)  # no stray .env
    monkeypatch.delenv("FROGNANO_CHAT_TEMPLATE", raising=False)
    base = ["solve", str(tmp_path), "--issue", "x"]
    assert chosen() is None
    assert chosen("--chat-template", "t.jinja") == Path("t.jinja")
    monkeypatch.setenv("FROGNANO_CHAT_TEMPLATE", str(FIXTURE_TEMPLATE))
    assert chosen() == FIXTURE_TEMPLATE
    assert chosen("--chat-template", "t.jinja") == Path("t.jinja")  # the flag wins

    # A real `frognano solve` on a bare GGUF: the template file is checked before any run.
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "app.py").write_text("x = 1\n")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run([*git, "add", "app.py"], check=True)
    subprocess.run([*git, "commit", "-qm", "init"], check=True)
    bare = make_tiny_qwen35(tmp_path / "bare.gguf", chat_template="")
    monkeypatch.setenv("FROGNANO_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("FROGNANO_WORK_DIR", str(tmp_path / "work"))
    monkeypatch.setenv("FROGNANO_CHAT_TEMPLATE", str(tmp_path / "absent.jinja"))
    code = main(["solve", str(repo), "--issue", "Fix it.", "--model", str(bare),
                 "--n-ctx", "4096"])
    assert code == 2
    assert "chat template file not found" in " ".join(capsys.readouterr().out.split())


# --- llama.cpp settings: one place, for the worker and solve -------------------------------

LLAMA_ENV = ("FROGNANO_N_CTX", "FROGNANO_N_GPU_LAYERS", "FROGNANO_N_BATCH", "FROGNANO_N_UBATCH",
             "FROGNANO_FLASH_ATTN", "FROGNANO_KV_CACHE_TYPE", "FROGNANO_CPU_REPACK")


def worker_model(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, model: Path,
                 **env: str) -> LlamaCppModel:
    """The model the worker's runtime builds, from the environment alone."""
    from bot.settings import BotSettings
    from frognano.worker_command import build_runtime

    monkeypatch.chdir(tmp_path)  # no .env
    for name in LLAMA_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GITHUB_APP_ID", "1")
    monkeypatch.setenv("GITHUB_PRIVATE_KEY", "not used before a run")
    monkeypatch.setenv("FROGNANO_MODEL", str(model))
    monkeypatch.setenv("FROGNANO_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("FROGNANO_DATABASE_URL", f"sqlite:///{tmp_path / 'runs.db'}")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    built = build_runtime(BotSettings()).defaults.model_for(None)
    assert isinstance(built, LlamaCppModel)
    return built


def test_the_worker_runs_the_model_with_the_llama_environment(
        tiny_qwen35_gguf: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import llama_cpp

    model = worker_model(monkeypatch, tmp_path, tiny_qwen35_gguf, FROGNANO_N_CTX="3072",
                         FROGNANO_N_BATCH="256", FROGNANO_N_UBATCH="64",
                         FROGNANO_FLASH_ATTN="On", FROGNANO_CPU_REPACK="off")
    llm = model.resident.llm
    assert llm.n_ctx() == 3072
    params = llm.context_params
    assert (params.n_batch, params.n_ubatch) == (256, 64)
    assert params.flash_attn_type == llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED
    assert llm.model_params.use_extra_bufts is False
    turn = model.complete(task(), TOOLS, TurnBudget(max_tokens=3))
    assert turn.usage.completion_tokens >= 1

    defaults = worker_model(monkeypatch, tmp_path, tiny_qwen35_gguf).resident.llm
    # Unset, the evaluated context cut to what this host holds (frognano/model_host.py).
    from bot.settings import BotSettings
    from frognano.model_host import run_context

    chosen = run_context(BotSettings(), os.environ, copies=1).tokens
    assert defaults.n_ctx() == chosen and chosen in (131072, 65536, 32768, 16384, 8192)
    assert defaults.context_params.flash_attn_type == llama_cpp.LLAMA_FLASH_ATTN_TYPE_AUTO
    assert defaults.context_params.type_k == llama_cpp.GGML_TYPE_F16
    assert (defaults.context_params.n_batch, defaults.context_params.n_ubatch) == (512, 512)
    small = worker_model(monkeypatch, tmp_path, tiny_qwen35_gguf, FROGNANO_N_CTX="3072",
                         FROGNANO_N_BATCH="128").resident.llm  # the step follows the batch
    assert (small.context_params.n_batch, small.context_params.n_ubatch) == (128, 128)
    unload_all()


def test_a_q8_0_kv_cache_with_flash_attention_auto(gemma_gguf: Path,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path) -> None:
    # llama.cpp quantises the V cache only with flash attention: this context exists only
    # because "auto" reached llama.cpp (llama-cpp-python's own flag means on or off).
    import llama_cpp

    sizes = {}
    for kv in ("f16", "q8_0"):
        llm = worker_model(monkeypatch, tmp_path, gemma_gguf, FROGNANO_N_CTX="1024",
                           FROGNANO_KV_CACHE_TYPE=kv,
                           FROGNANO_CHAT_TEMPLATE=str(FIXTURE_TEMPLATE)).resident.llm
        assert llm.context_params.type_k == llm.context_params.type_v == {
            "f16": llama_cpp.GGML_TYPE_F16, "q8_0": llama_cpp.GGML_TYPE_Q8_0}[kv]
        llm.eval(llm.tokenize(b"The capital of France is Paris. " * 40))
        out = llm.create_completion("The capital of France is", max_tokens=2, temperature=0.0)
        assert out["usage"]["completion_tokens"] >= 1
        sizes[kv] = llama_cpp.llama_state_get_size(llm.ctx)
    assert 0.45 < sizes["q8_0"] / sizes["f16"] < 0.6, sizes  # 34 bytes per 32 values, not 64
    unload_all()


@pytest.mark.parametrize(("env", "error"), [
    ({"FROGNANO_FLASH_ATTN": "sometimes"}, "FROGNANO_FLASH_ATTN"),
    ({"FROGNANO_KV_CACHE_TYPE": "q5_1"}, "FROGNANO_KV_CACHE_TYPE"),
    ({"FROGNANO_KV_CACHE_TYPE": "q8_0", "FROGNANO_FLASH_ATTN": "off"},
     "FROGNANO_KV_CACHE_TYPE=q8_0 needs flash attention"),
    ({"FROGNANO_N_BATCH": "128", "FROGNANO_N_UBATCH": "512"},
     r"FROGNANO_N_UBATCH \(512\) must not exceed FROGNANO_N_BATCH \(128\)"),
    ({"FROGNANO_N_CTX": "0"}, "FROGNANO_N_CTX"),
    ({"FROGNANO_N_CTX": "lots"}, "FROGNANO_N_CTX"),
    ({"FROGNANO_N_GPU_LAYERS": "-2"}, "FROGNANO_N_GPU_LAYERS"),
    ({"FROGNANO_CPU_REPACK": "yes please"}, "FROGNANO_CPU_REPACK"),
])
def test_bad_llama_settings_name_the_setting(env: dict[str, str], error: str,
                                             monkeypatch: pytest.MonkeyPatch,
                                             tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    from pydantic import ValidationError

    from bot.settings import BotSettings
    from frognano.cli import main

    monkeypatch.chdir(tmp_path)
    for name in LLAMA_ENV:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError, match=error):
        BotSettings()
    assert main(["worker"]) == 2  # the worker refuses to start, saying why
    assert re.search(error, capsys.readouterr().err)


@pytest.mark.parametrize(("fields", "error"), [
    ({"kv_cache_type": "q4_0", "flash_attn": "off"}, "q4_0 KV cache needs flash attention"),
    ({"n_batch": 64, "n_ubatch": 128}, r"--n-ubatch must be between 1 and the batch size"),
    ({"flash_attn": True}, "FROGNANO_FLASH_ATTN / --flash-attn must be one of auto, on, off"),
    ({"n_ctx": -1}, "--n-ctx must be a positive number"),
])
def test_llama_settings_refuse_what_llama_cpp_cannot_run(fields: dict[str, Any],
                                                         error: str) -> None:
    with pytest.raises(ValueError, match=error):
        LlamaSettings(**fields)


def test_solve_flags_override_the_llama_environment(
        tiny_qwen35_gguf: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from frognano.cli import main

    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "app.py").write_text("x = 1\n")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run([*git, "add", "app.py"], check=True)
    subprocess.run([*git, "commit", "-qm", "init"], check=True)
    issue = tmp_path / "issue.md"
    issue.write_text("Fix it. " + "word " * 3000)  # more tokens than either context holds
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FROGNANO_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("FROGNANO_WORK_DIR", str(tmp_path / "work"))
    monkeypatch.setenv("FROGNANO_DATABASE_URL", "")
    monkeypatch.setenv("FROGNANO_N_CTX", "2048")
    solve = ["solve", str(repo), "--issue-file", str(issue), "--model", str(tiny_qwen35_gguf)]

    def refusal(*flags: str) -> str:
        assert main([*solve, *flags]) == 2
        return " ".join(capsys.readouterr().out.split())

    assert "does not fit the model's context of 2048 tokens" in refusal()
    assert "does not fit the model's context of 1024 tokens" in refusal("--n-ctx", "1024")
    monkeypatch.setenv("FROGNANO_N_BATCH", "256")
    assert "--n-ubatch must be between 1 and the batch size (256), not 512" in refusal(
        "--n-ubatch", "512")
    monkeypatch.setenv("FROGNANO_FLASH_ATTN", "never")
    assert main([*solve]) == 2
    assert "FROGNANO_FLASH_ATTN" in capsys.readouterr().err
    unload_all()


# --- recovery state: only what cannot be cut back ------------------------------------------


class AbortOnce:
    """Aborts one real llama_decode (llama.cpp's abort callback, checked between graph
    nodes): the `at`-th decode from now fails as an out-of-memory or backend error would."""

    def __init__(self, llm: Any, at: int) -> None:
        import llama_cpp

        self.llm, self.calls, self.armed, self.fired = llm, 0, False, 0
        self._callback = llama_cpp.ggml_abort_callback(self._abort)
        llama_cpp.llama_set_abort_callback(llm.ctx, self._callback, None)
        stock = type(llm).eval.__get__(llm)

        def eval_(tokens: Any) -> None:
            self.calls += 1
            self.armed = self.armed or self.calls == at
            stock(tokens)

        llm.eval = eval_

    def _abort(self, _: Any) -> bool:
        if self.armed:
            self.armed, self.fired = False, self.fired + 1
            return True
        return False

    def close(self) -> None:
        import llama_cpp

        del self.llm.eval
        llama_cpp.llama_set_abort_callback(self.llm.ctx, llama_cpp.ggml_abort_callback(), None)


def greedy_session(model: LlamaCppModel, abort_in_turn: int | None = None,
                   ) -> tuple[list[str], list[Any], list[list[str]], int]:
    """Three free-running greedy turns of a conversation; optionally one decode of one
    turn's generation aborted. The texts, the last logits after each turn, the notes,
    and the context resets (full re-evaluations) after the first turn."""
    import numpy as np

    llm = model.resident.llm
    messages = task()
    texts, logits, notes = [], [], []
    resets = 0
    for index in range(3):
        abort = AbortOnce(llm, at=3) if index == abort_in_turn else None
        resets_before = llm.resets
        try:
            turn = model.complete(messages, [], TurnBudget(max_tokens=12))
        finally:
            if abort is not None:
                abort.close()
                assert abort.fired == 1
        texts.append(turn.raw_text or "")
        logits.append(np.ctypeslib.as_array(llm._ctx.get_logits(),
                                            shape=(llm.n_vocab(),)).copy())
        notes.append(turn.notes)
        resets += (llm.resets - resets_before) if index else 0
        messages += [turn.to_message(), {"role": "user", "content": f"Go on ({index})."}]
    return texts, logits, notes, resets


@pytest.mark.parametrize("recovery", ["partial", "full"])
def test_a_failed_decode_is_retried_from_the_recovery_state_exactly(
        tiny_qwen35_gguf: Path, recovery: str) -> None:
    import numpy as np

    sampling = Sampling(temperature=0.0, seed=1, enable_thinking=False)
    reference = LlamaCppModel(tiny_qwen35_gguf, settings=SETTINGS, sampling=sampling,
                              logit_bias={IM_END: -100.0})
    reference.resident.llm.reset()
    texts, logits, _, resets = greedy_session(reference)
    assert resets == 0

    # The second turn's third decode fails after two tokens were generated: the
    # recurrent state has moved on. The retry must continue as if it never happened.
    model = LlamaCppModel(tiny_qwen35_gguf, settings=SETTINGS, sampling=sampling,
                          logit_bias={IM_END: -100.0}, recovery=recovery)  # type: ignore[arg-type]
    model.resident.llm.reset()
    retried, retried_logits, notes, resets = greedy_session(model, abort_in_turn=1)
    assert resets == 0  # restored in place: nothing evaluated again
    assert any("retried from the state snapshot after: llama_decode returned 2" in note
               for note in notes[1]), notes
    assert model.last_prompt_path == "append"
    assert retried == texts
    for ours, fresh in zip(retried_logits, logits, strict=True):
        assert np.array_equal(ours, fresh)


def test_a_recovery_state_that_does_not_apply_falls_back_to_evaluating(
        tiny_qwen35_gguf: Path) -> None:
    # Without the recurrent state the context cannot be cut back (its recurrent cell is
    # two tokens ahead): the retry evaluates the prompt again, slower but still exact.
    sampling = Sampling(temperature=0.0, seed=1, enable_thinking=False)
    model = LlamaCppModel(tiny_qwen35_gguf, settings=SETTINGS, sampling=sampling,
                          logit_bias={IM_END: -100.0})
    model.resident.llm.reset()
    texts, _, _, _ = greedy_session(model)
    model.resident.llm.reset()
    real_snapshot = model.resident.snapshot
    model.resident.snapshot = lambda mode="partial": dataclasses.replace(  # type: ignore
        real_snapshot(mode), state=b"")
    try:
        forgetful, _, notes, resets = greedy_session(model, abort_in_turn=1)
    finally:
        del model.resident.snapshot
    assert any("retried" in note for note in notes[1])
    assert (forgetful, resets) == (texts, 1)


def test_the_recovery_state_is_the_recurrent_state_not_the_context(tmp_path: Path) -> None:
    import llama_cpp

    # Long context, few recurrent layers: the full state grows with every cached token,
    # the partial one (three Gated-DeltaNet layers' states) does not.
    path = make_tiny_qwen35(tmp_path / "wide.gguf", n_embd=128, n_layer=8,
                            full_attention_interval=2, context_length=16384)
    model = LlamaCppModel(path, settings=LlamaSettings(n_ctx=16384, n_threads=2),
                          sampling=Sampling(seed=1), grammar=READ_CALL_GRAMMAR)
    resident = model.resident
    llm = resident.llm
    sizes = []
    messages = task()
    for index in range(3):
        turn = model.complete(messages, TOOLS, TurnBudget(max_tokens=400))
        snapshot = model._conversation.snapshot  # type: ignore[union-attr]
        assert snapshot is not None and snapshot.mode == "partial"
        assert snapshot.tokens == llm.input_ids[: len(snapshot.tokens)].tolist()
        sizes.append((len(snapshot.tokens), len(snapshot.state),
                      llama_cpp.llama_state_get_size(llm.ctx)))
        messages += [turn.to_message(), {"role": "tool", "tool_call_id": turn.tool_calls[0].id,
                                         "content": "x = 1\n" * (500 + 500 * index)}]
    partial = llama_cpp.llama_state_seq_get_size_ext(llm.ctx, 0, 1)
    assert {state for _, state, _ in sizes} == {partial}, sizes  # the same every turn
    (_, _, full_first), (tokens, _, full_last) = sizes[0], sizes[-1]
    assert tokens > 8000 and full_last > 2 * full_first
    assert partial * 20 < full_last, sizes  # what a turn copies, against the whole state
