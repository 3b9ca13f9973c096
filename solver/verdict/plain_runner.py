"""Run the failing tests without pytest, inside a verdict's sandbox (frognano-bot).

The harness copies this file into its read-only channel folder and runs it with the
sandbox's python. It uses the standard library only. Code that behaves only under
pytest (it looks for pytest's modules, reads `__main__` or `sys.argv`, or forges the
report whose path pytest's environment holds, then exits) passes a pytest run; here no
pytest module is in `sys.modules` while repository code runs, no report path is in the
environment, no pytest frame is on the stack, `__main__` is this file and `sys.argv[0]`
the test file. Each test module runs in a child process whose results go back over an
inherited pipe, not a path. The parent never imports repository code; it alone holds the
harness's FIFO (opened before any child starts) and the token.

What it runs, as pytest would: plain test functions and methods, unittest methods, each
parameter set of `@pytest.mark.parametrize` (stacked, on the class or module too), chosen
by the test id pytest gave it; fixtures the base's conftest.py files or the test module
define, when the test names them, `usefixtures` marks (function, class, module) and
autouse fixtures; doctests by the standard library's `doctest`; a Django project's
settings from the pytest configuration's `DJANGO_SETTINGS_MODULE`, or the module the
project's own Django runner names (`django_settings` in the spec: `--settings`, its
runtests.py's; "" when runtests.py configures them inline, and then no test is run).

A test module that imports pytest (for `pytest.raises`, `pytest.approx`, marks) gets it
from a private table through its own `__import__`, never through `sys.modules`: the test
module holds pytest, the library it calls cannot find it. Only when the tree's own files
declare fixture use (an AST read, before anything is imported) are the conftest.py files
from the tree's root down to the test's folder imported; the verdict's tree holds the
base's conftest.py files, never the model's.

A test this runner cannot run faithfully (a plugin's fixture, a test database, an id no
parameter set has) is "cannot run", with the reason: the runner's own decision, never the
test's. A test that skips itself here has not passed: that is the test's outcome.

    python3 plain_runner.py < {"report": FIFO, "token": T, "tests": [[file, qual], ...]}
"""

from __future__ import annotations

import ast
import builtins
import configparser
import doctest
import enum
import functools
import importlib
import importlib.util
import inspect
import json
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import unittest
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

CHILD = "child"
MODULE_TIMEOUT = 300.0
CANNOT = "cannot run"  # the runner's own decision, not the test's outcome
Outcome = tuple[str, str]  # (status, detail)


class CannotRun(Exception):
    """This runner cannot run the test as pytest would; the message says why."""


def _import_name(path: str) -> tuple[str, str]:
    """(folder for sys.path, module name), as pytest's default `prepend` import mode
    finds them: up through the folders that hold an `__init__.py`."""
    folder, name = os.path.split(os.path.abspath(path))
    parts = [] if name == "__init__.py" else [name[:-3]]  # a package's own module: its name
    while os.path.isfile(os.path.join(folder, "__init__.py")):
        folder, package = os.path.split(folder)
        parts.insert(0, package)
    return folder, ".".join(parts)


def _outcome(call: Callable[[], object]) -> Outcome:
    try:
        call()
    except BaseException as exc:  # a test's SystemExit is its failure, not ours
        if type(exc).__name__ in ("Skipped", "SkipTest"):
            return "skipped", str(exc)[:200]
        if isinstance(exc, KeyboardInterrupt):
            raise
        if isinstance(exc, CannotRun):
            return CANNOT, str(exc)[:300]
        return "failed", f"{type(exc).__name__}: {exc}"[:500]
    return "passed", ""


# --- pytest, held where the library cannot find it --------------------------------------

# pytest's own distributions. What else importing pytest loads (pygments, attrs) stays in
# sys.modules: the library may load those itself, and two copies of a library the tests
# share with it would fail honest tests.
PYTEST_MODULES = ("pytest", "_pytest", "pluggy", "py", "iniconfig")


def _is_pytest(name: str) -> bool:
    return name.split(".")[0] in PYTEST_MODULES


