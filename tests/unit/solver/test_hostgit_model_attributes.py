"""A `.gitattributes` the model writes converts nothing on the host (issue 30 §6).

The host's git dir carries `info/attributes` that unset text, eol, ident, filter and the
rest for every path: it outranks every `.gitattributes` in the work tree. Without it, a
model that writes `*.py text eol=lf ident` gets what is committed to differ from what was
tested: CRLF lines staged as LF, and `$Id: … $` collapsed to `$Id$` (and expanded again to
another text in the verdict's checkout), so code can behave one way under the tests and
another in the PR. Real git, the model's own files.
"""

from __future__ import annotations

from pathlib import Path

from solver.hostgit import HostRepo
from tests.conftest import make_repo

# What the model writes: an attributes file, and code whose behaviour hangs on the bytes
# git would convert (a `$Id` keyword read at run time, CRLF line ends in a string).
ATTRIBUTES = b"*.py text eol=lf ident\n"
CODE = (b'MARK = "$Id: tested $"\r\n'
        b'SAFE = MARK != "$Id$"  # True as tested; False once ident collapsed it\r\n'
        b'TEXT = """one\r\ntwo"""\r\n')


def test_what_is_committed_is_byte_for_byte_what_the_model_left(tmp_path: Path) -> None:
    source = make_repo(tmp_path / "src", {"calc.py": "MARK = None\n"})
    host = HostRepo.create(source, "main", tmp_path / "run" / "git", tmp_path / "run" / "ws")
    (host.work_tree / ".gitattributes").write_bytes(ATTRIBUTES)
    (host.work_tree / "calc.py").write_bytes(CODE)
    snapshot = host.snapshot()
    checkout = tmp_path / "verdict-tree"
    host.materialize(snapshot.tree, checkout)
    assert host.read(snapshot.tree, "calc.py") == CODE  # what the PR's commit holds
    assert (checkout / "calc.py").read_bytes() == CODE  # what the verdict's tests read
    assert host.read(snapshot.tree, ".gitattributes") == ATTRIBUTES
