"""Per-test results from a runner's machine-readable report, never from its coloured stdout.

The harness asks the runner for a report at a random path only it knows (pytest's
`--junitxml` through `PYTEST_ADDOPTS`, which reaches pytest even behind `tox` or
`make test`; `go test -json` for Go), then reads the file on the host with a size cap.
Test ids are kept whole: parametrised ids with spaces and brackets stay one id.

The report path is a FIFO in a folder bound read-only into the sandbox (`ReportPipe`):
the tests can write it, never delete, replace or rewrite it, and the host reads every
write as it happens. A hook that rewrites the report after pytest (an `atexit` in the
code under test, a wrapper script) shows up as one write too many.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import threading
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

REPORT_MAX_BYTES = 64 * 1024 * 1024
# A status ranks above those before it: a test that failed in its call and errored in
# teardown is reported once, as failed.
_RANK = ("passed", "skipped", "xfailed", "error", "failed")


@dataclass(frozen=True)
class ReportRequest:
    """How one test run is asked for its report, and where the file lands."""

    kind: str  # "junit", "go-json" or "none" (the runner has no report we can ask for)
    command: str  # the command to run inside the sandbox
    inside_path: str  # the report's path inside the sandbox ("" for "none")


_GO_TEST = re.compile(r"^\s*go\s+test\b")


def report_request(command: str, inside_dir: str, token: str,
                   guard: tuple[str, str] | None = None) -> ReportRequest:
    """The command, rewritten so the runner writes a report to `inside_dir/<token>…`.

    `guard` is (folder, report path) of the harness's pytest guard: the folder goes on
    PYTHONPATH, where pytest finds the guard by its entry point (a wrapper that drops
    PYTHONPATH, or PYTEST_DISABLE_PLUGIN_AUTOLOAD, leaves it silent, never broken)."""
    if _GO_TEST.match(command) and not re.search(r"[;&|<>`$()]", command):
        path = f"{inside_dir}/{token}.jsonl"
        args = [a for a in shlex.split(command) if a not in ("-v", "-json")]
        rewritten = " ".join(shlex.quote(a) for a in [*args[:2], "-json", *args[2:]])
        return ReportRequest("go-json", f"{rewritten} > {shlex.quote(path)}", path)
    path = f"{inside_dir}/{token}.xml"
    # Every pytest process started under this shell reads PYTEST_ADDOPTS, whatever
    # wrapper (tox, nox, make) starts it; `-o junit_family=xunit1` keeps the `file`
    # attribute, from which the test's node id is rebuilt.
    addopts = (f"-p no:cacheprovider --junitxml={path} -o junit_family=xunit1 "
               "-o junit_logging=no")
    exports = f"export PYTEST_ADDOPTS={shlex.quote(addopts)}\n"
    if guard is not None:
        folder, report = guard
        exports += (f"export PYTHONPATH={shlex.quote(folder)}${{PYTHONPATH:+:$PYTHONPATH}} "
                    f"FROGNANO_GUARD_REPORT={shlex.quote(report)}\n")
    return ReportRequest("junit", exports + command, path)


def read_report(path: Path, max_bytes: int = REPORT_MAX_BYTES) -> bytes | None:
    """The report's bytes; None when absent, not a plain file, or over the cap."""
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > max_bytes:
            return None
        with path.open("rb") as handle:
            return handle.read(max_bytes + 1)[:max_bytes]
    except OSError:
        return None