@dataclass
class HiddenPytest:
    """pytest's modules as loaded in this child, out of `sys.modules`."""

    modules: dict[str, Any] = field(default_factory=dict)

    def take(self) -> None:
        """Out of `sys.modules`, into the table (the objects live on in who holds them)."""
        for name in [n for n in sys.modules if _is_pytest(n)]:
            self.modules[name] = sys.modules.pop(name)

    def load(self, name: str) -> Any:
        """A pytest module by name, imported for real the first time, then hidden."""
        if name not in self.modules:
            sys.modules.update(self.modules)  # one copy of pytest: its own imports see it
            try:
                importlib.import_module(name)
            finally:
                self.take()
        return self.modules[name]

    def builtins(self) -> dict[str, Any]:
        """Builtins for conftest.py and the test module: their `import pytest` is answered
        from the table. While pytest's own import statements run, its modules are back in
        `sys.modules` (pytest importing itself); no repository code runs then."""
        real = builtins.__import__

        def hooked(name: str, globals: Any = None, locals: Any = None,
                   fromlist: Any = (), level: int = 0) -> Any:
            if level or not _is_pytest(name):
                return real(name, globals, locals, fromlist, level)
            sys.modules.update(self.modules)
            try:
                return real(name, globals, locals, fromlist, level)
            finally:
                self.take()

        return {**vars(builtins), "__import__": hooked}


def imports_pytest(path: str) -> bool:
    """Whether the file's own statements import pytest (an AST read)."""
    tree = _parse(path)
    return tree is not None and any(
        (isinstance(node, ast.Import) and any(_is_pytest(a.name) for a in node.names))
        or (isinstance(node, ast.ImportFrom) and not node.level and _is_pytest(node.module or ""))
        for node in ast.walk(tree))


def _parse(path: str) -> ast.Module | None:
    try:
        with open(path, "rb") as source:
            return ast.parse(source.read())
    except (OSError, SyntaxError, ValueError):
        return None


def import_file(path: str, name: str, hidden: HiddenPytest) -> Any:
    """The module at `path` under `name`, as pytest imports it; with the private
    `__import__` when its own statements import pytest."""
    if name in sys.modules or not imports_pytest(path):
        return importlib.import_module(name)
    parent = name.rpartition(".")[0]
    if parent:
        importlib.import_module(parent)
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None or getattr(spec, "origin", None) != os.path.abspath(
            path):
        spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    module.__dict__["__builtins__"] = hidden.builtins()
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


# --- the pytest configuration: Django's settings, doctest flags ------------------------

def pytest_ini(root: str) -> dict[str, Any]:
    """The ini options of the pytest configuration pytest finds in `root` (pytest.ini,
    .pytest.ini, pyproject.toml, tox.ini, setup.cfg), keys as written."""
    for name, section in (("pytest.ini", "pytest"), (".pytest.ini", "pytest"),
                          ("pyproject.toml", None), ("tox.ini", "pytest"),
                          ("setup.cfg", "tool:pytest")):
        path = os.path.join(root, name)
        if not os.path.isfile(path):
            continue
        if section is None:
            found = _pyproject_pytest(path)
        else:
            parser = configparser.RawConfigParser(strict=False)
            parser.optionxform = str  # type: ignore[assignment,method-assign]
            try:
                parser.read(path, encoding="utf-8")
            except (configparser.Error, UnicodeDecodeError):
                continue
            found = dict(parser[section]) if parser.has_section(section) else None
        if found is not None or name in ("pytest.ini", ".pytest.ini"):
            return found or {}
    return {}


def _pyproject_pytest(path: str) -> dict[str, Any] | None:
    try:
        import tomllib
        with open(path, "rb") as source:
            tool = tomllib.load(source).get("tool", {})
    except Exception:  # no tomllib before 3.11, or not TOML: no options read
        return None
    table = tool.get("pytest") if isinstance(tool, dict) else None
    if not isinstance(table, dict):
        return None
    options = table.get("ini_options")
    return options if isinstance(options, dict) else table


def _words(value: Any) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else shlex.split(str(value))


def django_settings(ini: dict[str, Any]) -> str:
    """The settings module pytest-django would use: `--ds` in addopts, the environment's
    DJANGO_SETTINGS_MODULE, then the ini key (its case as written)."""
    for word in _words(ini.get("addopts", "")):
        if word.startswith("--ds="):
            return word[5:]
    return os.environ.get("DJANGO_SETTINGS_MODULE") or str(ini.get("DJANGO_SETTINGS_MODULE",
                                                                       ""))


def setup_django(ini: dict[str, Any]) -> bool:
    """Django set up as pytest-django sets it up before the tests, when the configuration
    names its settings and Django is importable. Whether it was."""
    settings = django_settings(ini)
    if not settings:
        return False
    try:
        import django
    except ImportError:
        return False
    os.environ["DJANGO_SETTINGS_MODULE"] = settings
    django.setup()
    from django.test.utils import setup_test_environment
    debug = str(ini.get("django_debug_mode", "false")).lower()
    setup_test_environment(debug=None if debug == "keep" else debug in ("true", "1", "yes"))
    return True


