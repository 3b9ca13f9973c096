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
import hashlib
import io
import json
import os
import re
import shlex
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from xml.parsers import expat

from solver.verdict.django_tests import django_with_report
from solver.verdict.repo_tests import unittest_with_report

REPORT_MAX_BYTES = 64 * 1024 * 1024  # one write of the report
# Every write of one test run together, and how many writes are kept: the code under
# test can rewrite the report path in a loop until the test timeout, so past either cap
# the pipe keeps only counts (measured: 768 MiB of the worker's memory and growing).
REPORT_MAX_TOTAL_BYTES = 128 * 1024 * 1024
REPORT_MAX_WRITES = 64
# The junit parse streams (nothing but the results is kept) and refuses a DOCTYPE: no
# entity can be declared, so no billion laughs, no external entity, and none of the
# up-to-100x blow-ups expat 2.5's amplification limit still lets through (measured: an
# 8 MiB report with eight 1 MiB entities took ElementTree to 773 MiB).
JUNIT_MAX_ELEMENTS = 4_000_000
JUNIT_MAX_DEPTH = 64  # pytest nests testsuites > testsuite > testcase > failure
JUNIT_MAX_TESTS = 500_000
TEST_ID_MAX_CHARS = 2_000  # a longer id keeps its head and a hash of the whole
# A status ranks above those before it: a test that failed in its call and errored in
# teardown is reported once, as failed.
_RANK = ("passed", "skipped", "xfailed", "error", "failed")
# Of a failing test, what its report says the failure was (evidence.py tells a fix from a
# new feature by it): the element's `type` and `message`, the tail of its text, and the
# summary kept; for at most FAILURES_KEPT tests a run.
FAILURE_ATTR_CHARS = 2_000
FAILURE_TEXT_CHARS = 4_000
FAILURE_SUMMARY_CHARS = 300
FAILURES_KEPT = 5_000


@dataclass(frozen=True)
class ReportRequest:
    """How one test run is asked for its report, and where the file lands."""

    kind: str  # "junit", "go-json" or "none" (the runner has no report we can ask for)
    command: str  # the command to run inside the sandbox
    inside_path: str  # the report's path inside the sandbox ("" for "none")


_GO_TEST = re.compile(r"^\s*go\s+test\b")


