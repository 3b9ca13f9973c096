"""The scorecard keeps the corpus rows that a run leaves out, dated, and nothing else."""

from __future__ import annotations

from pathlib import Path

from tests.reliability.scorecard import (
    REAL_PROJECT_KEY,
    ScenarioRecord,
    clear_results,
    load_records,
    render,
)


def _project(name: str, ran_at: str, seconds: float) -> ScenarioRecord:
    return ScenarioRecord(f"{REAL_PROJECT_KEY}{name}", f"{name} without config", "fixed",
                          {"shape": "a shape", "setup seconds": 3.5, "baseline seconds": 1.25,
                           "verdict seconds": 1.5, "solve seconds": seconds},
                          outcome="passed", ran_at=ran_at)


def test_a_run_keeps_the_corpus_rows_it_leaves_out_and_says_when_they_ran(
        tmp_path: Path) -> None:
    results = tmp_path / "results"
    _project("toolz", "2026-12-01 10:00 UTC", 20.0).write(results)
    _project("six", "2026-12-01 10:05 UTC", 13.0).write(results)
    _project("gone", "2026-12-01 10:09 UTC", 9.0).write(results)  # no longer in the corpus
    ScenarioRecord("5-hostile-issue", "Hostile issue", "refused", outcome="passed",
                   ran_at="2026-12-01 10:10 UTC").write(results)

    clear_results(results, {f"{REAL_PROJECT_KEY}{name}" for name in ("toolz", "six")})
    _project("toolz", "2026-12-03 14:00 UTC", 18.0).write(results)  # this run's

    records = {r.key.removeprefix(REAL_PROJECT_KEY): r for r in load_records(results)}
    assert set(records) == {"toolz", "six"}, "the hostile row and the dropped project go"
    assert not records["toolz"].earlier and records["toolz"].observed["solve seconds"] == 18.0
    assert records["six"].earlier
    page = render(list(records.values()), [])
    assert "**1 of 1 scenarios passed** (and 1 corpus rows kept from an earlier run)" in page
    assert "1 ran in this run" in page and "the other 1 rows are from the last" in page
    six = next(line for line in page.splitlines() if line.startswith("| six |"))
    assert six.endswith("| setup 3.5<br>baseline 1.25<br>verdict tests 1.5<br>whole 13.0"
                        "<br>(ran 2026-12-01 10:05 UTC, `--corpus`) |")
    toolz = next(line for line in page.splitlines() if line.startswith("| toolz |"))
    assert toolz.endswith("<br>whole 18.0 |")