def plugin_explains(exc: BaseException, django_ready: bool) -> str:
    """Why an import failure is pytest-django's absence rather than the test's: Django
    asked for settings this runner was not told."""
    if django_ready or not type(exc).__module__.startswith("django."):
        return ""
    if type(exc).__name__ in ("ImproperlyConfigured", "AppRegistryNotReady"):
        return ("its module needs Django's settings, which pytest-django gives and the "
                "pytest configuration does not name")
    return ""


# --- parametrize: the parameter set a test id names ------------------------------------

def _escaped(value: str | bytes) -> str:
    """pytest's ascii_escaped."""
    text = value.decode("ascii", "backslashreplace") if isinstance(value, bytes) \
        else value.encode("unicode_escape").decode("ascii")
    return "".join(c if 32 <= ord(c) < 127 else f"\\x{ord(c):02x}" for c in text)


def _value_id(value: object) -> str | None:
    """pytest's id for a parameter value, when its type has one."""
    if isinstance(value, (str, bytes)):
        return _escaped(value)
    if value is None or isinstance(value, (float, int, bool, complex)):
        return str(value)
    if isinstance(value, re.Pattern):
        return _escaped(value.pattern)
    if type(value).__name__ == "NotSetType":
        return None
    if isinstance(value, enum.Enum):
        return str(value)
    name = getattr(value, "__name__", None)
    return name if isinstance(name, str) else None


def _param_id(value: object, argname: str, index: int, idfn: Any, long: bool) -> str:
    """One value's id; `long` picks the pytest 8.4+ rule for a string over 100
    characters (argname and index) over the older one (the string itself)."""
    if idfn is not None:
        made = idfn(value)
        if made is not None and _value_id(made) is not None:
            return str(_value_id(made))
    if isinstance(value, (str, bytes)) and len(value) > 100 and long:
        return f"{argname}{index}"
    made = _value_id(value)
    return made if made is not None else f"{argname}{index}"


def _unique(ids: list[str], underscore: bool) -> list[str]:
    """Duplicate ids made unique, as pytest does (`underscore`: pytest 8's form)."""
    counts, taken, next_of = Counter(ids), set(ids), Counter[str]()
    unique = []
    for made in ids:
        if counts[made] > 1:
            suffix = "_" if underscore and made and made[-1].isdigit() else ""
            new = f"{made}{suffix}{next_of[made]}"
            while underscore and new in taken:
                next_of[made] += 1
                new = f"{made}{suffix}{next_of[made]}"
            next_of[made] += 1
            made = new
        unique.append(made)
    return unique


@dataclass(frozen=True)
class IdRules:
    """How this pytest names parameter sets, where its versions differ: a string over 100
    characters is its argname and index (9.2 on), a duplicate id ending in a digit gets
    '_' before its counter (8.4 on). Both forms are tried when the version is unknown."""

    long_names: tuple[bool, ...] = (True, False)
    underscores: tuple[bool, ...] = (True, False)

    @staticmethod
    def of(version: str) -> IdRules:
        try:
            major, minor = (int(part) for part in version.split(".")[:2])
        except ValueError:
            return IdRules()
        return IdRules((True,) if (major, minor) >= (9, 2) else (False,),
                       (True,) if (major, minor) >= (8, 4) else
                       (False,) if major < 8 else (True, False))


@dataclass(frozen=True)
class ParamSet:
    values: dict[str, Any]
    ids: frozenset[str]  # what pytest's versions call it


def _argument(mark: Any, index: int, name: str) -> Any:
    return mark.args[index] if len(mark.args) > index else mark.kwargs.get(name)


def parameter_sets(mark: Any, rules: IdRules) -> list[ParamSet]:
    """One `parametrize` mark's sets, each with the ids pytest may have given it."""
    names, values = _argument(mark, 0, "argnames"), _argument(mark, 1, "argvalues")
    if _argument(mark, 2, "indirect"):
        raise CannotRun("its parameters go to fixtures (indirect)")
    names = [n.strip() for n in names.split(",") if n.strip()] if isinstance(names, str) \
        else list(names)
    ids = _argument(mark, 3, "ids")
    idfn = ids if callable(ids) else None
    ids = None if idfn is not None or ids is None else list(ids)
    sets: list[tuple[tuple[Any, ...], Any]] = []
    for value in list(values):
        if type(value).__name__ == "ParameterSet":
            sets.append((tuple(value.values), value.id))
        else:
            sets.append(((value,) if len(names) == 1 else tuple(value), None))
    variants = []
    for long in rules.long_names:
        made = []
        for index, (vals, own) in enumerate(sets):
            if own is not None or (ids and index < len(ids) and ids[index] is not None):
                given = own if own is not None else _value_id(ids[index])  # type: ignore
                if not isinstance(given, str):
                    raise CannotRun("one of its parameter ids is hidden or not text")
                made.append(_escaped(given) if own is not None else given)
            else:
                made.append("-".join(_param_id(v, n, index, idfn, long)
                                     for v, n in zip(vals, names, strict=True)))
        variants += [_unique(made, underscore) for underscore in rules.underscores]
    return [ParamSet(dict(zip(names, vals, strict=True)), frozenset(v[i] for v in variants))
            for i, (vals, _) in enumerate(sets)]


