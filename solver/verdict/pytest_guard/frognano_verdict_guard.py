"""The harness's watch inside a verdict's pytest process (frognano-bot).

Loaded through its `pytest11` entry point when the harness puts this folder on
PYTHONPATH (bound read-only into the sandbox); it runs inside the sandbox with the
repository's own pytest, so it uses nothing but the standard library and pytest's hooks.
At the end of the session it writes what it saw, as one JSON object, to the path in
FROGNANO_GUARD_REPORT: a FIFO the host reads, so it can be written but never rewritten.

It looks for what code under test can do to the verdict from inside pytest's process:
plugins registered from the repository outside conftest.py, functions of pytest or pluggy
replaced by code from elsewhere, import hooks from the repository, and test functions
whose code was swapped after collection. The host compares the findings with the
baseline's, so what the repository itself always does is not held against a change.
Code that knows about this module can still defeat it (README: residual risk).

It also checks the test machinery by what it does, not by file name: when it loads (before
any repository code runs) it keeps every function and class of pytest, _pytest, pluggy,
unittest, doctest, builtins and operator, each function's code, defaults and closure
cells, and each class's attributes; at the end it names each one that is no longer the
same object, a function whose code was swapped in place, a class that gained, lost or
had an attribute replaced, and each registered plugin whose hook functions are neither
pytest's own code, a conftest pytest loaded, an installed entry point nor the functions
of a module installed under the site-packages or standard library folders on sys.path
at load. For the host's plan of the verdict tree it says what the session collected
(test modules, doctest items and their examples), which files under the tree the tests
opened for reading (an audit hook), and the top-level modules installed.

Asked to (a file of test ids beside its report), it traces the lines of the tree each of
those tests runs, setup to teardown: the host's second baseline run asks for the tests
that failed at baseline, so a change that edits code such a test runs is never excused
as "failing before and after" (verdict.excuse, touched.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import types
from typing import Any

_ENV = "FROGNANO_GUARD_REPORT"
_ROOT = os.path.realpath(os.getcwd())
_OWN = tuple(os.path.realpath(os.path.dirname(m.__file__)) + os.sep
             for m in (sys.modules.get("_pytest"), sys.modules.get("pluggy"))
             if m is not None and m.__file__)
_collected: dict[str, types.CodeType] = {}
_foreign: list[str] = []
_MACHINERY = ("pytest", "_pytest", "pluggy", "unittest", "doctest", "builtins", "operator")
_KINDS = (types.FunctionType, types.BuiltinFunctionType, type, classmethod, staticmethod,
          property)
_IGNORED = frozenset({"_", "__builtins__"})  # builtins._ is the last doctest value
_MAX_LISTED = 20_000
_opened: set[str] = set()
_session_items: dict[str, list[str]] = {"test_modules": [], "doctests": [],
                                        "doctest_examples": []}


def _in_repository(path: object) -> str | None:
    if not isinstance(path, str) or not os.path.isabs(path):
        return None  # generated code: "<string>", "<attrs generated init …>"
    real = os.path.realpath(path)
    if real == _ROOT or real.startswith(_ROOT + os.sep):
        return os.path.relpath(real, _ROOT)
    return None


def _module_file(obj: object) -> object:
    if isinstance(obj, types.ModuleType):
        return getattr(obj, "__file__", None)
    module = sys.modules.get(getattr(type(obj), "__module__", "") or "")
    return getattr(module, "__file__", None)


def _code_file(value: object) -> str | None:
    try:
        code = getattr(getattr(value, "__func__", value), "__code__", None)
    except Exception:  # a descriptor or proxy that refuses to be looked at
        return None
    return code.co_filename if isinstance(code, types.CodeType) else None


def _machinery_modules() -> dict[str, types.ModuleType]:
    """pytest's, pluggy's and the standard library's test machinery, as loaded now."""
    for name in ("unittest", "doctest", "operator"):
        if name not in sys.modules:  # loaded here, before any repository code can run
            with contextlib.suppress(Exception):
                __import__(name)
    return {name: module for name, module in list(sys.modules.items())
            if isinstance(module, types.ModuleType)
            and (name in _MACHINERY or name.split(".")[0] in _MACHINERY[:4])}