def report_request(command: str, inside_dir: str, token: str,
                   guard: tuple[str, str] | None = None, *,
                   keep_going: bool = False) -> ReportRequest:
    """The command, rewritten so the runner writes a report to `inside_dir/<token>…`.

    `guard` is (folder, report path) of the harness's pytest guard: the folder goes on
    PYTHONPATH, where pytest finds the guard by its entry point (a wrapper that drops
    PYTHONPATH, or PYTEST_DISABLE_PLUGIN_AUTOLOAD, leaves it silent, never broken).
    `keep_going`: pytest runs the modules it could collect past a collection error (which
    otherwise stops the session), for the model's tests on the base tree: a test module
    importing a name only the change adds must not keep its neighbours from running."""
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
               "-o junit_logging=no" + (" --continue-on-collection-errors" if keep_going
                                        else ""))
    exports = f"export PYTEST_ADDOPTS={shlex.quote(addopts)}\n"
    if guard is not None:
        folder, report = guard
        exports += (f"export PYTHONPATH={shlex.quote(folder)}${{PYTHONPATH:+:$PYTHONPATH}} "
                    f"FROGNANO_GUARD_REPORT={shlex.quote(report)}\n")
        # unittest has no report of its own, Django's runner none the harness can ask
        # for: the guard folder's runners write junit.
        command = unittest_with_report(command, path) or django_with_report(command, path) \
            or command
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
    At most `max_bytes` a write, `max_total_bytes` and `max_writes` over the pipe's life
    are kept; past a cap the pipe reads on (a writer never blocks) and only counts, and
    `overflow()` says which cap was passed.
    """

    def __init__(self, path: Path, max_bytes: int = REPORT_MAX_BYTES, *,
                 label: str = "the test report",
                 max_total_bytes: int = REPORT_MAX_TOTAL_BYTES,
                 max_writes: int = REPORT_MAX_WRITES) -> None:
        self.path, self.max_bytes, self.label = path, max_bytes, label
        self.max_total_bytes, self.max_writes = max_total_bytes, max_writes
        os.mkfifo(path, 0o600)
        os.chmod(path, 0o622)  # the sandbox uid writes; only the host reads
        self.writes: list[bytes] = []
        self.oversize = False  # one write was over `max_bytes`
        self.over_total = False  # the writes together passed a total cap
        self.dropped = 0  # writes counted but not kept
        self.bytes_seen = 0  # every byte read, kept or not
        self._kept_bytes = 0
        self._closing = False
        self._thread = threading.Thread(target=self._drain, name="report-pipe", daemon=True)
        self._thread.start()

    def _drain(self) -> None:
        while not self._closing:
            with self.path.open("rb") as pipe:  # blocks until a writer opens the FIFO
                kept = self._session(pipe)
            if kept is None:
                self.dropped += 1
            elif kept:  # the closing wake-up writes nothing; a late real write still counts
                self.writes.append(bytes(kept))
                self._kept_bytes += len(kept)

    def _session(self, pipe: Any) -> bytearray | None:
        """One writer's bytes; None when the session wrote but was not kept (a cap)."""
        kept: bytearray | None = bytearray()
        while chunk := pipe.read(1 << 16):
            self.bytes_seen += len(chunk)
            if kept is None:
                continue  # read on, so the writer never blocks
            size = len(kept) + len(chunk)
            if size > self.max_bytes:
                self.oversize, kept = True, None
            elif (self._kept_bytes + size > self.max_total_bytes
                  or len(self.writes) >= self.max_writes):
                self.over_total, kept = True, None
            else:
                kept += chunk
        return kept

    def overflow(self) -> str | None:
        """Which cap the writes passed, in words that stay the same for every run that
        passes it (a baseline that passed it too is then no news); None within them."""
        if self.oversize:
            return (f"a write of {self.label} was over {_size(self.max_bytes)} "
                    "(read on, not kept)")
        if self.over_total:
            return (f"the writes of {self.label} passed {self.max_writes} writes or "
                    f"{_size(self.max_total_bytes)} in all (later ones were "
                    "counted, not kept)")
        return None

    @property
    def sessions(self) -> int:
        """Every write, kept or only counted."""
        return len(self.writes) + self.dropped

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


def _size(count: int) -> str:
    return f"{count // 1024**2} MiB" if count % 1024**2 == 0 else f"{count:,} bytes"


def documents(kind: str, writes: list[bytes]) -> list[bytes]:
    """The reports in the writes: writers that follow each other fast share one FIFO
    session, so a junit write is split where each XML declaration starts."""
    if kind != "junit":
        return [w for w in writes if w]
    # A write holding one report is kept as it is: a split copies it (up to the pipe's
    # whole total, twice in the worker's memory).
    parts = [part for w in writes
             for part in (re.split(rb"(?=<\?xml)", w) if w.count(b"<?xml") > 1 else [w])]
    return [part for part in parts if part.strip()]


def merge_reports(kind: str, writes: list[bytes], refusals: list[str] | None = None,
                  failures: dict[str, str] | None = None) -> dict[str, str] | None:
    """One result per test over every write; None if any write is unreadable (why a
    bound refused one goes to `refusals`; each failing test's summary to `failures`)."""
    merged: dict[str, str] = {}
    for data in writes:
        tests = parse_report(kind, data, refusals, failures)
        if tests is None:
            return None
        for test, status in tests.items():
            merged[test] = _worse(merged.get(test), status)
    return merged if writes else None


def _worse(current: str | None, new: str) -> str:
    if current is None:
        return new
    return max(current, new, key=_RANK.index)


def _node_id(case: dict[str, str]) -> str:
    """pytest's node id, rebuilt from junit's `file`, `classname` and `name`."""
    name = case.get("name", "")
    classname = case.get("classname", "")
    file = case.get("file")
    if file and not classname:  # a collection error: the module itself
        return _bounded_id(file)
    if file and file.endswith(".py"):
        module = file[:-3].replace("/", ".")
        if classname == module:
            return _bounded_id(f"{file}::{name}")
        if classname.startswith(module + "."):
            nested = classname[len(module) + 1:].replace(".", "::")
            return _bounded_id(f"{file}::{nested}::{name}")
    return _bounded_id(f"{classname}::{name}" if classname else name)