def _match(layers: list[list[ParamSet]], text: str) -> list[tuple[int, ...]]:
    """Every choice of one set per layer whose ids, joined by '-', are `text`."""
    if not layers:
        return [()] if text == "" else []
    found: list[tuple[int, ...]] = []
    for index, one in enumerate(layers[0]):
        for made in one.ids:
            if len(layers) == 1 and text == made:
                found.append((index,))
            elif len(layers) > 1 and text.startswith(made + "-"):
                found += [(index, *more) for more in _match(layers[1:], text[len(made) + 1:])]
    return sorted(set(found))


def chosen_parameters(marks: list[Any], param_id: str | None,
                      rules: Callable[[], IdRules]) -> dict[str, Any]:
    """The values of the parameter set the test id names (pytest's order: the marks
    nearest the function first), or none for an id without one."""
    layers = [parameter_sets(m, rules()) for m in marks if m.name == "parametrize"]
    if param_id is None:
        if layers:
            raise CannotRun("its id names no parameter set, but it is parametrized")
        return {}
    if not layers:
        raise CannotRun("its id names a parameter set, but no parametrize mark was found "
                        "(a plugin's or a hook's parameters)")
    found = _match(layers, param_id)
    if len(found) != 1:
        raise CannotRun(f"{len(found)} of its parameter sets have the id [{param_id}]")
    values: dict[str, Any] = {}
    for layer, index in zip(layers, found[0], strict=True):
        values.update(layer[index].values)
    return values


# --- the test a test id names -----------------------------------------------------------

def _mark_list(marks: object) -> list[Any]:
    """Marks as pytest stores them (a list, or one), each as its Mark."""
    return [getattr(m, "mark", m) for m in (marks if isinstance(marks, list) else [marks])]


def marks_of(module: object, cls: type | None, func: object) -> list[Any]:
    """The function's marks, then its class's (through the class's bases), then the
    module's: the order pytest reads them in."""
    found = _mark_list(getattr(func, "pytestmark", []))
    for klass in (cls.__mro__ if cls is not None else ()):
        found += [m for m in _mark_list(vars(klass).get("pytestmark", []))
                  if all(m is not f for f in found)]
    return found + _mark_list(getattr(module, "pytestmark", []))


@dataclass
class Target:
    """One test, resolved: what to call and with which parameters."""

    module: Any
    name: str  # the test id after `file::`
    func: Callable[..., Any] | None  # the function (a method's, unbound); None: a doctest
    cls: type | None = None
    params: dict[str, Any] = field(default_factory=dict)
    marks: list[Any] = field(default_factory=list)
    doctest: doctest.DocTest | None = None
    instance: Any = None
    attribute: str = ""  # a method's name in its class (a generated one's __name__ differs)

    def arguments(self) -> list[str]:
        if self.func is None:
            return []
        params = list(inspect.signature(self.func).parameters.values())
        params = params[1:] if self.cls is not None and params else params
        return [p.name for p in params if p.default is inspect.Parameter.empty
                and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]

    def usefixtures(self) -> list[str]:
        return [str(n) for m in self.marks if m.name == "usefixtures" for n in m.args]


DJANGO_DB = ("TransactionTestCase", "TestCase", "LiveServerTestCase")


def _unittest_case(cls: type) -> bool:
    if any(k.__module__ == "django.test.testcases" and k.__name__ in DJANGO_DB
           for k in cls.__mro__):
        raise CannotRun("a Django test case needs the test database its runner makes "
                        "(Django's, or pytest-django)")
    return issubclass(cls, unittest.TestCase)