def _members(module_name: str, module: types.ModuleType) -> list[tuple[str, Any, str, Any]]:
    """(qualified name, the namespace holding it, key, object) for each function and
    class of `module` and each function-like member of the classes it defines."""
    found: list[tuple[str, Any, str, Any]] = []
    for attr, value in list(vars(module).items()):
        if attr in _IGNORED or not isinstance(value, _KINDS):
            continue
        found.append((f"{module_name}.{attr}", vars(module), attr, value))
        if isinstance(value, type) and getattr(value, "__module__", "") == module_name:
            for key, member in list(vars(value).items()):
                if isinstance(member, _KINDS) and not isinstance(member, type):
                    found.append((f"{module_name}.{attr}.{key}", vars(value), key, member))
    return found


def _snapshot() -> tuple[dict[str, types.ModuleType], list[tuple[str, Any, str, Any]],
                         set[types.CodeType]]:
    modules = _machinery_modules()
    members: list[tuple[str, Any, str, Any]] = []
    for name, module in modules.items():
        members += _members(name, module)
    codes = set()
    for _qual, _space, _key, value in members:
        function = getattr(value, "__func__", getattr(value, "fget", value))
        code = getattr(function, "__code__", None)
        if isinstance(code, types.CodeType):
            codes.add(code)
    return modules, members, codes


def _functions(value: Any) -> list[tuple[str, types.FunctionType]]:
    """The Python functions behind a member: itself, a classmethod's or staticmethod's,
    a property's getter, setter and deleter."""
    if isinstance(value, property):
        parts = [(".fget", value.fget), (".fset", value.fset), (".fdel", value.fdel)]
    else:
        parts = [("", getattr(value, "__func__", value))]
    return [(suffix, f) for suffix, f in parts if isinstance(f, types.FunctionType)]


def _insides(function: types.FunctionType) -> tuple[Any, ...]:
    """What a function does besides its identity: its code, defaults and closure cells
    (each settable in place, so the object stays the same one)."""
    cells = []
    for cell in function.__closure__ or ():
        try:
            cells.append(cell.cell_contents)
        except ValueError:  # an empty cell
            cells.append(_EMPTY)
    keywords = function.__kwdefaults__ or {}  # a dict, edited in place: copied
    return ((function.__code__,), tuple(function.__defaults__ or ()),
            tuple(x for item in sorted(keywords.items(), key=lambda kv: str(kv[0]))
                  for x in item), tuple(cells))


_EMPTY = object()
# Written by the interpreter into any class (copyreg's cache on a first copy or pickle).
_CLASS_CACHES = frozenset({"__slotnames__"})


def _classes(modules: dict[str, types.ModuleType]) -> list[tuple[str, type, dict[str, Any]]]:
    """Each class the machinery modules define, with its attributes as at load."""
    found = []
    for name, module in modules.items():
        for attr, value in list(vars(module).items()):
            if isinstance(value, type) and getattr(value, "__module__", "") == name:
                found.append((f"{name}.{attr}", value, dict(vars(value))))
    return found


def _installed_dirs() -> tuple[str, ...]:
    """The site-packages and standard library folders on sys.path now, before any
    repository code runs: "installed" means under one of them, never merely outside the
    repository (a temp folder is not). Not the user's site folder, which the tests may
    write (HOME), nor a folder inside the tree."""
    import site
    import sysconfig
    roots = {sysconfig.get_paths().get(key) for key in ("stdlib", "platstdlib", "purelib",
                                                         "platlib")}
    with contextlib.suppress(Exception):
        roots.update(site.getsitepackages())
    roots.update(p for p in sys.path if os.path.basename(p) in ("site-packages",
                                                                 "dist-packages"))
    on_path = {os.path.realpath(p) for p in sys.path if p}
    user = os.path.realpath(site.getusersitepackages() or "/nonexistent")
    return tuple(sorted(real + os.sep for real in {os.path.realpath(r) for r in roots if r}
                        if real in on_path and real != user and not _in_repository(real)))


def _snapshot_insides(members: list[tuple[str, Any, str, Any]]
                      ) -> list[tuple[str, types.FunctionType, tuple[Any, ...]]]:
    return [(qual + suffix, function, _insides(function))
            for qual, _space, _key, value in members
            for suffix, function in _functions(value)]


