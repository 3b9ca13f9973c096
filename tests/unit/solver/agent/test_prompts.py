"""The task message the harness builds (solver/agent/prompts.task_message): the test
services' line (issue 23 §1), only when a repository asks for services; the system
prompt stays Leaf's (tests/unit/solver/agent/test_fidelity.py)."""

from __future__ import annotations

from sandbox.services import ServiceBinaries, ServiceSpec
from solver import service_report
from solver.agent.prompts import task_message

ISSUE = "Occupancy is wrong\n\nIt counts bookings."
COMMAND = "python3 -m pytest -q"


def test_without_services_the_task_is_as_it_was() -> None:
    assert task_message(ISSUE, COMMAND) == (
        f"{ISSUE}\n\nThe repository's tests are run with `{COMMAND}`; they must pass when "
        "you are done.")
    assert "Services" not in task_message(ISSUE, COMMAND, "Use the cache.", ())


def test_the_services_line_names_each_service_and_its_variables() -> None:
    # As the sandbox reports them (RunnerBackedSandbox.started_services).
    started = service_report.started([
        ServiceBinaries(ServiceSpec("postgresql", 15, "shuttle"), {}, "15.18"),
        ServiceBinaries(ServiceSpec("redis"), {}, "7.0.15")])
    task = task_message(ISSUE, COMMAND, "", started)
    parts = task.split("\n\n")
    assert parts[-2] == (
        "Services running in the sandbox: PostgreSQL 15.18 with database `shuttle` "
        "(`DATABASE_URL`, `PGHOST`, `PGPORT`, `PGUSER`, `PGPASSWORD`, `PGDATABASE`); "
        "Redis 7.0.15 (`REDIS_URL`). The harness's test runs start them fresh and empty.")
    assert parts[-1].startswith("The repository's tests are run with")
    assert parts[0] == ISSUE.split("\n\n")[0]
