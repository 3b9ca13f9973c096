"""Hostile text through what the bot writes on GitHub: test output that tries to close
its code fence, a model answer that tries to mention, link, embed and reference, paths
and test names with backticks. Rendered by a real CommonMark parser (markdown-it-py),
then checked for what GitHub would turn live on top of CommonMark: @mentions, #123
references and bare URLs in text outside code."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from bot.inert import neutralize, visible
from bot.markdown import (
    ZWSP,
    code_span,
    escape_prose,
    escape_text,
    fence,
    neutralize_mentions,
    quote_untrusted,
)
from bot.messages import (
    STATUS_MARKER,
    commit_message,
    failure_comment,
    pr_body,
    refused_paths,
    status_failed,
)
from tests.unit.bot.test_messages import report

markdown_it = pytest.importorskip("markdown_it")  # comes with rich, a dependency

EVIL = "https://evil.example/p.gif"
FENCE_BREAK = ("E   assert 1 == 2\n````\n```\n``````````\n~~~\n"
               f"@octocat look: [click]({EVIL}) ![pixel]({EVIL}) <img src={EVIL}>\n"
               "<!-- hide the rest -->\n")
SUMMARY = (
    "## Done, merge now\n"
    "@octocat and @acme/security-team: closes #1, fixes GH-2 and acme/other#3.\n"
    f"[click me]({EVIL}) ![]({EVIL}) [![x]({EVIL})]({EVIL}) <img src={EVIL}>\n"
    f"<{EVIL}> {EVIL} www.evil.example mail@evil.example\n"
    "<details><summary>open</summary>hidden</details>\n```\n"
    "&lt;script&gt; &#64;octocat\n"
    f"    indented {EVIL}\n"
    f"[ref]: {EVIL}\n[ref] and [click][ref]\n"
    "- [ ] a task\n| a | b |\n|---|---|\n| 1 | 2 |\n"
    "\u202eright-to-left override\n")
# What GitHub links by itself in rendered text (not in code, links or attributes).
GITHUB_AUTOLINKS = {
    "mention": re.compile(r"(?<![\w`])@[A-Za-z0-9]"),
    "reference": re.compile(r"#\d|\bGH-\d", re.IGNORECASE),
    "url": re.compile(r"[a-z]+://|\bwww\.", re.IGNORECASE),
    "email": re.compile(r"\w@\w"),
}


def tokens(text: str) -> list[Any]:
    md = markdown_it.MarkdownIt("commonmark").enable(["table", "strikethrough"])
    flat = []
    for token in md.parse(text):
        flat.append(token)
        flat.extend(token.children or [])
    return flat


def live(text: str) -> dict[str, list[str]]:
    """Everything in `text` that would be live on GitHub, by kind."""
    found: dict[str, list[str]] = {}
    for token in tokens(text):
        if token.type in ("image", "link_open", "html_inline", "html_block"):
            found.setdefault(token.type, []).append(str(token.attrs or token.content))
        if token.type == "text":
            for kind, pattern in GITHUB_AUTOLINKS.items():
                found.setdefault(kind, []).extend(pattern.findall(token.content))
        if token.type in ("code_inline", "fence", "code_block"):
            found.setdefault("mention in code", []).extend(
                GITHUB_AUTOLINKS["mention"].findall(token.content))
    return {kind: hits for kind, hits in found.items() if hits}


def test_the_hostile_strings_are_live_when_pasted_raw() -> None:
    """The check can fail: raw, every trick works."""
    raw = live(SUMMARY)
    assert {"image", "link_open", "html_inline", "html_block", "mention", "reference",
            "url"} <= set(raw)
    # The old failure comment: four backticks when the output held three; a line of four
    # in the output closed it.
    output = f"E   assert 1 == 2\n````\n@octocat ![pixel]({EVIL})\n"
    old_fence = "````" if "```" in output else "```"
    naive = f"{old_fence}\n{output}{old_fence}"
    assert "image" in live(naive) and "mention" in live(naive)


def test_test_output_cannot_close_its_fence() -> None:
    text = failure_comment(report(final_output=FENCE_BREAK, exit_reason="max_rounds"))
    fences = [t for t in tokens(text) if t.type == "fence"]
    assert len(fences) == 1
    assert fences[0].content == neutralize_mentions(FENCE_BREAK.rstrip()) + "\n"
    assert fences[0].markup == "`" * 11  # longer than the 10-backtick line inside
    found = live(text)
    assert found.pop("link_open") == [str({"href": url}) for url in (
        "https://bot.example/runs/o/r/7/1", "https://bot.example/runs/o/r/7/1#events")]
    assert found == {}, "only the run page and its transcript, the bot's own links"
    assert "@octocat" not in text and f"@{ZWSP}octocat" in text


def test_the_model_summary_cannot_mention_link_embed_or_reference() -> None:
    quoted = quote_untrusted(SUMMARY)
    assert live(quoted) == {}
    kinds = {t.type for t in tokens(quoted)}
    assert not kinds & {"heading_open", "table_open", "bullet_list_open", "fence",
                        "code_block"}, kinds
    assert all(line.startswith(">") for line in quoted.splitlines())
    # It still reads as what the model wrote, line by line.
    text = "".join(t.content for t in tokens(quoted) if t.type == "text").replace(ZWSP, "")
    assert "## Done, merge now" in text and f"[click me]({EVIL})" in text
    assert "\\x202e" in text  # the bidi override is shown, not obeyed
    assert [t.type for t in tokens(quoted)].count("hardbreak") == SUMMARY.count("\n") - 1


def test_the_pr_body_has_only_the_bots_own_links() -> None:
    body = pr_body(report(
        summary=SUMMARY, warnings=[f"the diff adds a skip marker: @pytest.mark.skip {EVIL}"],
        changed_tests=["tests/t.py::test_x[`@octocat`]: failed → passed"],
        test_files_changed=["tests/@octocat/``x``.py"],
        test_command="pytest -k '@octocat'"))
    found = live(body)
    assert found.pop("link_open") == [str({"href": "https://bot.example/runs/o/r/7/1"})]
    assert found.pop("reference") == ["#7"]  # "Fixes #7", the bot's own
    assert found == {}
    headings = [t for t in tokens(body) if t.type == "heading_open"]
    # What changed, Tests, Reproduce, Cautions, Run, Review checklist
    assert len(headings) == 6
    assert "**CI and secrets:**" in body


@pytest.mark.parametrize("path", [
    "a`b.py", "``", "`", "x\ny.md", " lead and trail ", "@octocat/notes.md",
    f"docs/[x]({EVIL}).md", "```\n## heading", "", " ", "   ",
])
def test_a_code_span_shows_any_path_as_written(path: str) -> None:
    inline = [t for t in tokens(code_span(path)) if t.type == "code_inline"]
    assert len(inline) == 1, code_span(path)
    expected = neutralize_mentions(path.replace("\n", "\\x0a")) or " "
    assert inline[0].content == expected
    assert live(code_span(path)) == {}


def test_status_comment_paths_go_through_the_same_escaping() -> None:
    paths = ["@octocat.py", f"a`b]({EVIL})", "x\n## hi", "<img src=x>"]
    text = status_failed(refused_paths(paths), 1)
    found = live(text)
    assert found.pop("html_block") == [STATUS_MARKER + "\n"]  # the bot's own marker
    assert found == {}
    assert "heading_open" not in {t.type for t in tokens(text)}
    assert len([t for t in tokens(text) if t.type == "code_inline"]) == len(paths)
    assert set(live(status_failed("GitHub said: @octocat is not allowed", 1))) == {
        "html_block"}


def test_commit_message_carries_skip_ci_unless_ci_runs_and_mentions_no_one() -> None:
    skipped = commit_message("Fix add() for @octocat", 7, "pytest", "skip")
    subject = skipped.splitlines()[0]
    assert subject.endswith(" [skip ci]") and not GITHUB_AUTOLINKS["mention"].search(subject)
    assert "Fixes #7." in skipped
    assert "[skip ci]" not in commit_message("Fix add()", 7, "pytest", "run")


def test_fences_and_spans_grow_with_the_content() -> None:
    assert fence("plain").startswith("```\n")
    assert fence("a ```` b").startswith("`````\n")
    assert code_span("a ``` b") == "````a ``` b````"


# Text built from what Markdown and GitHub act on: every ASCII punctuation character,
# digits (ordered lists, entities), words and spaces, newlines and tabs, and the pieces
# of links, mentions, references, entities and HTML.
HOSTILE_PIECES = st.one_of(
    st.sampled_from([
        *"!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~", "0", "1", "12", "a", "B", " ", "  ", "\t",
        "\n", "é", "\u202e", "http://x.io",
        "www.x.io", "@octocat", "#1", "GH-2", "&#64;", "&amp;", "<b>", "</div>", "<!--",
        "***", "---", "===", "```", "~~~", "[x](y)", "![i](y)", "[^1]", "$x$", "1. ",
        "2) ", "- ", "+ ", "> ", "# ", "| a |", "|---|", ":smile:", "a@b.io"]),
    st.text(alphabet="ab ", max_size=3))
HOSTILE_TEXT = st.lists(HOSTILE_PIECES, max_size=14).map("".join)
INLINE_KINDS = {"text", "softbreak", "hardbreak"}


def shown(text: str) -> str:
    """What one line of untrusted text must read as once rendered: as written, with
    whitespace runs one space, control characters shown, GitHub's autolinks broken."""
    return neutralize(visible(" ".join(text.split())))