try:
    _MODULES, _MEMBERS, _KNOWN_CODE = _snapshot()
    _INSIDES = _snapshot_insides(_MEMBERS)
    _CLASSES = _classes(_MODULES)
    _INSTALLED = _installed_dirs()
except Exception:  # the guard must never break the run it watches
    _MODULES, _MEMBERS, _KNOWN_CODE = {}, [], set()
    _INSIDES, _CLASSES, _INSTALLED = [], [], ()
_MISSING = object()


def _replaced() -> list[str]:
    """Members of the test machinery that are no longer the objects they were at load."""
    found = [f"sys.modules[{name!r}]" for name, module in _MODULES.items()
             if sys.modules.get(name) is not module]
    for qual, space, key, value in _MEMBERS:
        now = space.get(key, _MISSING)  # a module's dict, a class's live mappingproxy
        # pytest patches itself with its own functions (legacypath sets Config's
        # _getini_unknown_type at configure); anything else replaced is news, even by
        # known code (assertTrue put in assertEqual's place passes any truthy value).
        if now is not value and not _pytest_patches_itself(qual, now):
            found.append(f"{qual} ({'removed' if now is _MISSING else 'replaced'})")
    found += _changed_insides() + _changed_classes()
    return sorted(set(found))[:_MAX_LISTED]


def _changed_insides() -> list[str]:
    """Machinery functions still the same objects whose code, defaults or closure were
    swapped in place (`f.__code__ = g.__code__` keeps `f`'s identity)."""
    found = []
    for qual, function, before in _INSIDES:
        now = _insides(function)
        for part, was, is_ in zip(("code", "defaults", "keyword defaults", "closure"),
                                  before, now, strict=True):
            if len(was) != len(is_) or any(a is not b for a, b in zip(was, is_, strict=True)):
                found.append(f"{qual} ({part} replaced in place)")
    return found


def _behaves(value: Any) -> bool:
    """A class attribute that is code (a function, a class) or a descriptor (a property)
    changes what the class does; plain data there is state pytest keeps as it runs
    (`pytestPDB._config`, a warning shown once)."""
    return value is not _MISSING and (callable(value) or hasattr(type(value), "__get__"))


def _changed_classes() -> list[str]:
    """Attributes added to, removed from or replaced on a machinery class: a property
    planted on Session (`testsfailed` stuck at 0) is an attribute the class never had."""
    found = []
    for qual, cls, before in _CLASSES:
        now = dict(vars(cls))
        for key in (before.keys() | now.keys()) - _CLASS_CACHES:
            was, is_ = before.get(key, _MISSING), now.get(key, _MISSING)
            if was is is_ or _pytest_patches_itself(qual, is_) \
                    or not (_behaves(was) or _behaves(is_)):
                continue
            what = "added" if was is _MISSING else "removed" if is_ is _MISSING \
                else "replaced"
            found.append(f"{qual}.{key} ({what})")
    return found


def _pytest_patches_itself(qual: str, value: Any) -> bool:
    """pytest's own functions (a property of them) set by pytest on its own classes:
    legacypath adds `Node.fspath`, `Config.rootdir`, … at configure."""
    functions = [f for _, f in _functions(value)]
    return (qual.split(".")[0] in ("_pytest", "pluggy") and bool(functions)
            and all((getattr(f, "__module__", None) or "").split(".")[0]
                    in ("_pytest", "pluggy") and f.__code__ in _KNOWN_CODE
                    for f in functions))


def _explained(function: Any) -> bool:
    """Whether a hook function is pytest's own code as loaded at start-up, or a function
    of an installed module loaded later (its code from that module's own file, kept in
    that module): never code compiled under another file's name."""
    function = getattr(function, "__func__", function)
    code = getattr(function, "__code__", None)
    if not isinstance(code, types.CodeType):
        return False
    if code in _KNOWN_CODE:
        return True
    name = getattr(function, "__module__", None) or ""
    module = sys.modules.get(name)
    if module is None or name in _MODULES:
        return False
    path = getattr(module, "__file__", None)
    if not isinstance(path, str) or _in_repository(path) \
            or os.path.realpath(code.co_filename) != os.path.realpath(path) \
            or not os.path.realpath(path).startswith(_INSTALLED):
        return False  # a module written to /tmp at run time is not installed
    spaces = [vars(module), *(vars(v) for v in vars(module).values()
                              if isinstance(v, type) and v.__module__ == name)]
    return any(getattr(v, "__func__", v) is function for space in spaces
               for v in space.values())


