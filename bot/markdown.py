"""Putting text the bot does not control (model answers, test output, paths, test names)
into GitHub Markdown so that it shows as written and can do nothing else.

Two layers, because GitHub has two. CommonMark syntax (links, images, raw HTML, fences)
is defused by backslash-escaping every ASCII punctuation character in prose, and by
fences and code spans longer than any backtick run in code. GitHub then scans the
rendered text for @mentions, #123 references and bare URLs (skipping code); those are
broken by a zero-width space (U+200B) after `@` and `#` and inside `://` and `www.`.
That is what Renovate does in its PR bodies: GitHub's mention pattern needs a letter or
digit right after `@`, and the space is invisible. It is used literally, not as
`&#8203;`, because an entity shows as text inside code.
"""

from __future__ import annotations

import re

ZWSP = "\u200b"
_MENTION = re.compile(r"@(?!\u200b)")
_REFERENCE = re.compile(r"#(?=[^\u200b\s])")
_GH_REFERENCE = re.compile(r"\b(GH)-(?=\d)", re.IGNORECASE)
_SCHEME = re.compile(r":(?=//)")
_WWW = re.compile(r"\b(www)\.", re.IGNORECASE)
_PUNCTUATION = re.compile(r"([!-/:-@\[-`{-~])")
_BACKTICKS = re.compile(r"`+")


def neutralize_mentions(text: str) -> str:
    """`@name` and `@org/team` no longer mention anyone (safe to apply twice)."""
    return _MENTION.sub("@" + ZWSP, text)


def neutralize(text: str) -> str:
    """Nothing GitHub links by itself: mentions, #123 / GH-123 references, bare URLs."""
    text = neutralize_mentions(text)
    text = _REFERENCE.sub("#" + ZWSP, text)
    text = _GH_REFERENCE.sub(lambda m: m.group(1) + ZWSP + "-", text)
    text = _SCHEME.sub(":" + ZWSP, text)
    return _WWW.sub(lambda m: m.group(1) + ZWSP + ".", text)


def escape_text(text: str) -> str:
    """One line of plain text: no Markdown syntax, no HTML, nothing GitHub autolinks."""
    flat = _printable(" ".join(text.split()))  # tabs and runs of spaces: one space
    return _PUNCTUATION.sub(r"\\\1", neutralize(flat))


def quote_untrusted(text: str, max_chars: int = 4000) -> str:
    """A block quote showing `text` line by line as plain text, nothing live in it."""
    text = text.strip()
    if len(text) > max_chars:
        text = text[:max_chars].rstrip() + " … (cut)"
    lines = [escape_text(line) for line in text.splitlines()] or [""]
    # A trailing backslash is a hard line break, so the model's lines stay lines.
    body = [(line + "\\" if line and index < len(lines) - 1 else line)
            for index, line in enumerate(lines)]
    return "\n".join(f"> {line}".rstrip() for line in body)


def code_span(text: str) -> str:
    """Inline code that no backtick, newline or mention in `text` can break out of."""
    content = neutralize_mentions(_printable(text))
    runs = [len(run) for run in _BACKTICKS.findall(content)]
    ticks = "`" * (max(runs, default=0) + 1)
    # CommonMark strips one space from each end when both ends have one; pad to keep them.
    if not content:
        content = " "  # all spaces: kept as they are
    elif content[:1] in ("`", " ") or content[-1:] in ("`", " "):
        content = f" {content} "
    return f"{ticks}{content}{ticks}"


def fence(text: str) -> str:
    """A fenced code block that no line of `text` can close (its fence is longer than
    every backtick run inside), with mentions neutralised as well."""
    content = neutralize_mentions(text.rstrip())
    runs = [len(run) for run in _BACKTICKS.findall(content)]
    ticks = "`" * max(3, max(runs, default=0) + 1)
    return f"{ticks}\n{content}\n{ticks}"


def _printable(text: str) -> str:
    r"""Control characters (a newline in a path, a NUL) shown as \xNN escapes."""
    return "".join(c if c.isprintable() or c == " " else f"\\x{ord(c):02x}" for c in text)