def rendered_text(markdown: str) -> tuple[str, set[str], set[str]]:
    """The text a reader sees, the inline token kinds and the block token kinds."""
    parsed = tokens(markdown)
    inline = [t for t in parsed if t.type != "inline" and not t.block]
    blocks = {t.type for t in parsed if t.block and t.type != "inline"}
    # A line break, or a new paragraph (a blank line in a quote), reads as a new line;
    # a code span as the name in backticks it shows.
    text = "".join("\n" if t.type in ("softbreak", "hardbreak", "paragraph_close")
                   else "" if t.block else f"`{t.content}`" if t.type == "code_inline"
                   else t.content for t in parsed if t.type != "inline")
    return text.strip("\n"), {t.type for t in inline}, blocks


def as_written(text: str) -> str:
    """A line as its reader should see it, less the zero-width spaces that break links."""
    return visible(" ".join(text.split())).replace(ZWSP, "")


@settings(max_examples=400, deadline=None)
@given(HOSTILE_TEXT)
@example("1. item")
@example("2) item")
@example("=== ")
@example("+ item")
@example("# heading")
@example("--- ")
@example("a\\")
@example("\\*not emphasis*")
@example("- [ ] task")
@example("> [!NOTE] alert")
def test_escaped_text_is_plain_text_in_every_context_the_bot_uses(text: str) -> None:
    """escape_text leaves most punctuation bare (no backslash in a plain-text e-mail
    where none is needed), so its claim is checked by parsing: at a line's start, after
    a list marker, in a table cell, it renders as the text, nothing else."""
    escaped = escape_text(text)
    for markdown, container in (
            (escaped, {"paragraph_open", "paragraph_close"}),
            (f"Fixes #7: {escaped}", {"paragraph_open", "paragraph_close"}),
            (f"- {escaped}\n- {escaped}", {"bullet_list_open", "bullet_list_close",
                                            "list_item_open", "list_item_close",
                                            "paragraph_open", "paragraph_close"}),
            (f"| a |\n|---|\n| {escaped} |", {"table_open", "table_close", "thead_open",
                                                "thead_close", "tbody_open", "tbody_close",
                                                "tr_open", "tr_close", "th_open", "th_close",
                                                "td_open", "td_close"})):
        seen, inline, blocks = rendered_text(markdown)
        assert inline <= INLINE_KINDS, (markdown, inline)
        assert blocks <= container, (markdown, blocks)
        assert live(markdown).keys() <= {"reference"} and live(markdown).get(
            "reference", ["#7"]) == ["#7"], (markdown, live(markdown))
        expected = shown(text)
        if container == {"paragraph_open", "paragraph_close"} and markdown != escaped:
            expected = f"Fixes #7: {expected}"
        if "bullet_list_open" in container:
            expected = f"{expected}{expected}"
        if "table_open" in container:
            expected = f"a{expected}"
        assert seen.replace("\n", "") == expected.strip(), (markdown, seen)


