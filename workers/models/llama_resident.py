"""Loaded GGUF models, kept for the life of the process, and their context state.

Loading a multi-gigabyte GGUF takes seconds to minutes; a worker runs many
agent runs, so a model is loaded once per (file, settings) and shared. All
access to one model's context goes through its `lock`.
"""

from __future__ import annotations

import ctypes
import threading
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from workers.models.base import ModelLoadError, ModelQueryError
from workers.models.gguf_file import check_gguf_file, read_gguf_info


@dataclass(frozen=True)
class LlamaSettings:
    """How llama.cpp runs the model. `n_gpu_layers=-1` offloads every layer (CUDA
    builds; CPU builds ignore it); `n_threads=None` lets llama.cpp choose."""

    n_ctx: int = 65536
    n_gpu_layers: int = -1
    n_threads: int | None = None
    n_batch: int = 512
    flash_attn: bool = False


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


@dataclass
class Snapshot:
    """The complete context state (attention cache and recurrent states) at `tokens`."""

    tokens: list[int]
    state: bytes


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

        def _init_sampler(self, **stock: Any) -> Any:
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

    def snapshot(self) -> Snapshot:
        import llama_cpp

        llm = self.llm
        size = llama_cpp.llama_state_get_size(llm.ctx)
        buffer = (ctypes.c_uint8 * size)()
        written = llama_cpp.llama_state_get_data(llm.ctx, buffer, size)
        return Snapshot(tokens=llm.input_ids[: llm.n_tokens].tolist(),
                        state=ctypes.string_at(buffer, written))

    def restore(self, snapshot: Snapshot) -> None:
        import llama_cpp

        llm = self.llm
        size = len(snapshot.state)
        buffer = (ctypes.c_uint8 * size).from_buffer_copy(snapshot.state)
        if llama_cpp.llama_state_set_data(llm.ctx, buffer, size) != size:
            llm.reset()
            raise ModelQueryError("llama.cpp could not restore the state snapshot")
        count = len(snapshot.tokens)
        llm.input_ids[:count] = snapshot.tokens
        llm.n_tokens = count
        # The restored logits are not live: llama-cpp-python must decode before sampling.
        llm._requires_eval = True


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
            "(see the README for the CUDA build)") from None
    try:
        return llama_class(
            model_path=str(path), n_ctx=settings.n_ctx, n_gpu_layers=settings.n_gpu_layers,
            n_threads=settings.n_threads, n_threads_batch=settings.n_threads,
            n_batch=settings.n_batch, n_ubatch=settings.n_batch,
            flash_attn=settings.flash_attn, logits_all=False, verbose=False)
    except (ValueError, RuntimeError, OSError) as exc:
        import llama_cpp

        architecture = read_gguf_info(path).architecture
        raise ModelLoadError(
            f"llama.cpp (llama-cpp-python {llama_cpp.__version__}) cannot load {path} "
            f"(architecture {architecture!r}; an architecture this build does not know, or a "
            f"damaged file): {exc}") from None