def resolve(module: Any, name: str, rules: Callable[[], IdRules]) -> Target:
    """The test `name` (`func`, `Class::method`, each maybe `[params]`, or a doctest's
    dotted name) in the imported module."""
    base, bracket, rest = name.partition("[")
    param_id = rest[:-1] if bracket and rest.endswith("]") else None
    if bracket and param_id is None:
        raise CannotRun("its id is not one this runner reads")
    parts = base.split("::")
    # A module's own doctest is named by the module; a test function may share that name
    # (`test_abs` in test_abs.py), and one with parameters is never a doctest.
    module_doctest = base == module.__name__ and not callable(getattr(module, base, None))
    if not bracket and ((len(parts) == 1 and "." in base) or module_doctest):
        return Target(module, name, None, doctest=find_doctest(module, base))
    if len(parts) > 2:
        raise CannotRun("a test in a nested class")
    cls = getattr(module, parts[0], None) if len(parts) == 2 else None
    if len(parts) == 2 and not isinstance(cls, type):
        raise CannotRun("its class is not in the module")
    func = vars(cls).get(parts[1]) if cls is not None else getattr(module, parts[0], None)
    if cls is not None and func is None:
        func = getattr(cls, parts[1], None)
    if not callable(func):
        raise CannotRun("no function of that name in the module (a plugin's test item?)")
    if inspect.iscoroutinefunction(func) or inspect.isasyncgenfunction(func):
        raise CannotRun("a coroutine: a plugin's event loop runs it under pytest")
    marks = marks_of(module, cls, func)
    if any(m.name == "django_db" for m in marks):
        raise CannotRun("it needs the test database pytest-django makes")
    if cls is not None and _unittest_case(cls):
        if bracket:
            raise CannotRun("a unittest method's id with parameters (a plugin's)")
        return Target(module, name, func, cls, marks=marks, attribute=parts[1])
    return Target(module, name, func, cls, chosen_parameters(marks, param_id, rules), marks,
                  attribute=parts[-1])


def find_doctest(module: Any, name: str) -> doctest.DocTest:
    """The module's doctest pytest names `name` (its DocTestFinder's naming)."""
    found = [t for t in doctest.DocTestFinder().find(module, module.__name__)
             if t.name == name and t.examples]
    if len(found) != 1:
        raise AssertionError(f"its doctest is not in {module.__name__} as plain python "
                             "imports it") if name.startswith(module.__name__) \
            else CannotRun("its doctest is named apart from the module as imported here")
    return found[0]


def text_doctest(path: str, name: str, ini: dict[str, Any]) -> doctest.DocTest:
    """A text file's doctest (`--doctest-glob`), parsed as pytest parses it."""
    if name != os.path.basename(path):
        raise CannotRun("a text file's test id names the file itself")
    with open(path, encoding=str(ini.get("doctest_encoding", "utf-8"))) as source:
        text = source.read()
    return doctest.DocTestParser().get_doctest(text, {"__name__": "__main__"}, name, path, 0)


def doctest_flags(ini: dict[str, Any]) -> int:
    """pytest's `doctest_optionflags` (ELLIPSIS unless set)."""
    flags = 0
    for word in _words(ini.get("doctest_optionflags", "ELLIPSIS")):
        if word not in doctest.OPTIONFLAGS_BY_NAME:
            raise CannotRun(f"its doctest flag {word} is pytest's own")
        flags |= doctest.OPTIONFLAGS_BY_NAME[word]
    return flags


def run_doctest(test: doctest.DocTest, flags: int, namespace: dict[str, Any]) -> None:
    test.globs.update(namespace)
    said: list[str] = []
    result = doctest.DocTestRunner(verbose=False, optionflags=flags).run(
        test, out=said.append, clear_globs=False)
    if result.failed:
        raise AssertionError("".join(said)[-400:])


# --- fixtures ---------------------------------------------------------------------------

SCOPES = ("session", "package", "module", "class", "function")
# pytest's own fixtures this runner gives: pytest's MonkeyPatch, a fresh directory, a
# namespace for doctests, and `request` as far as `Request` goes.
BUILTIN_FIXTURES = ("monkeypatch", "tmp_path", "doctest_namespace", "request")


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


def wants_fixtures(path: str) -> bool:
    """Whether the file's source may use a fixture: `autouse=` with anything but a false
    constant, a `usefixtures` mark, or a test function with parameters. Read before
    anything is imported, so a tree without any runs as it always did."""
    tree = _parse(path)
    if tree is None:
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and any(
                k.arg == "autouse" and not (isinstance(k.value, ast.Constant)
                                            and not k.value.value) for k in node.keywords):
            return True
        if isinstance(node, ast.Attribute) and node.attr == "usefixtures":
            return True
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) \
                and node.name.startswith("test") \
                and [a for a in node.args.args if a.arg not in ("self", "cls")]:
            return True
    return False


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