@settings(max_examples=200, deadline=None)
@given(st.lists(HOSTILE_TEXT, min_size=1, max_size=5).map("\n".join))
@example("a heading?\n===")
@example("a heading?\n---")
@example("line\n\nafter a blank line")
def test_quoted_text_is_plain_text_line_by_line(text: str) -> None:
    """The model's summary: each line as written, names in backticks as code."""
    quoted = quote_untrusted(text)
    seen, inline, blocks = rendered_text(quoted)
    assert inline <= INLINE_KINDS | {"code_inline"}, (quoted, inline)
    assert blocks <= {"blockquote_open", "blockquote_close", "paragraph_open",
                      "paragraph_close"}, (quoted, blocks)
    assert live(quoted) == {}, quoted
    lines = [as_written(line) for line in text.strip().splitlines()]
    assert seen.replace(ZWSP, "").split("\n") == [line for line in lines if line] \
        or not text.strip(), (quoted, seen)


@settings(max_examples=400, deadline=None)
@given(HOSTILE_TEXT)
@example("both phases changed `setup.py`: the change keeps the agent's")
@example("`@octocat` and `#1` and `https://x.io` `` ` `")
@example("a\\`b` c")
@example("` lead` `trail ` ` `")
@example("# `h` a heading?")
@example("1. `x` a list?")
def test_prose_names_are_code_and_the_words_plain_text(text: str) -> None:
    """escape_prose in every context the bot puts a warning or note: code spans for the
    names, the words as text, nothing live. Never in a table cell: GitHub splits a cell at
    a `|` inside a code span too (escape_text escapes it)."""
    escaped = escape_prose(text)
    paragraph = {"paragraph_open", "paragraph_close"}
    item = paragraph | {"bullet_list_open", "bullet_list_close", "list_item_open",
                        "list_item_close"}
    for markdown, container, prefix in ((escaped, paragraph, ""),
                                        (f"- ⚠️ {escaped}", item, "⚠️ ")):
        seen, inline, blocks = rendered_text(markdown)
        assert inline <= INLINE_KINDS | {"code_inline"}, (markdown, inline)
        assert blocks <= container, (markdown, blocks)
        assert live(markdown) == {}, (markdown, live(markdown))
        assert seen.replace(ZWSP, "").replace("\n", "") == \
            (prefix + as_written(text)).strip(), (markdown, seen)


def test_escaping_adds_no_backslash_where_none_is_needed() -> None:
    """What a plain-text e-mail shows: the title and the model's words as written."""
    assert escape_text("add() subtracts; see calc.py: 2 tests, 100% - ok?") == \
        "add() subtracts; see calc.py: 2 tests, 100% - ok?"
    assert escape_text("1.5 seconds, (cut) {x} = y + z") == "1.5 seconds, (cut) {x} = y + z"
    assert escape_text("# 1. `x` *y* [z](w) <b> &amp; a|b $m$ ~s~ _u_") == \
        "\\# 1. \\`x\\` \\*y\\* \\[z\\](w) \\<b> \\&amp; a\\|b \\$m\\$ \\~s\\~ \\_u\\_"
