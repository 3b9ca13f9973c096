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
"""

from __future__ import annotations

import json
import os
import sys
import types

_ENV = "FROGNANO_GUARD_REPORT"
_ROOT = os.path.realpath(os.getcwd())
_OWN = tuple(os.path.realpath(os.path.dirname(m.__file__)) + os.sep
             for m in (sys.modules.get("_pytest"), sys.modules.get("pluggy"))
             if m is not None and m.__file__)
_collected: dict[str, types.CodeType] = {}
_foreign: list[str] = []


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
                    "swapped": _swapped(session) if session is not None else []}
    except Exception as exc:  # the guard must never break the run it watches
        findings = {"guard_error": [f"{type(exc).__name__}: {exc}"]}
    try:
        with open(target, "w", encoding="utf-8") as handle:
            handle.write(json.dumps(findings))
    except OSError:
        pass  # the host reads silence as silence


def pytest_sessionstart(session) -> None:
    session.config._frognano_session = session
