"""Best of N as data (solver/best_of.py): which candidate `choose` takes, how lines are
counted on a real git diff, what the PR body says, how `candidates` and the
operator's settings are read, and the scripted model's one script per seed. A crashed
candidate is in tests/unit/solver/test_run.py; the whole path runs end to end in
tests/e2e/test_candidates.py."""

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
    Candidate,
    CandidateEnded,
    CandidateStarted,
    changed_lines,
    choose,
    summary,
)
from solver.hostgit import Snapshot
from solver.models import ModelSpec, ModelSpecError, build_model
from solver.models.base import Sampling, Usage
from solver.repo_config import RepoConfigError, parse_repo_config
from solver.report import CandidateLine, CandidatesReport
from solver.run import decide
from tests.conftest import git
from tests.support.fake_github.server import FakeGitHub
from workers.status import StatusComment, StatusProgress

DEFAULT = parse_repo_config(None)


def candidate(index: int, *, passed: bool = True, lines: int = 1, files: int = 1,
              paths: list[str] | None = None, steps: int = 5, tokens: int = 100) -> Candidate:
    """A candidate whose diff changes `lines` lines spread over `files` files."""
    names = paths or [f"f{i}.py" for i in range(files)]
    diff = "".join(f"diff --git a/{n} b/{n}\n--- a/{n}\n+++ b/{n}\n@@ -1 +1 @@\n"
                   for n in names) + "+x\n" * lines
    shot = Snapshot(base="b" * 40, tree="t" * 40, diff=diff, paths=names)
    result = SolveResult(exit_reason="tests_passed" if passed else "max_rounds",
                         tests_passed=passed, diff=diff, test_command="pytest", baseline=None,
                         final=None, rounds=1, steps=steps,
                         usage=Usage(completion_tokens=tokens), seconds=1.0, snapshot=shot)
    return Candidate(index, 100 + index, result, decide(result, DEFAULT))


def test_the_fewest_changed_lines_win_then_the_fewest_files_then_the_first() -> None:
    small, large = candidate(2, lines=2), candidate(1, lines=40)
    failed = candidate(0, passed=False)
    choice = choose([failed, large, small])
    assert choice.chosen is small and choice.published
    assert choice.others == [failed, large]
    one_file, two_files = candidate(0, lines=5, files=2), candidate(1, lines=5, files=1)
    assert choose([one_file, two_files]).chosen is two_files
    first, second = candidate(0, lines=3), candidate(1, lines=3)
    assert choose([first, second]).chosen is first


def _evidenced(index: int, lines: int, reproduce: int, fixed: int,
               failing: int) -> Candidate:
    """A passing candidate whose verdict shows `reproduce` reproducing tests, which fixed
    `fixed` of the repository's failing tests and left `failing` failing."""
    from solver.verdict.evidence import MODEL, REPRODUCES, TestEvidence
    from solver.verdict.repo_tests import TestVerdict
    from solver.verdict.verdict import Verdict

    base = {f"t::f{i}": "failed" for i in range(fixed + failing)}
    after = {**base, **{f"t::f{i}": "passed" for i in range(fixed)}}
    made = candidate(index, lines=lines)
    made.result.baseline = TestVerdict("pytest", 1, False, 1.0, "", base, "junit")
    made.result.final = TestVerdict("pytest", 1 if failing else 0, False, 1.0, "", after,
                                    "junit")
    made.result.verdict = Verdict(accepted=True, evidence=[
        TestEvidence(f"t::new{i}", REPRODUCES, MODEL, "failed") for i in range(reproduce)])
    return made


def test_evidence_ranks_before_size() -> None:
    """The partial fix one line shorter loses to the whole one; a test that reproduces
    the issue beats none; of equal evidence, the smaller change wins."""
    partial, whole = _evidenced(0, 2, 0, 1, 1), _evidenced(1, 3, 0, 2, 0)
    assert choose([partial, whole]).chosen is whole
    assert summary(partial, whole).outcome == "passed, less evidence"
    unverified, verified = _evidenced(0, 2, 0, 0, 0), _evidenced(1, 30, 1, 0, 0)
    assert choose([unverified, verified]).chosen is verified
    small, large = _evidenced(1, 4, 1, 0, 0), _evidenced(0, 9, 1, 0, 0)
    assert choose([large, small]).chosen is small
    assert summary(large, small).outcome == "passed, larger change"


def test_a_failed_candidate_is_never_chosen_however_small() -> None:
    tiny_failure, passing = candidate(0, passed=False, lines=0), candidate(1, lines=500)
    assert choose([tiny_failure, passing]).chosen is passing


