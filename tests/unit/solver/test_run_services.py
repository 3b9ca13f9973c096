"""A run whose services cannot run (solver/run.py execute and decide): it ends before
setup and the agent as `services_failed`, and the decision's reason, which the status
comment shows, names the service. Real bubblewrap, this host's PostgreSQL binaries."""

from __future__ import annotations

import pytest

from sandbox.services import ServiceSpec, postgres_versions
from solver.agent.harness import RunPlan
from solver.agent.run_events import Event, RunFinished
from solver.models.scripted import ScriptedModel, final_answer
from solver.repo_config import RepoConfig
from solver.run import decide, execute
from tests.support.sandbox_support import HAVE_BWRAP, make_host_repo, reachable_dir

pytestmark = [pytest.mark.skipif(not HAVE_BWRAP, reason="bubblewrap is not installed"),
              pytest.mark.skipif(not postgres_versions(), reason="postgresql is missing")]


class Collected:
    def __init__(self) -> None:
        self.events: list[Event] = []

    def emit(self, event: Event) -> None:
        self.events.append(event)


def test_a_missing_version_ends_the_run_before_setup_and_the_agent() -> None:
    events = Collected()
    model = ScriptedModel([final_answer("nothing to do")])
    with reachable_dir() as root:
        host = make_host_repo(root, {"test_x.py": "def test_x():\n    assert True\n"})
        plan = RunPlan(issue="x", test_command="python3 -m pytest -q",
                       setup_command="touch /frognano/setup-ran")
        result = execute(plan, model, host, "bubblewrap", events,
                         services=(ServiceSpec("redis"), ServiceSpec("postgresql", version=99)))
        assert not (root / "private" / "setup-ran").exists()
    assert result.exit_reason == "services_failed"
    assert (result.steps, result.rounds, result.baseline) == (0, 0, None)
    assert model.remaining == 1, "the model was asked for a turn"
    assert [type(e) for e in events.events] == [RunFinished]
    decision = decide(result, RepoConfig())
    assert decision.action == "fail"
    assert decision.reason.startswith("`services_failed`: service `postgresql` version 99 "
                                      "is not available on this worker (installed: ")