def _bounded_id(test_id: str) -> str:
    """The id, or its head and a hash of the whole: the ids are kept for the whole run,
    and the code under test names its own tests (a 1 MiB parametrised id)."""
    if len(test_id) <= TEST_ID_MAX_CHARS:
        return test_id
    digest = hashlib.sha256(test_id.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{test_id[:TEST_ID_MAX_CHARS]}…[{digest}]"


class ReportRefused(Exception):
    """A report past a parse bound, or with a DOCTYPE: read as unreadable."""


class _JunitReader:
    """expat handlers that keep only the results: one open testcase per nesting level,
    the counts that bound the parse, never the elements or their text; of a failing
    test, a bounded summary of its failure (`failure_summary`)."""

    def __init__(self) -> None:
        self.results: dict[str, str] = {}
        self.failures: dict[str, str] = {}  # test id → "Type: message", bounded
        self.cases: list[tuple[int, dict[str, str], list[str]]] = []  # depth, attrs, status
        self.depth = self.elements = 0
        # The failure or error element being read: its attributes, its text's tail.
        self.failure: tuple[int, dict[str, str]] | None = None
        self.text: list[str] = []
        self.text_chars = 0

    def start(self, tag: str, attrs: dict[str, str]) -> None:
        self.depth += 1
        self.elements += 1
        if self.depth > JUNIT_MAX_DEPTH or self.elements > JUNIT_MAX_ELEMENTS:
            raise ReportRefused(f"over {JUNIT_MAX_DEPTH} levels or {JUNIT_MAX_ELEMENTS:,} "
                                "elements")
        if self.cases and self.cases[-1][0] == self.depth - 1:  # a testcase's own child
            status = self.cases[-1][2]
            if tag == "failure":
                status[0] = _worse(status[0], "failed")
            elif tag == "error":
                status[0] = _worse(status[0], "error")
            elif tag == "skipped":
                xfail = attrs.get("type") == "pytest.xfail"
                status[0] = _worse(status[0], "xfailed" if xfail else "skipped")
            if tag in ("failure", "error") and len(status) == 1:  # the first one tells
                self.failure = (self.depth, {k: attrs[k][:FAILURE_ATTR_CHARS]
                                             for k in ("type", "message") if k in attrs})
                self.text, self.text_chars = [], 0
        if tag == "testcase":
            kept: dict[str, str] = {k: attrs[k] for k in ("name", "classname", "file")
                                    if k in attrs}
            self.cases.append((self.depth, kept, ["passed"]))

    def data(self, text: str) -> None:
        """A failure's text, of which only the tail is kept: its last lines name the
        exception."""
        if self.failure is None:
            return
        self.text.append(text)
        self.text_chars += len(text)
        if self.text_chars > 2 * FAILURE_TEXT_CHARS:
            kept = "".join(self.text)[-FAILURE_TEXT_CHARS:]
            self.text, self.text_chars = [kept], len(kept)

    def end(self, tag: str) -> None:
        if self.failure is not None and self.failure[0] == self.depth:
            attrs = self.failure[1]
            self.cases[-1][2].append(failure_summary(
                attrs.get("type", ""), attrs.get("message", ""),
                "".join(self.text)[-FAILURE_TEXT_CHARS:]))
            self.failure = None
        if tag == "testcase" and self.cases and self.cases[-1][0] == self.depth:
            _depth, attrs, status = self.cases.pop()
            test_id = _node_id(attrs)
            self.results[test_id] = _worse(self.results.get(test_id), status[0])
            if len(status) > 1 and status[0] in ("failed", "error") \
                    and test_id not in self.failures and len(self.failures) < FAILURES_KEPT:
                self.failures[test_id] = status[1]
            if len(self.results) > JUNIT_MAX_TESTS:
                raise ReportRefused(f"over {JUNIT_MAX_TESTS:,} tests")
        self.depth -= 1


# An exception's name as Python prints it: `ValueError`, `pkg.errors.Bad`.
_EXCEPTION = re.compile(r"([A-Za-z_][\w.]*(?:Error|Exception|Warning|Exit|Interrupt|"
                        r"Iteration))(?::\s*(.*))?$", re.DOTALL)
_TEXT_EXCEPTION = re.compile(r"^E\s+([A-Za-z_][\w.]*(?:Error|Exception|Warning|Exit|"
                             r"Interrupt|Iteration))(?::[ \t]*(.*))?$", re.MULTILINE)
_WRAPPED = re.compile(r'^failed on (?:setup|teardown) with "(.*)"$', re.DOTALL)
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]+")