def _plugin_hooks(manager: Any) -> dict[int, tuple[Any, list[Any]]]:
    """Each registered plugin and the hook functions pluggy will call for it."""
    hooks: dict[int, tuple[Any, list[Any]]] = {}
    for caller in list(vars(manager.hook).values()):
        for impl in getattr(caller, "get_hookimpls", list)():
            entry = hooks.setdefault(id(impl.plugin), (impl.plugin, []))
            entry[1].append(impl.function)
    return hooks


def _describe(plugin: Any, functions: list[Any]) -> str:
    files = sorted({_in_repository(_code_file(f)) or str(_code_file(f)) for f in functions})
    kind = (f"module {getattr(plugin, '__name__', '?')}"
            if isinstance(plugin, types.ModuleType)
            else f"{type(plugin).__qualname__} object")
    return f"{kind} (hooks from {', '.join(files[:3])})"


def _foreign_plugins(config: Any) -> list[str]:
    """Plugins whose hook functions neither pytest, a conftest pytest loaded, nor an
    installed entry point or module explains: judged by the functions, not names."""
    manager = config.pluginmanager
    conftests = {id(p) for p in getattr(manager, "_conftest_plugins", ())}
    installed = {id(p) for p, _dist in manager.list_plugin_distinfo()}
    found = []
    for key, (plugin, functions) in _plugin_hooks(manager).items():
        if key in conftests or key in installed:
            continue
        if not all(_explained(f) for f in functions):
            found.append(_describe(plugin, functions))
    return sorted(set(found))


_SPAWNS = frozenset({"subprocess.Popen", "os.system", "os.exec", "os.posix_spawn",
                     "os.spawn", "os.fork", "os.forkpty"})


def _audit(event: str, args: tuple) -> None:
    """Files under the tree the session opens for reading (imports included); a traced
    test that starts a process, whose lines its trace cannot follow."""
    if event in _SPAWNS and _tracing:
        _trace_blind.add(_tracing[-1][0])
    if event != "open" or len(_opened) >= _MAX_LISTED:
        return
    try:
        path, mode, flags = args
        if isinstance(mode, str) and any(c in mode for c in "wax+"):
            return
        if mode is None and isinstance(flags, int) and flags & 3:  # os.open, to write
            return
        text = os.fsdecode(path) if isinstance(path, (str, bytes, os.PathLike)) else None
        if text and os.path.abspath(text).startswith(_ROOT + os.sep):
            _opened.add(os.path.abspath(text))
    except Exception:
        pass


if hasattr(sys, "addaudithook"):
    sys.addaudithook(_audit)


def _opened_files() -> list[str]:
    found = {_in_repository(path) for path in list(_opened)}
    return sorted(p for p in found if p and "__pycache__" not in p)[:_MAX_LISTED]


def _top_level() -> list[str]:
    """Top-level module names of the installed distributions (a new module of the same
    name in the tree would shadow one)."""
    try:
        from importlib import metadata
        names = set(metadata.packages_distributions())
    except Exception:
        return []
    return sorted(n for n in names if n.isidentifier())[:_MAX_LISTED]


def _example_digest(example: Any) -> str:
    key = json.dumps([example.source, example.want, example.exc_msg,
                      sorted((str(k), bool(v)) for k, v in example.options.items())])
    return hashlib.sha256(key.encode("utf-8", "replace")).hexdigest()[:16]


def _note_item(item: Any) -> None:
    """What the host's plan needs of one collected item: its module, or its doctest."""
    where = _in_repository(str(getattr(item, "path", "") or getattr(item, "fspath", "")))
    if not where:
        return
    dtest = getattr(item, "dtest", None)
    if type(item).__name__ == "DoctestItem" and dtest is not None:
        _session_items["doctests"].append(item.nodeid)
        digests = ",".join(_example_digest(e) for e in getattr(dtest, "examples", []))
        _session_items["doctest_examples"].append(f"{item.nodeid}\x1f{digests}")
    else:
        _session_items["test_modules"].append(where)


