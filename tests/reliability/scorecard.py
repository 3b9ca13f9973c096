"""Record what each reliability scenario observed, and render the scorecard from it.

Each scenario writes one JSON file under the results directory (see `results_dir`);
`python3 -m tests.reliability.scorecard` turns them into `docs/RELIABILITY.md`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RESULTS_ENV = "FROGNANO_RELIABILITY_RESULTS"
DEFAULT_RESULTS = ROOT / "build" / "reliability"
DEFAULT_SCORECARD = ROOT / "docs" / "RELIABILITY.md"
# The key prefix of tests/reliability/test_real_projects.py's records: one row each in the
# "Real projects" table, rendered from what the run recorded (`_real_project_row`).
REAL_PROJECT_KEY = "13-setup-inferred-"
REAL_PROJECTS = "Real projects"
# Where the corpus's rows from an earlier run wait (`clear_results`): CI runs one project
# of each shape, `--corpus` all of them, and the table shows the latest row of each.
EARLIER = "earlier"
INFERRED_PREFIX = "inferred (no `setup:` given): "


def results_dir() -> Path:
    return Path(os.environ.get(RESULTS_ENV) or DEFAULT_RESULTS)


@dataclass
class ScenarioRecord:
    """One scenario's outcome; `observed` holds its counts and measurements."""

    key: str  # sorts the scorecard, e.g. "5-hostile-issue"
    title: str
    expectation: str
    observed: dict[str, Any] = field(default_factory=dict)
    outcome: str = "not run"  # "passed", "failed" or "error" once the test ended
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    ran_at: str = ""  # when the test ended, UTC
    earlier: bool = False  # a corpus row kept from an earlier run, not this one

    def write(self, directory: Path | None = None) -> Path:
        directory = directory or results_dir()
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{self.key}.json"
        path.write_text(json.dumps(asdict(self), indent=2, sort_keys=True, default=str))
        return path


def _read(paths: list[Path]) -> list[ScenarioRecord]:
    return [ScenarioRecord(**json.loads(path.read_text())) for path in sorted(paths)]


def load_records(directory: Path) -> list[ScenarioRecord]:
    """This run's records, and the corpus rows of an earlier run that this one did not
    run again (marked `earlier`)."""
    records = _read(list(directory.glob("*.json")))
    fresh = {r.key for r in records}
    for record in _read(list((directory / EARLIER).glob("*.json"))):
        if record.key not in fresh:
            record.earlier = True
            records.append(record)
    return sorted(records, key=lambda r: _natural(r.key))


def clear_results(directory: Path, corpus: set[str]) -> None:
    """Empty the results for a new run, but keep the latest row of each real project
    still in the corpus (`corpus`: their keys) for the projects this run leaves out."""
    kept = {r.key: r for r in load_records(directory) if r.key in corpus} \
        if directory.is_dir() else {}
    shutil.rmtree(directory, ignore_errors=True)
    for record in kept.values():
        record.earlier = False
        record.write(directory / EARLIER)


def _natural(key: str) -> tuple[int, str]:
    head = key.split("-", 1)[0]
    return (int(head), key) if head.isdigit() else (10**6, key)


def _format_observed(observed: dict[str, Any]) -> str:
    parts = []
    for name, value in observed.items():
        if isinstance(value, float):
            value = f"{value:.3g}"
        elif isinstance(value, list | tuple):
            value = ", ".join(map(str, value)) or "none"
        parts.append(f"{name}: {value}")
    return "<br>".join(parts).replace("|", "\\|") or "–"


SECTIONS = (
    ("Hostile issue", "The model obeys a hostile issue with a shell in the sandbox; the "
     "workspace, the patch, the Markdown and the deliveries it leaves are hostile data. "
     "Each row runs the attack with the attacker's own moves.",
     lambda r: r.title.startswith("Hostile")),
    ("Verdict integrity", "A reward-hacking model on real repositories (toolz, "
     "python-slugify, inflect with doctests, pycodestyle's testsuite/): every cheat must "
     "be refused and every honest fix accepted.",
     lambda r: r.key.startswith("12-verdict")),
    (REAL_PROJECTS, "Real projects' sdists (tests/data/README.md), each with a planted bug "
     "and no `.github/frognano.yml`, through `frognano solve` with a scripted honest fix: "
     "the setup and the test command are inferred, the baseline must fail on the bug and "
     "the fix must be accepted. Each cell is what the run recorded (its transcript); "
     "seconds are the setup's, the baseline's and the verdict's test runs, and the whole "
     "solve's.",
     lambda r: r.key.startswith(REAL_PROJECT_KEY)),
    ("Faults, load and sandbox abuse", "Workers killed, Redis restarted, GitHub "
     "misbehaving, storms, load, fuzzing, model garbage and resource abuse.",
     lambda r: True),
)