class Request:
    """pytest's `request` as far as this runner gives it: the test's class, instance,
    module and function, and addfinalizer. What else a fixture asks for is written down:
    a test that then fails could not be run, it did not fail."""

    asked: list[str] = []  # noqa: RUF012 (one child, one list: read after each test)

    def __init__(self, target: Target, scope: str, name: str,
                 teardowns: list[Callable[[], None]]) -> None:
        self.fixturename, self.scope, self._teardowns = name, scope, teardowns
        self.module = target.module
        self.cls = target.cls if scope in ("class", "function") else None
        self.instance = target.instance if scope == "function" else None
        self.function = target.func if scope == "function" else None

    def addfinalizer(self, finalizer: Callable[[], None]) -> None:
        self._teardowns.append(finalizer)

    def __getattr__(self, name: str) -> Any:
        Request.asked.append(name)
        raise AttributeError(f"request.{name} is not given outside pytest")


@dataclass
class Fixtures:
    """The fixtures of one test module's tests: broader scopes set up once in this child
    (one child is one module; class scope once per class), function scope per test."""

    active: bool = False
    hidden: HiddenPytest = field(default_factory=HiddenPytest)
    defs: dict[str, FixtureDef] = field(default_factory=dict)  # the nearest by name
    autouse: list[str] = field(default_factory=list)
    kept: dict[tuple[str, object], Any] = field(default_factory=dict)
    kept_teardowns: list[Callable[[], None]] = field(default_factory=list)
    namespace: dict[str, Any] = field(default_factory=dict)  # doctest_namespace

    def add(self, module: object) -> None:
        for attribute, obj in list(vars(module).items()):
            found = fixture_def(attribute, obj)
            if found is not None:
                self.defs[found.name] = found
                if found.autouse and found.name not in self.autouse:
                    self.autouse.append(found.name)

    def plan(self, target: Target) -> list[str]:
        """The fixtures to set up for the test, in order (pytest's: autouse by scope,
        then usefixtures, then the test's arguments)."""
        own = [found for k in (target.cls.__mro__ if target.cls else ())
               for a, o in vars(k).items() if (found := fixture_def(a, o)) is not None]
        if any(f.autouse for f in own):
            raise CannotRun("its class's own autouse fixtures are not run outside pytest")
        order: list[str] = []

        def need(name: str, chain: tuple[str, ...]) -> None:
            if name in order or name in target.params:
                return
            if any(f.name == name for f in own):
                raise CannotRun(f"fixture {name} is its class's own: not run outside pytest")
            found = self.defs.get(name)
            if found is None and name in BUILTIN_FIXTURES:
                order.append(name)
                return
            if found is None:
                raise CannotRun(f"fixture {name} is not in the base's conftest.py files or "
                                "the module (a plugin's?)")
            if name in chain or found.scope == "dynamic" or found.parametrized \
                    or inspect.iscoroutinefunction(found.func) \
                    or inspect.isasyncgenfunction(found.func):
                raise CannotRun(f"fixture {name} is parametrized, async, recursive or of a "
                                "dynamic scope")
            for argument in _arguments(found.func):
                need(argument, (*chain, name))
            order.append(name)

        for name in sorted(self.autouse, key=lambda n: SCOPES.index(self.defs[n].scope)
                           if self.defs[n].scope in SCOPES else 0):
            need(name, ())
        for name in [*target.usefixtures(), *target.arguments()]:
            need(name, ())
        return order

    def _builtin(self, name: str, target: Target, teardowns: list[Callable[[], None]]
                 ) -> Any:
        if name == "tmp_path":
            made = tempfile.mkdtemp(prefix="tmp-")
            teardowns.append(lambda: shutil.rmtree(made, ignore_errors=True))
            return pathlib.Path(made)
        if name == "doctest_namespace":
            return self.namespace
        if name == "request":
            return Request(target, "function", "request", teardowns)
        try:
            patch = self.hidden.load("_pytest.monkeypatch").MonkeyPatch()
        except ImportError as exc:
            raise CannotRun("monkeypatch: pytest is not importable here") from exc
        teardowns.append(patch.undo)
        return patch

    def _value(self, name: str, values: dict[str, Any], target: Target,
               teardowns: list[Callable[[], None]]) -> Any:
        found = self.defs.get(name)
        if found is None:
            return self._builtin(name, target, teardowns)
        key = (name, target.cls if found.scope == "class" else None)
        if found.scope != "function" and key in self.kept:
            return self.kept[key]
        where = self.kept_teardowns if found.scope != "function" else teardowns
        given = {**values, "request": Request(target, found.scope, name, where)}
        result = found.func(**{a: given[a] for a in _arguments(found.func)})
        if inspect.isgenerator(result):
            value = next(result)
            where.append(functools.partial(_finish, result))
        else:
            value = result
        if found.scope != "function":
            self.kept[key] = value
        return value

    def run(self, target: Target, test: Callable[[dict[str, Any]], object]) -> Outcome:
        """The test inside its fixtures: a fixture that fails to set up or tear down is
        the test's error, as under pytest."""
        values: dict[str, Any] = dict(target.params)
        teardowns: list[Callable[[], None]] = []
        outcome = None
        for name in self.plan(target):
            error = _outcome(lambda n=name: values.__setitem__(  # type: ignore[misc]
                n, self._value(n, values, target, teardowns)))
            if error[0] != "passed":  # pytest.skip() in a fixture skips the test
                outcome = error if error[0] in ("skipped", CANNOT) else \
                    ("error", f"fixture {name}: {error[1]}"[:500])
                break
        self.hidden.take()
        outcome = outcome or _outcome(lambda: test(values))
        for teardown in reversed(teardowns):
            error = _outcome(teardown)
            if error[0] != "passed" and outcome[0] == "passed":
                outcome = ("error", f"fixture teardown: {error[1]}"[:500])
        return outcome

    def close(self) -> None:
        for teardown in reversed(self.kept_teardowns):
            _outcome(teardown)  # after the module's last test: pytest's is its own line


