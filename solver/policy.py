"""What the bot may push and as whom: paths it never pushes (workflows, the local actions
they run, submodule and LFS plumbing, the repository's `protected_paths`), its branch
names and its commit identity; what a fix contains (source text: never compiled or binary
code, nor a `.gitignore` that un-ignores it); and what a change edits that setup reads,
which the reviewer is told. Plain policy, shared by the solver's decision, its verdict
and the GitHub side's pushes."""

from __future__ import annotations

import fnmatch
import posixpath
import re
from collections import Counter
from collections.abc import Mapping
from pathlib import PurePosixPath

import pathspec

from solver.hostgit import HostRepo, Identity

# Workflows, and the local actions they run (`uses: ./.github/actions/x` runs with secrets).
ALWAYS_FORBIDDEN = (".github/workflows/", ".github/actions/")
# Their parents, too: replaced by a link (`.github -> hub`, `.github/workflows -> ../ci`),
# `hub/workflows/x.yml` would be a workflow without any path under `.github/workflows/`.
FORBIDDEN_PARENTS = (".github", ".github/workflows", ".github/actions")
# Plumbing every clone reads: submodule URLs (`git clone --recursive` fetches them) and
# Git LFS endpoints. The bot never makes a submodule, so no fix needs these.
PLUMBING = (".gitmodules", ".lfsconfig")

def branch_for(issue_number: int) -> str:
    return f"frognano/issue-{issue_number}"


def forbidden_paths(paths: list[str], protected: tuple[str, ...],
                    links: Mapping[str, str] | None = None) -> list[str]:
    """Paths the bot must never push: workflows and local actions (in any case, or
    through a link standing in for their directories; `links` maps changed symlinks to
    their targets, `Snapshot.links`), `.gitmodules` and `.lfsconfig`, and the
    repository's `protected_paths`, matched as .gitignore lines are (`**/settings.py`
    also matches `settings.py`, `docs` and `/docs/**` protect the folder, a pattern
    without a slash matches at any depth)."""
    spec = pathspec.GitIgnoreSpec.from_lines(protected)
    links = links or {}
    return [path for path in paths
            if _always_forbidden(path)
            or (path in links and _always_forbidden(_link_target(path, links[path])))
            or spec.match_file(path)]


def _always_forbidden(path: str) -> bool:
    folded = path.casefold()  # a case-insensitive clone sees .GitHub/Workflows as theirs
    return (folded.startswith(ALWAYS_FORBIDDEN) or folded in FORBIDDEN_PARENTS
            or folded in PLUMBING)


def _link_target(path: str, target: str) -> str:
    """Where a link in the tree points, as a tree path ("" when it leaves the tree)."""
    resolved = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
    return "" if target.startswith("/") or resolved.startswith("..") else resolved


def bot_identity(login: str) -> Identity:
    return (login, f"{login}@users.noreply.github.com")


# Files an inferred or configured setup reads: what a change to them would install.
_SETUP_INPUT_NAMES = frozenset({
    "setup.py", "setup.cfg", "pyproject.toml", "tox.ini", "noxfile.py", "MANIFEST.in",
    "Pipfile", "Pipfile.lock", "poetry.lock", "pdm.lock", "uv.lock", "frognano.yml"})
_SETUP_INPUT = re.compile(r"(^|/)(requirements[^/]*|constraints[^/]*)\.(txt|in)$"
                          r"|(^|/)requirements/[^/]+\.(txt|in)$|\.lock$")


def setup_inputs(paths: list[str]) -> list[str]:
    """The changed paths that setup reads: the run installed none of them (setup ran on
    the files as they were), so the reviewer is told."""
    return [path for path in paths if PurePosixPath(path).name in _SETUP_INPUT_NAMES
            or _SETUP_INPUT.search(path)]


def not_installed_note(host: HostRepo, changed: list[str]) -> str:
    """`setup_inputs_note` over the change and what the bot's earlier commits on the branch
    changed (put back for setup by `distrust_setup`): a review's PR still holds those."""
    earlier = [] if host.setup_base == host.base else \
        host.changed_paths(host.base, against=host.setup_base)
    return setup_inputs_note(sorted({*changed, *earlier}))


def setup_inputs_note(paths: list[str]) -> str:
    """The sentence for the PR and the status comment; "" when the change touches none."""
    touched = setup_inputs(paths)
    if not touched:
        return ""
    shown = ", ".join(f"`{path}`" for path in touched[:10])
    more = f" and {len(touched) - 10} more" if len(touched) > 10 else ""
    return (f"the change edits what setup reads ({shown}{more}): not installed: the "
            "verdict ran with the setup of the original files")


# -- What a fix contains ---------------------------------------------------------------
# A bug fix in a Python project is source text. Compiled or binary code in the change is
# refused whatever `.gitignore` says: an unchecked-hash `.pyc` in `__pycache__/` loads
# instead of the untouched `.py` beside it, and an extension module built in the sandbox
# shadows the module of the same name, so the reviewer's diff is one binary file. The
# tree judged is the one staged (HostRepo.snapshot), so the check never relies on excludes,
# which a work tree's `.gitignore` outranks.
SOURCE_TEXT = "a fix is source text"  # how each such refusal starts (the model's rule)
# The rule as the model reads it (solver/agent/prompts.py): the rule, then the reasons.
SOURCE_TEXT_RULE = (
    "A fix is source text: compiled or binary files (`__pycache__/`, `*.pyc`, native "
    "extensions such as `*.so`, archives and wheels) are never part of it, whatever "
    "`.gitignore` says, and `.gitignore` must not un-ignore them. Delete these files, take "
    "back such `.gitignore` lines, and fix the source itself:")
