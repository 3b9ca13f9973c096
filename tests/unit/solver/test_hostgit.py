"""The host's view of a change (solver/hostgit.py): its paths and their line counts."""

from __future__ import annotations

from pathlib import Path

from solver.hostgit import HostRepo, same_noreply
from tests.conftest import git, make_repo


def test_changed_paths_cover_edits_additions_deletions_and_renames(tmp_path: Path) -> None:
    source = make_repo(tmp_path / "r", {"a.py": "a\n", "b.py": "b\n", "old/name.py": "x\n"})
    host = HostRepo.create(source, "main", tmp_path / "run" / "git", tmp_path / "run" / "ws")
    repo = host.work_tree
    (repo / "a.py").write_text("changed\n")
    (repo / "b.py").unlink()
    (repo / "new").mkdir()
    (repo / "old" / "name.py").rename(repo / "new" / "name.py")
    (repo / "c.py").write_text("c\n")
    assert host.snapshot().paths == ["a.py", "b.py", "c.py", "new/name.py", "old/name.py"]


def test_numstat_gives_each_changed_paths_lines_added_and_removed(tmp_path: Path) -> None:
    """The PR body's size of the change: per path, a binary file without line counts."""
    source = make_repo(tmp_path / "r", {"a.py": "a\nb\n", "b.py": "b\n", "t\tab.py": "x\n"})
    host = HostRepo.create(source, "main", tmp_path / "run" / "git", tmp_path / "run" / "ws")
    (host.work_tree / "a.py").write_text("A\nb\nc\n")
    (host.work_tree / "b.py").unlink()
    (host.work_tree / "logo.png").write_bytes(b"\0\x89PNG")
    (host.work_tree / "t\tab.py").write_text("y\n")
    assert host.numstat(host.snapshot().tree) == [
        ("a.py", 2, 1), ("b.py", 0, 1), ("logo.png", None, None), ("t\tab.py", 1, 1)]


def test_the_bots_commits_made_through_githubs_api_count_as_its_own(tmp_path: Path) -> None:
    """GitHub authors the commits it makes for the App as `<id>+<bot>@users.noreply…`:
    `distrust` still finds the bot's test edits in them (a person's stay trusted)."""
    source = make_repo(tmp_path / "r", {"calc.py": "x\n", "tests/test_calc.py": "ok\n"})
    bot = "frognano[bot]@users.noreply.github.com"
    for author, text in ((f"41898282+{bot}", "weakened\n"), ("9+someone@example.com", "")):
        if text:
            (source / "tests" / "test_calc.py").write_text(text)
        else:
            (source / "calc.py").write_text("y\n")
        git(source, "-c", f"user.email={author}", "commit", "-qam", "change")
    host = HostRepo.create(source, "main", tmp_path / "run" / "git", tmp_path / "run" / "ws")
    assert host.distrust("HEAD~2", bot, lambda path: path.startswith("tests/")) == [
        "tests/test_calc.py"]
    assert host.read_base("tests/test_calc.py") == b"ok\n"
    assert same_noreply(f"7+{bot}", bot) and same_noreply(bot.upper(), bot)
    assert not same_noreply(f"x+{bot}", bot) and not same_noreply("7+a@b.c", "a@b.c")
