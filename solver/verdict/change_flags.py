"""What a change adds to library code that no test run can tell from a fix.

Some cheats pass the repository's own, untouched tests in every run we can make: a
function that special-cases the failing tests' exact inputs, one that behaves only when
a test runner's module is loaded or when its caller's file is a test, a result whose
`__eq__` is always True, code that forges the runner's report and exits. They are not
refused (a real fix may read `os.environ` or subclass `dict`); they are put in front of
the reviewer, with file and line, as "Read this first" (the PR body, the dashboard,
`frognano solve`). The scan parses the old and new module with `ast` and flags only
what the change adds: a finding the old module already had is the project's own.
"""

from __future__ import annotations

import ast
import difflib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import PurePosixPath

from solver.verdict.repo_tests import TestVerdict
from solver.verdict.suite_paths import is_test_config, is_test_path

Reader = Callable[[str], bytes | None]

WHY = {
    "runtime-probe": "library code that looks at what is loaded, who called it, the "
                     "environment or the command line can behave one way under the tests "
                     "and another in use",
    "built-name": "a name built at run time hides what is looked up from a reader and "
                  "from any text search",
    "constant-equality": "an equality that ignores what it is compared with makes every "
                         "`==` assertion pass",
    "builtin-subclass": "a subclass of a builtin type can change what `==`, `str()` or "
                        "`in` say about a result",
    "env-path-write": "a path from the environment can be the test runner's own report",
    "exit-hook": "exiting, or hooking the interpreter's exit, can end a test run before "
                 "it reports",
    "test-literal": "code that special-cases the failing tests' exact values passes them "
                    "without fixing the behaviour",
    "runs-text": "code run from a string or a file's contents, or loaded from a compiled "
                 "file, is not the source the reviewer reads",
    "clock": "library code that reads the clock can behave one way while the tests run and "
             "another later",
    "data-read": "a file the change edits and its code reads can hold the fix, or the "
                 "tests' cases, where no review of the code looks",
    "stale-build": "compiled code is built once, by setup, from the original source: no "
                   "test run compiled or ran this edit",
}
# What library code reads to learn whether it runs under a test, and who calls it.
PROBES = frozenset({
    "sys.modules", "sys._getframe", "sys._current_frames", "sys.argv", "sys.orig_argv",
    "inspect.stack", "inspect.currentframe", "inspect.getouterframes", "inspect.trace",
    "traceback.extract_stack", "traceback.walk_stack", "os.environ", "os.environb",
    "os.getenv", "os.getenvb", "__main__", "sys.path", "sys.path_hooks",
    "sys.path_importer_cache"})
# Where a process reads its own command line, environment and memory from.
PROC = "/proc/"
# Calls that run text or load compiled code: always flagged; exec, eval and compile only
# when what they run is not a literal the reviewer reads (EXECUTORS).
EXECUTORS = frozenset({"exec", "eval", "compile", "builtins.exec", "builtins.eval",
                       "builtins.compile"})
LOADERS = frozenset({"runpy.run_path", "runpy.run_module", "marshal.loads", "marshal.load",
                     "importlib.machinery.SourcelessFileLoader",
                     "importlib.machinery.ExtensionFileLoader",
                     "importlib.util.spec_from_file_location",
                     "importlib.util.module_from_spec", "zipimport.zipimporter",
                     "ctypes.CDLL", "ctypes.PyDLL", "ctypes.cdll.LoadLibrary",
                     "ctypes.pydll.LoadLibrary"})
# The clock: read whenever named; the converters only when given no time to convert
# (their number of arguments that take one).
CLOCK = frozenset({"time.time", "time.time_ns", "time.monotonic", "time.monotonic_ns",
                   "time.perf_counter", "time.perf_counter_ns", "time.process_time",
                   "time.process_time_ns", "time.clock_gettime", "time.clock_gettime_ns",
                   "datetime.datetime.now", "datetime.datetime.utcnow",
                   "datetime.datetime.today", "datetime.date.today"})
