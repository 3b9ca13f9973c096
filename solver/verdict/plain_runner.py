"""Run test functions without pytest, inside a verdict's sandbox (frognano-bot).

The harness copies this file into its read-only channel folder and runs it with the
sandbox's python. It uses the standard library only. Code that behaves only under
pytest (it looks for pytest's modules, or forges the report whose path pytest's
environment holds, then exits) passes a pytest run; here no pytest is loaded, no report
path is in the environment, and each test module runs in a child process whose results
go back over an inherited pipe, not a path. The parent never imports repository code;
it alone holds the harness's FIFO (opened before any child starts) and the token.

    python3 plain_runner.py < {"report": FIFO, "token": T, "tests": [[file, qual], ...]}
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import subprocess
import sys
import unittest
from collections.abc import Callable
from typing import Any

CHILD = "child"
MODULE_TIMEOUT = 300.0


def _import_name(path: str) -> tuple[str, str]:
    """(folder for sys.path, module name), as pytest's default `prepend` import mode
    finds them: up through the folders that hold an `__init__.py`."""
    folder, name = os.path.split(os.path.abspath(path))
    parts = [name[:-3]]
    while os.path.isfile(os.path.join(folder, "__init__.py")):
        folder, package = os.path.split(folder)
        parts.insert(0, package)
    return folder, ".".join(parts)


def _needs_arguments(func: Callable[..., Any], bound: bool) -> bool:
    """Parameters without defaults are pytest fixtures: not run here."""
    try:
        params = list(inspect.signature(func).parameters.values())
    except (TypeError, ValueError):
        return True
    params = params[1:] if bound and params and params[0].name == "self" else params
    return any(p.default is inspect.Parameter.empty and p.kind not in (
        p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params)


def _outcome(call: Callable[[], object]) -> tuple[str, str]:
    try:
        call()
    except BaseException as exc:  # a test's SystemExit is its failure, not ours
        if type(exc).__name__ in ("Skipped", "SkipTest"):
            return "skipped", str(exc)[:200]
        if isinstance(exc, KeyboardInterrupt):
            raise
        return "failed", f"{type(exc).__name__}: {exc}"[:500]
    return "passed", ""


def _unittest_case(cls: type[unittest.TestCase], method: str) -> tuple[str, str]:
    result = unittest.TestResult()
    cls(method).run(result)
    for kind, found in (("error", result.errors), ("failed", result.failures)):
        if found:
            return kind, found[0][1][-500:]
    return ("skipped", result.skipped[0][1]) if result.skipped else ("passed", "")


def _run_one(module: object, qualname: str) -> tuple[str, str]:
    parts = qualname.split("::")
    if len(parts) == 1:
        func = getattr(module, parts[0], None)
        if not callable(func) or _needs_arguments(func, False) \
                or inspect.iscoroutinefunction(func):
            return "skipped", "not a plain function without fixtures"
        return _outcome(func)
    cls = getattr(module, parts[0], None)
    if len(parts) != 2 or not isinstance(cls, type) or not hasattr(cls, parts[1]):
        return "skipped", "not a test class's method"
    if issubclass(cls, unittest.TestCase):
        return _unittest_case(cls, parts[1])
    method = getattr(cls, parts[1])
    if _needs_arguments(method, True) or inspect.iscoroutinefunction(method):
        return "skipped", "needs fixtures"
    instance = cls()
    bound = getattr(instance, parts[1])

    def call() -> None:
        if hasattr(instance, "setup_method"):
            instance.setup_method(bound)
        try:
            bound()
        finally:
            if hasattr(instance, "teardown_method"):
                instance.teardown_method(bound)

    return _outcome(call)


def child() -> None:
    """One test module: import it, run the named tests, one JSON line each on the pipe."""
    spec = json.loads(sys.stdin.read())
    os.close(0)
    out = int(spec["fd"])
    folder, name = _import_name(spec["file"])
    sys.path[:1] = [os.getcwd()]  # as `python -m pytest`: the tree first, not this folder
    if folder not in sys.path:
        sys.path.insert(0, folder)
    sys.argv = [spec["file"]]
    try:
        module = importlib.import_module(name)
    except BaseException as exc:  # the module's own import error is the tests' error
        module = None
        failure = ("error", f"import failed: {type(exc).__name__}: {exc}"[:500])
    for qualname in spec["tests"]:
        status, detail = _run_one(module, qualname) if module is not None else failure
        line = json.dumps({"test": qualname, "status": status, "detail": detail})
        os.write(out, line.encode() + b"\n")
    os.close(out)


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


def _run_module(file: str, tests: list[str]) -> dict[str, Any]:
    """One child per test module; what it said on its pipe, and how it ended."""
    read_end, write_end = os.pipe()
    spec = json.dumps({"file": file, "tests": tests, "fd": write_end})
    proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), CHILD],
                            stdin=subprocess.PIPE, pass_fds=(write_end,), close_fds=True)
    os.close(write_end)
    assert proc.stdin is not None
    proc.stdin.write(spec.encode())
    proc.stdin.close()
    said = _read_all(read_end)
    os.close(read_end)
    try:
        code = proc.wait(MODULE_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        code = proc.wait()
    return {"file": file, "exit_code": code, "lines": said.decode("utf-8", "replace")}


def parent() -> None:
    spec = json.loads(sys.stdin.readline())
    sys.stdin.close()
    os.close(0)
    report = os.open(spec["report"], os.O_WRONLY)  # before any repository code runs
    by_file: dict[str, list[str]] = {}
    for file, qualname in spec["tests"]:
        by_file.setdefault(file, []).append(qualname)
    modules = [_run_module(file, tests) for file, tests in sorted(by_file.items())]
    data = json.dumps({"token": spec["token"], "modules": modules}).encode()
    while data:  # a pipe may take a large write in parts
        data = data[os.write(report, data):]
    os.close(report)


if __name__ == "__main__":
    child() if sys.argv[1:] == [CHILD] else parent()