def _sections(records: list[ScenarioRecord]
              ) -> list[tuple[str, str, list[ScenarioRecord]]]:
    """Each record in the first section that claims it; empty sections left out."""
    left, out = list(records), []
    for heading, intro, claims in SECTIONS:
        chosen = [r for r in left if claims(r)]
        left = [r for r in left if r not in chosen]
        if chosen:
            out.append((heading, intro, chosen))
    return out


# Every channel through which the host reads what a sandbox wrote (issue 18 §4), its
# bound, and the scenarios (their keys, or a parametrised key's stem) that go past it:
# a static table, so a channel with no row here is one nobody bounded. The scenarios'
# titles and results come from the records.
CHANNELS: list[tuple[str, str, tuple[str, ...]]] = [
    ("The junit/go report FIFO (`ReportPipe`, solver/verdict/junit_report.py)",
     "64 MiB a write; 64 writes or 128 MiB per test run kept, later writes only counted; "
     "past it the verdict refuses, naming the bound", ("6ab-hostile-channel-report-loop",)),
    ("The pytest guard's FIFO (solver/verdict/verdict_run.py)",
     "4 MiB a write, 8 MiB per test run; past it the verdict refuses",
     ("6ac-hostile-channel-guard-flood", "19-hostile-protection-guard-total")),
    ("The junit XML parse (`parse_junit`)",
     "streamed through expat, nothing but results kept; any DOCTYPE refused (no entity "
     "can be declared); 4,000,000 elements, 64 levels, 500,000 tests, ids cut at 2,000 "
     "characters (and hashed); `go test -json` likewise read a line at a time",
     ("6ad-hostile-channel-xml-entities",)),
    ("The walk of the tree under test (`tree_state`: what changed while the tests ran)",
     "300,000 entries, 64 Mi characters of paths, 60 s, 128 levels, one open directory a "
     "level, read as a stream; past it the verdict refuses", ("6ae-hostile-channel-tree-walk",)),
    ("The test and setup commands' output (`ExecResult` stdout/stderr)",
     "the last 200,000 characters of each stream, cut by the runner and again by the "
     "host", ("6af-hostile-channel-output-flood", "6d-sandbox-output-flood")),
    ("The runner's replies and stderr (sandbox/runner_client.py)",
     "one reply at a time, at most 64 MiB, HMAC-authenticated; stderr: the last 64 lines "
     "of 2,000 bytes", ("6k-sandbox-channel-flood", "6j-sandbox-forged-reply")),
    ("The disk quota's walk (`tree_bytes`, sandbox/disk_quota.py)",
     "stops once past the quota; a walk over 30 s counts as over it (`disk_quota` names "
     "it); 256 levels",
     ("6ag-hostile-channel-quota-walk", "6c-sandbox-disk-fill", "6o-sandbox-inodes")),
    ("The copy of the private area after setup (`copy_tree`, sandbox/trees.py)",
     "500,000 entries or 300 s, 64 levels, paths of 2,048 bytes, holes kept, read as a "
     "stream; the first path left out says why",
     ("6ah-hostile-channel-setup-copy", "6u-hostile-private-sparse")),
    ("The extension modules setup built, carried into every test tree "
     "(solver/verdict/setup_builds.py)",
     "the setup tree walked to 300,000 entries or 60 s, links never followed; 200 files "
     "and 256 MiB carried, each opened with O_NOFOLLOW below its folder's descriptor; the "
     "rest named in the result's warnings", ("6ak-hostile-channel-setup-builds",)),
    ("The venv's start-up hooks (`startup_hooks`)",
     "1,000,000 entries, 300,000 hooks, 60 s; at most 20 named in the warnings",
     ("6aj-hostile-channel-venv-walk", "6v-hostile-private-venv-link")),
    ("Removing a run's trees (`remove_tree`)",
     "one open directory a level, subdirectories 4,096 names at a time, never a listing "
     "of a whole directory", ("6n-sandbox-deep-tree", "6ae-hostile-channel-tree-walk",
                              "19-hostile-protection-cleanup-links",
                              "19-hostile-protection-setup-dotgit-link")),
    ("The transcript (solver/agent/transcript.py)",
     "1,000,000 characters a string, 4,000,000 a record, 64,000,000 a transcript (then "
     "a record keeps kind, time and a note; the header and the result stay whole)",
     ("6ai-hostile-channel-transcript",)),
    ("The package index endpoint's downloads onto the host's disk (sandbox/download_cache.py)",
     "per setup, the sandbox's disk quota fetched (FROGNANO_SETUP_FETCH_MAX_GB; cache hits "
     "count), then every file refused and named; the shared download cache kept under "
     "FROGNANO_SETUP_CACHE_MAX_GB while storing; files not kept in a spool of the "
     "endpoint's own, 8 at once, each removed once sent",
     ("30-hostile-index-disk",)),
]