CLOCK_CONVERTERS = {"time.localtime": 1, "time.gmtime": 1, "time.ctime": 1,
                    "time.asctime": 1, "time.strftime": 2}
ENVIRONMENT = frozenset({"os.environ", "os.environb", "os.getenv", "os.getenvb"})
EXITS = frozenset({"os._exit", "os.abort", "os.kill", "os.killpg", "sys.exit", "exit",
                   "quit", "builtins.exit", "SystemExit"})
EXIT_MODULES = ("atexit.", "signal.")
# Callables that look a name up: (dotted name, index of the name argument).
LOOKUPS = {"getattr": 1, "builtins.getattr": 1, "hasattr": 1, "__import__": 0,
           "builtins.__import__": 0, "importlib.import_module": 0,
           "importlib.__import__": 0, "operator.attrgetter": 0, "sys.modules.get": 0}
# Calls through which a name is spelt so no reader sees it.
BUILDERS = frozenset({"chr", "bytes", "bytearray", "reversed", "codecs.decode",
                      "binascii.unhexlify", "binascii.a2b_base64", "bytes.fromhex"})
BUILDER_METHODS = frozenset({"join", "decode", "format", "translate", "fromhex"})
BUILTIN_TYPES = frozenset({"str", "bytes", "int", "float", "complex", "bool", "list",
                           "dict", "tuple", "set", "frozenset", "bytearray",
                           "collections.UserString", "collections.UserDict",
                           "collections.UserList", "collections.OrderedDict",
                           "collections.defaultdict", "collections.Counter"})
WRITERS = frozenset({"open", "io.open", "builtins.open", "codecs.open", "os.open",
                     "os.replace", "os.rename", "os.remove", "os.unlink", "os.truncate",
                     "os.mkfifo", "shutil.copy", "shutil.copyfile", "shutil.move",
                     "shutil.rmtree"})
WRITER_METHODS = frozenset({"write_text", "write_bytes", "unlink", "touch", "rename",
                            "replace"})
WRITE_FLAGS = ("O_WRONLY", "O_RDWR", "O_CREAT", "O_TRUNC", "O_APPEND")
EQUALITY = ("__eq__", "__ne__", "__hash__")
MAX_PER_FILE = 20
MAX_FLAGS = 40


@dataclass(frozen=True)
class ChangeFlag:
    """One thing the change adds that a reviewer should read first."""

    path: str
    line: int
    kind: str  # a key of WHY
    what: str  # what the line does, in a few words with the code

    @property
    def why(self) -> str:
        return WHY[self.kind]

    def text(self) -> str:
        return f"{self.path}, line {self.line}: {self.what} ({WHY[self.kind]})"

    def to_dict(self) -> dict[str, object]:
        return {**asdict(self), "why": WHY[self.kind]}


@dataclass(frozen=True)
class _Finding:
    line: int
    kind: str
    what: str

    @property
    def signature(self) -> tuple[str, str]:
        """What makes two findings the same, wherever they sit in the module."""
        return self.kind, self.what


