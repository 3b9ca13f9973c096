"""Loaded GGUF models, kept for the life of the process, and their context state.

Loading a multi-gigabyte GGUF takes seconds to minutes; a worker runs many
agent runs, so a model is loaded once per (file, settings) and shared. All
access to one model's context goes through its `lock`.
"""

from __future__ import annotations

import ctypes
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from solver.limits import EVALUATION_CONTEXT
from solver.models.base import ModelLoadError, ModelQueryError
from solver.models.gguf_file import check_gguf_file, read_gguf_info

FlashAttn = Literal["auto", "on", "off"]
KvCacheType = Literal["f16", "q8_0", "q4_0"]
CpuRepack = Literal["auto", "on", "off"]
FLASH_ATTN: tuple[FlashAttn, ...] = ("auto", "on", "off")
KV_CACHE_TYPES: tuple[KvCacheType, ...] = ("f16", "q8_0", "q4_0")
CPU_REPACK: tuple[CpuRepack, ...] = ("auto", "on", "off")


@dataclass(frozen=True)
class LlamaSettings:
    """How llama.cpp runs the model (docs/SETTINGS.md; the environment is read
    into these by `bot.settings.LlamaEnvSettings`, for `solve` and the worker alike).

    `n_gpu_layers=-1` offloads every layer (CUDA builds; CPU builds ignore it);
    `n_threads=None` lets llama.cpp choose. `flash_attn="auto"` lets llama.cpp enable
    flash attention where the backend has it. `kv_cache_type` quantises the attention
    cache (K and V; a quantised V cache needs flash attention). `cpu_repack` is
    llama.cpp's `use_extra_bufts`, weights repacked for the CPU's matmul kernels (AMX,
    AVX512 …): "auto" turns it off where this build would use AMX, whose matmul
    segfaults on the first generation (llama.cpp #20824; docs/BENCHMARKS.md).
    """

    # The composition root passes the context it chose (frognano/model_host.py).
    n_ctx: int = EVALUATION_CONTEXT
    n_gpu_layers: int = -1
    n_threads: int | None = None
    n_batch: int = 512
    n_ubatch: int | None = None  # None: n_batch, at most 512
    flash_attn: FlashAttn = "auto"
    kv_cache_type: KvCacheType = "f16"
    cpu_repack: CpuRepack = "auto"

    def __post_init__(self) -> None:
        problem = llama_settings_problem(self)
        if problem:
            raise ValueError(problem)


def llama_settings_problem(s: LlamaSettings) -> str | None:
    """Why llama.cpp could not run with these settings, naming the setting and the flag."""
    if s.n_ctx <= 0:
        return f"FROGNANO_N_CTX / --n-ctx must be a positive number of tokens, not {s.n_ctx}"
    if s.n_gpu_layers < -1:
        return ("FROGNANO_N_GPU_LAYERS / --n-gpu-layers must be -1 (all) or a number of "
                f"layers, not {s.n_gpu_layers}")
    if s.n_threads is not None and s.n_threads <= 0:
        return f"the thread count must be positive, not {s.n_threads}"
    if s.n_batch <= 0:
        return f"FROGNANO_N_BATCH / --n-batch must be a positive number of tokens, not {s.n_batch}"
    if s.n_ubatch is not None and not 0 < s.n_ubatch <= s.n_batch:
        return (f"FROGNANO_N_UBATCH / --n-ubatch must be between 1 and the batch size "
                f"({s.n_batch}), not {s.n_ubatch}")
    for name, value, allowed in (("FROGNANO_FLASH_ATTN / --flash-attn", s.flash_attn, FLASH_ATTN),
                                 ("FROGNANO_KV_CACHE_TYPE / --kv-cache-type", s.kv_cache_type,
                                  KV_CACHE_TYPES),
                                 ("FROGNANO_CPU_REPACK / --cpu-repack", s.cpu_repack, CPU_REPACK)):
        if value not in allowed:
            return f"{name} must be one of {', '.join(allowed)}, not {value!r}"
    if s.kv_cache_type != "f16" and s.flash_attn == "off":
        return (f"a {s.kv_cache_type} KV cache needs flash attention (llama.cpp quantises the "
                "V cache only with it): set FROGNANO_FLASH_ATTN / --flash-attn to auto or on, "
                "or use f16")
    return None