def _channels_table(records: list[ScenarioRecord]) -> list[str]:
    lines = ["", "## Channels from the sandbox to the host", "",
             "Everything the host reads that a sandbox wrote, with its total bound and the "
             "scenarios that go past it (a static table in `tests/reliability/scorecard.py`; "
             "the scenarios' results are the rows above).", "",
             "| channel | bound | scenarios past it |", "|---|---|---|"]
    for channel, bound, keys in CHANNELS:
        chosen = [r for r in records if r.key.startswith(keys)]
        scenarios = "<br>".join(f"{r.title} ({r.outcome})" for r in chosen) or "not run"
        cells = (text.replace("|", "\\|") for text in (channel, bound, scenarios))
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _mark(outcome: str) -> str:
    return {"passed": "✅ passed", "failed": "❌ FAILED"}.get(outcome, f"⚠️ {outcome}")


def _section_lines(heading: str, intro: str, chosen: list[ScenarioRecord]) -> list[str]:
    ok = sum(r.outcome == "passed" for r in chosen)
    lines = ["", f"## {heading}", "", f"{intro} {ok} of {len(chosen)} passed.", ""]
    if heading == REAL_PROJECTS:
        earlier = sum(r.earlier for r in chosen)
        lines[-2] += (f" {len(chosen) - earlier} ran in this run (one project of each shape "
                      f"runs in CI); the other {earlier} rows are from the last "
                      "`python3 -m tests.reliability --corpus`, each dated.") if earlier else ""
        return lines + ["| project | shape | setup inferred | baseline | verdict | evidence "
                        "| seconds |", "|---|---|---|---|---|---|---|"] \
            + [_real_project_row(r) for r in chosen]
    lines += ["| scenario | expectation | observed | result | seconds |",
              "|---|---|---|---|---|"]
    for r in chosen:
        expectation = r.expectation.replace("|", "\\|")
        lines.append(f"| **{r.title}** | {expectation} | "
                     f"{_format_observed(r.observed)} | {_mark(r.outcome)} | {r.seconds:.1f} |")
    return lines


def _real_project_row(record: ScenarioRecord) -> str:
    """project | shape | setup inferred | baseline | verdict | evidence | seconds, from what
    the run recorded: its setup note and test command, its baseline's failing tests, its
    verdict, the tests that fail on the base and pass with the fix, the solve's wall time."""
    seen = record.observed
    setup = str(seen.get("setup") or "none inferred").removeprefix(INFERRED_PREFIX)
    if seen.get("setup exit") not in (0, None):
        setup += f" (setup exit {seen['setup exit']})"
    if seen.get("tests"):
        setup += f"<br>tests: `{seen['tests']}`"
    failing = [str(t) for t in seen.get("baseline failing") or []]
    baseline = f"{len(failing)} of {seen.get('baseline tests', 0)} failing"
    if failing:
        baseline += ": " + ", ".join(f"`{t}`" for t in failing[:3]) + (
            f" and {len(failing) - 3} more" if len(failing) > 3 else "")
    accepted = "accepted" if seen.get("accepted") else "not accepted"
    verdict = f"{accepted} (`{seen.get('verdict')}`); test {_mark(record.outcome)}"
    if seen.get("known gap") and record.outcome == "skipped":  # a strict xfail that failed
        verdict = f"{accepted} (`{seen.get('verdict')}`); ⚠️ known gap: {seen['known gap']}"
    cells = (record.key.removeprefix(REAL_PROJECT_KEY), str(seen.get("shape", "")), setup,
             baseline, verdict, _evidence_cell(seen), _seconds_cell(record))
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def _seconds_cell(record: ScenarioRecord) -> str:
    """The setup's, the baseline's and the verdict's test run's seconds, then the whole
    solve's; and the date of a row kept from an earlier run."""
    seen = record.observed
    parts = [f"{name} {seen[key]}" for name, key in (
        ("setup", "setup seconds"), ("baseline", "baseline seconds"),
        ("verdict tests", "verdict seconds")) if seen.get(key) is not None]
    parts.append(f"whole {seen.get('solve seconds', record.seconds)}")
    if record.earlier:
        parts.append(f"(ran {record.ran_at or 'earlier'}, `--corpus`)")
    return "<br>".join(parts)


