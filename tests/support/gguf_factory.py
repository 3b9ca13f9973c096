"""Write tiny random-weight Qwen3.5 (``qwen35``) / Qwen3 GGUF files for tests.

Real FrogNano weights cannot be downloaded here, so the tests build a model that
llama.cpp loads through exactly the same code paths (architecture, hybrid
recurrent+attention memory, BPE tokenizer with ChatML/think/tool special tokens,
embedded chat template) but whose weights are random and a few hundred KB big.
Its output is gibberish; only mechanics (loading, templating, stop tokens, cache
reuse) can be tested with it.

Tensor names, shapes and metadata keys follow llama.cpp's ``src/models/qwen35.cpp``
and ``src/models/qwen3.cpp`` as vendored in llama-cpp-python 0.3.36.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import gguf
import numpy as np

from solver.models.chat_template import ChatTemplateError as ChatTemplateError  # re-exported
from solver.models.chat_template import render_chat_template as _render
from tests.support.paths import FIXTURES

FIXTURES_DIR = FIXTURES
QWEN35_CHAT_TEMPLATE_PATH = FIXTURES_DIR / "qwen35_chat_template.jinja"

# Control tokens are hidden when detokenizing without `special=True`, like in the
# real Qwen GGUFs; the think/tool tags are user-defined there, so they are always
# parsed as single tokens and show up in generated text, which the tool-call and
# reasoning parsers rely on.
CONTROL_TOKENS: tuple[str, ...] = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
USER_DEFINED_TOKENS: tuple[str, ...] = (
    "<think>",
    "</think>",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
)
SPECIAL_TOKENS: tuple[str, ...] = CONTROL_TOKENS + USER_DEFINED_TOKENS

# A handful of merges so the BPE path is exercised; a merges array is mandatory
# for the "gpt2" tokenizer model and gguf cannot write an empty array.
_MERGES: tuple[tuple[str, str], ...] = (
    ("Ġ", "Ġ"),
    ("Ġ", "t"),
    ("i", "n"),
    ("e", "r"),
    ("t", "h"),
)

SUPPORTED_ARCHS = ("qwen35", "qwen3")


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable-character map used by byte-level BPE."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    mapping: dict[int, str] = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


def tiny_vocab() -> tuple[list[str], list[int], list[str]]:
    """Tokens, token types and merges: byte tokens first (id == byte value)."""
    byte_map = bytes_to_unicode()
    tokens = [byte_map[b] for b in range(256)]
    types = [int(gguf.TokenType.NORMAL)] * 256
    for left, right in _MERGES:
        tokens.append(left + right)
        types.append(int(gguf.TokenType.NORMAL))
    for tok in CONTROL_TOKENS:
        tokens.append(tok)
        types.append(int(gguf.TokenType.CONTROL))
    for tok in USER_DEFINED_TOKENS:
        tokens.append(tok)
        types.append(int(gguf.TokenType.USER_DEFINED))
    merges = [f"{left} {right}" for left, right in _MERGES]
    return tokens, types, merges


def special_token_ids() -> dict[str, int]:
    """Token id of every special token in the tiny vocabulary."""
    tokens, _, _ = tiny_vocab()
    return {tok: tokens.index(tok) for tok in SPECIAL_TOKENS}


def default_chat_template() -> str:
    return QWEN35_CHAT_TEMPLATE_PATH.read_text(encoding="utf-8")


def _add_tokenizer(writer: Any, tokens: list[str], token_types: list[int],
                   merges: list[str], ids: dict[str, int]) -> None:
    """The byte-level Qwen tokenizer both generated models carry."""
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen35")
    writer.add_token_list(tokens)
    writer.add_token_types(token_types)
    writer.add_token_merges(merges)
    writer.add_eos_token_id(ids["<|im_end|>"])
    writer.add_pad_token_id(ids["<|endoftext|>"])
    # Qwen has no BOS; the id is still set (as in the real GGUFs) but never added.
    writer.add_bos_token_id(ids["<|endoftext|>"])
    writer.add_add_bos_token(False)


def make_tiny_qwen35(
    path: Path,
    *,
    arch: str = "qwen35",
    n_layer: int = 4,
    full_attention_interval: int = 4,
    n_embd: int = 64,
    context_length: int = 4096,
    seed: int = 0,
    chat_template: str | None = None,
) -> Path:
    """Write a tiny random-weight GGUF to ``path`` and return ``path``.

    ``arch="qwen35"`` is the hybrid: layer ``i`` is full attention when
    ``(i + 1) % full_attention_interval == 0`` and Gated-DeltaNet otherwise (the
    rule llama.cpp applies), so the defaults give layers R R R A, the 3:1 ratio
    of the real model. ``arch="qwen3"`` is a plain transformer with the same
    vocabulary and template, for comparing cache behaviour. ``n_embd`` must be a
    multiple of 16 (the head size). ``chat_template=None`` embeds
    ``tests/fixtures/qwen35_chat_template.jinja``; pass ``""`` to embed none.
    The same arguments always produce the same bytes.
    """
    if arch not in SUPPORTED_ARCHS:
        raise ValueError(f"arch must be one of {SUPPORTED_ARCHS}, not {arch!r}")
    if arch == "qwen35":
        n_attn = sum((i + 1) % full_attention_interval == 0 for i in range(n_layer))
        if not 0 < n_attn < n_layer:
            raise ValueError(
                f"n_layer={n_layer}, full_attention_interval={full_attention_interval} "
                "is not hybrid: need at least one attention and one recurrent layer"
            )
    if n_embd % 16:
        raise ValueError("n_embd must be a multiple of 16 (head size)")
    if chat_template is None:
        chat_template = default_chat_template()

    head_dim = 16
    n_head = n_embd // head_dim
    n_head_kv = max(1, n_head // 2)
    n_ff = 2 * n_embd

    tokens, token_types, merges = tiny_vocab()
    ids = special_token_ids()
    n_vocab = len(tokens)

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_name(f"tiny-random-{arch}")
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_context_length(context_length)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(n_layer)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head_kv)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_rope_freq_base(10_000_000.0)
    writer.add_rope_dimension_count(head_dim)

    _add_tokenizer(writer, tokens, token_types, merges, ids)
    if chat_template:
        writer.add_chat_template(chat_template)

    rng = np.random.default_rng(seed)

    def rand(*shape: int, scale: float = 0.02) -> np.ndarray:
        # numpy shape is the reverse of llama.cpp's {ne0, ne1, ...}.
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    def ones(n: int) -> np.ndarray:
        return np.ones(n, dtype=np.float32)

    # Unit-scale embeddings dominate the residual stream; with tied output the
    # argmax would just echo the input token, so the output head is separate.
    writer.add_tensor("token_embd.weight", rand(n_vocab, n_embd, scale=1.0))
    writer.add_tensor("output_norm.weight", ones(n_embd))
    writer.add_tensor("output.weight", rand(n_vocab, n_embd, scale=0.5))

    if arch == "qwen35":
        # Gated-DeltaNet sizes: head dims equal ssm.state_size, k heads = group
        # count, v heads = time_step_rank, inner size = v heads * head dim.
        d_state = head_dim
        n_k_heads = max(1, n_head // 2)
        n_v_heads = n_head
        d_inner = d_state * n_v_heads
        d_conv = 4
        conv_dim = 2 * d_state * n_k_heads + d_inner
        writer.add_ssm_conv_kernel(d_conv)
        writer.add_ssm_state_size(d_state)
        writer.add_ssm_group_count(n_k_heads)
        writer.add_ssm_time_step_rank(n_v_heads)
        writer.add_ssm_inner_size(d_inner)
        writer.add_full_attention_interval(full_attention_interval)
        # IMRoPE sections (text-only positions make them equivalent to plain RoPE);
        # they cover the head_dim / 2 rotary frequency pairs.
        writer.add_rope_dimension_sections([3, 3, 2, 0])

        for il in range(n_layer):
            blk = f"blk.{il}"
            writer.add_tensor(f"{blk}.attn_norm.weight", ones(n_embd))
            writer.add_tensor(f"{blk}.post_attention_norm.weight", ones(n_embd))
            if (il + 1) % full_attention_interval == 0:
                # attn_q is twice as wide: per head, the query then its output gate.
                writer.add_tensor(f"{blk}.attn_q.weight", rand(2 * n_head * head_dim, n_embd))
                writer.add_tensor(f"{blk}.attn_k.weight", rand(n_head_kv * head_dim, n_embd))
                writer.add_tensor(f"{blk}.attn_v.weight", rand(n_head_kv * head_dim, n_embd))
                writer.add_tensor(f"{blk}.attn_output.weight", rand(n_embd, n_head * head_dim))
                writer.add_tensor(f"{blk}.attn_q_norm.weight", ones(head_dim))
                writer.add_tensor(f"{blk}.attn_k_norm.weight", ones(head_dim))
            else:
                writer.add_tensor(f"{blk}.attn_qkv.weight", rand(conv_dim, n_embd))
                writer.add_tensor(f"{blk}.attn_gate.weight", rand(d_inner, n_embd))
                writer.add_tensor(f"{blk}.ssm_conv1d.weight", rand(conv_dim, d_conv, scale=0.5))
                writer.add_tensor(f"{blk}.ssm_dt.bias", rand(n_v_heads, scale=0.1))
                # ssm_a holds -exp(A_log): negative, so the state decays.
                writer.add_tensor(f"{blk}.ssm_a", -np.exp(rand(n_v_heads, scale=0.5)))
                writer.add_tensor(f"{blk}.ssm_beta.weight", rand(n_v_heads, n_embd))
                writer.add_tensor(f"{blk}.ssm_alpha.weight", rand(n_v_heads, n_embd))
                writer.add_tensor(f"{blk}.ssm_norm.weight", ones(d_state))
                writer.add_tensor(f"{blk}.ssm_out.weight", rand(n_embd, d_inner))
            writer.add_tensor(f"{blk}.ffn_gate.weight", rand(n_ff, n_embd))
            writer.add_tensor(f"{blk}.ffn_up.weight", rand(n_ff, n_embd))
            writer.add_tensor(f"{blk}.ffn_down.weight", rand(n_embd, n_ff))
    else:
        for il in range(n_layer):
            blk = f"blk.{il}"
            writer.add_tensor(f"{blk}.attn_norm.weight", ones(n_embd))
            writer.add_tensor(f"{blk}.attn_q.weight", rand(n_head * head_dim, n_embd))
            writer.add_tensor(f"{blk}.attn_k.weight", rand(n_head_kv * head_dim, n_embd))
            writer.add_tensor(f"{blk}.attn_v.weight", rand(n_head_kv * head_dim, n_embd))
            writer.add_tensor(f"{blk}.attn_output.weight", rand(n_embd, n_head * head_dim))
            writer.add_tensor(f"{blk}.attn_q_norm.weight", ones(head_dim))
            writer.add_tensor(f"{blk}.attn_k_norm.weight", ones(head_dim))
            writer.add_tensor(f"{blk}.ffn_norm.weight", ones(n_embd))
            writer.add_tensor(f"{blk}.ffn_gate.weight", rand(n_ff, n_embd))
            writer.add_tensor(f"{blk}.ffn_up.weight", rand(n_ff, n_embd))
            writer.add_tensor(f"{blk}.ffn_down.weight", rand(n_embd, n_ff))

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def render_chat_template(
    messages: Sequence[Mapping[str, Any]],
    tools: Iterable[Mapping[str, Any]] | None = None,
    *,
    template: str | None = None,
    add_generation_prompt: bool = True,
    **kwargs: Any,
) -> str:
    """Render a chat template with the production renderer
    (``solver.models.chat_template``: transformers' Jinja semantics), defaulting to
    the tiny model's template. Extra ``kwargs`` (e.g. ``enable_thinking=False``)
    become template variables."""
    return _render(
        template if template is not None else default_chat_template(),
        messages,
        tools,
        add_generation_prompt=add_generation_prompt,
        bos_token="",
        eos_token="<|im_end|>",
        **kwargs,
    )


# --- a FrogNano-shaped model (Qwen3.5-4B's text config) with K-quant blocks ---------------

FROGNANO_SHAPE: dict[str, int] = {
    "n_layer": 32, "full_attention_interval": 4, "n_embd": 2560, "n_ff": 9216,
    "n_head": 16, "n_head_kv": 4, "head_dim": 256,
    "ssm_k_heads": 16, "ssm_v_heads": 32, "ssm_head_dim": 128, "d_conv": 4,
    "n_vocab": 248_320,
}
_QK = 256  # elements per K-quant super-block


def frognano_shape(scale: float = 1.0) -> dict[str, int]:
    """FrogNano's shape, or a smaller one (`scale` < 1) for a CPU run: layers, widths,
    head counts and vocabulary shrink; head dims stay (they fix the RoPE sections) and
    every matrix's input stays a multiple of 256 (the K-quant block)."""
    full = FROGNANO_SHAPE
    if scale >= 1.0:
        return dict(full)

    def blocks(n: int) -> int:
        return max(_QK, round(n * scale / _QK) * _QK)

    interval = full["full_attention_interval"]
    n_head_kv = max(1, round(full["n_head_kv"] * scale))
    k_heads = max(1, round(full["ssm_k_heads"] * scale))
    return {**full, "n_layer": max(interval, round(full["n_layer"] * scale / interval) * interval),
            "n_embd": blocks(full["n_embd"]), "n_ff": blocks(full["n_ff"]),
            "n_head": 4 * n_head_kv, "n_head_kv": n_head_kv,
            "ssm_k_heads": k_heads, "ssm_v_heads": 2 * k_heads,
            "n_vocab": max(1024, round(full["n_vocab"] * scale))}


def _q4_k(rng: np.random.Generator, rows: int, cols: int, d: float = 2e-4) -> np.ndarray:
    """Q4_K blocks written directly: w = d·sc·q − dmin·m with every sc = m = 21 (scale bytes
    0x55) and dmin = 7.5·d, so q ∈ 0..15 is centred and weights are zero-mean (random bytes
    everywhere would give mostly positive weights whose activations overflow f16 on a GPU)."""
    blocks = rng.integers(0, 256, size=(rows, cols // _QK, 144), dtype=np.uint8)
    blocks[:, :, 0:2] = np.frombuffer(np.float16(d).tobytes(), dtype=np.uint8)
    blocks[:, :, 2:4] = np.frombuffer(np.float16(7.5 * d).tobytes(), dtype=np.uint8)
    blocks[:, :, 4:16] = 0x55
    return blocks.reshape(rows, -1)


def _q6_k(rng: np.random.Generator, rows: int, cols: int, d: float = 2e-5) -> np.ndarray:
    """Q6_K blocks: w = d·sc·(q − 32), zero-mean with random bytes; `d` is the last two."""
    blocks = rng.integers(0, 256, size=(rows, cols // _QK, 210), dtype=np.uint8)
    blocks[:, :, 208:210] = np.frombuffer(np.float16(d).tobytes(), dtype=np.uint8)
    return blocks.reshape(rows, -1)


def make_frognano_shaped(path: Path, *, scale: float = 1.0, context_length: int = 65536,
                         seed: int = 0) -> Path:
    """A random-weight GGUF with FrogNano-4B's shape (Qwen3.5-4B, ``qwen35``): Q4_K
    matrices, Q6_K for the output head, attn_v and ffn_down (as in a Q4_K_M file), F32
    norms and small tensors; 2.9 GB at `scale=1`. Speed depends on shapes and
    quantisation, not on weight values, so it benchmarks what the real model would.
    The tokenizer is the tiny one padded with unused tokens to the vocabulary size."""
    s = frognano_shape(scale)
    n_embd, n_ff, head_dim = s["n_embd"], s["n_ff"], s["head_dim"]
    n_head, n_head_kv = s["n_head"], s["n_head_kv"]
    d_state, k_heads, v_heads = s["ssm_head_dim"], s["ssm_k_heads"], s["ssm_v_heads"]
    d_inner = d_state * v_heads
    conv_dim = 2 * d_state * k_heads + d_inner
    interval = s["full_attention_interval"]

    tokens, token_types, merges = tiny_vocab()
    ids = special_token_ids()
    pad = s["n_vocab"] - len(tokens)
    tokens += [f"<unused_{i}>" for i in range(pad)]
    token_types += [int(gguf.TokenType.UNUSED)] * pad

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(str(path), "qwen35")
    writer.add_name(f"frognano-shaped-random-x{scale:g}")
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_K_M)
    writer.add_context_length(context_length)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(s["n_layer"])
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head_kv)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_rope_freq_base(10_000_000.0)
    writer.add_rope_dimension_count(head_dim // 4)  # partial rotary 0.25
    writer.add_rope_dimension_sections([11, 11, 10, 0])
    writer.add_ssm_conv_kernel(s["d_conv"])
    writer.add_ssm_state_size(d_state)
    writer.add_ssm_group_count(k_heads)
    writer.add_ssm_time_step_rank(v_heads)
    writer.add_ssm_inner_size(d_inner)
    writer.add_full_attention_interval(interval)
    _add_tokenizer(writer, tokens, token_types, merges, ids)
    writer.add_chat_template(default_chat_template())

    rng = np.random.default_rng(seed)
    q4, q6 = gguf.GGMLQuantizationType.Q4_K, gguf.GGMLQuantizationType.Q6_K

    def mat(name: str, rows: int, cols: int, kind: gguf.GGMLQuantizationType = q4) -> None:
        data = _q4_k(rng, rows, cols) if kind == q4 else _q6_k(rng, rows, cols)
        writer.add_tensor(name, data, raw_dtype=kind)

    def f32(name: str, *shape: int, value: float | None = None, std: float = 0.02) -> None:
        data = (np.full(shape, value, dtype=np.float32) if value is not None
                else (rng.standard_normal(shape) * std).astype(np.float32))
        writer.add_tensor(name, data)

    mat("token_embd.weight", s["n_vocab"], n_embd)
    f32("output_norm.weight", n_embd, value=1.0)
    mat("output.weight", s["n_vocab"], n_embd, q6)
    for il in range(s["n_layer"]):
        blk = f"blk.{il}"
        f32(f"{blk}.attn_norm.weight", n_embd, value=1.0)
        f32(f"{blk}.post_attention_norm.weight", n_embd, value=1.0)
        if (il + 1) % interval == 0:
            mat(f"{blk}.attn_q.weight", 2 * n_head * head_dim, n_embd)
            mat(f"{blk}.attn_k.weight", n_head_kv * head_dim, n_embd)
            mat(f"{blk}.attn_v.weight", n_head_kv * head_dim, n_embd, q6)
            mat(f"{blk}.attn_output.weight", n_embd, n_head * head_dim)
            f32(f"{blk}.attn_q_norm.weight", head_dim, value=1.0)
            f32(f"{blk}.attn_k_norm.weight", head_dim, value=1.0)
        else:
            mat(f"{blk}.attn_qkv.weight", conv_dim, n_embd)
            mat(f"{blk}.attn_gate.weight", d_inner, n_embd)
            f32(f"{blk}.ssm_conv1d.weight", conv_dim, s["d_conv"], std=0.5)
            f32(f"{blk}.ssm_dt.bias", v_heads, std=0.1)
            writer.add_tensor(f"{blk}.ssm_a", -np.exp(
                (rng.standard_normal(v_heads) * 0.5).astype(np.float32)))
            f32(f"{blk}.ssm_beta.weight", v_heads, n_embd)
            f32(f"{blk}.ssm_alpha.weight", v_heads, n_embd)
            f32(f"{blk}.ssm_norm.weight", d_state, value=1.0)
            mat(f"{blk}.ssm_out.weight", n_embd, d_inner)
        mat(f"{blk}.ffn_gate.weight", n_ff, n_embd)
        mat(f"{blk}.ffn_up.weight", n_ff, n_embd)
        mat(f"{blk}.ffn_down.weight", n_embd, n_ff, q6)

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
