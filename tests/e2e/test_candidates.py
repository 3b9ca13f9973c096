"""Best of N end to end (solver/run.py): signed webhooks into the real receiver, a
real redis-server, real Celery workers, real bubblewrap and git, the OpenAPI-checked fake
GitHub, and a scripted model holding one script per seed (FROGNANO_SEED=0: candidate k
replays script k).

Three candidates at the calc issue: the first fails, the second passes with a large change,
the third passes with a small one. With three model slots all three run at once and the
small change is published; with one slot they run one after another and the first pass
(the large one) ends the run, so the third never starts."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runstore.store import RunStore
from solver.models.scripted import final_answer, think_and_call
from tests.conftest import git
from tests.reliability.stack import (
    FIX_CALC,
    MAINTAINER,
    OWNER,
    Stack,
    StackOptions,
    issue_json,
    repo_json,
    running_stack,
    user_json,
    wait_for,
)
from tests.support.sandbox_support import HAVE_BWRAP

pytestmark = pytest.mark.skipif(not HAVE_BWRAP, reason="bubblewrap is not installed")

# Each candidate first sits in a sleep, so that candidates run at once overlap for certain; a
# repository with SLOW keeps it there long enough to cancel the run.
WAIT = think_and_call("Wait for the service.", "Bash",
                      command="if [ -f SLOW ]; then touch SLEEPING; sleep 10; else sleep 3; fi")
NOTES = "".join(f"note {i}\\n" for i in range(20))
SCRIPTS = [
    [WAIT, final_answer("I could not find the bug.")],  # seed 0: fails
    [WAIT, FIX_CALC, think_and_call("Document it at length.", "Bash",
                                    command=f"printf '{NOTES}' > NOTES.md"),
     final_answer("Fixed `add` and wrote notes.")],  # seed 1: passes, 21+ lines in 2 files
    [WAIT, FIX_CALC, final_answer("Fixed `add`.")],  # seed 2: passes, 2 lines in 1 file
]
# max_steps as Leaf's agent default, which the status lines below count against.
CONFIG = {".github/frognano.yml": "candidates: 3\nmax_rounds: 1\nmax_steps: 100\n"}


def stack_with(tmp: Path, slots: int) -> Iterator[Stack]:
    options = StackOptions(SCRIPTS, env={"FROGNANO_SEED": "0",
                                         "FROGNANO_MODEL_SLOTS": str(slots),
                                         "FROGNANO_MAX_CANDIDATES": "3"})
    with running_stack(tmp, options) as stack:
        stack.add_calc_repo("calc", CONFIG)
        stack.add_calc_repo("calc-cancel", {**CONFIG, "SLOW": "x"})
        stack.add_calc_repo("calc-progress", {**CONFIG, "SLOW": "x"})
        yield stack


@pytest.fixture(scope="module")
def parallel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    yield from stack_with(tmp_path_factory.mktemp("parallel"), slots=3)


@pytest.fixture(scope="module")
def sequential(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    yield from stack_with(tmp_path_factory.mktemp("sequential"), slots=1)


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def finished_run(stack: Stack, repo: str = "calc") -> Any:
    """The run record, once finished, with its events (the dashboard's view)."""
    store = RunStore(f"sqlite:///{stack.state / 'frognano.db'}", migrate=False)
    try:
        runs = store.list_runs(repo=f"{OWNER}/{repo}")
        if not runs or not runs[0].finished:
            return None
        return runs[0], [record for _, record in store.events(runs[0].id)]
    finally:
        store.close()


def published_tree(stack: Stack, tmp_path: Path) -> Path:
    clone = tmp_path / "check"
    git(tmp_path, "clone", "-q", "--branch", "frognano/issue-1",
        str(stack.fake.repo(OWNER, "calc").bare_path), str(clone))
    return clone


def candidate_rows(body: str) -> dict[int, str]:
    """The PR body's candidates table: candidate number → its row, as GitHub shows it (the
    outcome is escaped like all text in the body)."""
    return {int(line.split("|")[1]): line.replace("\\", "") for line in body.splitlines()
            if line.startswith("| ") and line.split("|")[1].strip().isdigit()}


def test_three_at_once_publish_the_smallest_passing_change(parallel: Stack,
                                                          tmp_path: Path) -> None:
    assert parallel.label("calc", 1).status_code == 202
    pull = wait_for(lambda: parallel.fake.pulls(OWNER, "calc"), timeout=180,
                    message="a draft PR")[0]
    run, events = wait_for(lambda: finished_run(parallel), message="the run record")
    assert run.outcome == "pr_opened"
    # The record's result is the chosen candidate's (3 steps), stored once; the choice is
    # one of its events.
    assert run.steps == 3 and [e["kind"] for e in events].count("result") == 1
    chosen = next(e for e in events if e["kind"] == "candidates")
    assert chosen["chosen"] == 2 and chosen["published"] is True
    assert [a["outcome"] for a in chosen["candidates"]] == [
        "failed (max_rounds)", "passed, larger change", "chosen"]

    # The published branch is the third candidate's: the fix alone, no notes.
    clone = published_tree(parallel, tmp_path)
    assert "return a + b" in (clone / "calc.py").read_text()
    assert not (clone / "NOTES.md").exists(), "the larger passing change was published"

    # Each candidate kept its own transcript and seed, and they ran at the same time.
    first, second, third = (parallel.state / "transcripts" / OWNER / "calc" / name
                            for name in ("issue-1-run-1.jsonl",
                                         "issue-1-run-1-2.jsonl",
                                         "issue-1-run-1-3.jsonl"))
    runs = [next(r for r in records(t) if r["kind"] == "run") for t in (first, second, third)]
    assert [r["seed"] for r in runs] == [0, 1, 2]
    results = [next(r for r in records(t) if r["kind"] == "result")
               for t in (first, second, third)]
    assert [r["tests_passed"] for r in results] == [False, True, True]
    assert max(r["time"] for r in runs) < min(r["time"] for r in results), \
        "every candidate started before any ended"

    # The body says which candidate this is and how the others ended.
    assert "## Candidates" in pull.body and "This change is candidate 3" in pull.body
    rows = candidate_rows(pull.body)
    assert sorted(rows) == [1, 2, 3]
    assert "failed" in rows[1] and "passed, larger change" in rows[2]
    assert "chosen" in rows[3] and rows[3].rstrip().endswith("| 2 | 1 |")
    assert "3 at a time" in pull.body
    wait_for(lambda: parallel.status("calc", 1).count("opened a draft pull request") == 1,
             timeout=60, message="the status to name the draft PR once")


def status_bodies(stack: Stack, repo: str) -> list[str]:
    """Every text the status comment was given, in order (the fake's request log)."""
    return [r.body["body"] for r in stack.fake.api_requests()
            if r.method in ("POST", "PATCH") and r.path.startswith(f"/repos/{OWNER}/{repo}/")
            and isinstance(r.body, dict) and "frognano:status" in str(r.body.get("body"))]


def test_the_running_status_says_each_candidates_step(parallel: Stack) -> None:
    """Three candidates sit 10 s in their first step, as long as the status interval: an
    edit made by a later turn names all three, each with its own step (it used to show
    one count that jumped between them). Under load the first edit may come before some
    candidate's first turn: that one is "setting up" there."""
    assert parallel.label("calc-progress", 1).status_code == 202
    wait_for(lambda: parallel.fake.pulls(OWNER, "calc-progress"), timeout=180,
             message="a draft PR")
    bodies = status_bodies(parallel, "calc-progress")
    progress = [b for b in bodies if "best of 3" in b]
    assert progress, bodies
    states = [re.findall(r"candidate (\d): (step \d+ of 100|setting up|ended \(`\w+`\))", b)
              for b in progress]
    assert all([n for n, _ in found] == ["1", "2", "3"] for found in states), progress
    assert any(all(state.startswith("step ") for _, state in found) for found in states), \
        f"no edit with all three candidates at their own step: {progress}"
    assert not any(re.search(r"step \d+ of 100 \(run", b) for b in bodies), \
        "no single-candidate count among the edits"
    # The PR opens before the status comment's last edit: wait for that edit.
    wait_for(lambda: "opened a draft pull request" in parallel.status("calc-progress", 1),
             timeout=60, message="the status to name the draft PR")


def test_one_slot_runs_them_in_turn_and_stops_at_the_first_pass(sequential: Stack,
                                                                 tmp_path: Path) -> None:
    assert sequential.label("calc", 1).status_code == 202
    pull = wait_for(lambda: sequential.fake.pulls(OWNER, "calc"), timeout=180,
                    message="a draft PR")[0]
    run, _ = wait_for(lambda: finished_run(sequential), message="the run record")
    assert run.outcome == "pr_opened" and run.steps == 4
    # The second candidate passed first: its change is published, the third never ran.
    clone = published_tree(sequential, tmp_path)
    assert (clone / "NOTES.md").exists() and "return a + b" in (clone / "calc.py").read_text()
    names = [p.name for p in sequential.transcripts("calc")]
    assert names == ["issue-1-run-1-2.jsonl", "issue-1-run-1.jsonl"]
    first, second = (sequential.state / "transcripts" / OWNER / "calc" / n
                     for n in ("issue-1-run-1.jsonl", "issue-1-run-1-2.jsonl"))
    ended = next(r for r in records(first) if r["kind"] == "result")["time"]
    began = next(r for r in records(second) if r["kind"] == "run")["time"]
    assert ended < began, "one after another"
    rows = candidate_rows(pull.body)
    assert sorted(rows) == [1, 2] and "chosen" in rows[2] and "failed" in rows[1]
    assert "Candidate 3 did not run: candidate 2 passed first." in pull.body
    assert "one after another" in pull.body


def cancel(stack: Stack, repo: str) -> None:
    comment = stack.fake.add_comment(OWNER, repo, 1, "/frognano cancel", MAINTAINER)
    assert stack.deliver("issue_comment", {
        "action": "created", "issue": issue_json(1),
        "comment": {"id": comment.id, "body": comment.body, "user": user_json(MAINTAINER)},
        "repository": repo_json(repo), "sender": user_json(MAINTAINER),
        "installation": {"id": stack.fake.installation_id}}).status_code == 202


def sleeping(stack: Stack) -> list[Path]:
    """The workspaces (candidate 1's, then candidate k's under candidate-k/) sitting in the
    script's sleep."""
    run_dirs = list(Path(stack.env["FROGNANO_WORK_DIR"]).glob(f"{OWNER}-calc-cancel-1-*"))
    return [w for d in run_dirs for w in [d / "workspace", *d.glob("candidate-*/workspace")]
            if (w / "SLEEPING").exists()]


@pytest.mark.parametrize("mode", ["parallel", "sequential"])
def test_cancel_stops_every_candidate(mode: str, request: pytest.FixtureRequest) -> None:
    stack: Stack = request.getfixturevalue(mode)
    assert stack.label("calc-cancel", 1).status_code == 202
    running = 3 if mode == "parallel" else 1
    wait_for(lambda: len(sleeping(stack)) == running, message="the candidates' sleep")
    cancel(stack, "calc-cancel")
    wait_for(lambda: f"cancelled by @{MAINTAINER}" in stack.status("calc-cancel", 1),
             message="the status comment to say who cancelled")
    run, _ = wait_for(lambda: finished_run(stack, "calc-cancel"), message="the run to end")
    assert run.outcome == "cancelled"
    transcripts = stack.transcripts("calc-cancel")
    assert len(transcripts) == running, "no candidate starts once the run is cancelled"
    for transcript in transcripts:
        result = next(r for r in records(transcript) if r["kind"] == "result")
        assert result["exit_reason"] == "cancelled" and "return a + b" not in result["diff"]
    assert stack.fake.branch_sha(OWNER, "calc-cancel", "frognano/issue-1") is None
    assert stack.fake.pulls(OWNER, "calc-cancel") == []