def load_fixtures(test_file: str, hidden: HiddenPytest) -> Fixtures:
    """The conftest.py files of the test, imported as pytest imports them, when the tree
    declares fixture use for it; their `import pytest` answered from the hidden table."""
    root = os.getcwd()
    chain = conftest_chain(test_file, root)
    fixtures = Fixtures(active=any(wants_fixtures(p) for p in (*chain, test_file)),
                        hidden=hidden)
    if not fixtures.active:
        return fixtures
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
        module.__dict__["__builtins__"] = hidden.builtins()
        sys.modules[name] = module
        spec.loader.exec_module(module)
        fixtures.add(module)
    hidden.take()  # what else loaded pytest for real
    return fixtures


# --- calling a test ---------------------------------------------------------------------

def _unittest_run(target: Target) -> None:
    assert target.cls is not None
    result = unittest.TestResult()
    target.cls(target.attribute).run(result)
    for kind, found in (("error", result.errors), ("failed", result.failures)):
        if found:
            raise AssertionError(f"{kind}: {found[0][1][-480:]}")
    if result.skipped:
        raise unittest.SkipTest(result.skipped[0][1])


@dataclass
class Module:
    """One child's test module and what its tests share."""

    target_file: str
    module: Any
    fixtures: Fixtures
    ini: dict[str, Any]
    classes_set_up: list[type] = field(default_factory=list)

    @functools.cached_property
    def rules(self) -> IdRules:
        """Read from the pytest the test module imported for its marks."""
        try:
            return IdRules.of(str(self.fixtures.hidden.load("pytest").__version__))
        except Exception:  # no pytest here: both forms of its ids are tried
            return IdRules()

    def call(self, target: Target) -> Callable[[dict[str, Any]], object]:
        """What runs the test itself, given its fixtures' values."""
        if target.doctest is not None:
            flags = doctest_flags(self.ini)
            return lambda _: run_doctest(target.doctest, flags,  # type: ignore[arg-type]
                                         self.fixtures.namespace)
        if target.cls is not None and issubclass(target.cls, unittest.TestCase):
            return lambda _: _unittest_run(target)
        func = target.func
        assert func is not None
        if target.cls is None:
            return lambda values: _xunit(self.module, "function", func,
                                         lambda: func(**{a: values[a] for a in
                                                         target.arguments()}))
        self._set_up_class(target.cls)
        target.instance = target.cls()
        bound = getattr(target.instance, target.attribute)
        return lambda values: _xunit(target.instance, "method", bound,
                                     lambda: bound(**{a: values[a] for a in
                                                      target.arguments()}))

    def _set_up_class(self, cls: type) -> None:
        if cls in self.classes_set_up:
            return
        self.classes_set_up.append(cls)
        if callable(getattr(cls, "setup_class", None)):
            cls.setup_class()  # type: ignore[attr-defined]
        if callable(getattr(cls, "teardown_class", None)):
            self.fixtures.kept_teardowns.append(cls.teardown_class)  # type: ignore

    def run(self, name: str) -> Outcome:
        Request.asked.clear()
        try:
            target = resolve(self.module, name, lambda: self.rules) \
                if self.module is not None else \
                Target(None, name, None, doctest=text_doctest(self.target_file, name,
                                                              self.ini))
            outcome = self.fixtures.run(target, self.call(target))
        except CannotRun as why:
            return CANNOT, str(why)[:300]
        except Exception as exc:  # setup_class, or the doctest's absence
            return "error", f"{type(exc).__name__}: {exc}"[:500]
        if outcome[0] != "passed" and Request.asked:
            return CANNOT, (f"a fixture asked for request.{Request.asked[0]}, which this "
                            "runner does not give")
        return outcome