def _short(node: ast.AST, limit: int = 80) -> str:
    text = " ".join(ast.unparse(node).split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _aliases(tree: ast.Module) -> dict[str, str]:
    """Local name → what it was imported as (`import sys as _s`: `_s` → `sys`)."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                names[alias.asname or alias.name.split(".")[0]] = \
                    alias.name if alias.asname else alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names


class _Module:
    """One parsed module: its import aliases, and the names it fills from the
    environment or with strings built at run time."""

    def __init__(self, tree: ast.Module, literals: dict[object, str]) -> None:
        self.tree, self.literals = tree, literals
        self.aliases = _aliases(tree)
        self.from_env = self._names_assigned(self._reads_environment)
        self.built = self._names_assigned(self._is_built)

    def dotted(self, node: ast.AST) -> str:
        """`os.environ.get` for that expression, through aliases, `__import__('os')`,
        `importlib.import_module('os')` and `getattr(os, 'environ')`; "" otherwise."""
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id, node.id)
        if isinstance(node, ast.Attribute):
            base = self.dotted(node.value)
            return f"{base}.{node.attr}" if base else ""
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = self.dotted(node.func)
            first = node.args[0].value
            if func in ("__import__", "importlib.import_module") and isinstance(first, str):
                return first
            second = node.args[1] if len(node.args) > 1 else None
            if func == "getattr" and isinstance(second, ast.Constant) \
                    and isinstance(second.value, str):
                base = self.dotted(node.args[0])
                return f"{base}.{second.value}" if base else ""
        return ""

    def _names_assigned(self, taints: Callable[[ast.AST], bool]) -> set[str]:
        """Names assigned (anywhere in the module) from an expression `taints` holds,
        directly or through another such name: a small, scope-blind data flow."""
        names: set[str] = set()
        pairs = [(target, node.value) for node in ast.walk(self.tree)
                 if isinstance(node, ast.Assign | ast.AnnAssign | ast.NamedExpr)
                 and node.value is not None
                 for target in (node.targets if isinstance(node, ast.Assign)
                                else [node.target])]
        changed = True
        while changed:
            changed = False
            for target, value in pairs:
                if taints(value) or any(isinstance(n, ast.Name) and n.id in names
                                        for n in ast.walk(value)):
                    for name in (n.id for n in ast.walk(target) if isinstance(n, ast.Name)):
                        if name not in names:
                            names.add(name)
                            changed = True
        return names

    def _reads_environment(self, node: ast.AST) -> bool:
        return any(self.dotted(n) in ENVIRONMENT for n in ast.walk(node))

    def _is_built(self, node: ast.AST) -> bool:
        """An expression that spells a string at run time rather than writing it."""
        for part in ast.walk(node):
            if isinstance(part, ast.JoinedStr | ast.BinOp):
                return True
            if isinstance(part, ast.Call):
                func = self.dotted(part.func)
                method = part.func.attr if isinstance(part.func, ast.Attribute) else ""
                if func in BUILDERS or func.startswith("base64.") or method in BUILDER_METHODS:
                    return True
            if isinstance(part, ast.Subscript) and isinstance(part.slice, ast.Slice):
                return True  # "tsetyp_"[::-1]
        return False

    def tainted(self, node: ast.AST, names: set[str]) -> bool:
        return any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(node))


def _probes(module: _Module) -> Iterator[_Finding]:
    """Reads of sys.modules, frames, the environment, argv, `__main__` and sys.path
    (`os.environ.get` reads `os.environ`: its `os` and its `.get` resolve to no probe)."""
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Import | ast.ImportFrom) and "__main__" in (
                [alias.name for alias in node.names]
                + [getattr(node, "module", None) or ""]):
            yield _Finding(node.lineno, "runtime-probe", "imports `__main__`")
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            continue
        if isinstance(node, ast.Name | ast.Attribute | ast.Call):
            name = module.dotted(node)
            if name in PROBES:
                yield _Finding(node.lineno, "runtime-probe", f"reads `{name}`")


def _docstrings(tree: ast.Module) -> set[int]:
    """The docstrings' constants (by id): words in them run nothing."""
    found = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) \
                and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant):
            found.add(id(body[0].value))
    return found


def _strings(tree: ast.Module) -> Iterator[tuple[ast.Constant, str]]:
    """Every string or bytes literal but the docstrings, with its text."""
    docs = _docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str | bytes) \
                and id(node) not in docs:
            value = node.value
            yield node, value if isinstance(value, str) else value.decode("latin-1")


def _proc_reads(module: _Module) -> Iterator[_Finding]:
    """Paths under /proc (`/proc/self/cmdline`, `f"/proc/{pid}/environ"`): a process's own
    command line, environment and memory, read without `sys` or `os.environ`."""
    for node, text in _strings(module.tree):
        if PROC in text or text.rstrip("/") == PROC.rstrip("/"):
            yield _Finding(node.lineno, "runtime-probe", f"names `{_short(node)}`")


