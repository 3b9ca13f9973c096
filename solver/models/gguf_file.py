"""Checking and describing a GGUF file without loading its weights.

Everything here reads the header with the `gguf` package (memory-mapped, so a
multi-gigabyte file costs milliseconds), which lets us give a clear message
before llama.cpp gets a chance to fail with a generic one.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from solver.models.base import ModelLoadError

GGUF_MAGIC = b"GGUF"
SPECIAL_TOKEN_KINDS = ("bos", "eos", "eot", "eom", "pad", "unk", "sep", "mask")


@dataclass
class GgufInfo:
    """What `frognano model info` prints, and what the backend checks."""

    path: Path
    architecture: str
    name: str | None
    parameter_count: int
    context_length: int | None
    file_type: str | None
    chat_template: str | None
    special_tokens: dict[str, tuple[int, str]] = field(default_factory=dict)  # kind → (id, text)
    add_bos: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "architecture": self.architecture,
            "name": self.name,
            "parameter_count": self.parameter_count,
            "context_length": self.context_length,
            "file_type": self.file_type,
            "chat_template": self.chat_template is not None,
            "special_tokens": {kind: {"id": token_id, "text": text}
                               for kind, (token_id, text) in self.special_tokens.items()},
            "add_bos": self.add_bos,
        }


def check_gguf_file(path: Path) -> Path:
    """The resolved path of a readable GGUF file, or a `ModelLoadError` saying what is wrong."""
    path = Path(path).expanduser()
    if not path.exists():
        raise ModelLoadError(f"model file not found: {path}")
    if path.is_dir():
        raise ModelLoadError(f"{path} is a directory, not a GGUF model file")
    try:
        with path.open("rb") as handle:
            magic = handle.read(4)
    except OSError as exc:
        raise ModelLoadError(f"cannot read the model file {path}: {exc.strerror}") from None
    if magic != GGUF_MAGIC:
        raise ModelLoadError(
            f"{path} is not a GGUF file (it starts with {magic!r}, a GGUF starts with b'GGUF')")
    return path.resolve()


def read_gguf_info(path: Path) -> GgufInfo:
    """The header facts of a GGUF file (checked first with `check_gguf_file`)."""
    from gguf import LlamaFileType

    path = check_gguf_file(path)
    try:
        metadata, parameter_count = read_gguf_header(path)
    except (ValueError, OSError, struct.error) as exc:
        raise ModelLoadError(f"{path} is not a valid GGUF file: {exc}") from None

    architecture = str(metadata.get("general.architecture") or "unknown")
    raw_file_type = metadata.get("general.file_type")
    try:
        file_type = (LlamaFileType(raw_file_type).name.removeprefix("MOSTLY_").removeprefix("ALL_")
                     if raw_file_type is not None else None)
    except ValueError:
        file_type = f"unknown ({raw_file_type})"
    tokens = metadata.get("tokenizer.ggml.tokens") or []
    special: dict[str, tuple[int, str]] = {}
    for kind in SPECIAL_TOKEN_KINDS:
        token_id = metadata.get(f"tokenizer.ggml.{kind}_token_id")
        if isinstance(token_id, int):
            text = tokens[token_id] if 0 <= token_id < len(tokens) else ""
            special[kind] = (token_id, text)
    return GgufInfo(
        path=path,
        architecture=architecture,
        name=metadata.get("general.name"),
        parameter_count=parameter_count,
        context_length=metadata.get(f"{architecture}.context_length"),
        file_type=file_type,
        chat_template=metadata.get("tokenizer.chat_template"),
        special_tokens=special,
        add_bos=metadata.get("tokenizer.ggml.add_bos_token"),
    )


# --- a small header reader ------------------------------------------------------------------
# gguf.GGUFReader builds a numpy view of every element of every array, which takes
# over ten seconds for a 262k-token vocabulary; the header itself is small.

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
            10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
# Arrays we keep: the vocabulary (for special-token texts); other arrays are skipped.
_KEPT_ARRAYS = {"tokenizer.ggml.tokens"}


class _Cursor:
    def __init__(self, data: mmap.mmap) -> None:
        self.data, self.pos = data, 0

    def unpack(self, fmt: str) -> Any:
        (result,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return result

    def string(self) -> str:
        length = self.unpack("<Q")
        if self.pos + length > len(self.data):
            raise ValueError("string runs past the end of the file")
        text = self.data[self.pos:self.pos + length].decode("utf-8", "replace")
        self.pos += length
        return text

    def value(self, kind: int, keep: bool = True) -> Any:
        if kind in _SCALARS:
            return self.unpack(_SCALARS[kind])
        if kind == _STRING:
            return self.string()
        if kind == _ARRAY:
            item_kind, count = self.unpack("<I"), self.unpack("<Q")
            if item_kind in _SCALARS and not keep:
                self.pos += count * struct.calcsize(_SCALARS[item_kind])
                return None
            items = [self.value(item_kind) for _ in range(count)]
            return items if keep else None
        raise ValueError(f"unknown GGUF value type {kind}")


def read_gguf_header(path: Path) -> tuple[dict[str, Any], int]:
    """The key/value metadata (large arrays other than the vocabulary left out as None)
    and the parameter count summed over the tensor infos."""
    with path.open("rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
        cursor = _Cursor(data)
        if data[:4] != GGUF_MAGIC:
            raise ValueError("bad magic")
        cursor.pos = 4
        version = cursor.unpack("<I")
        if version not in (2, 3):
            raise ValueError(f"unsupported GGUF version {version}")
        n_tensors, n_kv = cursor.unpack("<Q"), cursor.unpack("<Q")
        metadata: dict[str, Any] = {}
        for _ in range(n_kv):
            key = cursor.string()
            kind = cursor.unpack("<I")
            keep = kind != _ARRAY or key in _KEPT_ARRAYS
            metadata[key] = cursor.value(kind, keep)
        parameters = 0
        for _ in range(n_tensors):
            cursor.string()
            n_dims = cursor.unpack("<I")
            elements = 1
            for _ in range(n_dims):
                elements *= cursor.unpack("<Q")
            cursor.pos += 4 + 8  # tensor type, data offset
            parameters += elements
    return metadata, parameters
