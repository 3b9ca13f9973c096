"""Per-test results from a runner's machine-readable report, never from its coloured stdout.

The harness asks the runner for a report at a random path only it knows (pytest's
`--junitxml` through `PYTEST_ADDOPTS`, which reaches pytest even behind `tox` or
`make test`; `go test -json` for Go), then reads the file on the host with a size cap.
Test ids are kept whole: parametrised ids with spaces and brackets stay one id.
"""

from __future__ import annotations

import json
import re
import shlex
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


def report_request(command: str, inside_dir: str, token: str) -> ReportRequest:
    """The command, rewritten so the runner writes a report to `inside_dir/<token>…`."""
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
    return ReportRequest("junit", f"export PYTEST_ADDOPTS={shlex.quote(addopts)}\n{command}",
                         path)


def read_report(path: Path, max_bytes: int = REPORT_MAX_BYTES) -> bytes | None:
    """The report's bytes; None when absent, not a plain file, or over the cap."""
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > max_bytes:
            return None
        with path.open("rb") as handle:
            return handle.read(max_bytes + 1)[:max_bytes]
    except OSError:
        return None


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
