"""Putting text the bot does not control (model answers, test output, paths, test names)
into GitHub Markdown so that it shows as written and can do nothing else.

Two layers, because GitHub has two. CommonMark syntax (links, images, raw HTML, fences)
is defused by backslash-escaping every ASCII punctuation character in prose, and by
fences and code spans longer than any backtick run in code. GitHub then scans the
rendered text for @mentions, references, closing keywords, commit SHAs and bare URLs
(skipping code); those are broken by bot/inert.py's `neutralize`, the same rule as for
plain-text fields (titles, commit messages), and control characters are shown by its
`visible`. The zero-width space is used literally, not as `&#8203;`, because an entity
shows as text inside code.
"""

from __future__ import annotations

import re

from bot.inert import ZWSP as ZWSP
from bot.inert import neutralize as neutralize
from bot.inert import neutralize_mentions as neutralize_mentions
from bot.inert import visible

_PUNCTUATION = re.compile(r"([!-/:-@\[-`{-~])")
_BACKTICKS = re.compile(r"`+")


def escape_text(text: str) -> str:
    """One line of plain text: no Markdown syntax, no HTML, nothing GitHub autolinks."""
    flat = visible(" ".join(text.split()))  # tabs and runs of spaces: one space
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
    content = neutralize_mentions(visible(text, keep=""))
    runs = [len(run) for run in _BACKTICKS.findall(content)]
    ticks = "`" * (max(runs, default=0) + 1)
    # CommonMark strips one space from each end when both ends have one; pad to keep them.
    if not content:
        content = " "  # all spaces: kept as they are
    elif content[:1] in ("`", " ") or content[-1:] in ("`", " "):
        content = f" {content} "
    return f"{ticks}{content}{ticks}"


def fence(text: str, info: str = "") -> str:
    """A fenced code block that no line of `text` can close (its fence is longer than
    every backtick run inside), with mentions neutralised as well. `info` (the language,
    e.g. "sh") is the bot's own word, never untrusted text."""
    content = neutralize_mentions(visible(text.rstrip()))
    runs = [len(run) for run in _BACKTICKS.findall(content)]
    ticks = "`" * max(3, max(runs, default=0) + 1)
    return f"{ticks}{info}\n{content}\n{ticks}"
