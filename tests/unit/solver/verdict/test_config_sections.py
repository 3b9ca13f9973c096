"""The pytest section of a pyproject.toml or setup.cfg swapped by its text
(config_sections.py): on the shapes of real projects' files, and on the shapes an
attacker would write to make the swap leave the change's pytest settings in place."""

from __future__ import annotations

import tomllib

import pytest

from solver.verdict.config_sections import pytest_section, swap_section

# python-slugify 9.2.0's pyproject.toml, cut to its tables (tests/data/).
SLUGIFY = b"""[build-system]
requires = ["setuptools"]

[tool.coverage.run]
branch = true

# mypy
# ----

[tool.mypy]
packages = "slugify"
strict = true

# pytest
# ------

[tool.pytest.ini_options]
testpaths = ["tests"]
addopts = "--color=yes"
filterwarnings = [
    "error",
]
"""
# toolz 1.0.0's setup.cfg with a [tool:pytest] section, as a project with strict markers.
TOOLZ = b"""[versioneer]
vcs = git
style = pep440

[coverage:run]
source = toolz
omit =
\ttoolz/tests/test*

[tool:pytest]
addopts = --strict-markers

[egg_info]
tag_build =
"""


def test_toml_swap_keeps_the_rest_and_takes_the_section() -> None:
    change = SLUGIFY.replace(b'addopts = "--color=yes"',
                             b'addopts = "--color=yes --deselect tests/test_legacy.py"\n'
                             b'markers = ["regression: a regression test"]'
                             ).replace(b"strict = true", b"strict = false")
    verdict = swap_section("pyproject.toml", change, SLUGIFY)
    assert verdict is not None
    parsed = tomllib.loads(verdict.decode())
    assert parsed["tool"]["pytest"] == tomllib.loads(SLUGIFY.decode())["tool"]["pytest"]
    assert parsed["tool"]["mypy"]["strict"] is False, "the rest is the change's"
    assert b"# mypy\n# ----" in verdict, "comments and layout stay"
    on_base = swap_section("pyproject.toml", SLUGIFY, change)
    assert on_base is not None and b"--deselect" in on_base and b"strict = true" in on_base


def test_toml_section_the_base_lacks_is_taken_out() -> None:
    base = SLUGIFY.split(b"# pytest")[0]
    change = base + b'[tool.pytest.ini_options]\naddopts = ["-p", "pkg._flip"]\n' \
        b"[tool.pytest.ini_options.extra]\nx = 1\n[tool.black]\nline-length = 99\n"
    verdict = swap_section("pyproject.toml", change, base)
    assert verdict is not None and pytest_section("pyproject.toml", verdict.decode()) is None
    assert b"[tool.black]" in verdict and b"_flip" not in verdict


@pytest.mark.parametrize("change", [
    # pytest's settings as dotted keys of another table: no header to cut at
    b'[tool]\npytest.ini_options.addopts = "-p pkg._flip"\n',
    b'[tool]\npytest = {ini_options = {addopts = "-p pkg._flip"}}\n',
    # a header inside a multi-line string: cut there, the file no longer parses the same
    b'[project]\ndescription = """\n[tool.pytest.ini_options]\n"""\n'
    b'[tool.pytest.ini_options]\naddopts = "-x"\n',
    b"not = = toml\n[tool.pytest.ini_options]\naddopts = '-x'\n",
], ids=["dotted-keys", "inline-table", "header-in-string", "unreadable"])
def test_toml_that_cannot_be_cut_is_refused_a_swap(change: bytes) -> None:
    assert swap_section("pyproject.toml", change, SLUGIFY) is None


def test_ini_swap_keeps_the_rest_and_takes_the_section() -> None:
    change = TOOLZ.replace(b"addopts = --strict-markers",
                           b"addopts = --strict-markers -p toolz._flip\nmarkers =\n"
                           b"    regression: a regression test").replace(b"vcs = git",
                                                                       b"vcs = hg")
    verdict = swap_section("setup.cfg", change, TOOLZ)
    assert verdict is not None
    assert pytest_section("setup.cfg", verdict.decode()) == {"addopts": "--strict-markers"}
    assert b"vcs = hg" in verdict and b"_flip" not in verdict
    on_base = swap_section("setup.cfg", TOOLZ, change)
    assert on_base is not None and b"vcs = git" in on_base and b"regression:" in on_base


@pytest.mark.parametrize("header", [
    "[tool:pytest]", "[tool:pytest] ; pytest's", "[tool:pytest]  # x", "[ tool:pytest ]"])
def test_ini_headers_are_found_as_pytest_reads_them(header: str) -> None:
    """Each spelling pytest's iniconfig reads as `[tool:pytest]` is cut out of the
    change's file and the base's section comes back; one that only a reader stripping
    the name would read so (`[ tool:pytest ]`) is cut out too, and as configparser then
    sees another file, the swap is refused (the caller takes the base's whole file)."""
    change = TOOLZ.replace(b"[tool:pytest]\naddopts = --strict-markers\n", b"") \
        + f"{header}\naddopts = --deselect toolz/tests/test_itertoolz.py\n".encode()
    verdict = swap_section("setup.cfg", change, TOOLZ)
    if header == "[ tool:pytest ]":
        assert verdict is None
        return
    assert verdict is not None and b"--deselect" not in verdict
    assert verdict.endswith(b"[tool:pytest]\naddopts = --strict-markers\n\n")


def test_ini_continuation_that_looks_like_a_header_stays_a_value() -> None:
    """iniconfig reads an indented `[tool:pytest]` as a line of the value above it: it is
    not pytest's section, and the swap leaves the value whole."""
    change = TOOLZ.replace(b"style = pep440", b"style = pep440\n  [tool:pytest]")
    verdict = swap_section("setup.cfg", change, TOOLZ)
    assert verdict == change


def test_ini_default_section_is_a_section_like_any_other() -> None:
    """pytest's reader has no [DEFAULT]: a change to it is no change of pytest's section."""
    change = b"[DEFAULT]\naddopts = -p x\n" + TOOLZ
    assert pytest_section("setup.cfg", change.decode()) == {"addopts": "--strict-markers"}


def test_duplicate_or_unreadable_ini_is_refused_a_swap() -> None:
    twice = TOOLZ + b"\n[tool:pytest]\naddopts = -p toolz._flip\n"
    assert swap_section("setup.cfg", twice, TOOLZ) is None
    assert swap_section("setup.cfg", b"\xff\xfe not utf-8", TOOLZ) is None


def test_a_deleted_or_new_file() -> None:
    assert swap_section("pyproject.toml", None, SLUGIFY) is not None
    assert pytest_section("pyproject.toml",
                          swap_section("pyproject.toml", None, SLUGIFY).decode()  # type: ignore[union-attr]
                          ) == tomllib.loads(SLUGIFY.decode())["tool"]["pytest"]
    assert swap_section("setup.cfg", TOOLZ, None) == TOOLZ.replace(
        b"[tool:pytest]\naddopts = --strict-markers\n\n", b"")
