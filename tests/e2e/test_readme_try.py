"""The README's "Try it in five minutes", run as written: its shell blocks, in a fresh
`git clone` of this repository's HEAD (so `examples/` is what was committed), with the
installed `frognano` on PATH and a HOME of its own (no git identity, no state, no model
cache of the developer's), checked against what the section says it prints."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.paths import REPO_ROOT

SECTION = "## Try it in five minutes"
INSTALL = "scripts/install.sh --dev"  # the section's first block; the suite runs installed
DONE_MARK = "@@scripted block done@@"
EXIT_MARK = "@@gguf block exit:"


@dataclass
class TrySection:
    install: str  # the install block, which the test does not rerun
    scripted: str  # the scripted model's block
    gguf: str  # the real GGUF's block
    expected_output: list[str]  # the ```text block: lines `solve` ends with (… = anything)
    expected_diff: list[str]  # the ```diff block: the branch's change
    gguf_message: str  # the code span saying how the GGUF run ends


def section_text(readme: str) -> str:
    start = readme.index(SECTION)
    end = readme.find("\n## ", start + len(SECTION))
    return readme[start:end if end > 0 else None]


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of each fenced block, in order."""
    return [(lang, body) for lang, body in
            re.findall(r"^```(\w*)\n(.*?)^```$", text, flags=re.MULTILINE | re.DOTALL)]


def parse_try(readme: str) -> TrySection:
    text = section_text(readme)
    blocks = fenced_blocks(text)
    shell = [body for lang, body in blocks if lang == "sh"]
    by_lang = {lang: body for lang, body in blocks if lang in ("text", "diff")}
    assert len(shell) == 3, f"the try has three shell blocks (install, scripted, GGUF): {shell}"
    prose = re.sub(r"^```\w*\n.*?^```$", "", text, flags=re.MULTILINE | re.DOTALL)
    spans = [s for s in re.findall(r"`([^`]+)`", prose.replace("\n", " "))
             if "without ending its turn" in s]
    assert len(spans) == 1, "the section quotes how the GGUF run ends, once"
    return TrySection(shell[0].strip(), shell[1], shell[2],
                      by_lang["text"].splitlines(), by_lang["diff"].splitlines(), spans[0])


def wildcard(line: str) -> re.Pattern[str]:
    """A README line as a pattern: `…` stands for anything the run fills in."""
    return re.compile(".*".join(re.escape(part) for part in line.split("…")))


def lines_in_order(expected: list[str], output: str) -> list[str]:
    """The expected lines that `output` does not hold, in that order (empty: all found)."""
    got = output.splitlines()
    at = 0
    for index, line in enumerate(expected):
        pattern = wildcard(line.rstrip())
        found = next((i for i in range(at, len(got)) if pattern.fullmatch(got[i].rstrip())),
                     None)
        if found is None:
            return expected[index:]
        at = found + 1
    return []


def branch_of(expected_output: list[str]) -> str:
    match = next(re.search(r"on branch (\S+)", line) for line in expected_output
                 if "on branch" in line)
    assert match, "the expected output names the branch"
    return match.group(1)


def clean_environment(home: Path) -> dict[str, str]:
    """A newcomer's shell: the installed `frognano` on PATH, a fresh HOME, none of the
    developer's frognano, git or Python settings."""
    bin_dir = Path(shutil.which("frognano") or sys.executable).parent
    # The default work directory (/var/tmp/frognano-<uid>) stays: the sandbox's uid must
    # reach the workspace, which a pytest tmp_path (0700) would not let it.
    return {"PATH": f"{bin_dir}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": str(home), "LANG": "C.UTF-8", "TERM": "dumb"}


def clone_head(source: Path, into: Path) -> Path:
    """A fresh clone of `source`'s HEAD: the README and examples/ as committed."""
    subprocess.run(["git", "clone", "-q", str(source), str(into)], check=True)
    return into


def run_try(section: TrySection, clone: Path, home: Path,
            with_gguf: bool) -> subprocess.CompletedProcess[str]:
    """The section's blocks in one shell from the clone's root, as a reader pastes them."""
    home.mkdir()
    script = f"set -eo pipefail\n{section.scripted}\necho '{DONE_MARK}'\n"
    if with_gguf:
        script += f"set +e\n{section.gguf}\necho \"{EXIT_MARK}$?\"\n"
    return subprocess.run(["bash", "-c", script], cwd=clone, env=clean_environment(home),
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return clone_head(REPO_ROOT, tmp_path_factory.mktemp("try") / "clone")


@pytest.fixture(scope="module")
def section(clone: Path) -> TrySection:
    return parse_try((clone / "README.md").read_text(encoding="utf-8"))


def test_the_install_block_is_the_install(section: TrySection, clone: Path) -> None:
    """Not rerun here (the suite runs in what it installed), so it must be just that."""
    assert section.install == INSTALL
    assert os.access(clone / "scripts" / "install.sh", os.X_OK)


def _check_scripted_run(section: TrySection, done: subprocess.CompletedProcess[str],
                        home: Path) -> None:
    output = done.stdout + done.stderr
    assert done.returncode == 0 and DONE_MARK in done.stdout, output
    scripted_part = done.stdout.split(DONE_MARK)[0]
    assert lines_in_order(section.expected_output, scripted_part) == [], scripted_part
    assert lines_in_order(section.expected_diff, scripted_part) == [], scripted_part
    repo = home / "calc"
    branches = subprocess.run(["git", "-C", str(repo), "branch", "--list", "frognano/*",
                               "--format=%(refname:short)"], capture_output=True, text=True,
                              check=True).stdout.split()
    assert branches == [branch_of(section.expected_output)]
    assert "return a - b" in (repo / "calc.py").read_text().split("def sub")[0], \
        "the current branch is untouched"
    status = subprocess.run(["git", "-C", str(repo), "status", "--porcelain"],
                            capture_output=True, text=True, check=True).stdout
    assert status == ""


def test_the_scripted_try_runs_as_written(section: TrySection, clone: Path,
                                          tmp_path: Path) -> None:
    done = run_try(section, clone, tmp_path / "home", with_gguf=False)
    _check_scripted_run(section, done, tmp_path / "home")


def test_the_real_gguf_try_runs_as_written(section: TrySection, clone: Path,
                                           tmp_path: Path) -> None:
    """The test model drives the loop for a minute and the run says how it ended: exit 1,
    the tests still failing, nothing committed, the words the README quotes."""
    done = run_try(section, clone, tmp_path / "home", with_gguf=True)
    _check_scripted_run(section, done, tmp_path / "home")
    gguf_part = done.stdout.split(DONE_MARK)[1]
    assert f"{EXIT_MARK}1" in gguf_part, gguf_part + done.stderr
    assert re.search(r"^tests after: +FAIL", gguf_part, flags=re.MULTILINE), gguf_part
    assert wildcard(section.gguf_message).search(gguf_part.replace("\n", " ")), gguf_part
    assert "committed" not in gguf_part