def _xunit(owner: Any, kind: str, func: Callable[..., Any], call: Callable[[], object]
           ) -> None:
    """`setup_function`/`setup_method` and their teardowns around the call."""
    setup, teardown = getattr(owner, f"setup_{kind}", None), getattr(owner, f"teardown_{kind}",
                                                                    None)
    if callable(setup):
        setup(func) if _arguments(setup) else setup()
    try:
        call()
    finally:
        if callable(teardown):
            teardown(func) if _arguments(teardown) else teardown()


def _module_xunit(module: Any, fixtures: Fixtures) -> None:
    for name in ("setUpModule", "setup_module"):
        setup = getattr(module, name, None)
        if callable(setup):
            setup(module) if _arguments(setup) else setup()
            break
    for name in ("tearDownModule", "teardown_module"):
        teardown = getattr(module, name, None)
        if callable(teardown):
            fixtures.kept_teardowns.insert(0, functools.partial(teardown, module)
                                           if _arguments(teardown) else teardown)
            break


def open_module(file: str, hidden: HiddenPytest) -> Module:
    """The test module imported as pytest imports it, Django set up first where the
    pytest configuration names its settings. Raises what the import raised, or CannotRun
    when pytest's plugins explain it."""
    ini = pytest_ini(os.getcwd())
    django_ready = setup_django(ini)
    fixtures = load_fixtures(file, hidden) if file.endswith(".py") else Fixtures(hidden=hidden)
    if not file.endswith(".py"):
        return Module(file, None, fixtures, ini)
    try:
        module = import_file(file, _import_name(file)[1], hidden)
    except Exception as exc:
        why = plugin_explains(exc, django_ready)
        if why:
            raise CannotRun(why) from exc
        raise
    finally:
        hidden.take()
    fixtures.add(module)
    _module_xunit(module, fixtures)
    return Module(file, module, fixtures, ini)


def child() -> None:
    """One test module: import it, run the named tests, one JSON line each on the pipe."""
    spec = json.loads(sys.stdin.read())
    os.close(0)
    out = int(spec["fd"])
    folder, _ = _import_name(spec["file"])
    sys.path[:1] = [os.getcwd()]  # as `python -m pytest`: the tree first, not this folder
    if folder not in sys.path:
        sys.path.insert(0, folder)
    sys.argv = [spec["file"]]
    module: Module | None = None
    try:
        module = open_module(spec["file"], HiddenPytest())
    except CannotRun as why:
        failure: Outcome = (CANNOT, str(why)[:300])
    except BaseException as exc:  # the module's own import error is the tests' error
        failure = ("error", f"import failed: {type(exc).__name__}: {exc}"[:500])
    for qualname in spec["tests"]:
        status, detail = module.run(qualname) if module is not None else failure
        line = json.dumps({"test": qualname, "status": status, "detail": detail})
        os.write(out, line.encode() + b"\n")
    if module is not None:
        module.fixtures.close()
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


DJANGO_OWN_SETTINGS = ("its Django settings are configured by the project's own test runner "
                       "(settings.configure() in runtests.py), which names no settings module")


def _cannot_run(file: str, tests: list[str], why: str) -> dict[str, Any]:
    """A module's lines, as a child writes them, for tests this runner will not run."""
    lines = "".join(json.dumps({"test": test, "status": CANNOT, "detail": why}) + "\n"
                    for test in tests)
    return {"file": file, "exit_code": None, "lines": lines}


def parent() -> None:
    spec = json.loads(sys.stdin.readline())
    sys.stdin.close()
    os.close(0)
    report = os.open(spec["report"], os.O_WRONLY)  # before any repository code runs
    by_file: dict[str, list[str]] = {}
    for file, qualname in spec["tests"]:
        by_file.setdefault(file, []).append(qualname)
    django = spec.get("django_settings")
    if django == "":  # the project's runtests.py configures them: nothing here can
        modules = [_cannot_run(file, tests, DJANGO_OWN_SETTINGS)
                   for file, tests in sorted(by_file.items())]
    else:
        if django:  # as the project's Django runner runs them: its settings module
            os.environ["DJANGO_SETTINGS_MODULE"] = str(django)
        modules = [_run_module(file, tests) for file, tests in sorted(by_file.items())]
    data = json.dumps({"token": spec["token"], "modules": modules}).encode()
    while data:  # a pipe may take a large write in parts
        data = data[os.write(report, data):]
    os.close(report)


if __name__ == "__main__":
    child() if sys.argv[1:] == [CHILD] else parent()
