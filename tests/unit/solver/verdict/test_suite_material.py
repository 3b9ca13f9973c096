"""Test material from the baseline's run (test_material.py) and doctest edits
(doctest_edits.py), on the shapes of real projects; no sandbox."""

from __future__ import annotations

from solver.verdict.doctest_edits import compare
from solver.verdict.repo_tests import TestVerdict
from solver.verdict.suite_material import material_from
from solver.verdict.suite_paths import plan_verdict_tree

PYCODESTYLE = ["pycodestyle.py", "setup.py", "setup.cfg", "README.rst",
               "testsuite/__init__.py", "testsuite/E26.py", "testsuite/support.py",
               "testsuite/test_all.py"]
SLUGIFY = ["README.md", "pyproject.toml", "slugify/__init__.py", "slugify/slugify.py",
           "slugify/data/table.json", "tests/__init__.py", "tests/test_release.py",
           "docs/fixtures/case.txt", "lib/testing/__init__.py", "lib/__init__.py",
           "lib/testing/asserts.py", "checks/test_x.py", "checks/helper.py",
           "app/__init__.py", "app/core.py", "app/test_core.py"]


def baseline(guard: dict[str, list[str]], tests: dict[str, str] | None = None
             ) -> TestVerdict:
    return TestVerdict(command="pytest", exit_code=1, timed_out=False, seconds=1,
                       output="", tests=tests or {}, report="junit", guard=guard)


def test_the_folder_of_collected_modules_is_restored_whole() -> None:
    material = material_from(baseline({"test_modules": ["testsuite/test_all.py"],
                                       "opened": ["testsuite/E26.py", "pycodestyle.py",
                                                  "setup.py", "README.rst"]}), PYCODESTYLE)
    assert material.folders == {"testsuite"}
    assert material.holds("testsuite/E26.py") and material.holds("testsuite/support.py")
    assert material.holds("README.rst")  # opened by a test, outside any package
    assert not material.holds("pycodestyle.py") and not material.holds("setup.py")
    plan = plan_verdict_tree(["testsuite/support.py", "pycodestyle.py"],
                             {p: b"x" for p in PYCODESTYLE}.get, {}.get, material)
    assert plan.restore == ["testsuite/support.py"]
    assert plan.model_tests == ["testsuite/support.py"]


def test_library_folders_stay_the_change_and_package_data_is_flagged() -> None:
    material = material_from(baseline({
        "test_modules": ["tests/test_release.py", "checks/test_x.py", "app/test_core.py"],
        "opened": ["README.md", "slugify/data/table.json", "slugify/slugify.py",
                   "docs/fixtures/case.txt", "pyproject.toml"]}), SLUGIFY)
    assert material.folders == {"tests", "checks", "docs/fixtures"}
    assert not material.holds("app/core.py")  # a package beside its test: library code
    assert not material.holds("lib/testing/asserts.py")  # a library's testing subpackage
    assert material.files == {"README.md", "docs/fixtures/case.txt"}
    assert material.package_data == {"slugify/data/table.json"}
    plan = plan_verdict_tree(["slugify/data/table.json"], {p: b"{}" for p in SLUGIFY}.get,
                             {"slugify/data/table.json": b"[]"}.get, material)
    assert plan.restore == [] and any("package data" in f for f in plan.flags)


def test_new_top_level_modules_may_not_shadow() -> None:
    material = material_from(baseline({"top_level": ["yaml", "slugify"]}), SLUGIFY)
    base = {p: b"" for p in SLUGIFY}.get
    for path, name in (("xml/__init__.py", "xml"), ("json.py", "json"),
                       ("yaml/__init__.py", "yaml")):
        plan = plan_verdict_tree([path], base, {path: b"x = 1\n"}.get, material)
        assert any(f"shadow `{name}`" in r for r in plan.refusals), plan.refusals
    # The project's own top-level names and modules below the top are its own business.
    for path in ("slugify/json.py", "mypkg/__init__.py"):
        assert plan_verdict_tree([path], base, {path: b"x = 1\n"}.get, material).refusals == []


SOURCE = b'''"""Module.

>>> 1 + 1
2
"""


def stem(word):
    """Cut.

    >>> stem("iris")
    'iri'
    >>> stem("ab")
    'a'
    """
    return word[:-1]
'''


def test_doctest_edits_are_found_and_put_back() -> None:
    names = ["pkg.mod", "pkg.mod.stem"]
    edited = SOURCE.replace(b"    'iri'", b"    'ir'")
    edit = compare("pkg/mod.py", SOURCE, edited, names)
    assert edit.edited == ["stem"] and edit.restored == SOURCE and not edit.problem
    skip = SOURCE.replace(b'stem("ab")', b'stem("ab")  # doctest: +SKIP')
    assert compare("pkg/mod.py", SOURCE, skip, names).edited == ["stem"]
    module = SOURCE.replace(b">>> 1 + 1\n2\n", b"")
    assert compare("pkg/mod.py", SOURCE, module, names).edited == ["the module"]
    added = SOURCE.replace(b"    'a'\n", b"    'a'\n    >>> stem('xy')\n    'x'\n")
    kept = compare("pkg/mod.py", SOURCE, added, names)
    assert kept.edited == [] and kept.added == 1 and kept.restored is None
    # A docstring the baseline did not collect is not a test.
    assert compare("pkg/mod.py", SOURCE, edited, ["pkg.mod"]).edited == []