@dataclass(frozen=True)
class SamplerChain:
    """How one generation draws its tokens, in the order of the evaluation engine.

    vLLM and SGLang, where Microsoft evaluated FrogNano, apply logit bias, penalties
    and grammar, then the temperature, then min-p, top-k and top-p on the tempered
    distribution, then draw. llama-cpp-python's stock chain applies the temperature
    last, after top-p: with p = .947/.053, T = 0.6 and top_p = 0.95 its nucleus keeps
    both tokens where vLLM's keeps one (docs/LEAF_CONTRACT.md §4). Known remaining
    difference: llama.cpp's repetition penalty sees the last 64 generated tokens,
    vLLM's the prompt and all output; the contract's penalty is 1.0 (off).
    """

    temperature: float
    top_k: int
    top_p: float
    min_p: float
    seed: int
    repetition_penalty: float = 1.0
    logit_bias: tuple[tuple[int, float], ...] = ()
    grammar: Any = None  # a llama_cpp.LlamaGrammar

    def build(self, llm: Any) -> Any:
        """The llama.cpp sampler chain (a `llama_cpp._internals.LlamaSampler`)."""
        from llama_cpp import _internals

        sampler = _internals.LlamaSampler()
        n_vocab = llm.n_vocab()
        if self.logit_bias:
            sampler.add_logit_bias(n_vocab, dict(self.logit_bias))
        if self.repetition_penalty != 1.0:
            sampler.add_penalties(n_vocab, llm.last_n_tokens_size, self.repetition_penalty,
                                  0.0, 0.0)
        if self.grammar is not None:
            sampler.add_grammar(llm._model, self.grammar)
        if self.temperature <= 0.0:
            sampler.add_greedy()
            return sampler
        sampler.add_temp(self.temperature)
        if self.min_p > 0.0:
            sampler.add_min_p(self.min_p, 1)
        if self.top_k > 0:
            sampler.add_top_k(self.top_k)
        if self.top_p < 1.0:
            sampler.add_top_p(self.top_p, 1)
        sampler.add_dist(self.seed)
        return sampler


RecoveryMode = Literal["partial", "full"]
_SEQ = 0  # the one sequence of the context
_PARTIAL_ONLY = 1  # LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY


@dataclass
class Snapshot:
    """How to bring the context back to `tokens` after a failed or discarded decode.

    "partial" (the default): attention KV only grows, so it still holds `tokens` and is
    cut back to them; `state` holds only what cannot be cut back, the recurrent state
    of a hybrid model (llama.cpp's partial sequence state, a fixed size whatever the
    context length; empty for a model with attention only). "full": `state` is the
    whole context, KV of every token included (what llama.cpp's full state copy costs).
    """

    tokens: list[int]
    state: bytes
    mode: RecoveryMode = "partial"


