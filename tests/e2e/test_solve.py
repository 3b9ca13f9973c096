"""`frognano solve` end to end: real git, real bubblewrap, the scripted model through the
real Qwen3-Coder parser, the real CLI process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from solver.agent.transcript import read_transcript
from solver.models.scripted import final_answer, think_and_call
from tests.conftest import git
from tests.support.sandbox_support import HAVE_BWRAP, reachable_dir

pytestmark = pytest.mark.skipif(not HAVE_BWRAP, reason="bubblewrap is not installed")

ISSUE = "add() subtracts instead of adding\n\n`calc.add(2, 3)` returns -1; it should return 5."

FIXING_SCRIPT = [
    think_and_call("Let me look at the calculator.", "Read", file_path="calc.py"),
    think_and_call("add uses minus; fix it.", "Edit", file_path="calc.py",
                   old_string="return a - b", new_string="return a + b"),
    think_and_call("Run the tests.", "Bash", command="python3 -m pytest -q",
                   description="run tests"),
    final_answer("Fixed `add` to return the sum."),
]


def solve(repo: Path, script: list[str] | list[list[str]], tmp: Path, *extra: str,
          env: dict[str, str] | None = None, umask: int | None = None
          ) -> tuple[int, str, Path]:
    script_file = tmp / "script.json"
    script_file.write_text(json.dumps(script))
    transcript = tmp / "transcript.jsonl"
    with reachable_dir() as work:
        env = {**os.environ, "FROGNANO_STATE_DIR": str(tmp / "state"),
               "FROGNANO_WORK_DIR": str(work / "work"), "COLUMNS": "200", **(env or {})}
        proc = subprocess.run(
            [sys.executable, "-m", "frognano", "solve", str(repo), "--issue", ISSUE,
             "--model", f"scripted:{script_file}", "--transcript", str(transcript), *extra],
            env=env, capture_output=True, text=True, timeout=300,
            preexec_fn=None if umask is None else lambda: os.umask(umask) and None,
        )
        leftovers = list((work / "work").iterdir()) if (work / "work").exists() else []
    assert leftovers == [], "the private workspace must be cleaned up"
    return proc.returncode, proc.stdout + proc.stderr, transcript


def test_a_hardened_umask_does_not_shut_the_sandbox_out(calc_repo: Path, tmp_path: Path
                                                        ) -> None:
    """A root shell or unit with umask 077 made the run's folders the host's alone, and
    bubblewrap, as the sandbox's uid, could not bind them: every run failed. The bot's
    processes keep what others may read and enter unmasked (frognano/cli.py)."""
    code, output, _ = solve(calc_repo, FIXING_SCRIPT, tmp_path, umask=0o077)
    assert code == 0, output
    assert "tests_passed" in output and "not reachable by the sandbox uid" not in output


def test_a_committed_link_to_a_host_file_is_not_read_as_the_project(calc_repo: Path,
                                                                   tmp_path: Path) -> None:
    """The repository's own move: `pyproject.toml` committed as a link to a file of the
    worker host. The inferred setup read it through the link and put what it held (here a
    Poetry group naming a host secret) into the setup command, the transcript and the PR
    body. Now every project file is read only where it is not a link."""
    host_file = tmp_path / "host-secret.toml"
    host_file.write_text("[build-system]\nrequires = ['poetry-core']\n\n"
                         "[tool.poetry.group.test.dependencies]\nhost-secret-7c1d = '*'\n")
    (calc_repo / "pyproject.toml").symlink_to(host_file)
    # And the bot's own settings file, linked to a host file that says which command runs.
    host_config = tmp_path / "host-config.yml"
    host_config.write_text("test: echo host-secret-7c1d\n")
    (calc_repo / ".github").mkdir()
    (calc_repo / ".github" / "frognano.yml").symlink_to(host_config)
    git(calc_repo, "add", "pyproject.toml", ".github/frognano.yml")
    git(calc_repo, "commit", "-qm", "a link to the host")
    code, output, transcript = solve(calc_repo, FIXING_SCRIPT, tmp_path)
    assert code == 0, output
    assert "host-secret-7c1d" not in output + transcript.read_text()
    assert "inferred (no `setup:` given)" not in output, "nothing to infer from a link"


def test_solve_fixes_the_bug_and_commits_on_a_new_branch(calc_repo: Path, tmp_path: Path
                                                         ) -> None:
    head = git(calc_repo, "rev-parse", "HEAD").strip()
    code, output, transcript = solve(calc_repo, FIXING_SCRIPT, tmp_path)
    assert code == 0, output
    assert "tests_passed" in output

    branch = "frognano/add-subtracts-instead-of-adding"
    assert git(calc_repo, "branch", "--list", "frognano/*").split() == [branch]
    assert git(calc_repo, "rev-parse", "HEAD").strip() == head, "current branch untouched"
    assert "return a - b" in (calc_repo / "calc.py").read_text(), "working tree untouched"
    assert "return a + b" in git(calc_repo, "show", f"{branch}:calc.py")
    assert git(calc_repo, "diff", "--name-only", head, branch).split() == ["calc.py"]

    records = read_transcript(transcript)
    kinds = [r["kind"] for r in records]
    assert kinds[0] == "run" and kinds[1] == "baseline" and kinds[-1] == "result"
    assert kinds.count("turn") == 4
    baseline = records[1]
    assert baseline["passed"] is False
    assert baseline["tests"] == {"tests/test_calc.py::test_add": "failed",
                                 "tests/test_calc.py::test_mul": "passed"}
    turns = [r for r in records if r["kind"] == "turn"]
    assert [c["name"] for t in turns for c in t["tool_calls"]] == ["Read", "Edit", "Bash"]
    assert turns[0]["observations"][0]["output"].startswith("calc.py\n1. ")
    assert turns[1]["observations"][0]["output"] == "Edited calc.py (1 replacement)."
    assert turns[2]["observations"][0]["output"].startswith("Exit code: 0\nSTDOUT:\n")
    assert turns[0]["assistant"]["reasoning"] == "Let me look at the calculator."
    assert all(t["usage"]["completion_tokens"] > 0 for t in turns)
    result = records[-1]
    assert result["exit_reason"] == "tests_passed" and result["tests_passed"] is True
    assert result["verdict"]["accepted"] is True and result["verdict"]["mode"] == "per-test"
    assert result["changes"] == [{"test": "tests/test_calc.py::test_add",
                                  "before": "failed", "after": "passed"}]
    assert "-    return a - b\n+    return a + b" in result["diff"]
    assert result["totals"]["steps"] == 4 and result["totals"]["rounds"] == 1
    assert result["totals"]["tool_calls"] == {"Read": 1, "Edit": 1, "Bash": 1}


def test_solve_that_never_passes_ends_with_a_reason_and_no_commit(calc_repo: Path,
                                                                  tmp_path: Path) -> None:
    wrong = [
        think_and_call("Maybe multiplication?", "Edit", file_path="calc.py",
                       old_string="return a - b", new_string="return a * b"),
        final_answer("Changed add."),
    ]
    code, output, transcript = solve(calc_repo, wrong, tmp_path, "--max-rounds", "2")
    assert code == 1, output
    assert "max_rounds" in output and "2 round(s)" in output
    assert git(calc_repo, "branch", "--list", "frognano/*").strip() == ""
    records = read_transcript(transcript)
    feedback = [r for r in records if r["kind"] == "feedback"]
    assert len(feedback) == 1
    assert "do not pass:\n- tests/test_calc.py::test_add" in feedback[0]["content"]
    assert "assert 6 == 5" in feedback[0]["content"], "the failing output reaches the model"
    result = records[-1]
    assert result["exit_reason"] == "max_rounds" and result["tests_passed"] is False
    assert result["final"]["tests"]["tests/test_calc.py::test_add"] == "failed"
    assert result["totals"]["rounds"] == 2


def test_markup_like_paths_and_test_ids_are_printed_as_data(tmp_path: Path) -> None:
    """`[/x]` in a repository path and `[/tmp]` in a test id used to crash the report
    (MarkupError), the second after the tests had passed; piped, nothing wraps."""
    from tests.conftest import make_repo

    repo = make_repo(tmp_path / "src" / "a[/x]b", template="calc_repo")
    (repo / "tests" / "test_abs.py").write_text(
        "import pytest\nimport calc\n\n@pytest.mark.parametrize('p', ['/tmp'])\n"
        "def test_abs(p):\n    assert calc.add(len(p), 1) == 5\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "abs")
    code, output, _ = solve(repo, FIXING_SCRIPT, tmp_path)
    assert code == 0, output
    assert "MarkupError" not in output
    assert "a[/x]b" in output
    assert "tests/test_abs.py::test_abs[/tmp]: failed → passed" in output
    assert "committed" in output
    transcript_line = next(line for line in output.splitlines() if line.startswith("transcript:"))
    assert transcript_line.endswith(".jsonl"), "the transcript path is one unbroken line"


# One script per seed (frognano/models.py): with --seed 0, candidate k replays script k.
NOTES = "".join(f"note {i}\\n" for i in range(20))
BEST_OF_THREE = [
    [final_answer("I could not find the bug.")],  # fails
    [*FIXING_SCRIPT[:-1], think_and_call("Document it.", "Bash",
                                         command=f"printf '{NOTES}' > NOTES.md"),
     final_answer("Fixed `add` and wrote notes.")],  # passes, 22 lines in 2 files
    FIXING_SCRIPT,  # passes, 2 lines in 1 file
]


def test_solve_best_of_three_commits_the_smallest_passing_change(calc_repo: Path,
                                                                 tmp_path: Path) -> None:
    """`--candidates 3`, three model slots: the three run at once, each with its own seed,
    workspace and transcript; the smallest passing change is the one committed, and the
    output says how each candidate ended."""
    code, output, transcript = solve(calc_repo, BEST_OF_THREE, tmp_path, "--candidates", "3",
                                     "--seed", "0", "--max-rounds", "1",
                                     env={"FROGNANO_MODEL_SLOTS": "3"})
    assert code == 0, output
    branch = "frognano/add-subtracts-instead-of-adding"
    assert git(calc_repo, "branch", "--list", "frognano/*").split() == [branch]
    assert git(calc_repo, "diff", "--name-only", "main", branch).split() == ["calc.py"], \
        "the larger passing change (with NOTES.md) was committed"
    assert "best of 3, 3 at a time:" in output
    assert "candidate 1 (seed 0): failed (max_rounds); 1 step(s)" in output
    assert "candidate 2 (seed 1): passed, larger change; 5 step(s)" in output
    assert "candidate 3 (seed 2): chosen; 4 step(s)" in output
    assert "2 lines changed in 1 file(s)" in output and "candidate 3, chosen:" in output
    transcripts = [transcript, tmp_path / "transcript-2.jsonl", tmp_path / "transcript-3.jsonl"]
    runs = [next(r for r in read_transcript(t) if r["kind"] == "run") for t in transcripts]
    assert [r["seed"] for r in runs] == [0, 1, 2]
    results = [read_transcript(t)[-1] for t in transcripts]
    assert [r["tests_passed"] for r in results] == [False, True, True]
    assert max(r["time"] for r in runs) < min(r["time"] for r in results), "all at once"


def test_solve_takes_candidates_from_the_checkouts_config_cut_as_the_bot_would(
        tmp_path: Path) -> None:
    """No flag: `candidates: 3` from the checkout, cut to FROGNANO_MAX_CANDIDATES=2, one
    slot: in turn, and the first pass ends it. The config and the environment say it
    in the names of before issue 22 §1 (`attempts_in_parallel`, `max_attempts`,
    FROGNANO_MAX_PARALLEL_ATTEMPTS), which still work; the output uses today's."""
    from tests.conftest import make_repo

    repo = make_repo(tmp_path / "calc", {".github/frognano.yml":
                                         "attempts_in_parallel: 3\nmax_attempts: 1\n"},
                     template="calc_repo")
    code, output, _ = solve(repo, BEST_OF_THREE, tmp_path, "--seed", "0",
                            env={"FROGNANO_MAX_PARALLEL_ATTEMPTS": "2"})
    assert code == 0, output
    assert "best of 2 (asked 3; FROGNANO_MAX_CANDIDATES allows 2), in turn:" in output
    assert "candidate 2 (seed 1): chosen" in output and "attempt" not in output
    assert sorted(p.name for p in tmp_path.glob("transcript*.jsonl")) == [
        "transcript-2.jsonl", "transcript.jsonl"]
    assert "NOTES.md" in git(repo, "diff", "--name-only", "main",
                             "frognano/add-subtracts-instead-of-adding")


@pytest.mark.parametrize(("extra", "env", "error"), [
    (("--candidates", "9"), {}, "--candidates must be from 1 to 8, not 9"),
    (("--model", "/models/frognano.gguf"), {"FROGNANO_MODEL_SLOTS": "2"},
     "FROGNANO_MODEL_SLOTS=2 needs a model server"),
])
def test_solve_refuses_candidates_it_cannot_run(calc_repo: Path, tmp_path: Path,
                                              extra: tuple[str, ...], env: dict[str, str],
                                              error: str) -> None:
    code, output, _ = solve(calc_repo, FIXING_SCRIPT, tmp_path, *extra, env=env)
    assert code == 2 and error in output, output
    assert git(calc_repo, "branch", "--list", "frognano/*").strip() == ""
