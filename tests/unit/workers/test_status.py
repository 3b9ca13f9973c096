"""The issue's status comment as a run writes it (workers/status.RunStatus), against the
fake GitHub: one comment, edited in place, saying what the run's named step says."""

from __future__ import annotations

from bot.github_client import GitHubAppClient
from bot.triggers import Trigger
from tests.support.fake_github.server import FakeGitHub
from workers.status import RunStatus


def test_a_runs_status_goes_queued_preparing_done_in_one_comment(
        fake_github: FakeGitHub) -> None:
    fake_github.add_repo("octo", "calc", {"README.md": "# calc\n"})
    fake_github.add_issue("octo", "calc", 1, "add() subtracts")
    client = GitHubAppClient(fake_github.app_id, fake_github.private_key_pem,
                             fake_github.api_url)
    trigger = Trigger(delivery_id="d1", installation_id=fake_github.installation_id,
                      owner="octo", repo="calc", issue_number=1, kind="label", actor="m")
    assert trigger.repo_ref.full_name == "octo/calc"

    def body() -> str:
        bodies = [c.body for c in fake_github.comments("octo", "calc", 1)]
        assert len(bodies) == 1, "one status comment, edited in place"
        return bodies[0]

    RunStatus.of(client, trigger, 3).queued(2)  # the accept step's
    assert "position 2" in body() and "Run 3" in body()
    status = RunStatus.of(client, trigger, 3)  # the run's: finds the same comment
    status.preparing()
    assert "preparing the workspace" in body()
    status.done("https://github.example/octo/calc/pull/9", "setup reads `setup.py` *edited*")
    assert "opened a draft pull request: https://github.example/octo/calc/pull/9" in body()
    assert "(run 3)" in body()
    assert "⚠️ setup reads" in body() and "*edited*" not in body(), "the note is escaped"


def test_a_cancel_names_the_generation_it_stopped(fake_github: FakeGitHub) -> None:
    fake_github.add_repo("octo", "calc", {"README.md": "# calc\n"})
    fake_github.add_issue("octo", "calc", 1, "add() subtracts")
    client = GitHubAppClient(fake_github.app_id, fake_github.private_key_pem,
                             fake_github.api_url)
    trigger = Trigger(delivery_id="d2", installation_id=fake_github.installation_id,
                      owner="octo", repo="calc", issue_number=1, kind="cancel", actor="m")
    RunStatus.of(client, trigger, 4).failed("the tests still fail")
    RunStatus.of(client, trigger, 4).cancelled("cancelled by @m")
    [comment] = fake_github.comments("octo", "calc", 1)
    assert "stopped (run 4): cancelled by @m" in comment.body
    assert "the tests still fail" not in comment.body