@lru_cache(maxsize=1)
def _counting_llama_class() -> type:
    from llama_cpp import Llama

    class CountingLlama(Llama):  # type: ignore[misc]
        """Counts the tokens handed to llama_decode and the context resets: the
        honest measure of prompt reuse (llama.cpp's perf counters are not); and
        samples with `sampler_chain` while one is set (under the resident lock)."""

        tokens_evaluated = 0
        resets = 0
        sampler_chain: SamplerChain | None = None

        def __init__(self, *, use_extra_bufts: bool, flash_attn_type: int,
                     **kwargs: Any) -> None:
            # Two llama.cpp parameters the constructor has no argument for; the
            # properties below put them into the structs it hands to llama.cpp.
            self._use_extra_bufts = use_extra_bufts
            self._flash_attn_type = flash_attn_type
            super().__init__(**kwargs)

        @property
        def model_params(self) -> Any:
            return self.__dict__["_model_params"]

        @model_params.setter
        def model_params(self, params: Any) -> None:
            # Llama.__init__ assigns the default params first and never sets this field.
            params.use_extra_bufts = self._use_extra_bufts
            self.__dict__["_model_params"] = params

        @property
        def context_params(self) -> Any:
            # Llama.__init__ maps its bool `flash_attn` to on/off after assigning the
            # params; re-applied on every read, so the params llama.cpp receives (and
            # what the object reports afterwards) carry the setting, "auto" included.
            params = self.__dict__["_context_params"]
            params.flash_attn_type = self._flash_attn_type
            return params

        @context_params.setter
        def context_params(self, params: Any) -> None:
            self.__dict__["_context_params"] = params

        # Takes the stock keywords through (**stock) instead of repeating llama_cpp's list:
        # narrower on paper than the parent's signature, the same calls in practice.
        def _init_sampler(self, **stock: Any) -> Any:  # type: ignore[override]
            # `generate` builds its sampler here; the stock chain when none is set.
            if self.sampler_chain is None:
                return super()._init_sampler(**stock)
            return self.sampler_chain.build(self)

        def eval(self, tokens: Any) -> None:
            self.tokens_evaluated += len(tokens)
            super().eval(tokens)

        def reset(self) -> None:
            self.resets += 1
            super().reset()

    return CountingLlama


