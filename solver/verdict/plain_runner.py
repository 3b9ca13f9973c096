"""Run test functions without pytest, inside a verdict's sandbox (frognano-bot).

The harness copies this file into its read-only channel folder and runs it with the
sandbox's python. It uses the standard library only. Code that behaves only under
pytest (it looks for pytest's modules, or forges the report whose path pytest's
environment holds, then exits) passes a pytest run; here no pytest is loaded, no report
path is in the environment, and each test module runs in a child process whose results
go back over an inherited pipe, not a path. The parent never imports repository code;
it alone holds the harness's FIFO (opened before any child starts) and the token.

The repository's `autouse` fixtures run around its tests, as under pytest: a test whose
conftest.py builds a schema, sets a variable or changes directory for every test passes
or fails here as it did there. Only when the tree's own files declare one (an AST read,
before anything is imported) are the conftest.py files from the tree's root down to the
test's folder imported, as pytest would; the verdict's tree holds the base's conftest.py
files, never the model's. Their own `import pytest` is answered from a private table,
never `sys.modules`, so the repository code they import, and a test module that does not
import pytest, still run with none of pytest's modules loaded. A test whose autouse
fixtures need one this runner cannot give (`request`, a plugin's, parametrized ones) is
skipped, as a test that takes fixture arguments is.

    python3 plain_runner.py < {"report": FIFO, "token": T, "tests": [[file, qual], ...]}
"""

from __future__ import annotations

import ast
import builtins
import functools
import importlib
import importlib.util
import inspect
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import unittest
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
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


def _run_one(module: object, qualname: str,
             around: Callable[[Callable[[], tuple[str, str]]], tuple[str, str]]
             ) -> tuple[str, str]:
    """One test's outcome; `around` runs the test itself inside its autouse fixtures."""
    parts = qualname.split("::")
    if len(parts) == 1:
        func = getattr(module, parts[0], None)
        if not callable(func) or _needs_arguments(func, False) \
                or inspect.iscoroutinefunction(func):
            return "skipped", "not a plain function without fixtures"
        return around(lambda: _outcome(func))
    cls = getattr(module, parts[0], None)
    if len(parts) != 2 or not isinstance(cls, type) or not hasattr(cls, parts[1]):
        return "skipped", "not a test class's method"
    if issubclass(cls, unittest.TestCase):
        return around(lambda: _unittest_case(cls, parts[1]))
    method = getattr(cls, parts[1])
    if _needs_arguments(method, True) or inspect.iscoroutinefunction(method):
        return "skipped", "needs fixtures"
    return around(lambda: _outcome(_method_call(cls, parts[1])))


def _method_call(cls: type, name: str) -> Callable[[], None]:
    def call() -> None:
        instance = cls()
        bound = getattr(instance, name)
        if hasattr(instance, "setup_method"):
            instance.setup_method(bound)
        try:
            bound()
        finally:
            if hasattr(instance, "teardown_method"):
                instance.teardown_method(bound)

    return call


# --- the repository's autouse fixtures ----------------------------------------------------

SCOPES = ("session", "package", "module", "class", "function")
# pytest's own fixtures this runner gives: pytest's MonkeyPatch, a fresh directory.
BUILTIN_FIXTURES = ("monkeypatch", "tmp_path")
PYTEST_MODULES = ("pytest", "_pytest", "pluggy")


@dataclass(frozen=True)
class FixtureDef:
    """One fixture of the conftest.py files or the test module (pytest's own objects read
    by their attributes: pytest 8.4's FixtureFunctionDefinition, or an older pytest's
    marked function)."""

    name: str
    func: Callable[..., Any]
    scope: str  # one of SCOPES, or "dynamic" (a callable scope: not given here)
    autouse: bool
    parametrized: bool


def fixture_def(attribute: str, obj: object) -> FixtureDef | None:
    marker: Any = getattr(obj, "_fixture_function_marker", None) \
        if type(obj).__name__ == "FixtureFunctionDefinition" else None
    func = getattr(obj, "_fixture_function", None)
    if marker is None and inspect.isfunction(obj):
        marker = getattr(obj, "_pytestfixturefunction", None)
        func = getattr(getattr(obj, "__pytest_wrapped__", None), "obj", None)
    if type(marker).__name__ != "FixtureFunctionMarker" or not callable(func):
        return None
    scope = marker.scope if marker.scope in SCOPES else "dynamic"
    return FixtureDef(marker.name or attribute, func, scope, bool(marker.autouse),
                      marker.params is not None)


