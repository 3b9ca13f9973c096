"""`python3 -m tests.reliability`: run the reliability suite, then render the scorecard.

Extra arguments go to pytest (e.g. `-k hostile`). The scenarios run in two pytest-xdist
workers (a file stays on one worker: its stack is set up once), except those whose
measure is time itself (latency under load, lock and visibility timeouts, a restart's
recovery), which run after, alone: a neighbour's load would be part of what they measure.
`--workers 0` runs everything in one process. The exit status is pytest's worst.

The real-projects corpus (tests/reliability/test_real_projects.py) runs one project of
each shape here, as CI does; `--corpus` runs the whole corpus as well (its other projects
are marked `corpus`). The scorecard keeps the rows of corpus projects that did not run
this time from the last run that did, each saying when it ran.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

from tests.reliability.scorecard import (
    REAL_PROJECT_KEY,
    RESULTS_ENV,
    ROOT,
    clear_results,
    main,
    results_dir,
)
from tests.reliability.test_real_projects import PROJECTS

# Scenarios that time the bot itself: they run alone, after the rest.
TIMED = ("tests/reliability/test_load.py", "tests/reliability/test_storms.py",
         "tests/reliability/test_worker_killed.py", "tests/reliability/test_redis_restart.py")
NO_TESTS_COLLECTED = 5  # pytest's exit status when a selection (-k) leaves a part empty


def _pytest(paths: list[str], extra: list[str], env: dict[str, str]) -> int:
    return subprocess.call([sys.executable, "-m", "pytest", "-q", *paths, *extra],
                           cwd=ROOT, env=env)


def run(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m tests.reliability")
    parser.add_argument("--workers", type=int, default=2,
                        help="pytest-xdist workers for the untimed scenarios (0: one process)")
    parser.add_argument("--corpus", action="store_true",
                        help="run the whole real-projects corpus, not one project per shape")
    args, extra = parser.parse_known_args(argv)
    results = results_dir()
    # A scorecard shows one run, but for the corpus rows this run leaves out.
    clear_results(results, {f"{REAL_PROJECT_KEY}{name}" for name in PROJECTS})
    env = {**os.environ, RESULTS_ENV: str(results)}
    extra = ["-m", "reliability" if args.corpus else "reliability and not corpus", *extra]
    if args.workers <= 0:
        statuses = [_pytest(["tests/reliability"], extra, env)]
    else:
        untimed = [f"--ignore={path}" for path in TIMED]
        statuses = [_pytest(["tests/reliability", *untimed, "-n", str(args.workers),
                             "--dist", "loadfile"], extra, env),
                    _pytest(list(TIMED), extra, env)]
    main(["--results", str(results)])
    ran = [status for status in statuses if status != NO_TESTS_COLLECTED]
    return max(ran) if ran else NO_TESTS_COLLECTED


if __name__ == "__main__":
    raise SystemExit(run())
