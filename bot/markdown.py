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

# What starts inline syntax anywhere in a line: code, emphasis and strikethrough, links,
# images and footnotes, autolinks and raw HTML, entities, table cells, GitHub's math; and
# a backslash that would escape the next character (or, last, break the line).
_INLINE = re.compile(r"[`*_~\[\]<&|$]|\\(?=[!-/:-@\[-`{-~]|$)")
# What starts a block at the start of a line (the rest are inline characters, escaped
# everywhere): a heading, a quote or an alert, a list item, a thematic break, a setext
# underline; and a number that would start an ordered list ("1." or "1)", then a space).
_LEADING = re.compile(r"^(?=[#>+=-])|^(\d{1,9})(?=[.)](?: |$))")
_BACKTICKS = re.compile(r"`+")
_NAMED = re.compile(r"`([^`]+)`")  # a name in single backticks


def escape_text(text: str) -> str:
    """One line of plain text: no Markdown syntax, no HTML, nothing GitHub autolinks.

    Only what can start syntax is escaped, so a plain-text e-mail notification (GitHub
    sends the Markdown source) shows `add()` and `tests: 2 passed`, not `add\\(\\)` and
    `tests\\: 2 passed`: the inline characters above everywhere, and what starts a block
    at the start of the text. tests/unit/bot/test_markdown_safety.py parses the result in
    every context the bot puts it (a paragraph, a list item, a quote, a table cell)."""
    return _escaped(visible(" ".join(text.split())), first=True)  # whitespace: one space


def _escaped(flat: str, first: bool) -> str:
    """`flat` (one line, control characters shown) escaped; `first`: it starts a line."""
    escaped = _INLINE.sub(lambda match: "\\" + match.group(0), neutralize(flat))
    if not first:
        return escaped
    return _LEADING.sub(lambda match: (match.group(1) or "") + "\\", escaped, count=1)


def escape_prose(text: str) -> str:
    """One line of words that name things in backticks, as the solver writes its warnings
    ("both phases changed `setup.py`") and as a model writes its summary: each name a code
    span (`code_span`), which shows as written with no backslash, and the words between
    escaped as `escape_text` escapes them. Whatever the text holds, each piece is inert on
    its own; an unpaired backtick is escaped. Not for a table cell, which GitHub splits at
    a `|` even inside a code span."""
    flat = visible(" ".join(text.split()))
    pieces, at = [], 0
    for match in _NAMED.finditer(flat):
        pieces.append(_escaped(flat[at:match.start()], first=at == 0))
        pieces.append(code_span(match.group(1)))
        at = match.end()
    pieces.append(_escaped(flat[at:], first=at == 0))
    return "".join(pieces)


def quote_untrusted(text: str, max_chars: int = 4000) -> str:
    """A block quote showing `text` line by line, nothing live in it: words as plain text,
    names in backticks as code (`escape_prose`)."""
    text = text.strip()
    if len(text) > max_chars:
        text = text[:max_chars].rstrip() + " … (cut)"
    lines = [escape_prose(line) for line in text.splitlines()] or [""]
    # A trailing backslash is a hard line break, so the model's lines stay lines; before
    # a blank line (a new paragraph) it would show as a backslash.
    body = [(line + "\\" if line and index < len(lines) - 1 and lines[index + 1] else line)
            for index, line in enumerate(lines)]
    return "\n".join(f"> {line}".rstrip() for line in body)


def code_span(text: str) -> str:
    """Inline code that no backtick, newline or mention in `text` can break out of."""
    content = neutralize_mentions(visible(text, keep=""))
    runs = [len(run) for run in _BACKTICKS.findall(content)]
    ticks = "`" * (max(runs, default=0) + 1)
    # CommonMark strips one space from each end when both ends have one; pad to keep them.
    if not content.strip(" "):
        content = content or " "  # all spaces: kept as they are
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


# GitHub refuses a longer body of an issue comment, a pull request or a review reply:
# 422 "body is too long (maximum is 65536 characters)".
GITHUB_BODY_LIMIT = 65536
CUT_NOTICE = ("… (cut here: GitHub takes at most 65,536 characters in one body; the run "
              "page and the transcript have all of it)")
_FENCE_OPEN = re.compile(r"^ {0,3}(`{3,}|~{3,})")


def _fence_after(fence: str, line: str) -> str:
    """The open fence after `line` ("" outside one): CommonMark's rule, which closes a
    fence with a line of only its character, at least as long, indented 3 at most."""
    if not fence:
        opened = _FENCE_OPEN.match(line)
        return opened.group(1) if opened else ""
    stripped = line.strip()
    closes = (len(line) - len(line.lstrip(" ")) <= 3 and len(stripped) >= len(fence)
              and stripped == fence[0] * len(stripped))
    return "" if closes else fence


def fit_body(text: str, limit: int = GITHUB_BODY_LIMIT) -> str:
    """`text` as GitHub takes it: whole when it fits, else its first whole lines, an open
    fence closed, and a line that says so. Never a cut inside a line (a code span left
    open would make what it holds live Markdown), never a line left out in the middle (a
    fence's opening line left out would do the same to its content)."""
    if len(text) <= limit:
        return text
    budget = limit - len(CUT_NOTICE) - 2  # the notice and the blank line before it
    kept: list[str] = []
    size, fence = 0, ""
    for line in text.split("\n"):
        after = _fence_after(fence, line)
        if size + len(line) + 1 + (len(after) + 1 if after else 0) > budget:
            break
        kept.append(line)
        size, fence = size + len(line) + 1, after
    return "\n".join([*kept, *([fence] if fence else []), "", CUT_NOTICE])