def test_without_a_pass_the_refused_candidate_is_reported_else_the_first() -> None:
    failed, refused = candidate(0, passed=False), candidate(1, paths=[".github/workflows/x.yml"])
    choice = choose([failed, refused])
    assert choice.chosen is refused and not choice.published
    assert choose([candidate(0, passed=False), candidate(1, passed=False)]).chosen.index == 0
    with pytest.raises(ValueError):
        choose([])


def test_summaries_say_how_each_candidate_ended() -> None:
    small, large = candidate(2, lines=2), candidate(1, lines=40, steps=9, tokens=900)
    failed, refused = candidate(0, passed=False), candidate(3, paths=[".github/workflows/x.yml"])
    assert summary(small, small) == CandidateLine(number=3, seed=102, outcome="chosen",
                                                steps=5, tokens=100, lines=2, files=1)
    assert summary(large, small).outcome == "passed, larger change"
    assert (summary(large, small).steps, summary(large, small).tokens) == (9, 900)
    assert summary(failed, small).outcome == "failed (max_rounds)"
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


def report(best_of: CandidatesReport | None) -> RunReport:
    return RunReport(issue_number=7, exit_reason="tests_passed", test_command="pytest",
                     baseline_summary="1 failed", final_summary="1 passed", final_output="",
                     steps=5, rounds=1, tokens=100, seconds=3, model="scripted",
                     transcript_url=None, best_of=best_of)


LINES = [CandidateLine(1, 100, "failed (max_rounds)", 2, 40, 0, 0),
         CandidateLine(2, 101, "passed, larger change", 4, 170, 22, 2),
         CandidateLine(3, 102, "chosen", 3, 90, 2, 1)]


def test_the_pr_body_lists_every_candidate_escaped() -> None:
    body = pr_body(report(CandidatesReport(asked=3, allowed=3, slots=3, chosen=LINES[2],
                                         others=LINES[:2], published=True)))
    assert "## Candidates" in body and "3 at a time" in body
    assert "This change is candidate 3" in body and "(2 lines in 1 file(s))" in body
    assert "| 1 | 100 | failed (max\\_rounds) | 2 | 40 | 0 | 0 |" in body
    assert "| 2 | 101 | passed, larger change | 4 | 170 | 22 | 2 |" in body
    assert body.index("| 1 |") < body.index("| 2 |") < body.index("| 3 |")
    assert "## Candidates" not in pr_body(report(None)), "one candidate: no section"


def test_the_cap_and_the_skipped_candidates_are_named() -> None:
    sequential = CandidatesReport(asked=5, allowed=3, slots=1, chosen=LINES[1],
                                others=LINES[:1], published=True)
    body = pr_body(report(sequential))
    assert "`candidates: 5`; this bot allows 3" in body
    assert "one after another until one passed" in body
    assert "Candidate 3 did not run: candidate 2 passed first." in body
    none = CandidatesReport(asked=2, allowed=2, slots=2, chosen=LINES[0], others=[LINES[1]],
                          published=False)
    failure = failure_comment(report(none))
    assert "No candidate passed; this report is candidate 1's." in failure
    assert "did not run" not in failure and "| 2 | 101 |" in failure


@pytest.mark.parametrize(("text", "error"), [
    ("candidates: 0", "greater than or equal to 1"),
    ("candidates: x", "valid integer, not 'x'"),
    ("candidates: 100", "less than or equal to 8"),
    ("candidates: yes", "valid integer, not True"),  # YAML's yes is True
    ("candidates: 2.5", "valid integer"),
])
def test_bad_candidates_is_named(text: str, error: str) -> None:
    with pytest.raises(RepoConfigError) as caught:
        parse_repo_config(text)
    assert "`candidates`" in str(caught.value) and error in str(caught.value)


def test_candidates_defaults_to_one() -> None:
    assert DEFAULT.candidates == 1
    assert parse_repo_config("candidates: 3").candidates == 3


def test_the_operator_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)  # no .env of the developer's
    for name in ("FROGNANO_MODEL_SLOTS", "FROGNANO_MAX_CANDIDATES", "FROGNANO_SEED"):
        monkeypatch.delenv(name, raising=False)
    settings = BotSettings()
    assert (settings.model_slots, settings.max_candidates, settings.seed) == \
        (1, 1, None)
    monkeypatch.setenv("FROGNANO_MAX_CANDIDATES", "9")
    with pytest.raises(ValueError, match="FROGNANO_MAX_CANDIDATES"):
        BotSettings()


