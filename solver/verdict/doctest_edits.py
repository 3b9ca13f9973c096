"""Doctests are tests: what a change did to the examples of the baseline's doctests.

A test id from a file that is not a test file is a doctest item (`--doctest-modules`):
the examples in a docstring of library code. A model can make a failing doctest pass by
editing its expected output, deleting the example or adding `# doctest: +SKIP` or
`+ELLIPSIS` to it, all without touching a test file. So the examples of every docstring
the baseline collected are compared, base against candidate (`doctest.DocTestParser`):
a baseline example changed or removed, or given a new directive, is a test edit. It is
shown, never trusted: the verdict runs the candidate file with that docstring's original
literal put back, so the original examples run against the new code. Examples the
change adds around the originals are new tests and run with them.
"""

from __future__ import annotations

import ast
import doctest
from dataclasses import dataclass, field

Example = tuple[str, str, str | None, tuple[tuple[int, bool], ...]]
_PARSER = doctest.DocTestParser()
_DEFINITIONS = (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


@dataclass
class DoctestEdit:
    """The change to one file's collected doctests."""

    path: str
    edited: list[str] = field(default_factory=list)  # docstrings whose originals changed
    added: int = 0  # examples added to collected docstrings, originals kept
    restored: bytes | None = None  # the candidate with the edited docstrings put back
    problem: str = ""  # why the originals could not be put back (refuses the change)


def docstrings(tree: ast.Module) -> dict[str, ast.Constant]:
    """Qualified name ("" for the module) → the docstring's string literal (a Constant
    whose value is a str: `text` reads it)."""
    found: dict[str, ast.Constant] = {}

    def visit(node: ast.AST, qual: str) -> None:
        body = getattr(node, "body", [])
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            found[qual] = body[0].value
        for child in body:
            if isinstance(child, _DEFINITIONS):
                visit(child, f"{qual}.{child.name}" if qual else child.name)

    visit(tree, "")
    return found


def text(node: ast.Constant) -> str:
    return node.value if isinstance(node.value, str) else ""


def examples(docstring: str) -> list[Example]:
    """The examples as doctest runs them: source, expected output, exception, options."""
    try:
        parsed = _PARSER.get_examples(docstring)
    except ValueError:  # doctest refuses the docstring: keep it as one opaque example
        return [(docstring, "", None, ())]
    return [(e.source, e.want, e.exc_msg, tuple(sorted(e.options.items()))) for e in parsed]


def _kept(original: list[Example], candidate: list[Example]) -> bool:
    """Every original example still there, unchanged and in order (new ones between)."""
    rest = iter(candidate)
    return all(any(example == other for other in rest) for example in original)


def collected(qual: str, names: list[str], quals: list[str]) -> bool:
    """Whether the baseline's doctest items (`module.Class.method`; `module` for the
    module's own docstring) include the docstring at `qual` ("" for the module's: the
    item that names no class or function of the file)."""
    def names_one(name: str, other: str) -> bool:
        return name == other or name.endswith("." + other)
    if qual:
        return any(names_one(name, qual) for name in names)
    return any(not any(names_one(name, q) for q in quals if q) for name in names)


def _span(lines: list[bytes], node: ast.Constant) -> tuple[int, int]:
    """The literal's byte offsets in the source (ast columns are UTF-8 byte offsets)."""
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    end_line = node.end_lineno if node.end_lineno is not None else node.lineno
    end_col = node.end_col_offset if node.end_col_offset is not None else node.col_offset
    return starts[node.lineno - 1] + node.col_offset, starts[end_line - 1] + end_col


def _parse(source: bytes) -> tuple[ast.Module, list[bytes]] | None:
    try:
        return ast.parse(source), source.splitlines(keepends=True)
    except (SyntaxError, ValueError):
        return None


def compare(path: str, base: bytes, candidate: bytes, names: list[str]) -> DoctestEdit:
    """What the candidate did to the collected docstrings of `path`, and the candidate
    with each edited docstring's original literal back (`restored`)."""
    edit = DoctestEdit(path)
    before, after = _parse(base), _parse(candidate)
    if before is None or after is None:
        return edit  # a file that does not parse fails its doctests' collection anyway
    (base_tree, base_lines), (new_tree, new_lines) = before, after
    new_docs, base_docs = docstrings(new_tree), docstrings(base_tree)
    swaps: list[tuple[int, int, bytes]] = []
    for qual, node in base_docs.items():
        original = examples(text(node))
        now = new_docs.get(qual)
        if not original or now is None or not collected(qual, names, list(base_docs)):
            continue  # a docstring gone takes its test with it: the test no longer runs
        new = examples(text(now))
        if _kept(original, new):
            edit.added += len(new) - len(original)
            continue
        edit.edited.append(qual or "the module")
        start, end = _span(base_lines, node)
        new_start, new_end = _span(new_lines, now)
        swaps.append((new_start, new_end, b"".join(base_lines)[start:end]))
    if swaps:
        restored = candidate
        for start, end, literal in sorted(swaps, reverse=True):
            restored = restored[:start] + literal + restored[end:]
        edit.restored = restored
        edit.problem = _check(restored, base_tree, names)
    return edit


def _check(restored: bytes, base_tree: ast.Module, names: list[str]) -> str:
    """Why the restored file does not hold the original examples ("" when it does)."""
    parsed = _parse(restored)
    if parsed is None:
        return "the file does not parse once its original docstrings are back"
    now, base_docs = docstrings(parsed[0]), docstrings(base_tree)
    for qual, node in base_docs.items():
        if collected(qual, names, list(base_docs)) and qual in now \
                and not _kept(examples(text(node)), examples(text(now[qual]))):
            return f"the original examples of {qual or 'the module'} could not be put back"
    return ""