class ReportPipe:
    """A FIFO at `path` the host drains in a thread; each writer's session is one write.

    Create it before the run; `close()` once every sandboxed process is gone. Sessions
    that wrote nothing are not counted (opening the path is not writing a report).
    """

    def __init__(self, path: Path, max_bytes: int = REPORT_MAX_BYTES) -> None:
        self.path, self.max_bytes = path, max_bytes
        os.mkfifo(path, 0o600)
        os.chmod(path, 0o622)  # the sandbox uid writes; only the host reads
        self.writes: list[bytes] = []
        self.oversize = False
        self._closing = False
        self._thread = threading.Thread(target=self._drain, name="report-pipe", daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        while not self._closing:
            kept = bytearray()
            with self.path.open("rb") as pipe:  # blocks until a writer opens the FIFO
                while chunk := pipe.read(1 << 16):
                    if len(kept) + len(chunk) > self.max_bytes:
                        self.oversize = True  # read on, so the writer never blocks
                    else:
                        kept += chunk
            if kept:  # the closing wake-up writes nothing; a late real write still counts
                self.writes.append(bytes(kept))

    def close(self, wait: float = 5.0) -> list[bytes]:
        """Stop the reader (a last empty write wakes it) and return the writes."""
        self._closing = True
        deadline = time.monotonic() + wait
        while self._thread.is_alive() and time.monotonic() < deadline:
            # Succeeds only while the reader waits in open(): retry until it does.
            with contextlib.suppress(OSError):
                os.close(os.open(self.path, os.O_WRONLY | os.O_NONBLOCK))
            self._thread.join(0.05)
        return self.writes


def documents(kind: str, writes: list[bytes]) -> list[bytes]:
    """The reports in the writes: writers that follow each other fast share one FIFO
    session, so a junit write is split where each XML declaration starts."""
    if kind != "junit":
        return [w for w in writes if w]
    parts = [part for w in writes for part in re.split(rb"(?=<\?xml)", w)]
    return [part for part in parts if part.strip()]


def merge_reports(kind: str, writes: list[bytes]) -> dict[str, str] | None:
    """One result per test over every write; None if any write is unreadable."""
    merged: dict[str, str] = {}
    for data in writes:
        tests = parse_report(kind, data)
        if tests is None:
            return None
        for test, status in tests.items():
            merged[test] = _worse(merged.get(test), status)
    return merged if writes else None


def _worse(current: str | None, new: str) -> str:
    if current is None:
        return new
    return max(current, new, key=_RANK.index)


def _node_id(case: ET.Element) -> str:
    """pytest's node id, rebuilt from junit's `file`, `classname` and `name`."""
    name = case.get("name", "")
    classname = case.get("classname", "")
    file = case.get("file")
    if file and not classname:  # a collection error: the module itself
        return file
    if file and file.endswith(".py"):
        module = file[:-3].replace("/", ".")
        if classname == module:
            return f"{file}::{name}"
        if classname.startswith(module + "."):
            return f"{file}::{classname[len(module) + 1:].replace('.', '::')}::{name}"
    return f"{classname}::{name}" if classname else name


def parse_junit(data: bytes) -> dict[str, str] | None:
    """test id → passed/failed/error/skipped/xfailed; None when the XML is unreadable."""
    try:
        # expat refuses external entities and (2.4+) entity blow-ups; the size is capped.
        root = ET.fromstring(data)
    except ET.ParseError:
        return None
    results: dict[str, str] = {}
    for case in root.iter("testcase"):
        status = "passed"
        for child in case:
            if child.tag == "failure":
                status = _worse(status, "failed")
            elif child.tag == "error":
                status = _worse(status, "error")
            elif child.tag == "skipped":
                xfail = child.get("type") == "pytest.xfail"
                status = _worse(status, "xfailed" if xfail else "skipped")
        test_id = _node_id(case)
        results[test_id] = _worse(results.get(test_id), status)
    return results


def parse_go_json(data: bytes) -> dict[str, str] | None:
    """test id (`package/TestName`) → status, from `go test -json` events."""
    results: dict[str, str] = {}
    actions = {"pass": "passed", "fail": "failed", "skip": "skipped"}
    for line in data.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue  # build output interleaved with the events
        if not isinstance(event, dict) or event.get("Action") not in actions:
            continue
        if not event.get("Test"):
            if event.get("Action") == "fail" and event.get("Package"):
                results.setdefault(f"{event['Package']} (package)", "error")
            continue
        results[f"{event.get('Package', '')}/{event['Test']}"] = actions[event["Action"]]
    return results


def go_output(data: bytes) -> str:
    """The human-readable output carried inside `go test -json` events."""
    parts = []
    for line in data.splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            parts.append(line.decode("utf-8", "replace") + "\n")
            continue
        if isinstance(event, dict) and isinstance(event.get("Output"), str):
            parts.append(event["Output"])
    return "".join(parts)


def parse_report(kind: str, data: bytes | None) -> dict[str, str] | None:
    if data is None or kind == "none":
        return None
    return parse_junit(data) if kind == "junit" else parse_go_json(data)
