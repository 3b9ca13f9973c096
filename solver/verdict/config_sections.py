"""The pytest section of a pyproject.toml or setup.cfg: read, and swapped by its text.

Those files hold a project's other settings beside pytest's: a fix may edit them, and a
model may register a marker there for its new test. The repository's tests run with the
base's pytest section in the change's file; the model's own tests against the base tree
run with the change's section in the base's file. Both are one operation, `swap_section`:
the blocks of text from a section's header line to the next header line are exchanged,
with headers found as pytest's own readers find them (iniconfig: a line starting with `[`
at its first column; tomllib: the header's key path), and the result is parsed to check
that it holds exactly one file's pytest section and the other file's rest. When it does
not (a dotted key, a header inside a multi-line string, a file that does not parse), the
answer is None and the caller takes the whole file.
"""

from __future__ import annotations

import configparser
import tomllib
from collections.abc import Callable

INI_SECTION = "tool:pytest"
# pytest reads setup.cfg with iniconfig, where [DEFAULT] is a section like any other:
# configparser is told that no section is its default one.
NO_DEFAULT_SECTION = "\x00frognano: no default section"
Header = Callable[[str], "bool | None"]  # a line → None (no header), pytest's or not


def _toml(text: str) -> dict[str, object] | None:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return None


def _ini(text: str) -> dict[str, dict[str, str]] | None:
    parser = configparser.ConfigParser(interpolation=None,
                                       default_section=NO_DEFAULT_SECTION)
    try:
        parser.read_string(text)
    except configparser.Error:
        return None
    return {name: dict(parser[name]) for name in parser.sections()}


def _parts(name: str, text: str) -> tuple[object, object] | None:
    """(the pytest section, everything else) as parsed; None if the text does not parse."""
    if name == "pyproject.toml":
        data = _toml(text)
        if data is None:
            return None
        rest = dict(data)
        tool = rest.get("tool")
        if not isinstance(tool, dict):
            return None, rest
        rest.pop("tool")
        others = {key: value for key, value in tool.items() if key != "pytest"}
        if others:
            rest["tool"] = others
        return tool.get("pytest"), rest
    sections = _ini(text)
    if sections is None:
        return None
    return sections.pop(INI_SECTION, None), sections


def pytest_section(name: str, text: str) -> object:
    """The pytest settings a pyproject.toml or setup.cfg holds, parsed (None: none);
    an unreadable file reads as its raw text, so any edit to it counts as a change."""
    parts = _parts(name, text)
    return text if parts is None else parts[0]


def _toml_header(line: str) -> bool | None:
    """Whether a line is a table header, and of pytest's table (`[tool.pytest…]`)."""
    if not line.lstrip(" \t").startswith("["):
        return None
    node: object = _toml(line)
    if not isinstance(node, dict) or len(node) != 1:
        return None  # a line of an array or a string that starts with `[`
    path: list[str] = []
    while isinstance(node, (dict, list)) and node:
        if isinstance(node, list):
            node = node[-1]
            continue
        if len(node) != 1:
            return None
        key, node = next(iter(node.items()))
        path.append(key)
    return path[:2] == ["tool", "pytest"]


def _ini_header(line: str) -> bool | None:
    """Whether a line is a section header as iniconfig (pytest's reader) reads one, and
    of `[tool:pytest]` (spaces around the name too: a newer reader may strip them)."""
    if line.lstrip()[:1] in ("", "#", ";"):
        return None
    line = line.rstrip()
    if line[0] != "[":
        return None
    for comment in "#;":
        line = line.split(comment)[0].rstrip()
    return line[1:-1].strip() == INI_SECTION if line.endswith("]") else None


def _blocks(text: str, header: Header) -> list[tuple[bool, str]]:
    """The text cut before each header line: (the block is pytest's section, its text)."""
    blocks: list[tuple[bool, str]] = [(False, "")]
    for line in text.splitlines(keepends=True):
        ours = header(line)
        if ours is not None:
            blocks.append((ours, ""))
        blocks[-1] = (blocks[-1][0], blocks[-1][1] + line)
    return blocks


def _joined(pieces: list[str]) -> str:
    text = ""
    for piece in pieces:
        if text and not text.endswith(("\n", "\r")):
            text += "\n"
        text += piece
    return text


def _swapped_text(name: str, into: str, section_from: str) -> str | None:
    header = _toml_header if name == "pyproject.toml" else _ini_header
    kept, wanted = _blocks(into, header), _blocks(section_from, header)
    section = _joined([text for ours, text in wanted if ours])
    first = next((i for i, (ours, _) in enumerate(kept) if ours), len(kept))
    result = _joined([*(text for ours, text in kept[:first] if not ours), section,
                      *(text for ours, text in kept[first:] if not ours)])
    # The result, read again as the readers read it: the pytest section is `section_from`'s
    # (its text and its parse), the rest is `into`'s.
    again = _joined([text for ours, text in _blocks(result, header) if ours])
    mine, theirs = _parts(name, result), _parts(name, into)
    source = _parts(name, section_from)
    if again != section or mine is None or theirs is None or source is None \
            or mine[0] != source[0] or mine[1] != theirs[1]:
        return None
    return result


def swap_section(name: str, into: bytes | None, section_from: bytes | None) -> bytes | None:
    """`into` (a pyproject.toml or setup.cfg; None: no such file) with the pytest section
    of `section_from` instead of its own, the rest of it unchanged; None when that cannot
    be done by the text and checked by parsing both ways."""
    try:
        texts = [(data or b"").decode("utf-8") for data in (into, section_from)]
    except UnicodeDecodeError:
        return None
    result = _swapped_text(name, *texts)
    return None if result is None else result.encode("utf-8")