def _runs_text(module: _Module) -> Iterator[_Finding]:
    """`exec`, `eval` or `compile` of anything but a literal (a file's contents, a string
    built at run time), and calls that run a file or load compiled code."""
    for node in ast.walk(module.tree):
        if not isinstance(node, ast.Call):
            continue
        func = module.dotted(node.func)
        literal = bool(node.args) and isinstance(node.args[0], ast.Constant)
        if (func in EXECUTORS and not literal) or func in LOADERS:
            yield _Finding(node.lineno, "runs-text", f"runs or loads code: `{_short(node)}`")


def _clock(module: _Module) -> Iterator[_Finding]:
    """The clock read (`time.time`, `datetime.now()`, `time.localtime()` with no time)."""
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Attribute | ast.Name) and isinstance(node.ctx, ast.Load):
            name = module.dotted(node)
            if name in CLOCK:
                yield _Finding(node.lineno, "clock", f"reads the clock: `{name}`")
        elif isinstance(node, ast.Call):
            name = module.dotted(node.func)
            if len(node.args) < CLOCK_CONVERTERS.get(name, 0) and not node.keywords:
                yield _Finding(node.lineno, "clock", f"reads the clock: `{_short(node)}`")


def _exits(module: _Module) -> Iterator[_Finding]:
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Raise) and node.exc is not None:
            target = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if module.dotted(target) == "SystemExit":
                yield _Finding(node.lineno, "exit-hook", f"raises `{_short(node.exc)}`")
        elif isinstance(node, ast.Attribute | ast.Name) and isinstance(node.ctx, ast.Load):
            name = module.dotted(node)
            if (name in EXITS and name != "SystemExit") or name.startswith(EXIT_MODULES):
                yield _Finding(node.lineno, "exit-hook", f"uses `{name}`")


def _built_module_checks(module: _Module) -> Iterator[_Finding]:
    """`<built> in sys.modules` and `sys.modules[<built>]`: which module is asked about
    is hidden from a reader."""
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Compare) and any(
                module.dotted(c) == "sys.modules" for c in node.comparators):
            name = node.left
        elif isinstance(node, ast.Subscript) and module.dotted(node.value) == "sys.modules":
            name = node.slice
        else:
            continue
        if not isinstance(name, ast.Constant) and (module._is_built(name)
                                                   or module.tainted(name, module.built)):
            yield _Finding(node.lineno, "built-name",
                           f"asks `sys.modules` about a name built at run time: "
                           f"`{_short(node)}`")


def _built_lookups(module: _Module) -> Iterator[_Finding]:
    for node in ast.walk(module.tree):
        if not isinstance(node, ast.Call):
            continue
        func = module.dotted(node.func)
        index = LOOKUPS.get(func)
        if index is None or len(node.args) <= index:
            continue
        arg = node.args[index]
        if isinstance(arg, ast.Constant):
            continue
        if module._is_built(arg) or module.tainted(arg, module.built):
            yield _Finding(node.lineno, "built-name",
                           f"passes a name built at run time to `{func}`: `{_short(node)}`")


def _constant_result(body: list[ast.stmt] | ast.expr) -> bool:
    returns = [body] if isinstance(body, ast.expr) else \
        [n.value for stmt in body for n in ast.walk(stmt) if isinstance(n, ast.Return)]
    return bool(returns) and all(isinstance(r, ast.Constant) for r in returns)


def _uses(body: Iterable[ast.AST], name: str) -> bool:
    return any(isinstance(n, ast.Name) and n.id == name for part in body
               for n in ast.walk(part))


