"""A review as the model reads it (solver/agent/prompts.review_feedback): the reviewer's
words, each line comment with its file, line and the diff it is about."""

from __future__ import annotations

from dataclasses import dataclass

from solver.agent.prompts import review_comments_text, review_feedback


@dataclass(frozen=True)
class Comment:
    body: str | None
    path: str
    line: int | None
    diff_hunk: str


def test_a_review_reads_as_its_body_then_each_line_comment() -> None:
    text = review_feedback("Name the sum.", [
        Comment("use a + b here", "calc.py", 2, "@@ -1 +1 @@\n-    return a - b"),
        Comment("  /frognano rename it", "calc.py", None, "@@ -5 +5 @@")])
    assert text.startswith("A reviewer asked for changes on your pull request.\n\n"
                           "Name the sum.\n\n")
    assert "Review comment on calc.py, line 2:\nuse a + b here\n\nThe diff it is about:\n" \
           "@@ -1 +1 @@\n-    return a - b" in text
    assert "Review comment on calc.py:\nrename it\n" in text, "the command word is not asked"


def test_only_a_whole_command_word_is_dropped() -> None:
    text = review_comments_text([Comment("/frognanos are frogs", "a.py", 1, "@@")])
    assert "a.py, line 1:\n/frognanos are frogs" in text
    assert review_comments_text([]) == ""