COMPILED_NAME = re.compile(
    r"(^|/)__pycache__/"
    r"|\.(py[cdo]|pyd|so|dylib|dll|exe|o|obj|a|lib|whl|egg|zip|pyz|pex|jar|class|wasm|node"
    r"|7z|rar|tar|tgz|tbz2?|txz|tzst)$"
    r"|\.so(\.\d+)+$|\.tar\.\w+$", re.IGNORECASE)
# Leading bytes of code a loader or an importer runs, or of archives that carry it.
_MAGIC = ((b"\x7fELF", "an ELF binary"), (b"\xfe\xed\xfa\xce", "a Mach-O binary"),
          (b"\xfe\xed\xfa\xcf", "a Mach-O binary"), (b"\xce\xfa\xed\xfe", "a Mach-O binary"),
          (b"\xcf\xfa\xed\xfe", "a Mach-O binary"),
          (b"\xca\xfe\xba\xbe", "a Mach-O universal binary or Java class"),
          (b"PK\x03\x04", "a zip archive"), (b"PK\x05\x06", "a zip archive"),
          (b"PK\x07\x08", "a zip archive"), (b"7z\xbc\xaf\x27\x1c", "a 7z archive"),
          (b"Rar!\x1a\x07", "a rar archive"), (b"\0asm", "WebAssembly"))
HEAD_BYTES = 4096  # what the magic is read from: a tar's sits at 257, a PE's offset below 4k
# Names a `.gitignore` negation is tried on: compiled Python, native code and archives.
_COMPILED_SAMPLES = ("__pycache__", "m.pyc", "m.pyo", "m.cpython-311.pyc", "m.so",
                     "m.cpython-311-x86_64-linux-gnu.so", "m.abi3.so", "m.pyd", "m.dylib",
                     "m.dll", "m.exe", "m.o", "m.a", "m.whl", "m.egg", "m.zip", "m.tar",
                     "m.tar.gz", "m.pyz", "m.jar")
MAX_NAMED = 10


def binary_code(head: bytes) -> str | None:
    """What compiled code or archive a file's first bytes (`HEAD_BYTES`) say it is, if
    any: an executable or library (ELF, Mach-O, PE), a compiled Python module, an
    archive (zip, which Python imports from; tar, 7z, rar) or WebAssembly."""
    for magic, what in _MAGIC:
        if head.startswith(magic):
            return what
    if head[:2] == b"MZ" and b"\0" in head[2:64]:
        return "a Windows executable"
    # A .pyc: two bytes of magic number, b"\r\n", then flags and a stamp holding NULs.
    if head[2:4] == b"\r\n" and len(head) >= 16 and b"\0" in head[4:16]:
        return "compiled Python"
    if head[257:262] == b"ustar":
        return "a tar archive"
    return None


def compiled_code(host: HostRepo, tree: str) -> list[str]:
    """The files `tree` adds or edits against base that are compiled or binary code: by
    name (`__pycache__/`, `.pyc`, `.so`, wheels, archives, …; a link so named too, it
    would load what it points at), or by content where git reads the file as binary and
    its first bytes are code (`binary_code`). Each as `path` or `path (what it is)`."""
    binary = {path for path, added, _removed in host.numstat(tree) if added is None}
    found = []
    for path, mode, sha, _before in host.tree_changes(host.base, tree):
        if sha is None or mode == "160000":  # deleted, or a gitlink: nothing to load
            continue
        what = None
        if path in binary and mode != "120000":
            what = binary_code(host.object_head(sha, HEAD_BYTES))
        if what or COMPILED_NAME.search(path):
            found.append(f"{path} ({what})" if what else path)
    return found


def unignores_code(before: bytes | None, after: bytes | None) -> list[str]:
    """The lines a `.gitignore` gains that un-ignore compiled or binary files
    (`!__pycache__/`, `!*.so`, `!*`): a negation whose last component matches one."""
    if after is None:
        return []
    old = Counter(_ignore_lines(before))
    added = []
    for line in _ignore_lines(after):
        if old[line] > 0:
            old[line] -= 1
        elif line.startswith("!") and _names_compiled(line[1:]):
            added.append(line)
    return added


def _ignore_lines(data: bytes | None) -> list[str]:
    # git drops trailing spaces (unless escaped; such a name is no compiled file anyway)
    return [line.rstrip() for line in (data or b"").decode("utf-8", "replace").splitlines()]


def _names_compiled(pattern: str) -> bool:
    parts = [part for part in pattern.split("/") if part not in ("", "**")]
    last = parts[-1].casefold() if parts else "*"
    return any(fnmatch.fnmatchcase(name, last) for name in _COMPILED_SAMPLES)


def source_text_refusals(host: HostRepo, tree: str, paths: list[str]) -> list[str]:
    """Why the change in `tree` (`paths`, against base) is no fix, in plain words that
    name the files: it adds or edits compiled or binary code, or a `.gitignore` of it
    un-ignores such files. Each starts with `SOURCE_TEXT`."""
    reasons = []
    compiled = compiled_code(host, tree)
    if compiled:
        reasons.append(f"{SOURCE_TEXT}: the change adds or edits compiled or binary code, "
                       "which is never part of a fix, whatever .gitignore says: "
                       + _named(compiled))
    for path in paths:
        if PurePosixPath(path).name == ".gitignore":
            lines = unignores_code(host.read(host.base, path), host.read(tree, path))
            if lines:
                reasons.append(f"{SOURCE_TEXT}: the change makes {path} un-ignore compiled "
                               "or binary files (" + _named([f"`{x}`" for x in lines]) + ")")
    return reasons


def _named(items: list[str]) -> str:
    more = f" and {len(items) - MAX_NAMED} more" if len(items) > MAX_NAMED else ""
    return ", ".join(items[:MAX_NAMED]) + more