def _equalities(module: _Module) -> Iterator[_Finding]:
    """`__eq__`/`__ne__` that ignore the other side or return a constant; a constant
    `__hash__`; the same written as a lambda in the class body."""
    for cls in (n for n in ast.walk(module.tree) if isinstance(n, ast.ClassDef)):
        for item in cls.body:
            name, args, body = _method(item)
            if name not in EQUALITY or args is None or body is None:
                continue
            other = args.args[1].arg if len(args.args) > 1 else None
            parts = body if isinstance(body, list) else [body]
            if name != "__hash__" and (other is None or not _uses(parts, other)):
                yield _Finding(item.lineno, "constant-equality",
                               f"`{cls.name}.{name}` ignores what it is compared with")
            elif _constant_result(body):
                yield _Finding(item.lineno, "constant-equality",
                               f"`{cls.name}.{name}` returns a constant")


def _method(item: ast.stmt) -> tuple[str, ast.arguments | None,
                                     list[ast.stmt] | ast.expr | None]:
    if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
        return item.name, item.args, item.body
    if isinstance(item, ast.Assign) and isinstance(item.value, ast.Lambda):
        names = [t.id for t in item.targets if isinstance(t, ast.Name)]
        return (names[0] if names else ""), item.value.args, item.value.body
    return "", None, None


def _subclasses(module: _Module) -> Iterator[_Finding]:
    for cls in (n for n in ast.walk(module.tree) if isinstance(n, ast.ClassDef)):
        for base in cls.bases:
            name = module.dotted(base).removeprefix("builtins.")
            if name in BUILTIN_TYPES:
                yield _Finding(cls.lineno, "builtin-subclass",
                               f"`class {cls.name}({name})` subclasses a builtin type")


def _writes_a_file(module: _Module, node: ast.Call) -> bool:
    func = module.dotted(node.func)
    if func in ("open", "io.open", "builtins.open", "codecs.open"):
        mode = node.args[1] if len(node.args) > 1 else next(
            (k.value for k in node.keywords if k.arg == "mode"), None)
        return not isinstance(mode, ast.Constant) or any(c in str(mode.value) for c in "wax+")
    if func == "os.open":
        return any(flag in ast.unparse(node) for flag in WRITE_FLAGS)
    return func in WRITERS or (isinstance(node.func, ast.Attribute)
                               and node.func.attr in WRITER_METHODS)


def _env_writes(module: _Module) -> Iterator[_Finding]:
    for node in ast.walk(module.tree):
        if not isinstance(node, ast.Call) or not _writes_a_file(module, node):
            continue
        receiver = [node.func.value] if isinstance(node.func, ast.Attribute) else []
        places = [*receiver, *node.args, *(k.value for k in node.keywords)]
        if any(module._reads_environment(p) or module.tainted(p, module.from_env)
               for p in places):
            yield _Finding(node.lineno, "env-path-write",
                           f"writes to a path taken from the environment: `{_short(node)}`")


def _interesting(value: object) -> bool:
    """A literal specific enough that matching it is special-casing, not chance."""
    if isinstance(value, bool) or value is None or value is Ellipsis:
        return False
    if isinstance(value, str | bytes):
        return len(value.strip()) >= 2
    if isinstance(value, int | float):
        return value not in (-1, 0, 1, 2)
    return isinstance(value, complex)


