"""`python3 -m tests.reliability`: run the reliability suite, then render the scorecard.

Extra arguments go to pytest (e.g. `-k hostile`). The exit status is pytest's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from tests.reliability.scorecard import RESULTS_ENV, ROOT, main, results_dir


def run() -> int:
    results = results_dir()
    shutil.rmtree(results, ignore_errors=True)  # a scorecard shows one run, never a mix
    env = {**os.environ, RESULTS_ENV: str(results)}
    status = subprocess.call([sys.executable, "-m", "pytest", "-q", "-m", "reliability",
                              "tests/reliability", *sys.argv[1:]], cwd=ROOT, env=env)
    main(["--results", str(results)])
    return status


if __name__ == "__main__":
    raise SystemExit(run())
