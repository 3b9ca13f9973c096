"""Text the bot did not write (issue titles, the model's words and tool arguments, test
output, paths), made inert for wherever it goes: a terminal, a log line, the dashboard,
or a plain-text field on GitHub (a commit message, a PR title). bot/markdown.py builds
the Markdown bodies on top of the same two functions.

`visible` is the one rule for control characters: every character Python does not call
printable (C0 but space and the kept newline and tab, DEL, C1, ESC and so every terminal
sequence it would start, bidi overrides and isolates, zero-width and other format
characters, line and paragraph separators) is shown as a `\\xNN` escape. Shown, not
dropped: the reader sees that the model tried an OSC 52 clipboard write, and the sequence
without its ESC is plain text that no terminal acts on.

`neutralize` is the one rule for what GitHub links by itself, from GitHub's documented
autolinks ("Autolinked references and URLs", "Using keywords in issues and pull
requests"): `@user` and `@org/team` mentions; `#26`, `GH-26`, `owner/repo#26` and the
issue, pull request and commit URLs; commit SHAs (7 to 40 hex digits, also `user@sha` and
`owner/repo@sha`); bare `https://` and `www.` links; and the closing keywords close(s/d),
fix(es/ed), resolve(s/d) before a reference, which close that issue when the PR or the
commit reaches the default branch (a squash merge's commit subject is the PR title).
Each is broken by a zero-width space (U+200B) where GitHub's pattern needs the next
character: after `@` and `#` (a letter or digit must follow), between `GH` and `-`,
inside `://` and `www.`, every six hex digits of a SHA (seven are the shortest GitHub
resolves), and after a closing keyword (a keyword must be followed by `:`, spaces and the
reference). The space is invisible in a title, a commit message and rendered Markdown
alike, so one form serves plain text and Markdown; it is the one Renovate puts after `@`
in its PR bodies. A fullwidth `＃` would also stop the links but shows as a different
character, and an HTML entity shows as text in a plain-text field.
"""

from __future__ import annotations

import re

ZWSP = "\u200b"
_MENTION = re.compile(r"@(?!\u200b)")
_REFERENCE = re.compile(r"#(?=[^\u200b\s])")
_GH_REFERENCE = re.compile(r"\b(GH)-(?=\d)", re.IGNORECASE)
_SCHEME = re.compile(r":(?=//)")
_WWW = re.compile(r"\b(www)\.", re.IGNORECASE)
_SHA = re.compile(r"(?<![0-9a-f])[0-9a-f]{7,40}(?![0-9a-f])", re.IGNORECASE)
# Followed by what GitHub takes as the issue to close: #N, GH-N, owner/repo#N or a URL.
_CLOSING_KEYWORD = re.compile(
    r"\b(close[sd]?|fix(?:e[sd])?|resolve[sd]?)"
    r"(?=:?\s*(?:#|gh-\d|[\w.-]+/[\w.-]+#|https?:))", re.IGNORECASE)
SHA_PIECE = 6  # GitHub resolves a SHA from 7 hex digits on


def visible(text: str, keep: str = "\n\t") -> str:
    r"""`text` with every non-printable character but those in `keep` shown as `\xNN`."""
    return "".join(c if c.isprintable() or c in keep else f"\\x{ord(c):02x}" for c in text)


def neutralize_mentions(text: str) -> str:
    """`@name` and `@org/team` no longer mention anyone (safe to apply twice)."""
    return _MENTION.sub("@" + ZWSP, text)


def neutralize(text: str) -> str:
    """Nothing GitHub links by itself: mentions, references, closing keywords, commit
    SHAs, bare URLs (safe to apply twice)."""
    text = _CLOSING_KEYWORD.sub(lambda m: m.group(1) + ZWSP, text)
    text = neutralize_mentions(text)
    text = _REFERENCE.sub("#" + ZWSP, text)
    text = _GH_REFERENCE.sub(lambda m: m.group(1) + ZWSP + "-", text)
    text = _SCHEME.sub(":" + ZWSP, text)
    text = _WWW.sub(lambda m: m.group(1) + ZWSP + ".", text)
    return _SHA.sub(_break_sha, text)


def _break_sha(match: re.Match[str]) -> str:
    digits = match.group(0)
    return ZWSP.join(digits[i:i + SHA_PIECE] for i in range(0, len(digits), SHA_PIECE))


def plain_line(text: str) -> str:
    """One line of a plain-text field on GitHub (a PR title, a commit subject): runs of
    whitespace one space, control characters shown, nothing GitHub links."""
    return neutralize(visible(" ".join(text.split())))