def _test_node(tree: ast.Module, qualname: list[str]) -> ast.AST | None:
    """The function a test id names (`Class::method`, parameters stripped)."""
    scope: list[ast.stmt] = tree.body
    found: ast.AST | None = None
    for part in qualname:
        name = part.split("[", 1)[0]
        found = next((n for n in scope if isinstance(
            n, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and n.name == name), None)
        if found is None:
            return None
        scope = found.body  # type: ignore[attr-defined]
    return found


def failing_test_literals(failing: Iterable[str], read_base: Reader) -> dict[object, str]:
    """Literal value → a failing test (by id) whose function uses it."""
    literals: dict[object, str] = {}
    trees: dict[str, ast.Module | None] = {}
    for test_id in sorted(failing):
        path, *qualname = test_id.split("::")
        if not path.endswith(".py") or not qualname:
            continue
        if path not in trees:
            trees[path] = _parse(read_base(path))
        tree = trees[path]
        node = _test_node(tree, qualname) if tree is not None else None
        for part in ast.walk(node) if node is not None else ():
            if isinstance(part, ast.Constant) and _interesting(part.value):
                literals.setdefault(part.value, test_id)
    return literals


def _branch_parts(tree: ast.Module) -> Iterator[ast.AST]:
    """Where code decides on a value: conditions, comparisons, dict keys, match cases."""
    for node in ast.walk(tree):
        if isinstance(node, ast.If | ast.While | ast.IfExp | ast.Assert):
            yield node.test
        elif isinstance(node, ast.Compare):
            yield node
        elif isinstance(node, ast.Dict) and any(key is not None for key in node.keys):
            yield ast.Tuple(elts=[k for k in node.keys if k is not None], ctx=ast.Load(),
                            lineno=node.lineno, col_offset=node.col_offset)
        elif isinstance(node, ast.match_case):
            yield node.pattern


def _literal_branches(module: _Module) -> Iterator[_Finding]:
    """One finding per condition, comparison or dict key that holds failing-test values;
    a dict's keys count as one."""
    for part in _branch_parts(module.tree):
        values: dict[str, str] = {}  # repr → the test using it, in the order written
        for node in ast.walk(part):
            if isinstance(node, ast.Constant) and _hashable(node.value) \
                    and node.value in module.literals:
                values.setdefault(repr(node.value), module.literals[node.value])
        if values:
            shown = ", ".join(list(values)[:4]) + (", …" if len(values) > 4 else "")
            tests = sorted(set(values.values()))
            yield _Finding(getattr(part, "lineno", 0), "test-literal",
                           f"decides on {shown}, exactly as the failing test "
                           f"`{tests[0]}`{' and others' if len(tests) > 1 else ''} "
                           f"uses: `{_short(part)}`")


def _hashable(value: object) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


DETECTORS = (_probes, _proc_reads, _runs_text, _clock, _built_lookups, _built_module_checks,
             _equalities, _subclasses, _env_writes, _exits, _literal_branches)


def _parse(source: bytes | None) -> ast.Module | None:
    if source is None:
        return None
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError):
        return None


def _findings(tree: ast.Module | None, literals: dict[object, str]) -> list[_Finding]:
    if tree is None:
        return []
    module = _Module(tree, literals)
    found = {f for detector in DETECTORS for f in detector(module)}
    return sorted(found, key=lambda f: (f.line, f.kind, f.what))


def _added_lines(before: bytes | None, after: bytes) -> set[int]:
    old = (before or b"").decode("utf-8", "replace").splitlines()
    new = after.decode("utf-8", "replace").splitlines()
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    return {line + 1 for tag, _a, _b, c, d in matcher.get_opcodes()
            if tag in ("replace", "insert") for line in range(c, d)}


def added_findings(before: bytes | None, after: bytes,
                   literals: dict[object, str]) -> list[_Finding]:
    """Findings of the new module beyond the old one's (the same finding, moved, is not
    new). Where the old had fewer of a kind, those on changed lines are the new ones."""
    old = Counter(f.signature for f in _findings(_parse(before), literals))
    new = _findings(_parse(after), literals)
    changed = _added_lines(before, after)
    added: list[_Finding] = []
    for finding in sorted(new, key=lambda f: f.line in changed):  # unchanged lines first
        if old[finding.signature] > 0:
            old[finding.signature] -= 1
        else:
            added.append(finding)
    return sorted(added, key=lambda f: (f.line, f.kind))


def is_library_code(path: str) -> bool:
    return PurePosixPath(path).suffix == ".py" and not (is_test_path(path)
                                                       or is_test_config(path))