def declares_autouse(path: str) -> bool:
    """Whether the file's source names `autouse=` with anything but a false constant:
    read before anything is imported, so a tree without one runs as it always did."""
    try:
        with open(path, "rb") as source:
            tree = ast.parse(source.read())
    except (OSError, SyntaxError, ValueError):
        return False
    return any(keyword.arg == "autouse" and not (isinstance(keyword.value, ast.Constant)
                                                 and not keyword.value.value)
               for node in ast.walk(tree) if isinstance(node, ast.Call)
               for keyword in node.keywords)


def conftest_chain(test_file: str, root: str) -> list[str]:
    """The conftest.py files pytest loads for `test_file`: `root`'s, then each folder's
    down to the test's own."""
    folder, chain = os.path.dirname(os.path.abspath(test_file)), list[str]()
    while folder == root or folder.startswith(root + os.sep):
        candidate = os.path.join(folder, "conftest.py")
        if os.path.isfile(candidate):
            chain.insert(0, candidate)
        if folder == root:
            break
        folder = os.path.dirname(folder)
    return chain


def _arguments(func: Callable[..., Any]) -> list[str]:
    params = inspect.signature(func).parameters.values()
    return [p.name for p in params if p.default is inspect.Parameter.empty
            and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def _finish(generator: Iterator[Any]) -> None:
    try:
        next(generator)
    except StopIteration:
        return
    raise RuntimeError("the fixture yielded more than once")


@dataclass
class Fixtures:
    """The autouse fixtures of one test module's tests: broader scopes set up once in
    this child (one child is one module), function scope around each test."""

    active: bool = False
    defs: dict[str, FixtureDef] = field(default_factory=dict)  # the nearest by name
    autouse: list[str] = field(default_factory=list)
    monkeypatch: Callable[[], Any] | None = None
    kept: dict[str, Any] = field(default_factory=dict)
    kept_teardowns: list[Callable[[], None]] = field(default_factory=list)

    def add(self, module: object) -> None:
        for attribute, obj in list(vars(module).items()):
            found = fixture_def(attribute, obj)
            if found is not None:
                self.defs[found.name] = found
                if found.autouse and found.name not in self.autouse:
                    self.autouse.append(found.name)

    def plan(self, module: object, qualname: str) -> list[str] | str:
        """The fixtures to set up for the test, in order, or why they cannot be."""
        cls = getattr(module, qualname.split("::")[0], None) if "::" in qualname else None
        if isinstance(cls, type) and any(getattr(fixture_def(a, o), "autouse", False)
                                         for k in cls.__mro__ for a, o in vars(k).items()):
            return "its class's own autouse fixtures are not run outside pytest"
        order: list[str] = []
        missing: list[str] = []

        def need(name: str, chain: tuple[str, ...]) -> None:
            if name in order or name in missing:
                return
            found = self.defs.get(name)
            given = name == "tmp_path" or (name == "monkeypatch" and self.monkeypatch)
            if found is None and given:
                order.append(name)
                return
            if found is None or name in chain or found.scope == "dynamic" \
                    or found.parametrized or inspect.iscoroutinefunction(found.func) \
                    or inspect.isasyncgenfunction(found.func):
                missing.append(name)
                return
            for argument in _arguments(found.func):
                need(argument, (*chain, name))
            order.append(name)

        ranked = sorted(self.autouse, key=lambda n: SCOPES.index(self.defs[n].scope)
                        if self.defs[n].scope in SCOPES else 0)
        for name in ranked:
            need(name, ())
        if missing:
            return ("its autouse fixtures need what this runner does not give: "
                    + ", ".join(sorted(missing)))
        return order

    def _value(self, name: str, values: dict[str, Any],
               teardowns: list[Callable[[], None]]) -> Any:
        found = self.defs.get(name)
        if found is None:  # one of BUILTIN_FIXTURES
            if name == "tmp_path":
                made = tempfile.mkdtemp(prefix="pytest-")
                teardowns.append(lambda: shutil.rmtree(made, ignore_errors=True))
                return pathlib.Path(made)
            assert self.monkeypatch is not None
            patch = self.monkeypatch()
            teardowns.append(patch.undo)
            return patch
        kept = found.scope != "function"
        if kept and name in self.kept:
            return self.kept[name]
        where = self.kept_teardowns if kept else teardowns
        result = found.func(**{a: values[a] for a in _arguments(found.func)})
        if inspect.isgenerator(result):
            value = next(result)
            where.append(lambda: _finish(result))
        else:
            value = result
        if kept:
            self.kept[name] = value
        return value

    def _set(self, name: str, values: dict[str, Any],
             teardowns: list[Callable[[], None]]) -> None:
        values[name] = self._value(name, values, teardowns)

    def run(self, module: object, qualname: str,
            test: Callable[[], tuple[str, str]]) -> tuple[str, str]:
        """The test inside its fixtures: a fixture that fails to set up or tear down is
        the test's error, as under pytest."""
        if not self.active:
            return test()
        plan = self.plan(module, qualname)
        if isinstance(plan, str):
            return "skipped", plan
        values: dict[str, Any] = {}
        teardowns: list[Callable[[], None]] = []
        outcome = None
        for name in plan:
            error = _outcome(functools.partial(self._set, name, values, teardowns))
            if error[0] != "passed":  # pytest.skip() in a fixture skips the test
                outcome = error if error[0] == "skipped" else \
                    ("error", f"fixture {name}: {error[1]}"[:500])
                break
        outcome = outcome or test()
        for teardown in reversed(teardowns):
            error = _outcome(teardown)
            if error[0] != "passed" and outcome[0] == "passed":
                outcome = ("error", f"fixture teardown: {error[1]}"[:500])
        return outcome

    def close(self) -> None:
        for teardown in reversed(self.kept_teardowns):
            _outcome(teardown)  # after the module's last test: pytest's is its own line


def _pytest_modules() -> dict[str, Any]:
    """pytest's modules, loaded here and taken out of `sys.modules` at once."""
    loaded = {n: m for n, m in sys.modules.items() if n.split(".")[0] in PYTEST_MODULES}
    for name in loaded:
        del sys.modules[name]
    return loaded


def _hidden_import(hidden: dict[str, Any]) -> Callable[..., Any]:
    """`__import__` for conftest.py's own statements: pytest's names from `hidden`, never
    through `sys.modules`, so the repository code a conftest imports never finds pytest
    loaded, even at its import time."""
    real = __import__

    def hooked(name: str, globals: Any = None, locals: Any = None,
               fromlist: Any = (), level: int = 0) -> Any:
        top = name.split(".")[0]
        if level == 0 and top in PYTEST_MODULES and name in hidden:
            return hidden[name] if fromlist else hidden[top]
        return real(name, globals, locals, fromlist, level)

    return hooked


def load_fixtures(test_file: str) -> Fixtures:
    """The conftest.py files of the test, imported as pytest imports them, when the tree
    declares an autouse fixture for it. Their `import pytest` gets pytest from a private
    table (`_hidden_import`), and what else loaded pytest is dropped from `sys.modules`
    before any test runs (the objects live on in the fixtures that hold them)."""
    root = os.getcwd()
    chain = conftest_chain(test_file, root)
    fixtures = Fixtures(active=any(declares_autouse(p) for p in (*chain, test_file)))
    if not fixtures.active:
        return fixtures
    try:
        fixtures.monkeypatch = importlib.import_module("_pytest.monkeypatch").MonkeyPatch
        importlib.import_module("pytest")
    except Exception:  # no pytest in this python: a fixture that needs it is not given
        fixtures.monkeypatch = None
    conftest_builtins = {**vars(builtins), "__import__": _hidden_import(_pytest_modules())}
    for index, path in enumerate(chain):
        folder, name = _import_name(path)
        if folder not in sys.path:
            sys.path.insert(0, folder)
        loaded = sys.modules.get(name)
        if loaded is not None and getattr(loaded, "__file__", None) != path:
            name = f"conftest_{index}"  # another folder's top-level conftest took the name
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        module.__dict__["__builtins__"] = conftest_builtins
        sys.modules[name] = module
        spec.loader.exec_module(module)
        fixtures.add(module)
    _pytest_modules()  # a submodule the hidden table lacked was imported for real
    return fixtures


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
        fixtures = load_fixtures(spec["file"])
        module = importlib.import_module(name)
        fixtures.add(module)
    except BaseException as exc:  # the module's own import error is the tests' error
        module = None
        failure = ("error", f"import failed: {type(exc).__name__}: {exc}"[:500])
    for qualname in spec["tests"]:
        if module is None:
            status, detail = failure
        else:
            status, detail = _run_one(module, qualname,
                                      functools.partial(fixtures.run, module, qualname))
        line = json.dumps({"test": qualname, "status": status, "detail": detail})
        os.write(out, line.encode() + b"\n")
    if module is not None:
        fixtures.close()
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