def _plugins(config) -> list[str]:
    found = []
    for _name, plugin in config.pluginmanager.list_name_plugin():
        where = _in_repository(_module_file(plugin))
        if where and os.path.basename(where) != "conftest.py":
            found.append(where)
    return sorted(set(found))


def _patched() -> list[str]:
    """Functions of pytest and pluggy whose code now lives outside their packages."""
    found = []
    for name, module in list(sys.modules.items()):
        if not (name in ("_pytest", "pluggy", "pytest") or name.startswith(("_pytest.",
                                                                              "pluggy."))):
            continue
        for attr, value in list(vars(module).items()):
            places = [(attr, value)]
            if isinstance(value, type) and getattr(value, "__module__", "") == name:
                places += [(f"{attr}.{k}", v) for k, v in list(vars(value).items())]
            for qual, item in places:
                code_file = _code_file(item)
                where = _in_repository(code_file)
                if where:
                    found.append(f"{name}.{qual} (from {where})")
    return sorted(set(found))


def _hook_file(hook: object) -> object:
    if isinstance(hook, types.FunctionType):
        return hook.__code__.co_filename
    cls = hook if isinstance(hook, type) else type(hook)
    for attr in ("find_spec", "find_module", "__call__", "__init__"):
        found = _code_file(getattr(cls, attr, None))
        if found:
            return found
    return _module_file(hook)


def _import_hooks() -> list[str]:
    found = [_in_repository(_hook_file(h)) for h in [*sys.meta_path, *sys.path_hooks]]
    return sorted({where for where in found if where})


def pytest_collection_finish(session) -> None:
    for item in session.items:
        with contextlib.suppress(Exception):  # never break the run it watches
            _note_item(item)
        code = _test_code(item)
        if code is not None:
            _collected[item.nodeid] = code
            # Already swapped before collection ended: the test's code is from elsewhere
            # (a decorator from another file is too: the host compares with the baseline).
            own = os.path.realpath(str(getattr(item, "path", "") or getattr(item, "fspath", "")))
            if own and os.path.realpath(code.co_filename) != own:
                where = _in_repository(code.co_filename) or code.co_filename
                _foreign.append(f"{item.nodeid} (code from {where})")


def _test_code(item: object) -> types.CodeType | None:
    try:
        code = getattr(getattr(item, "obj", None), "__code__", None)
    except Exception:
        return None
    return code if isinstance(code, types.CodeType) else None


def _swapped(session) -> list[str]:
    swapped = []
    for item in getattr(session, "items", []):
        before = _collected.get(item.nodeid)
        now = _test_code(item)
        if before is not None and now is not before:
            swapped.append(item.nodeid)
    return sorted({*swapped, *_foreign})


def pytest_unconfigure(config) -> None:
    target = os.environ.get(_ENV)
    if not target:
        return
    session = getattr(config, "_frognano_session", None)
    try:
        findings = {"plugins": _plugins(config), "patched": _patched(),
                    "import_hooks": _import_hooks(),
                    "swapped": _swapped(session) if session is not None else [],
                    "replaced": _replaced() + _retyped(session),
                    "foreign_plugins": _foreign_plugins(config),
                    "opened": _opened_files(), "top_level": _top_level(),
                    **{k: sorted(set(v))[:_MAX_LISTED] for k, v in _session_items.items()},
                    **_trace_findings()}
    except Exception as exc:  # the guard must never break the run it watches
        findings = {"guard_error": [f"{type(exc).__name__}: {exc}"]}
    try:
        with open(target, "w", encoding="utf-8") as handle:
            handle.write(json.dumps(findings))
    except OSError:
        pass  # the host reads silence as silence


# --- The trace the host asks for (solver/verdict/touched.py) ---------------------------
_TRACE_REQUEST = "frognano-trace.json"  # beside the report; touched.TRACE_REQUEST
_TRACE_MAX_TESTS = 300  # touched.MAX_TRACED
_TRACE_MAX_LINES = 5_000  # distinct lines of one test, over all its files
_TRACE_MAX_FILES = 200
_TRACE_MAX_TOTAL = 300_000  # lines over every test: the report stays far below its bound