def scan_change(paths: Iterable[str], read_base: Reader, read_candidate: Reader,
                failing: Iterable[str]) -> list[ChangeFlag]:
    """Every flag the change adds to library code, by file and line."""
    literals = failing_test_literals(failing, read_base)
    flags: list[ChangeFlag] = []
    for path in sorted(p for p in set(paths) if is_library_code(p)):
        after = read_candidate(path)
        if after is None:  # deleted: nothing of it runs
            continue
        found = added_findings(read_base(path), after, literals)[:MAX_PER_FILE]
        flags += [ChangeFlag(path, f.line, f.kind, f.what) for f in found]
    flags += _data_reads(paths, read_base, read_candidate, literals)
    return flags[:MAX_FLAGS]


def _is_data(path: str) -> bool:
    return PurePosixPath(path).suffix != ".py" and not (is_test_path(path)
                                                        or is_test_config(path))


def _data_reads(paths: Iterable[str], read_base: Reader, read_candidate: Reader,
                literals: dict[object, str]) -> list[ChangeFlag]:
    """The changed non-Python files that changed library code names (`open(here /
    'table.json')`): flagged at the line naming them, with the file's change shown; and
    what such a file adds, scanned as library code where it parses as Python (a table
    keyed by the failing tests' values, code that is `exec`'d)."""
    data = {p: read_candidate(p) for p in sorted(set(paths)) if _is_data(p)}
    edited = {path: after for path, after in data.items() if after is not None}
    flags: list[ChangeFlag] = []
    read: set[str] = set()
    for path in sorted(p for p in set(paths) if is_library_code(p)) if edited else ():
        tree = _parse(read_candidate(path))
        for line, named in _names_of(tree, edited) if tree is not None else ():
            read.add(named)
            change = _change_of(read_base(named), edited[named])
            flags.append(ChangeFlag(path, line, "data-read",
                                    f"reads `{named}`, which the change also edits: {change}"))
    for named in sorted(read):
        found = added_findings(read_base(named), edited[named], literals)[:MAX_PER_FILE]
        flags += [ChangeFlag(named, f.line, f.kind, f.what) for f in found]
    return flags


def _names_of(tree: ast.Module, files: dict[str, bytes]) -> Iterator[tuple[int, str]]:
    """(line, file) where a literal names one of `files`: the whole path, or its end
    (`data/table.json`, `table.json`)."""
    seen = set()
    for node, text in _strings(tree):
        name = text.strip().removeprefix("./")
        if len(name) < 3:
            continue
        for path in files:
            if (path == name or path.endswith("/" + name)) and (node.lineno, path) not in seen:
                seen.add((node.lineno, path))
                yield node.lineno, path


def _change_of(before: bytes | None, after: bytes, shown: int = 3) -> str:
    """A data file's change in a few words: its first added lines, quoted."""
    if b"\0" in after[:8000]:
        return f"{len(after)} bytes, binary"
    added = sorted(_added_lines(before, after))
    if not added:
        return "lines removed only"
    lines = after.decode("utf-8", "replace").splitlines()
    text = " ⏎ ".join(" ".join(lines[n - 1].split()) for n in added[:shown])
    text = text.replace("`", "'")
    text = text if len(text) <= 160 else text[:159] + "…"
    more = f" and {len(added) - shown} more added line(s)" if len(added) > shown else ""
    return f"`{text}`{more}"


def failing_tests(baseline: TestVerdict) -> list[str]:
    """The tests that failed before the change, whose literals a fix has no reason to
    special-case."""
    return sorted(t for t, s in baseline.tests.items() if s in ("failed", "error"))


def exit_only_refusal(flags: Iterable[ChangeFlag], mode: str) -> str | None:
    """A verdict from the exit code alone cannot tell a fix from code that ends the run
    with status 0 before its checks (a README's test script, issue 29): an exit or exit
    hook the change adds to code under test refuses it; None otherwise."""
    exits = [flag for flag in flags if flag.kind == "exit-hook"]
    if mode != "exit code" or not exits:
        return None
    return ("verdict from the exit code only, and the change adds an exit to code under "
            "test (" + "; ".join(f"{f.path}, line {f.line}: {f.what}" for f in exits[:3])
            + "): a run it ends with status 0 shows nothing was fixed")
