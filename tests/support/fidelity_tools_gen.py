"""Generate tests/data/fidelity_tools/expected.json from Leaf's own tool runner.

    python3 tests/support/fidelity_tools_gen.py PATH/TO/leaf/tool_runner.py

PATH is a local copy of frognano/harness/leaf/tool_runner.py from microsoft/FrogNano,
kept outside this repository (its code is never committed here). Each case of
cases.json runs in a fresh work directory: its files are written, then its calls are
made one after the other, each as Leaf makes them (one `python3 tool_runner.py` per
call, the payload on stdin). The work directory is written as {WORKDIR} in arguments
and outputs, so the test can put the sandbox's own in its place.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.support.paths import DATA as TEST_DATA

DATA = TEST_DATA / "fidelity_tools"


def substitute(value: object, workdir: str) -> object:
    if isinstance(value, str):
        return value.replace("{WORKDIR}", workdir)
    if isinstance(value, dict):
        return {key: substitute(item, workdir) for key, item in value.items()}
    return value


def run_case(leaf: Path, case: dict) -> list[str]:
    outputs, groups = [], []
    with tempfile.TemporaryDirectory(prefix="leaf-fidelity-") as tmp:
        workdir = str(Path(tmp, "ws").resolve())
        os.mkdir(workdir)  # HOME is the empty tmp: no profile of this machine's speaks
        for name, text in case.get("files", {}).items():
            Path(workdir, name).parent.mkdir(parents=True, exist_ok=True)
            Path(workdir, name).write_text(text)
        try:
            for call in case["calls"]:
                payload = {"tool": call["tool"], "workdir": workdir,
                           "args": substitute(call["args"], workdir)}
                proc = subprocess.Popen(
                    [sys.executable, str(leaf)], stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE, cwd=workdir, start_new_session=True,
                    env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": tmp})
                groups.append(proc.pid)
                out, _ = proc.communicate(json.dumps(payload).encode())
                outputs.append(out.decode("utf-8").replace(workdir, "{WORKDIR}"))
        finally:
            for pgid in groups:  # Leaf leaves background processes; the pod dies later
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pgid, signal.SIGKILL)
    return outputs


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    leaf = Path(argv[1]).resolve()
    cases = json.loads((DATA / "cases.json").read_text())
    expected = {case["name"]: run_case(leaf, case) for case in cases}
    (DATA / "expected.json").write_text(json.dumps(expected, indent=1, ensure_ascii=False) + "\n")
    print(f"{len(expected)} cases written to {DATA / 'expected.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