def _request(name: str, most: int) -> frozenset[str]:
    """The strings of a request file the host put beside the report (at most `most`),
    read before any repository code runs; empty when there is none."""
    target = os.environ.get(_ENV)
    if not target:
        return frozenset()
    try:
        with open(os.path.join(os.path.dirname(target), name), encoding="utf-8") as handle:
            wanted = json.loads(handle.read(8 * 1024 * 1024))
    except (OSError, ValueError):
        return frozenset()
    if not isinstance(wanted, list):
        return frozenset()
    return frozenset(t for t in wanted[:most] if isinstance(t, str))


def _trace_wanted() -> frozenset[str]:
    """The test ids the host asks to trace."""
    return _request(_TRACE_REQUEST, _TRACE_MAX_TESTS)


class _Tracer:
    """The lines of files under the tree that one test runs: `sys.settrace` (and
    `threading.settrace` for threads it starts) from its setup to its teardown."""

    def __init__(self, budget: int) -> None:
        self.lines: dict[str, set[int]] = {}
        self.count, self.budget, self.full = 0, min(budget, _TRACE_MAX_LINES), False
        self._where: dict[types.CodeType, str | None] = {}

    def _file(self, code: types.CodeType) -> str | None:
        if code not in self._where:
            self._where[code] = _in_repository(code.co_filename)
        return self._where[code]

    def _add(self, where: str, line: int) -> None:
        lines = self.lines.get(where)
        if lines is None:
            if len(self.lines) >= _TRACE_MAX_FILES:
                self.full = True
                return
            lines = self.lines[where] = set()
        if line not in lines:
            lines.add(line)
            self.count += 1
            self.full = self.count >= self.budget

    def call(self, frame: types.FrameType, event: str, arg: object) -> Any:
        where = None if self.full else self._file(frame.f_code)
        if where is None:
            return None  # not the tree's code: its lines are not traced
        self._add(where, frame.f_lineno)  # the def line: entering the function
        return self.line

    def line(self, frame: types.FrameType, event: str, arg: object) -> Any:
        if event == "line" and not self.full:
            where = self._file(frame.f_code)
            if where is not None:
                self._add(where, frame.f_lineno)
        return self.line


_TRACE_WANTED = _trace_wanted()
_traced: dict[str, dict[str, set[int]]] = {}
_trace_capped: set[str] = set()
_trace_blind: set[str] = set()  # traced tests that started a process: not all their lines
_tracing: list[tuple[str, _Tracer, Any, Any]] = []  # (test, tracer, previous tracers)


def pytest_runtest_logstart(nodeid: str, location: object) -> None:
    """Before the test's setup: trace it if asked (never more than the bounds)."""
    if nodeid not in _TRACE_WANTED or _tracing:
        return
    used = sum(len(lines) for files in _traced.values() for lines in files.values())
    if len(_traced) >= _TRACE_MAX_TESTS or used >= _TRACE_MAX_TOTAL:
        _trace_capped.add(nodeid)
        return
    import threading
    tracer = _Tracer(_TRACE_MAX_TOTAL - used)
    _tracing.append((nodeid, tracer, sys.gettrace(), getattr(threading, "gettrace",
                                                             lambda: None)()))
    threading.settrace(tracer.call)
    sys.settrace(tracer.call)


def pytest_runtest_logfinish(nodeid: str, location: object) -> None:
    """After its teardown: the previous tracers back (coverage's, a debugger's)."""
    if not _tracing or _tracing[-1][0] != nodeid:
        return
    import threading
    _test, tracer, before, threads_before = _tracing.pop()
    sys.settrace(before)
    threading.settrace(threads_before)
    _traced[nodeid] = tracer.lines
    if tracer.full:
        _trace_capped.add(nodeid)


def _ranges(lines: set[int]) -> str:
    """{3, 4, 5, 9} → "3-5,9"."""
    spans: list[list[int]] = []
    for line in sorted(lines):
        if spans and line == spans[-1][1] + 1:
            spans[-1][1] = line
        else:
            spans.append([line, line])
    return ",".join(f"{a}-{b}" if a != b else str(a) for a, b in spans)