@dataclass
class ResidentModel:
    path: Path
    settings: LlamaSettings
    llm: Any  # CountingLlama
    load_seconds: float
    lock: threading.RLock = field(default_factory=threading.RLock)
    _pieces: dict[int, bytes] = field(default_factory=dict)

    @property
    def n_ctx(self) -> int:
        return int(self.llm.n_ctx())

    @property
    def bos_text(self) -> str:
        return self._special_text(self.llm.token_bos())

    @property
    def eos_text(self) -> str:
        return self._special_text(self.llm.token_eos())

    def _special_text(self, token: int) -> str:
        return "" if token < 0 else self.token_bytes(token).decode("utf-8", "replace")

    def is_end_of_generation(self, token: int) -> bool:
        import llama_cpp

        return bool(llama_cpp.llama_vocab_is_eog(self._vocab(), token))

    @lru_cache(maxsize=1)  # noqa: B019 - one per resident model, which lives as long as the process
    def _vocab(self) -> Any:
        import llama_cpp

        return llama_cpp.llama_model_get_vocab(self.llm.model)

    def __hash__(self) -> int:
        return id(self)

    def token_bytes(self, token: int) -> bytes:
        """The bytes of one token, special tokens written out (they are part of the text)."""
        piece = self._pieces.get(token)
        if piece is None:
            piece = self._pieces[token] = self.llm.detokenize([token], special=True)
        return piece

    def extend_to(self, target: list[int]) -> None:
        """Make the context hold exactly `target`, reusing what it already holds."""
        llm = self.llm
        cached = llm.input_ids[: llm.n_tokens].tolist()
        common = 0
        for have, want in zip(cached, target, strict=False):
            if have != want:
                break
            common += 1
        if common < len(cached):
            # Attention caches can be cut back; recurrent states cannot (then it fails).
            if common > 0 and llm._ctx.kv_cache_seq_rm(-1, common, -1):
                llm.n_tokens = common
                llm._requires_eval = True
            else:
                llm.reset()
        if len(target) > llm.n_tokens:
            llm.eval(target[llm.n_tokens:])

    @property
    def cuts_back(self) -> bool:
        """Whether the whole cache can be cut back to a shorter prefix (attention only,
        sliding windows kept at full size); a hybrid or recurrent model's cannot."""
        import llama_cpp

        model = self.llm.model
        return not (llama_cpp.llama_model_is_recurrent(model)
                    or llama_cpp.llama_model_is_hybrid(model))

    def snapshot(self, mode: RecoveryMode = "partial") -> Snapshot:
        """What `restore` needs to come back to the tokens the context holds now."""
        import llama_cpp

        llm = self.llm
        tokens = llm.input_ids[: llm.n_tokens].tolist()
        if mode == "partial" and self.cuts_back:
            return Snapshot(tokens=tokens, state=b"")
        if mode == "partial":
            size = llama_cpp.llama_state_seq_get_size_ext(llm.ctx, _SEQ, _PARTIAL_ONLY)
            buffer = (ctypes.c_uint8 * size)()
            written = llama_cpp.llama_state_seq_get_data_ext(llm.ctx, buffer, size, _SEQ,
                                                             _PARTIAL_ONLY)
        else:
            size = llama_cpp.llama_state_get_size(llm.ctx)
            buffer = (ctypes.c_uint8 * size)()
            written = llama_cpp.llama_state_get_data(llm.ctx, buffer, size)
        if written == 0 and size:
            raise ModelQueryError("llama.cpp could not copy the context state")
        return Snapshot(tokens=tokens, state=ctypes.string_at(buffer, written), mode=mode)

    def restore(self, snapshot: Snapshot) -> None:
        """Bring the context back to `snapshot.tokens`. A partial snapshot relies on the
        context still holding those tokens' attention KV; where it does not (another
        conversation used the model since), the tokens are evaluated again."""
        llm = self.llm
        count = len(snapshot.tokens)
        if snapshot.mode == "full":
            self._set_state(snapshot.state, full=True)
        elif (llm.n_tokens < count or llm.input_ids[:count].tolist() != snapshot.tokens
              or not self._cut_back(snapshot, count)):
            llm.reset()
            self.extend_to(snapshot.tokens)
            return
        llm.input_ids[:count] = snapshot.tokens
        llm.n_tokens = count
        # The restored logits are not live: llama-cpp-python must decode before sampling.
        llm._requires_eval = True

    def _cut_back(self, snapshot: Snapshot, count: int) -> bool:
        # The recurrent state first: it then ends before `count`, so cutting everything
        # from `count` on only removes attention KV (a recurrent cell cannot be cut).
        if snapshot.state and not self._set_state(snapshot.state, full=False):
            return False
        return bool(self.llm._ctx.kv_cache_seq_rm(-1, count, -1))

    def _set_state(self, state: bytes, *, full: bool) -> bool:
        import llama_cpp

        llm = self.llm
        size = len(state)
        buffer = (ctypes.c_uint8 * size).from_buffer_copy(state)
        read = (llama_cpp.llama_state_set_data(llm.ctx, buffer, size) if full else
                llama_cpp.llama_state_seq_set_data_ext(llm.ctx, buffer, size, _SEQ,
                                                       _PARTIAL_ONLY))
        if read == size:
            return True
        llm.reset()
        if full:
            raise ModelQueryError("llama.cpp could not restore the state snapshot")
        return False


_RESIDENT: dict[tuple[Any, ...], ResidentModel] = {}
_LOAD_LOCK = threading.Lock()


def load_resident(path: str | Path, settings: LlamaSettings) -> ResidentModel:
    """The loaded model for this file and settings, loading it on first use."""
    path = check_gguf_file(Path(path))
    stat = path.stat()
    key = (str(path), stat.st_size, stat.st_mtime_ns, settings)
    with _LOAD_LOCK:
        resident = _RESIDENT.get(key)
        if resident is None:
            started = time.perf_counter()
            llm = _load(path, settings)
            resident = ResidentModel(path=path, settings=settings, llm=llm,
                                     load_seconds=time.perf_counter() - started)
            _RESIDENT[key] = resident
        return resident


def resident_models() -> list[ResidentModel]:
    with _LOAD_LOCK:
        return list(_RESIDENT.values())


