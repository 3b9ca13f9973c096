"""The documentation's own links: every relative link in README.md and docs/*.md names a
file of this repository (a topic moved out of the README must still be found)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.paths import REPO_ROOT

DOCUMENTATION = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def relative_links(path: Path) -> list[str]:
    """The targets of `[text](target)` outside fenced code, web addresses left out."""
    text = re.sub(r"^```.*?^```$", "", path.read_text(encoding="utf-8"),
                  flags=re.MULTILINE | re.DOTALL)
    return [target for target in LINK.findall(text)
            if not re.match(r"[a-z]+:", target) and not target.startswith("#")]


def broken_links(files: list[Path], root: Path = REPO_ROOT) -> list[str]:
    return [f"{path.relative_to(root)}: {target}" for path in files
            for target in relative_links(path)
            if not (path.parent / target.split("#")[0]).exists()]


def test_every_documentation_link_resolves() -> None:
    assert broken_links(DOCUMENTATION) == []


def test_the_readme_links_every_topic_file() -> None:
    """Each docs/ file is reachable from the README, one link away."""
    linked = {(REPO_ROOT / target.split("#")[0]).resolve()
              for target in relative_links(REPO_ROOT / "README.md")}
    assert [p.name for p in DOCUMENTATION[1:] if p.resolve() not in linked] == []


def test_a_broken_link_is_found(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("[here](page.md) [gone](docs/GONE.md) [web](https://example.org)\n"
                    "```\n[in code](nowhere.md)\n```\n")
    assert relative_links(page) == ["page.md", "docs/GONE.md"]
    assert broken_links([page], tmp_path) == ["page.md: docs/GONE.md"]