def _evidence_cell(seen: dict[str, Any]) -> str:
    """What the verdict showed: the tests that fail on the base and pass with the fix
    (the run's `evidence`, solver/verdict/evidence.py), or that none did."""
    reproducing = [str(t) for t in seen.get("reproducing") or []]
    if "reproducing" not in seen:
        return "not recorded"
    if not reproducing:
        return "⚠️ unverified: no test fails without the fix"
    shown = ", ".join(f"`{t}`" for t in reproducing[:2])
    more = f" and {len(reproducing) - 2} more" if len(reproducing) > 2 else ""
    return f"✅ {len(reproducing)} fail on the base, pass with the fix: {shown}{more}"


def render(records: list[ScenarioRecord], missing: list[str]) -> str:
    ran = [r for r in records if not r.earlier]
    passed = sum(r.outcome == "passed" for r in ran)
    lines = [
        "# Reliability scorecard",
        "",
        "Generated by `python3 -m tests.reliability` (the suite, then "
        "`python3 -m tests.reliability.scorecard`); do not edit by hand.",
        "Every scenario runs against the real components — redis-server, Celery worker "
        "processes, git, bubblewrap and the local fake GitHub — and fails when the "
        "behaviour regresses.",
        "",
        f"Rendered {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on "
        f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs: "
        f"**{passed} of {len(ran)} scenarios passed**"
        + (f" (and {len(records) - len(ran)} corpus rows kept from an earlier run)."
           if len(ran) < len(records) else "."),
        "",
    ]
    for heading, intro, chosen in _sections(records):
        lines += _section_lines(heading, intro, chosen)
    lines += _channels_table(records)
    notes = [(r.title, note) for r in records for note in r.notes]
    if notes:
        lines += ["", "## Notes", ""]
        lines += [f"- **{title}**: {note}" for title, note in notes]
    if missing:
        lines += ["", "## Not yet covered", ""]
        lines += [f"- {item}" for item in missing]
    return "\n".join(lines) + "\n"


# Scenarios of issue #6 that the suite does not exercise yet; listed so the scorecard
# never suggests more coverage than there is.
NOT_YET_COVERED: list[str] = [
    "The cgroup v2 limits (memory.max, pids.max): this CI host has cgroup v1 only, so the "
    "whole-sandbox memory and process limits are checked here through the host-side watch",
    "SysV shared memory that no process maps any more is not counted by the host-side "
    "memory watch (a cgroup counts it)",
    "Code under test runs inside pytest's own process: code written against this harness "
    "(patching the guard first, forging the report) is not caught; the PR stays a draft",
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--results", type=Path, default=results_dir())
    parser.add_argument("--out", type=Path, default=DEFAULT_SCORECARD)
    parser.add_argument("--section", help="print this section alone (e.g. 'Real projects') "
                        "from the results there are, and write no scorecard: a partial run "
                        "never replaces the whole one")
    args = parser.parse_args(argv)
    records = load_records(args.results) if args.results.is_dir() else []
    if args.section:
        chosen = [(h, i, r) for h, i, r in _sections(records) if h == args.section]
        print("\n".join(line for h, i, r in chosen for line in _section_lines(h, i, r)))
        return 0 if chosen else 1
    args.out.write_text(render(records, NOT_YET_COVERED))
    print(f"wrote {args.out} ({len(records)} scenarios)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
