"""HostRepo around the setup phase, as data: which tree setup gets, what the change is.

The sandbox's part is played by plain writes into the work tree (the scenarios with real
bubblewrap are tests/reliability/test_hostile_setup_review.py and test_setup_writes.py).
"""

from __future__ import annotations

from pathlib import Path

from solver.policy import setup_inputs
from solver.run import OwnCommits, open_workspace
from tests.conftest import git, make_repo

BOT = "bot@example.com"


def _bot_commit(repo: Path, files: dict[str, str], author: str = BOT) -> None:
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=someone", "-c", f"user.email={author}", "commit", "-qm", "c")


def test_the_change_is_the_agents_delta_on_base(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "src", {"a.py": "a\n", "meta/PKG-INFO": "v1\n",
                                        "both.txt": "one\n"})
    host = open_workspace(repo, None, tmp_path / "run")
    work = host.work_tree
    (work / "meta" / "PKG-INFO").write_text("v2, by setup\n")  # setup's writes
    (work / "both.txt").write_text("one\nsetup\n")
    assert host.finish_setup() == ["both.txt", "meta/PKG-INFO"]
    assert (work / ".git").is_dir()
    (work / "a.py").write_text("a, fixed\n")  # the agent's
    (work / "both.txt").write_text("one\nsetup\nagent\n")
    snapshot = host.snapshot()
    assert snapshot.paths == ["a.py", "both.txt"]
    assert snapshot.setup_writes == ["meta/PKG-INFO"]
    assert snapshot.setup_overlap == ["both.txt"], "both changed it: the agent's side kept"
    assert host.read(snapshot.tree, "meta/PKG-INFO") == b"v1\n"
    assert host.read(snapshot.tree, "both.txt") == b"one\nsetup\nagent\n"


def test_setup_gets_the_branch_without_the_bots_commits(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "src", {"calc.py": "x = 1\n", "README.md": "r\n"})
    git(repo, "checkout", "-q", "-b", "frognano/issue-1")
    _bot_commit(repo, {"setup.py": "raise SystemExit('model')\n", "calc.py": "x = 2\n"})
    _bot_commit(repo, {"README.md": "a person's\n"}, author="person@example.com")
    _bot_commit(repo, {"README.md": "the bot again\n", "calc.py": "x = 3\n"})
    _bot_commit(repo, {"calc.py": "x = 4, a person's\n"}, author="person@example.com")
    host = open_workspace(repo, "frognano/issue-1", tmp_path / "run",
                          own_commits=OwnCommits("refs/heads/main", BOT))
    work = host.work_tree
    assert not (work / ".git").exists() and not (work / "setup.py").exists()
    assert (work / "README.md").read_text() == "a person's\n", "a person's commit is trusted"
    assert (work / "calc.py").read_text() == "x = 4, a person's\n"
    host.finish_setup()  # the run's start, for the agent phase
    assert (work / "setup.py").read_text() == "raise SystemExit('model')\n"
    assert (work / "README.md").read_text() == "the bot again\n"
    assert git(work, "status", "--porcelain") == ""
    assert host.snapshot().paths == []


def test_what_setup_reads() -> None:
    assert setup_inputs(["setup.py", "pkg/pyproject.toml", "requirements/tests.txt",
                         "requirements-dev.txt", "poetry.lock", "tox.ini", "src/a.py",
                         "docs/setup.md"]) == ["setup.py", "pkg/pyproject.toml",
                                               "requirements/tests.txt",
                                               "requirements-dev.txt", "poetry.lock",
                                               "tox.ini"]