def unload_all() -> None:
    """Free every resident model (tests, benchmarks, shutdown)."""
    with _LOAD_LOCK:
        for resident in _RESIDENT.values():
            with resident.lock:
                resident.llm.close()
        _RESIDENT.clear()


def _load(path: Path, settings: LlamaSettings) -> Any:
    try:
        llama_class = _counting_llama_class()
    except ImportError:
        raise ModelLoadError(
            "llama-cpp-python is not installed: pip install llama-cpp-python "
            "(see docs/MODEL.md for the CUDA build)") from None
    import llama_cpp

    flash = {"auto": llama_cpp.LLAMA_FLASH_ATTN_TYPE_AUTO,
             "on": llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED,
             "off": llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED}[settings.flash_attn]
    kv_type = {"f16": llama_cpp.GGML_TYPE_F16, "q8_0": llama_cpp.GGML_TYPE_Q8_0,
               "q4_0": llama_cpp.GGML_TYPE_Q4_0}[settings.kv_cache_type]
    complaints: list[str] = []
    try:
        with _llama_complaints(complaints):
            return llama_class(
                model_path=str(path), n_ctx=settings.n_ctx, n_gpu_layers=settings.n_gpu_layers,
                n_threads=settings.n_threads, n_threads_batch=settings.n_threads,
                n_batch=settings.n_batch, n_ubatch=settings.n_ubatch or min(settings.n_batch, 512),
                use_extra_bufts=uses_cpu_repack(settings), flash_attn_type=flash,
                type_k=kv_type, type_v=kv_type, logits_all=False, verbose=False)
    except (ValueError, RuntimeError, OSError) as exc:
        if "llama_context" in str(exc):  # "Failed to create llama_context"
            said = "; ".join(complaints[-3:]) or "nothing"
            raise ModelLoadError(
                f"llama.cpp loaded {path} but could not create its context (n_ctx "
                f"{settings.n_ctx}, KV cache {settings.kv_cache_type}, flash attention "
                f"{settings.flash_attn}, batch {settings.n_batch}/{settings.n_ubatch or 'auto'}); "
                f"llama.cpp said: {said}") from None
        architecture = read_gguf_info(path).architecture
        raise ModelLoadError(
            f"llama.cpp (llama-cpp-python {llama_cpp.__version__}) cannot load {path} "
            f"(architecture {architecture!r}; an architecture this build does not know, or a "
            f"damaged file): {exc}") from None


@contextmanager
def _llama_complaints(lines: list[str]) -> Iterator[None]:
    """Collect llama.cpp's warnings and errors (it explains a failed load only in its
    log), passing everything on to llama-cpp-python's own log handler."""
    import llama_cpp
    from llama_cpp import _logger

    @llama_cpp.llama_log_callback
    def collect(level: int, text: bytes, data: Any) -> None:
        if level in (3, 4):  # GGML_LOG_LEVEL_WARN, _ERROR (ggml.h)
            lines.append(text.decode("utf-8", "replace").strip())
        _logger.llama_log_callback(level, text, data)

    llama_cpp.llama_log_set(collect, ctypes.c_void_p(0))
    try:
        yield
    finally:
        llama_cpp.llama_log_set(_logger.llama_log_callback, ctypes.c_void_p(0))


def uses_cpu_repack(settings: LlamaSettings) -> bool:
    """llama.cpp's `use_extra_bufts` for these settings (see `LlamaSettings`)."""
    if settings.cpu_repack != "auto":
        return settings.cpu_repack == "on"
    return not cpu_has_amx()


@lru_cache(maxsize=1)
def cpu_has_amx() -> bool:
    """Whether this llama.cpp build runs matmuls on AMX tiles (x86 Sapphire Rapids and
    later), where llama.cpp 0.3.36's AMX path crashes the process on the first decode."""
    import llama_cpp

    return b"AMX_INT8 = 1" in llama_cpp.llama_print_system_info()
