"""Best of N as data (solver/best_of.py): which attempt `choose` takes, how lines are
counted on a real git diff, what the PR body says, how `attempts_in_parallel` and the
operator's settings are read, and the scripted model's one script per seed. A crashed
attempt is in tests/unit/solver/test_run.py; the whole path runs end to end in
tests/e2e/test_attempts.py."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from bot.github_api import RepoRef
from bot.github_client import GitHubAppClient
from bot.messages import RunReport, failure_comment, pr_body
from bot.settings import BotSettings
from solver.agent.result import SolveResult
from solver.agent.run_events import TurnStarted
from solver.best_of import (
    Attempt,
    AttemptEnded,
    AttemptStarted,
    changed_lines,
    choose,
    summary,
)
from solver.hostgit import Snapshot
from solver.models import ModelSpecError, build_model
from solver.models.base import Sampling, Usage
from solver.repo_config import RepoConfigError, parse_repo_config
from solver.report import AttemptLine, AttemptsReport
from solver.run import decide
from tests.conftest import git
from tests.support.fake_github.server import FakeGitHub
from workers.status import StatusComment, StatusProgress

DEFAULT = parse_repo_config(None)


def attempt(index: int, *, passed: bool = True, lines: int = 1, files: int = 1,
            paths: list[str] | None = None, steps: int = 5, tokens: int = 100) -> Attempt:
    """An attempt whose diff changes `lines` lines spread over `files` files."""
    names = paths or [f"f{i}.py" for i in range(files)]
    diff = "".join(f"diff --git a/{n} b/{n}\n--- a/{n}\n+++ b/{n}\n@@ -1 +1 @@\n"
                   for n in names) + "+x\n" * lines
    shot = Snapshot(base="b" * 40, tree="t" * 40, diff=diff, paths=names)
    result = SolveResult(exit_reason="tests_passed" if passed else "max_attempts",
                         tests_passed=passed, diff=diff, test_command="pytest", baseline=None,
                         final=None, attempts=1, steps=steps,
                         usage=Usage(completion_tokens=tokens), seconds=1.0, snapshot=shot)
    return Attempt(index, 100 + index, result, decide(result, DEFAULT))


def test_the_fewest_changed_lines_win_then_the_fewest_files_then_the_first() -> None:
    small, large, failed = attempt(2, lines=2), attempt(1, lines=40), attempt(0, passed=False)
    choice = choose([failed, large, small])
    assert choice.chosen is small and choice.published
    assert choice.others == [failed, large]
    one_file, two_files = attempt(0, lines=5, files=2), attempt(1, lines=5, files=1)
    assert choose([one_file, two_files]).chosen is two_files
    first, second = attempt(0, lines=3), attempt(1, lines=3)
    assert choose([first, second]).chosen is first


def test_a_failed_attempt_is_never_chosen_however_small() -> None:
    tiny_failure, passing = attempt(0, passed=False, lines=0), attempt(1, lines=500)
    assert choose([tiny_failure, passing]).chosen is passing


def test_without_a_pass_the_refused_attempt_is_reported_else_the_first() -> None:
    failed, refused = attempt(0, passed=False), attempt(1, paths=[".github/workflows/x.yml"])
    choice = choose([failed, refused])
    assert choice.chosen is refused and not choice.published
    assert choose([attempt(0, passed=False), attempt(1, passed=False)]).chosen.index == 0
    with pytest.raises(ValueError):
        choose([])


def test_summaries_say_how_each_attempt_ended() -> None:
    small, large = attempt(2, lines=2), attempt(1, lines=40, steps=9, tokens=900)
    failed, refused = attempt(0, passed=False), attempt(3, paths=[".github/workflows/x.yml"])
    assert summary(small, small) == AttemptLine(number=3, seed=102, outcome="chosen",
                                                steps=5, tokens=100, lines=2, files=1)
    assert summary(large, small).outcome == "passed, larger change"
    assert (summary(large, small).steps, summary(large, small).tokens) == (9, 900)
    assert summary(failed, small).outcome == "failed (max_attempts)"
    assert summary(refused, small).outcome == "passed, refused (paths)"


def test_changed_lines_of_a_real_git_diff(tmp_path: Path) -> None:
    """A removed SQL comment (`-- x`) shows as `--- x` inside a hunk: still a line; the
    file headers are not; a binary file counts its patch lines."""
    git(tmp_path, "init", "-q")
    (tmp_path / "q.sql").write_text("-- keep\n-- drop\nselect 1;\n")
    (tmp_path / "a.py").write_text("a = 1\n")
    git(tmp_path, "add", ".")
    git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@e", "commit", "-qm", "base")
    (tmp_path / "q.sql").write_text("-- keep\nselect 2;\n")  # 2 removed, 1 added
    (tmp_path / "a.py").write_text("a = 1\nb = 2\n")  # 1 added
    git(tmp_path, "add", ".")
    text = git(tmp_path, "diff", "--cached", "--binary")
    assert changed_lines(text) == 4
    (tmp_path / "blob.bin").write_bytes(bytes(range(256)) * 64)
    git(tmp_path, "add", ".")
    with_binary = git(tmp_path, "diff", "--cached", "--binary")
    assert "GIT binary patch" in with_binary
    assert changed_lines(with_binary) > 4 + 10, "16 KiB of binary is not a small change"
    assert changed_lines("") == 0


def report(best_of: AttemptsReport | None) -> RunReport:
    return RunReport(issue_number=7, exit_reason="tests_passed", test_command="pytest",
                     baseline_summary="1 failed", final_summary="1 passed", final_output="",
                     steps=5, attempts=1, tokens=100, seconds=3, model="scripted",
                     transcript_url=None, best_of=best_of)


LINES = [AttemptLine(1, 100, "failed (max_attempts)", 2, 40, 0, 0),
         AttemptLine(2, 101, "passed, larger change", 4, 170, 22, 2),
         AttemptLine(3, 102, "chosen", 3, 90, 2, 1)]


def test_the_pr_body_lists_every_attempt_escaped() -> None:
    body = pr_body(report(AttemptsReport(asked=3, allowed=3, slots=3, chosen=LINES[2],
                                         others=LINES[:2], published=True)))
    assert "## Attempts" in body and "3 at a time" in body
    assert "This change is attempt 3" in body and "(2 lines in 1 file(s))" in body
    assert "| 1 | 100 | failed (max\\_attempts) | 2 | 40 | 0 | 0 |" in body
    assert "| 2 | 101 | passed, larger change | 4 | 170 | 22 | 2 |" in body
    assert body.index("| 1 |") < body.index("| 2 |") < body.index("| 3 |")
    assert "## Attempts" not in pr_body(report(None)), "one attempt: no section"


def test_the_cap_and_the_skipped_attempts_are_named() -> None:
    sequential = AttemptsReport(asked=5, allowed=3, slots=1, chosen=LINES[1],
                                others=LINES[:1], published=True)
    body = pr_body(report(sequential))
    assert "`attempts_in_parallel: 5`; this bot allows 3" in body
    assert "one after another until one passed" in body
    assert "Attempt 3 did not run: attempt 2 passed first." in body
    none = AttemptsReport(asked=2, allowed=2, slots=2, chosen=LINES[0], others=[LINES[1]],
                          published=False)
    failure = failure_comment(report(none))
    assert "No attempt passed; this report is attempt 1's." in failure
    assert "did not run" not in failure and "| 2 | 101 |" in failure


@pytest.mark.parametrize(("text", "error"), [
    ("attempts_in_parallel: 0", "greater than or equal to 1"),
    ("attempts_in_parallel: x", "valid integer, not 'x'"),
    ("attempts_in_parallel: 100", "less than or equal to 8"),
    ("attempts_in_parallel: yes", "valid integer, not True"),  # YAML's yes is True
    ("attempts_in_parallel: 2.5", "valid integer"),
])
def test_bad_attempts_in_parallel_is_named(text: str, error: str) -> None:
    with pytest.raises(RepoConfigError) as caught:
        parse_repo_config(text)
    assert "`attempts_in_parallel`" in str(caught.value) and error in str(caught.value)


def test_attempts_in_parallel_defaults_to_one() -> None:
    assert DEFAULT.attempts_in_parallel == 1
    assert parse_repo_config("attempts_in_parallel: 3").attempts_in_parallel == 3


def test_the_operator_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)  # no .env of the developer's
    for name in ("FROGNANO_MODEL_SLOTS", "FROGNANO_MAX_PARALLEL_ATTEMPTS", "FROGNANO_SEED"):
        monkeypatch.delenv(name, raising=False)
    settings = BotSettings()
    assert (settings.model_slots, settings.max_parallel_attempts, settings.seed) == \
        (1, 1, None)
    monkeypatch.setenv("FROGNANO_MAX_PARALLEL_ATTEMPTS", "9")
    with pytest.raises(ValueError, match="FROGNANO_MAX_PARALLEL_ATTEMPTS"):
        BotSettings()


def test_a_gguf_in_process_serves_one_slot(monkeypatch: pytest.MonkeyPatch,
                                           tmp_path: Path) -> None:
    from frognano.worker_command import WorkerConfigError, build_runtime

    monkeypatch.chdir(tmp_path)
    settings = BotSettings(GITHUB_APP_ID=1, GITHUB_PRIVATE_KEY="unused",
                           FROGNANO_MODEL=str(tmp_path / "m.gguf"), FROGNANO_MODEL_SLOTS=2,
                           FROGNANO_STATE_DIR=tmp_path / "state")
    with pytest.raises(WorkerConfigError, match="llama-server --parallel N"):
        build_runtime(settings)


def test_a_scripted_model_replays_one_script_per_seed(tmp_path: Path) -> None:
    script = tmp_path / "s.json"
    script.write_text(json.dumps([["zero"], ["one"], ["two"]]))
    for seed, text in ((0, "zero"), (4, "one"), (None, "zero")):
        model = build_model(f"scripted:{script}", Sampling(seed=seed))
        assert model._steps == [text] and model.seed == seed  # type: ignore[attr-defined]
    script.write_text(json.dumps([["a"], "b"]))
    with pytest.raises(ModelSpecError, match="one per seed"):
        build_model(f"scripted:{script}", Sampling(seed=1))


def test_the_dashboard_shows_which_attempt_won() -> None:
    from bot.dashboard import _environment

    html = _environment().get_template("events.html").render(events=[
        (1, {"kind": "attempt", "index": 1, "of": 3, "seed": 101}),
        (2, {"kind": "attempts", "chosen": 2, "published": True,
             "attempts": [vars(line) | {"outcome": "<b>x"} for line in LINES]})])
    assert "Attempt 2 of 3" in html and "seed 101" in html
    assert "Published: attempt 3" in html and html.count("<tr><td>") == 3
    assert "&lt;b&gt;x" in html and "<b>x" not in html


def test_the_status_follows_each_attempt_by_its_thread(fake_github: FakeGitHub) -> None:
    """Attempts in turn on one thread, then two at once on their own threads: each one's
    step is its own (the events do not name their attempt; the thread does), an ended one
    says how, and the comment is edited in place."""
    fake_github.add_repo("octo", "calc", {"README.md": "# calc\n"})
    fake_github.add_issue("octo", "calc", 1, "add() subtracts")
    client = GitHubAppClient(fake_github.app_id, fake_github.private_key_pem,
                             fake_github.api_url)
    status = StatusComment(client, RepoRef("octo", "calc", fake_github.installation_id), 1)
    progress = StatusProgress(status, max_steps=40, attempt=7)

    def body() -> str:
        bodies = [c.body for c in fake_github.comments("octo", "calc", 1)]
        assert len(bodies) == 1, "one status comment, edited in place"
        return bodies[0]

    for event in (AttemptStarted(index=0, of=3, seed=5), TurnStarted(step=1, attempt=1),
                  TurnStarted(step=2, attempt=1)):
        progress.emit(event)
    assert "is working (attempt 7), best of 3: attempt 1: step 2 of 40." in body()
    progress.emit(AttemptEnded(index=0, exit_reason="max_attempts"))
    progress.emit(AttemptStarted(index=1, of=3, seed=6))
    assert "attempt 1: step 2 of 40." in body(), "only a turn edits the comment"
    progress.emit(TurnStarted(step=1, attempt=1))
    assert "attempt 1: ended (`max_attempts`); attempt 2: step 1 of 40." in body()

    lock, turns = threading.Lock(), threading.Barrier(2)

    def attempt(index: int, steps: int) -> None:
        with lock:  # solver.run hands events over one at a time
            progress.emit(AttemptStarted(index=index, of=3, seed=index))
        turns.wait()  # both have started before either takes a step
        for step in range(1, steps + 1):
            with lock:
                progress.emit(TurnStarted(step=step, attempt=1))

    threads = [threading.Thread(target=attempt, args=(1, 5)),
               threading.Thread(target=attempt, args=(2, 2))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert body().endswith("best of 3: attempt 1: ended (`max_attempts`); "
                           "attempt 2: step 5 of 40; attempt 3: step 2 of 40.")
    progress.emit(AttemptStarted(index=0, of=3, seed=0))
    progress.emit(TurnStarted(step=1, attempt=1))  # main thread: attempt 1 again
    assert "attempt 1: step 1 of 40; attempt 2: step 5 of 40; attempt 3: step 2" in body()