def failure_summary(kind: str, message: str, text: str) -> str:
    """"Type: message" of a failing test's report element (untrusted: the code under test
    writes the message), at most FAILURE_SUMMARY_CHARS on one line. pytest's `message`
    is the exception (`AttributeError: …`; an assert's without its name); a collection
    error's is "collection failure", and its text's last `E   Type: …` line tells."""
    message = _WRAPPED.sub(r"\1", message.strip())
    found = _EXCEPTION.match(message)
    if found:
        summary = f"{found.group(1)}: {found.group(2) or ''}"
    elif message.startswith("assert"):
        summary = f"AssertionError: {message}"
    else:
        in_text = list(_TEXT_EXCEPTION.finditer(text))
        if in_text:
            summary = f"{in_text[-1].group(1)}: {in_text[-1].group(2) or ''}"
        elif re.search(r"^E\s+assert\b", text, re.MULTILINE):
            summary = f"AssertionError: {message}"
        else:
            summary = f"{kind or 'failure'}: {message}"
    return _CONTROL.sub(" ", summary).strip()[:FAILURE_SUMMARY_CHARS]


def _no_doctype(*_args: object) -> None:
    raise ReportRefused("a DOCTYPE (pytest writes none; entities are how XML blows up)")


def parse_junit(data: bytes, refusals: list[str] | None = None,
                failures: dict[str, str] | None = None) -> dict[str, str] | None:
    """test id → passed/failed/error/skipped/xfailed; None when the XML is unreadable,
    declares a DOCTYPE, or passes a bound (elements, nesting, tests), which is then said
    in `refusals`. Each failing test's `failure_summary` goes to `failures`."""
    reader = _JunitReader()
    parser = expat.ParserCreate()
    parser.StartElementHandler = reader.start
    parser.EndElementHandler = reader.end
    parser.CharacterDataHandler = reader.data
    parser.StartDoctypeDeclHandler = _no_doctype
    parser.EntityDeclHandler = _no_doctype
    try:
        parser.Parse(data, True)
    except ReportRefused as exc:
        if refusals is not None:
            refusals.append(f"the junit report was refused unread: {exc}")
        return None
    except expat.ExpatError:
        return None
    if failures is not None:
        failures.update(reader.failures)
    return reader.results


def parse_go_json(data: bytes) -> dict[str, str] | None:
    """test id (`package/TestName`) → status, from `go test -json` events."""
    results: dict[str, str] = {}
    actions = {"pass": "passed", "fail": "failed", "skip": "skipped"}
    for line in io.BytesIO(data):  # one line at a time, not a list of them all
        if len(results) > JUNIT_MAX_TESTS:
            return None
        try:
            event = json.loads(line)
        except ValueError:
            continue  # build output interleaved with the events
        if not isinstance(event, dict) or event.get("Action") not in actions:
            continue
        if not event.get("Test"):
            if event.get("Action") == "fail" and event.get("Package"):
                results.setdefault(_bounded_id(f"{event['Package']} (package)"), "error")
            continue
        test_id = _bounded_id(f"{event.get('Package', '')}/{event['Test']}")
        results[test_id] = actions[event["Action"]]
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


def parse_report(kind: str, data: bytes | None, refusals: list[str] | None = None,
                 failures: dict[str, str] | None = None) -> dict[str, str] | None:
    if data is None or kind == "none":
        return None
    return parse_junit(data, refusals, failures) if kind == "junit" else parse_go_json(data)
