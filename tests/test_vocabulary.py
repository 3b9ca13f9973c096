"""One word for one thing (issue 22 §1, docs/ARCHITECTURE.md "Words"): the old word that
meant a round, a candidate, a run number and a try at once appears nowhere in the product,
its templates and its docs. Allowed: the one module that spells the old names to read them
(solver/old_names.py), the migrations that made and renamed the old columns, and in the
docs a code span naming an old name in a paragraph that says it is one."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

from solver import old_names

ROOT = Path(__file__).resolve().parents[1]
WORD = re.compile(r"attempt", re.IGNORECASE)
# Whole files that must spell the old names: the reader of old input and records, and the
# migrations that created (0001) and renamed (0004) the old columns. 0002 and 0003 hold
# none, and stay checked.
EXEMPT = {"solver/old_names.py", "runstore/migrations/versions/0001_run_records.py",
          "runstore/migrations/versions/0004_run_number_and_rounds.py"}
NOT_PRODUCT = ("tests/", "build/")
DOCS = re.compile(r"(README\.md|docs/.*\.md)$")
# A paragraph that names an old name says that it is one.
SAYS_OLD = re.compile(r"old name|issue 22 §1|of before", re.IGNORECASE)
# The transcript file name of before (docs/TRANSCRIPT.md), which no code writes any more.
OLD_FILE_NAME = "issue-N-attempt-G.jsonl"


def old_spellings() -> set[str]:
    """What a doc may show in a code span: every old name solver/old_names.py reads."""
    names = {*old_names.CONFIG_KEYS.values(), *old_names.SETTINGS.values(),
             *old_names.SOLVE_FLAGS.values(), *old_names.EXIT_REASONS,
             *old_names.RECORD_KINDS, *(old for _, old in old_names.RECORD_KEYS)}
    names |= {f"{outer}.{old}" for outer, inner in old_names.NESTED_KEYS.items()
              for old in inner}
    return names | set().union(*old_names.NESTED_KEYS.values()) | {OLD_FILE_NAME}


def product_files() -> Iterator[str]:
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, capture_output=True, text=True, check=True).stdout
    for path in sorted(set(listed.splitlines())):
        if not path.startswith(NOT_PRODUCT) and (ROOT / path).is_file():
            yield path


def _text(path: str) -> str | None:
    try:
        return (ROOT / path).read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):  # a binary file, or one deleted meanwhile
        return None


def doc_problems(path: str, text: str, allowed: set[str]) -> list[str]:
    """Each use of the old word in a doc that is not an old name, named as one."""
    problems = []
    for paragraph in re.split(r"\n\s*\n", text):
        if not WORD.search(paragraph):
            continue
        spans = list(re.finditer(r"`([^`\n]+)`", paragraph))
        inside = [(m.start(), m.end()) for m in spans if m.group(1) in allowed]
        for hit in WORD.finditer(paragraph):
            named = any(start < hit.start() < end for start, end in inside)
            if not (named and SAYS_OLD.search(paragraph)):
                line = paragraph[:hit.start()].count("\n") + 1
                snippet = paragraph.splitlines()[line - 1].strip()[:120]
                problems.append(f"{path}: {snippet}")
    return problems


def vocabulary_problems(files: list[tuple[str, str]]) -> list[str]:
    allowed = old_spellings()
    problems = []
    for path, text in files:
        if path in EXEMPT or not WORD.search(text):
            continue
        if DOCS.fullmatch(path):
            problems += doc_problems(path, text, allowed)
        else:
            problems += [f"{path}:{number}: {line.strip()[:120]}"
                         for number, line in enumerate(text.splitlines(), start=1)
                         if WORD.search(line)]
    return problems


def test_the_old_word_is_nowhere_in_the_product() -> None:
    files = [(path, text) for path in product_files() if (text := _text(path)) is not None]
    assert len(files) > 100, "the product's files were not found"
    problems = vocabulary_problems(files)
    assert not problems, "use round, candidate, run number or try (docs/ARCHITECTURE.md " \
                         "\"Words\"):\n" + "\n".join(problems)


def test_the_check_finds_the_old_word_in_code_templates_and_docs() -> None:
    """The check can fail: in code anywhere, in a doc outside an old name's code span, or
    in a span whose paragraph does not say it names an old name."""
    code = "def retry(attempt: int) -> None:\n    pass\n"
    template = "<td>{{ run.number }}</td><th>Attempt</th>\n"
    docs = ("Old names: `max_attempts` is the old name of `max_rounds`.\n\n"
            "Each attempt runs in its own sandbox.\n\n"
            "Set `attempts_in_parallel: 3` to run three.\n")
    problems = vocabulary_problems([("bot/x.py", code), ("bot/templates/x.html", template),
                                    ("docs/X.md", docs)])
    assert problems == ["bot/x.py:1: def retry(attempt: int) -> None:",
                        "bot/templates/x.html:1: <td>{{ run.number }}</td><th>Attempt</th>",
                        "docs/X.md: Each attempt runs in its own sandbox.",
                        "docs/X.md: Set `attempts_in_parallel: 3` to run three."]
    assert vocabulary_problems([("solver/old_names.py", code)]) == [], "the one reader"