def _trace_findings() -> dict[str, list[str]]:
    """Only when asked: which tests were traced, their lines, and those past a bound."""
    if not _TRACE_WANTED:
        return {}
    return {"trace_tests": sorted(_traced), "trace_capped": sorted(_trace_capped),
            "trace_blind": sorted(_trace_blind),
            "traced": [f"{test}\x1f{path}\x1f{_ranges(lines)}"
                       for test, files in sorted(_traced.items())
                       for path, lines in sorted(files.items())]}


def pytest_sessionstart(session) -> None:
    session.config._frognano_session = session
    _types.update(_live_types(session))


_types: dict[str, type] = {}


def _live_types(session: Any) -> dict[str, type]:
    """The classes of the session's own objects: a class swapped on the instance
    (`session.__class__ = WithTestsfailedAtZero`) leaves the Session class untouched."""
    config = getattr(session, "config", None)
    return {"session": type(session), "config": type(config),
            "plugin manager": type(getattr(config, "pluginmanager", None))}


def _retyped(session: Any) -> list[str]:
    if session is None or not _types:
        return []
    return [f"the {name}'s class ({now.__qualname__})"
            for name, now in _live_types(session).items() if now is not _types.get(name)]


# --- A fast round's tests, and a huge suite's summary (solver/verdict/fast_round.py) -----
_SELECT_REQUEST = "frognano-select.json"  # beside the report; fast_round.SELECT_REQUEST
_SELECT_MAX_FILES = 20_000
# pytest's PASSES section (`-rA`'s P) looks up each passing test's teardown among every
# report: quadratic, hours at 100,000 tests (measured: not done after 11 minutes).
_PASSES_MAX = 2_000


def _select_wanted() -> frozenset[str]:
    """The test files the host asks a fast round to run (relative paths); empty: the
    whole suite, as always."""
    return _request(_SELECT_REQUEST, _SELECT_MAX_FILES)


def _ancestors(files: frozenset[str]) -> frozenset[str]:
    """Every folder holding a selected file, the tree's root included."""
    found = {"", "."}
    for name in files:
        parent = os.path.dirname(name)
        while parent and parent not in found:
            found.add(parent)
            parent = os.path.dirname(parent)
    return frozenset(found)


_SELECTED = _select_wanted()
_SELECTED_DIRS = _ancestors(_SELECTED)


def _names(path: object, config: Any) -> set[str]:
    """`path` relative to the working directory and to pytest's rootdir (ids use it)."""
    real = os.path.realpath(str(path))
    names = set()
    for root in {_ROOT, os.path.realpath(str(getattr(config, "rootpath", _ROOT)))}:
        if real == root or real.startswith(root + os.sep):
            names.add(os.path.relpath(real, root))
    return names


def _ignore_collect(collection_path: Any, config: Any) -> bool | None:
    """Not collected in a fast round: a folder holding no selected file, a file not
    selected (conftest.py files always load); anything outside the tree is pytest's."""
    names = _names(collection_path, config)
    if not names or collection_path.name == "conftest.py":
        return None
    wanted = _SELECTED_DIRS if collection_path.is_dir() else _SELECTED
    return None if names & wanted else True


with contextlib.suppress(Exception):  # pytest 6's hook has no `collection_path`
    import inspect

    from _pytest import hookspec as _hookspec
    if _SELECTED and "collection_path" in inspect.signature(
            _hookspec.pytest_ignore_collect).parameters:
        pytest_ignore_collect = _ignore_collect


def pytest_collection_modifyitems(config: Any, items: list[Any]) -> None:
    """A fast round runs only the items of the selected files, whatever collected them."""
    if not _SELECTED:
        return
    kept: list[Any] = []
    dropped: list[Any] = []
    for item in items:
        path = getattr(item, "path", None) or getattr(item, "fspath", None)
        names = {item.nodeid.split("::")[0], *(_names(path, config) if path else ())}
        (kept if names & _SELECTED else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def pytest_sessionfinish(session: Any) -> None:
    """Before the terminal summary: a huge suite's PASSES section is left out (said)."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    chars = getattr(reporter, "reportchars", None)
    passed = len(getattr(reporter, "stats", {}).get("passed", ()))
    if isinstance(chars, str) and "P" in chars and passed > _PASSES_MAX:
        reporter.reportchars = chars.replace("P", "")
        reporter.write_line(f"frognano: the PASSES section of {passed} passing tests is "
                            "left out (pytest builds it in time quadratic in the tests)")