def test_the_old_name_of_max_candidates_is_read_the_same(monkeypatch: pytest.MonkeyPatch,
                                                          tmp_path: Path) -> None:
    """An environment of before (issue 22 §1 renamed the variable): the old name still sets
    it, from the process's environment and from a `.env` file; the new name wins."""
    monkeypatch.chdir(tmp_path)
    for name in ("FROGNANO_MAX_CANDIDATES", "FROGNANO_MAX_PARALLEL_ATTEMPTS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("FROGNANO_MAX_PARALLEL_ATTEMPTS", "3")
    assert BotSettings().max_candidates == 3
    monkeypatch.setenv("FROGNANO_MAX_CANDIDATES", "2")
    assert BotSettings().max_candidates == 2
    monkeypatch.delenv("FROGNANO_MAX_CANDIDATES")
    monkeypatch.delenv("FROGNANO_MAX_PARALLEL_ATTEMPTS")
    (tmp_path / ".env").write_text("FROGNANO_MAX_PARALLEL_ATTEMPTS=4\n")
    assert BotSettings().max_candidates == 4
    assert BotSettings(max_candidates=5).max_candidates == 5, "by its field name, in code"


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
        model = build_model(ModelSpec.parse(f"scripted:{script}"), Sampling(seed=seed))
        assert model._steps == [text] and model.seed == seed  # type: ignore[attr-defined]
    script.write_text(json.dumps([["a"], "b"]))
    with pytest.raises(ModelSpecError, match="one per seed"):
        build_model(ModelSpec.parse(f"scripted:{script}"), Sampling(seed=1))


def test_the_dashboard_shows_which_candidate_won() -> None:
    from bot.dashboard import _environment

    html = _environment().get_template("events.html").render(events=[
        (1, {"kind": "candidate", "index": 1, "of": 3, "seed": 101}),
        (2, {"kind": "candidates", "chosen": 2, "published": True,
             "candidates": [vars(line) | {"outcome": "<b>x"} for line in LINES]})])
    assert "Candidate 2 of 3" in html and "seed 101" in html
    assert "Published: candidate 3" in html and html.count("<tr><td>") == 3
    assert "&lt;b&gt;x" in html and "<b>x" not in html


def test_the_status_follows_each_candidate_by_its_thread(fake_github: FakeGitHub) -> None:
    """Candidates in turn on one thread, then two at once on their own threads: each one's
    step is its own (the events do not name their candidate; the thread does), an ended one
    says how, and the comment is edited in place."""
    fake_github.add_repo("octo", "calc", {"README.md": "# calc\n"})
    fake_github.add_issue("octo", "calc", 1, "add() subtracts")
    client = GitHubAppClient(fake_github.app_id, fake_github.private_key_pem,
                             fake_github.api_url)
    status = StatusComment(client, RepoRef("octo", "calc", fake_github.installation_id), 1)
    progress = StatusProgress(status, max_steps=40, run_number=7)

    def body() -> str:
        bodies = [c.body for c in fake_github.comments("octo", "calc", 1)]
        assert len(bodies) == 1, "one status comment, edited in place"
        return bodies[0]

    for event in (CandidateStarted(index=0, of=3, seed=5), TurnStarted(step=1, round=1),
                  TurnStarted(step=2, round=1)):
        progress.emit(event)
    assert "is working (run 7), best of 3: candidate 1: step 2 of 40." in body()
    progress.emit(CandidateEnded(index=0, exit_reason="max_rounds"))
    progress.emit(CandidateStarted(index=1, of=3, seed=6))
    assert "candidate 1: step 2 of 40." in body(), "only a turn edits the comment"
    progress.emit(TurnStarted(step=1, round=1))
    assert "candidate 1: ended (`max_rounds`); candidate 2: step 1 of 40." in body()

    lock, turns = threading.Lock(), threading.Barrier(2)

    def run_candidate(index: int, steps: int) -> None:
        with lock:  # solver.run hands events over one at a time
            progress.emit(CandidateStarted(index=index, of=3, seed=index))
        turns.wait()  # both have started before either takes a step
        for step in range(1, steps + 1):
            with lock:
                progress.emit(TurnStarted(step=step, round=1))

    threads = [threading.Thread(target=run_candidate, args=(1, 5)),
               threading.Thread(target=run_candidate, args=(2, 2))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert body().endswith("best of 3: candidate 1: ended (`max_rounds`); "
                           "candidate 2: step 5 of 40; candidate 3: step 2 of 40.")
    progress.emit(CandidateStarted(index=0, of=3, seed=0))
    progress.emit(TurnStarted(step=1, round=1))  # main thread: candidate 1 again
    assert "candidate 1: step 1 of 40; candidate 2: step 5 of 40; candidate 3: step 2" in body()
