"""Scenario 13: real projects with no `.github/frognano.yml`, through `frognano solve`.

Each vendored project (tests/data/, one planted bug) becomes a git repository without a
config file and goes through the real CLI, real bubblewrap, real git and real pytest, with
a scripted honest fix. Nothing tells the run how to set the project up: the setup is
inferred (a venv, the project installed with its test extras) and runs in the sandbox's
network phase. This machine has no internet, so FROGNANO_PIP_* point that phase at the
machine's own package index, as an operator with a private index would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from solver.agent.transcript import read_transcript
from solver.models.scripted import final_answer, think_and_call
from solver.verdict.lint_items import is_lint_item
from tests.conftest import git, unpack
from tests.reliability.conftest import Recorder
from tests.reliability.scorecard import REAL_PROJECT_KEY
from tests.support.pip_config import pip_config
from tests.support.sandbox_support import HAVE_BWRAP, reachable_dir

pytestmark = [pytest.mark.reliability,
              pytest.mark.skipif(not HAVE_BWRAP, reason="bubblewrap is not installed")]
DATA = Path(__file__).resolve().parents[1] / "data"
ISSUE = "Wrong result\n\nThe function returns the wrong value; see the failing tests."


@dataclass(frozen=True)
class Project:
    name: str
    tarball: str
    failing: tuple[str, ...]  # node ids failing at baseline, by the planted bug
    fix: tuple[str, str, str]  # (file, buggy text, fixed text)
    needs: tuple[str, ...] = ()  # what the inferred setup must fetch from the index
    files: dict[str, str] | None = None  # written here instead of a tarball
    command: str = "python3 -m pytest"  # how the detected test command starts
    shape: str = ""  # what makes the project's layout its own, for the scorecard's table
    # Why the run is not accepted yet (an open part of issue 20): a strict xfail, so the
    # case goes red the day it passes and the mark must go.
    known_gap: str = ""
    # Lint plugins its test extras list that the inferred setup leaves out (issue 29 §1):
    # named in the setup note, never installed.
    left_out: tuple[str, ...] = ()
    # Tests of compiled code (an extension module setup builds): they must run in the
    # verdict, and pass, never be skipped for want of the extension.
    compiled: tuple[str, ...] = ()


# The mandatory extension's C source: `total(values)`, the sum of a sequence of ints.
FASTSUM_C = """#define PY_SSIZE_T_CLEAN
#include <Python.h>

static PyObject *total(PyObject *self, PyObject *values) {
    PyObject *fast = PySequence_Fast(values, "total() takes a sequence");
    if (fast == NULL) return NULL;
    long sum = 0;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(fast); i++) {
        long value = PyLong_AsLong(PySequence_Fast_GET_ITEM(fast, i));
        if (value == -1 && PyErr_Occurred()) { Py_DECREF(fast); return NULL; }
        sum += value;
    }
    Py_DECREF(fast);
    return PyLong_FromLong(sum);
}

static PyMethodDef methods[] = {{"total", total, METH_O, "The sum of the ints."},
                                {NULL, NULL, 0, NULL}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "fastsum._core", NULL, -1,
                                    methods};

PyMODINIT_FUNC PyInit__core(void) { return PyModule_Create(&module); }
"""

PROJECTS = {
    "toolz": Project("toolz", "toolz-1.0.0-planted.tar.gz",
                     ("toolz/tests/test_itertoolz.py::test_frequencies",
                      "toolz/tests/test_recipes.py::test_countby"),
                     ("toolz/itertoolz.py", "        d[item] = 1\n", "        d[item] += 1\n"),
                     shape="setup.py with versioneer, tests inside the package (`toolz/tests/`)"),
    "python-slugify": Project(
        "python-slugify", "python-slugify-9.2.0-planted.tar.gz",
        ("tests/test_legacy.py::TestSlugify::test_pre_translation",),
        ("slugify/special.py", "xlate.lower()", "xlate.capitalize()"),
        needs=("text-unidecode",),
        shape="setup.py beside a pyproject.toml, `tests/`, a dependency from the index"),
    # Issue 20 §5: a unittest suite that tox.ini runs (`unittest discover tests`), its
    # `testing` extra; pytest's guess would not collect it as the project runs it.
    "markdown": Project(
        "markdown", "markdown-3.11-planted.tar.gz",
        ("tests/test_syntax/inline/test_emphasis.py::TestNotEmphasis::test_nested_emphasis",
         "tests/test_legacy.py::TestMisc::test_em_strong_complex"),
        ("markdown/inlinepatterns.py", "STRONG_RE = r'(\\*{3})(.+?)\\1'",
         "STRONG_RE = r'(\\*{2})(.+?)\\1'"),
        needs=("coverage", "pyyaml"), command="python3 -m unittest discover -s tests",
        shape="a unittest suite that tox.ini runs (`unittest discover tests`), a `testing` "
              "extra"),
    # §2 and §5: requirements/testing.txt, and tox.ini's `python -m unittest`.
    "more-itertools": Project(
        "more_itertools", "more-itertools-11.2.1-planted.tar.gz",
        ("tests/test_recipes.py::QuantifyTests::test_happy_path",
         "more_itertools.recipes.quantify"),  # a doctest, through its load_tests
        ("more_itertools/recipes.py", "    return sum(map(pred, iterable)) + 1\n",
         "    return sum(map(pred, iterable))\n"),
        needs=("coverage",), command="python3 -m unittest",
        shape="requirements/testing.txt, tox.ini's `python -m unittest`, doctests through "
              "`load_tests`"),
    # §2: a PEP 735 `test` group that includes another (`coverage`), resolved on the host.
    "dependency-groups": Project(
        "dependency_groups", "dependency-groups-1.3.2-planted.tar.gz",
        ("tests/test_resolver_class.py::test_lookup_on_trivial_normalization",),
        ("src/dependency_groups/_implementation.py",
         '    return re.sub(r"[-_.]+", "-", name)\n',
         '    return re.sub(r"[-_.]+", "-", name).lower()\n'),
        needs=("coverage",),
        shape="flit, src/ layout, a PEP 735 `test` group with an `include-group`"),
    # §3: `minversion = "8.0"` and no pytest declared anywhere: Debian's pytest 7.2 refuses
    # to start; the venv gets pytest>=8.0 from the index.
    "minversion-8": Project(
        "minver", "", ("tests/test_minver.py::test_clamp_low",),
        ("minver/__init__.py", "min(high, value)", "min(high, max(low, value))"),
        needs=("pytest-9",), shape="hatchling, `minversion = 8.0`, no pytest declared "
                                   "(written by the test)", files={
            "pyproject.toml": '[build-system]\nrequires = ["hatchling"]\n'
                              'build-backend = "hatchling.build"\n\n[project]\n'
                              'name = "minver"\nversion = "1.0"\n\n'
                              '[tool.pytest.ini_options]\nminversion = "8.0"\n'
                              'testpaths = ["tests"]\n',
            "minver/__init__.py": "def clamp(value, low, high):\n"
                                  "    return min(high, value)\n",
            "tests/test_minver.py": "from minver import clamp\n\n\n"
                                    "def test_clamp_high():\n    assert clamp(5, 0, 3) == 3\n"
                                    "\n\ndef test_clamp_low():\n"
                                    "    assert clamp(-1, 0, 3) == 0\n"}),
    # What humanize needs (its tests import freezegun, a `tests` extra; without it the
    # baseline is a collection error), in a project of ours: humanize 4.17.0's source
    # with its tests is not on this machine (the local index has only a 4.16.0 wheel).
    "test-extras": Project(
        "countdown", "", ("tests/test_countdown.py::test_days_until",),
        ("countdown/__init__.py", "(when - today).days - 1", "(when - today).days"),
        needs=("freezegun",), shape="hatchling, a `tests` extra the tests import "
                                     "(freezegun; written by the test, as humanize)", files={
            "pyproject.toml": '[build-system]\nrequires = ["hatchling"]\n'
                              'build-backend = "hatchling.build"\n\n[project]\n'
                              'name = "countdown"\nversion = "1.0"\n\n'
                              '[project.optional-dependencies]\ntests = ["freezegun"]\n',
            "countdown/__init__.py": "import datetime\n\n\ndef days_until(when):\n"
                                     "    today = datetime.date.today()\n"
                                     "    return (when - today).days - 1\n",
            "tests/test_countdown.py": "import datetime\n\nfrom freezegun import freeze_time"
                                       "\n\nfrom countdown import days_until\n\n\n"
                                       "@freeze_time('2026-12-01')\ndef test_days_until():\n"
                                       "    assert days_until(datetime.date(2026, 12, 25)) "
                                       "== 24\n\n\ndef test_today():\n"
                                       "    assert days_until(datetime.date.today()) <= 0\n"}),
    # Poetry: the tests' pytest and freezegun only in `[tool.poetry.group.test]`, which
    # pip never reads; Poetry's `^` constraints (pytest ^8.0 is not the index's newest 9).
    "poetry-groups": Project(
        "deadline", "", ("tests/test_deadline.py::test_days_left",),
        ("deadline/__init__.py", "(when - today).days + 1", "(when - today).days"),
        needs=("freezegun", "pytest-8"), shape="poetry-core, the test tools in a Poetry "
                                                 "`test` group (written by the test)", files={
            "pyproject.toml": '[build-system]\nrequires = ["poetry-core>=1.0.0"]\n'
                              'build-backend = "poetry.core.masonry.api"\n\n[tool.poetry]\n'
                              'name = "deadline"\nversion = "1.0.0"\n'
                              'description = "Days left"\nauthors = ["A <a@example.invalid>"]\n'
                              '\n[tool.poetry.dependencies]\npython = "^3.9"\n\n'
                              '[tool.poetry.group.test.dependencies]\npytest = "^8.0"\n'
                              'freezegun = "^1.2"\n',
            "deadline/__init__.py": "import datetime\n\n\ndef days_left(when):\n"
                                    "    today = datetime.date.today()\n"
                                    "    return (when - today).days + 1\n",
            "tests/test_deadline.py": "import datetime\n\nimport pytest\nfrom freezegun import "
                                      "freeze_time\n\nfrom deadline import days_left\n\n\n"
                                      "@freeze_time('2026-12-01')\ndef test_days_left():\n"
                                      "    assert days_left(datetime.date(2026, 12, 25)) == 24"
                                      "\n\n\ndef test_pytest_is_the_pinned_one():\n"
                                      "    assert pytest.__version__.startswith('8.')\n"}),
    # pytest 9's native `[tool.pytest]` table, the only place that names the test files
    # (`check_*.py`): a pytest that ignores the table (Debian's 7.2) collects nothing.
    "pytest9-native": Project(
        "tally", "", ("checks/check_tally.py::test_total",),
        ("tally/__init__.py", "return sum(counts) - 1", "return sum(counts)"),
        needs=("pytest-9",), shape="hatchling, pytest 9's native `[tool.pytest]` table "
                                   "naming `check_*.py` files (written by the test)", files={
            "pyproject.toml": '[build-system]\nrequires = ["hatchling"]\n'
                              'build-backend = "hatchling.build"\n\n[project]\n'
                              'name = "tally"\nversion = "1.0"\n\n[tool.pytest]\n'
                              'testpaths = ["checks"]\npython_files = ["check_*.py"]\n',
            "tally/__init__.py": "def total(counts):\n    return sum(counts) - 1\n",
            "checks/check_tally.py": "from tally import total\n\n\ndef test_total():\n"
                                     "    assert total([1, 2, 3]) == 6\n\n\n"
                                     "def test_empty():\n    assert total([]) <= 0\n"}),
    # Doctests: pytest.ini's `--doctest-modules`; the bug fails one doctest and no test.
    "inflect": Project(
        "inflect", "inflect-7.5.0-planted.tar.gz", ("inflect/__init__.py::inflect.joinstem",),
        ("inflect/__init__.py", "w[: cutpoint or -1]", "w[:cutpoint]"),
        needs=("typeguard",),
        shape="setuptools-scm, doctests (pytest.ini `--doctest-modules`), a `test` extra"),
    # A `testsuite/` folder (no pytest configuration, no tox.ini): pytest collects it.
    "pycodestyle": Project(
        "pycodestyle", "pycodestyle-2.10.0-planted.tar.gz",
        ("testsuite/test_all.py::PycodestyleTestCase::test_checkers_testsuite",),
        ("pycodestyle.py", "elif bad_prefix and bad_prefix != '!':",
         "elif bad_prefix and (bad_prefix != '!' or start[0] > 1):"),
        shape="one module at the root, tests in `testsuite/` with golden files, setup.py"),
    # §2: tox.ini's [testenv] deps (pytest, pytest-cov, numpy) and `pytest tests`; two
    # tests read the toml-test submodule, which the sdist lacks (failing before and after).
    "toml": Project(
        "toml", "toml-0.10.2-planted.tar.gz", ("tests/test_api.py::test_tuple",),
        ("toml/encoder.py", '            retval += " " + unicode(self.dump_value(u))\n',
         '            retval += " " + unicode(self.dump_value(u)) + ","\n'),
        needs=("numpy", "pytest-cov"), command="python3 -m pytest -rA -p no:cacheprovider tests",
        shape="setup.py, tox.ini [testenv] deps (pytest, pytest-cov, numpy), committed "
              "egg-info"),
    # One module and its test file at the root; a committed egg-info that setup rewrites.
    "six": Project(
        "six", "six-1.17.0-planted.tar.gz", ("test_six.py::test_b",),
        ("six.py", '        return s.encode("utf-8")\n', '        return s.encode("latin-1")\n'),
        shape="one module and its test file at the root, setup.cfg [tool:pytest], "
              "committed egg-info"),
    # setup.cfg metadata under a bare setup.py, src/ layout, tox.ini's `py.test --cov`.
    "cachetools": Project(
        "cachetools", "cachetools-5.5.2-planted.tar.gz",
        ("tests/test_lru.py::LRUCacheTest::test_lru",),
        ("src/cachetools/__init__.py", "        if key not in self:  # __missing__",
         "        if key in self:  # __missing__"),
        needs=("pytest-cov",),
        shape="metadata in setup.cfg, src/ layout, tox.ini deps and `py.test --cov`"),
    # A `test/` folder and doctests through tox.ini's command, setuptools-scm's version.
    "tabulate": Project(
        "tabulate", "tabulate-0.10.0-planted.tar.gz",
        ("tabulate/__init__.py::tabulate._padleft",
         "test/test_cli.py::test_script_header_option"),
        ("tabulate/__init__.py",
         'fmt = "{0:<%ds}" % width\n    return fmt.format(s)\n\n\ndef _padright',
         'fmt = "{0:>%ds}" % width\n    return fmt.format(s)\n\n\ndef _padright'),
        command="python3 -m pytest -rA -p no:cacheprovider --doctest-modules",
        shape="setuptools-scm, `test/` (singular), tox.ini's `pytest --doctest-modules "
              "--ignore benchmark`"),
    # hatchling, unittest-style tests inside the package named `*_test.py`, no config.
    "colorama": Project(
        "colorama", "colorama-0.4.6-planted.tar.gz",
        ("colorama/tests/ansi_test.py::AnsiTest::testForeAttributes",),
        ("colorama/ansi.py", "    BLUE            = 35\n", "    BLUE            = 34\n"),
        shape="hatchling, unittest classes inside the package (`colorama/tests/*_test.py`), "
              "no test configuration"),
    # §2: a PEP 735 `dev` group (pytest, pytest-xdist); `testing/`; pytest needs iniconfig.
    "iniconfig": Project(
        "iniconfig", "iniconfig-2.3.0-planted.tar.gz",
        ("testing/test_iniconfig.py::test_iniconfig_lineof",),
        ("src/iniconfig/_parse.py", "        key_name = name.lstrip()\n",
         "        key_name = name.strip()\n"),
        needs=("pytest-xdist",),
        shape="setuptools-scm, src/ layout, a PEP 735 `dev` group, tests in `testing/`; "
              "pytest itself depends on it"),
    # tox.ini's `extras = testing` and its [pytest] (minversion 8.0, testpaths = testing).
    "pluggy": Project(
        "pluggy", "pluggy-1.6.0-planted.tar.gz",
        ("testing/test_tracer.py::test_readable_output_dictargs",),
        ("src/pluggy/_tracing.py", 'lines.append(f"{indent}  {name}: {value}\\n")',
         'lines.append(f"{indent}    {name}: {value}\\n")'),
        needs=("pytest-benchmark",),
        shape="setuptools-scm, src/ layout, tox.ini's `testing` extra and [pytest] section "
              "(minversion 8.0, `testing/`); pytest itself depends on it"),
    # Issue 29 §1: a reusable Django app whose tests run with its own runtests.py, as
    # tox.ini runs it (`coverage run … ./runtests.py --testrunner xmlrunner…`): Django's
    # runner with the settings runtests.py names, a SQLite test database, per test.
    "django-filter": Project(
        "django-filter", "django-filter-26.2-planted.tar.gz",
        ("tests/test_utils.py::VerboseLookupExprTests::test_verbose_expression",
         "tests/test_utils.py::VerboseLookupExprTests::test_missing_keys"),
        ("django_filters/utils.py", '    return " ".join(lookups[:1])\n',
         '    return " ".join(lookups)\n'),
        needs=("django", "djangorestframework"), command="python3 runtests.py",
        shape="flit, a Django app's runtests.py that tox.ini runs under coverage, "
              "requirements/test.txt, a SQLite test database"),
    # Issue 29 §1: pytest-django, its settings module in `[tool.pytest.ini_options]` as TOML
    # keeps it (`DJANGO_SETTINGS_MODULE`), neither it nor Django declared; a `django_db`
    # test on pytest-django's test database.
    "pytest-django": Project(
        "tagline", "", ("tests/test_tagline.py::test_tagline",
                        "tests/test_tagline.py::test_page_heading"),
        ("tagline/__init__.py", 'f"{title} - {settings.SITE_NAME}"',
         'f"{title} | {settings.SITE_NAME}"'),
        needs=("pytest-django", "django"), shape="hatchling, pytest-django's "
        "`DJANGO_SETTINGS_MODULE` in pyproject.toml, no Django declared (written by the test)",
        files={
            "pyproject.toml": '[build-system]\nrequires = ["hatchling"]\n'
                              'build-backend = "hatchling.build"\n\n[project]\n'
                              'name = "tagline"\nversion = "1.0"\n\n'
                              '[tool.pytest.ini_options]\n'
                              'DJANGO_SETTINGS_MODULE = "site_settings"\n'
                              'testpaths = ["tests"]\n',
            "site_settings.py": 'SECRET_KEY = "not-a-secret"\nINSTALLED_APPS = ["tagline"]\n'
                                'DATABASES = {"default": {"ENGINE": '
                                '"django.db.backends.sqlite3", "NAME": "db.sqlite3"}}\n'
                                'SITE_NAME = "Example"\nUSE_TZ = True\n',
            "tagline/__init__.py": "from django.conf import settings\n\n\n"
                                   "def tagline(title):\n"
                                   '    """The page title with the site\'s name."""\n'
                                   "    if not title:\n        return settings.SITE_NAME\n"
                                   '    return f"{title} - {settings.SITE_NAME}"\n',
            "tagline/models.py": "from django.db import models\n\nfrom tagline import "
                                 "tagline\n\n\nclass Page(models.Model):\n"
                                 "    title = models.CharField(max_length=100)\n\n"
                                 "    def heading(self):\n        return tagline(self.title)\n",
            "tests/test_tagline.py": "import pytest\n\nfrom tagline import tagline\n"
                                     "from tagline.models import Page\n\n\n"
                                     "def test_tagline():\n"
                                     '    assert tagline("Home") == "Home | Example"\n\n\n'
                                     "def test_empty_title():\n"
                                     '    assert tagline("") == "Example"\n\n\n'
                                     "@pytest.mark.django_db\ndef test_page_heading():\n"
                                     '    page = Page.objects.create(title="About")\n'
                                     "    assert Page.objects.get(pk=page.pk).heading() == "
                                     '"About | Example"\n'}),
    # Issue 29 §1: tox's `coverage run -m django test --settings=tests.settings`; the
    # fixed tests, unittest classes with no database, run outside pytest too: with the
    # settings module that command names (without it, every one errors: no settings).
    "django-widget-tweaks": Project(
        "django-widget-tweaks", "django-widget-tweaks-1.5.1-planted.tar.gz",
        ("tests/tests.py::SimpleAttrTest::test_add_class_chaining",
         "tests/tests.py::CustomizedWidgetTest::test_add_class_chaining"),
        ("widget_tweaks/templatetags/widget_tweaks.py",
         "            attrs[attribute] = value\n        elif widget",
         '            attrs[attribute] += " " + value\n        elif widget'),
        needs=("django",), command="python3 -m django test",
        shape="setup.py with setuptools-scm, tox.ini's `coverage run -m django test "
              "--settings=…`, unittest classes that need the settings"),
    # Issue 29 §1: tox.ini's extras `test check cover enabler type` (jaraco's skeleton):
    # pytest-enabler turns on pytest-ruff, pytest-mypy, pytest-cov and pytest-checkdocs,
    # whose findings (the index's ruff has rules newer than the project, checkdocs builds
    # the project without network) are no test of the fix; setup leaves them out.
    "jaraco.functools": Project(
        "jaraco.functools", "jaraco.functools-4.4.0-planted.tar.gz",
        ("test_functools.py::TestRetry::test_retry_call_succeeds",
         "test_functools.py::TestRetry::test_decorator"),
        ("jaraco/functools/__init__.py", "else range(retries - 1)\n", "else range(retries)\n"),
        needs=("pytest-cov", "more-itertools"),
        left_out=("pytest-checkdocs", "pytest-ruff", "pytest-enabler", "pytest-mypy"),
        shape="setuptools-scm, jaraco's skeleton: tox.ini's extras with pytest-checkdocs, "
              "pytest-ruff, pytest-mypy, pytest-cov and pytest-enabler; `--doctest-modules`"),
    # Issue 29 §1: a C extension the editable install builds in place (src/markupsafe/
    # _speedups.c); every test runs once with `_native` and once with `_speedups`, which
    # is skipped where the extension is not in the tree the tests run on.
    "markupsafe": Project(
        "markupsafe", "markupsafe-3.0.3-planted.tar.gz",
        ("tests/test_escape.py::test_proxy[markupsafe._native]",
         "tests/test_escape.py::test_proxy[markupsafe._speedups]"),
        ("src/markupsafe/__init__.py", "    return Markup(_escape_inner(s))\n\n\n",
         "    return Markup(_escape_inner(str(s)))\n\n\n"),
        compiled=("tests/test_escape.py::test_proxy[markupsafe._speedups]",
                  "tests/test_ext_init.py::test_ext_init[markupsafe._speedups]",
                  "tests/test_markupsafe.py::test_escape_silent[markupsafe._speedups]"),
        shape="setup.py building an optional C extension (`_speedups.c`), src/ layout, "
              "each test run with the Python and the C implementation"),
    # Issue 29 §1: an extension module the package cannot do without (no fallback): with
    # no build in the tree the tests run on, every test module fails to import.
    "mandatory-extension": Project(
        "fastsum", "", ("tests/test_fastsum.py::test_mean",),
        ("fastsum/__init__.py", "(len(values) + 1)", "len(values)"),
        compiled=("tests/test_fastsum.py::test_total",),
        shape="setup.py `Extension` the package imports with no fallback, flat layout "
              "(written by the test)", files={
            "pyproject.toml": '[build-system]\nrequires = ["setuptools"]\n'
                              'build-backend = "setuptools.build_meta"\n\n[project]\n'
                              'name = "fastsum"\nversion = "1.0"\n\n[tool.setuptools]\n'
                              'packages = ["fastsum"]\n',
            "setup.py": "from setuptools import Extension, setup\n\n"
                        'setup(ext_modules=[Extension("fastsum._core", '
                        '["fastsum/_core.c"])])\n',
            "fastsum/_core.c": FASTSUM_C,
            "fastsum/__init__.py": "from fastsum._core import total  # no fallback\n\n\n"
                                   "def mean(values):\n"
                                   "    return total(values) / (len(values) + 1)\n",
            "tests/test_fastsum.py": "from fastsum import mean, total\n\n\n"
                                     "def test_total():\n"
                                     "    assert total([1, 2, 3]) == 6\n\n\n"
                                     "def test_mean():\n"
                                     "    assert mean([1, 2, 3]) == 2\n"}),
    # Issue 29 §1: unittest in `tests/test.py`, which pytest's default python_files misses,
    # and a README that says `python tests/test.py -v`; nothing else declares the tests.
    "decorator": Project(
        "decorator", "decorator-5.3.1-planted.tar.gz",
        ("tests/test.py::ExtraTestCase::test_dan_schult",),
        ("src/decorator/__init__.py", "    ba = sig.bind(*args, **kwargs)\n    return",
         "    ba = sig.bind(*args, **kwargs)\n    ba.apply_defaults()\n    return"),
        command="python3 -m pytest -rA -p no:cacheprovider -o 'python_files=test_*.py "
                "*_test.py test.py'",
        shape="setuptools, src/ layout, unittest in `tests/test.py` (no `test_*.py`), the "
              "README's `python tests/test.py -v`"),
    # Issue 29 §1: a test script the README runs (`python tests/checks.py`), whose name no
    # runner collects, and nothing else that declares the tests.
    "readme-script": Project(
        "wordcount", "", ("tests/checks.py::CountTests::test_words",),
        ("wordcount/__init__.py", "len(text.split(' '))", "len(text.split())"),
        command="python3 -m pytest -rA -p no:cacheprovider tests/checks.py",
        shape="hatchling, a test script the README runs (`python tests/checks.py`), no "
              "test configuration (written by the test)", files={
            "pyproject.toml": '[build-system]\nrequires = ["hatchling"]\n'
                              'build-backend = "hatchling.build"\n\n[project]\n'
                              'name = "wordcount"\nversion = "1.0"\n',
            "README.md": "# wordcount\n\nCounts words.\n\n## Tests\n\n```console\n"
                         "$ pip install -e .\n$ python tests/checks.py\n```\n",
            "wordcount/__init__.py": "def words(text):\n    return len(text.split(' '))\n",
            "tests/checks.py": "import unittest\n\nfrom wordcount import words\n\n\n"
                               "class CountTests(unittest.TestCase):\n"
                               "    def test_words(self):\n"
                               "        self.assertEqual(words('a  b'), 2)\n\n"
                               "    def test_one(self):\n"
                               "        self.assertEqual(words('a'), 1)\n\n\n"
                               "if __name__ == '__main__':\n    unittest.main()\n"}),
    # Issue 29 §1: a Justfile's `test` recipe, `uv run --all-extras pytest tests`: the
    # tests import an extra (pyyaml) that only `--all-extras` installs.
    "justfile-extras": Project(
        "confload", "", ("tests/test_confload.py::test_defaults_kept",),
        ("confload/__init__.py", "{**loaded, **DEFAULTS}", "{**DEFAULTS, **loaded}"),
        needs=("pyyaml",), command="python3 -m pytest -rA -p no:cacheprovider tests",
        shape="hatchling, a Justfile `test` recipe through `uv run --all-extras`, the "
              "tests importing an extra (written by the test)", files={
            "pyproject.toml": '[build-system]\nrequires = ["hatchling"]\n'
                              'build-backend = "hatchling.build"\n\n[project]\n'
                              'name = "confload"\nversion = "1.0"\n\n'
                              '[project.optional-dependencies]\nyaml = ["pyyaml"]\n',
            "justfile": "# Development tasks\ndefault:\n    @just --list\n\n"
                        "lint:\n    uv run ruff check\n\n"
                        "test *args:\n    uv run --all-extras pytest tests {{args}}\n",
            "confload/__init__.py": "DEFAULTS = {'debug': False, 'level': 1}\n\n\n"
                                    "def merged(loaded):\n"
                                    "    return {**loaded, **DEFAULTS}\n",
            "tests/test_confload.py": "import yaml\n\nfrom confload import merged\n\n\n"
                                      "def test_defaults_kept():\n"
                                      "    loaded = yaml.safe_load('debug: true')\n"
                                      "    assert merged(loaded) == {'debug': True, "
                                      "'level': 1}\n\n\n"
                                      "def test_empty():\n"
                                      "    assert merged({})['level'] == 1\n"}),
    # Issue 29 §1: `benchmarks/` beside `tests/` and no `testpaths`: pytest would collect
    # the benchmarks, which import a tool the tests do not install (pyperf).
    "benchmarks-folder": Project(
        "slowpath", "", ("tests/test_slowpath.py::test_mean",),
        ("slowpath/__init__.py", "sum(values) / (len(values) - 1)", "sum(values) / len(values)"),
        command="python3 -m pytest -rA -p no:cacheprovider --ignore benchmarks",
        shape="setuptools, `benchmarks/test_*.py` beside `tests/`, no `testpaths` (written "
              "by the test)", files={
            "pyproject.toml": '[build-system]\nrequires = ["setuptools"]\n'
                              'build-backend = "setuptools.build_meta"\n\n[project]\n'
                              'name = "slowpath"\nversion = "1.0"\n\n[tool.setuptools]\n'
                              'packages = ["slowpath"]\n',
            "slowpath/__init__.py": "def mean(values):\n"
                                    "    return sum(values) / (len(values) - 1)\n",
            "tests/test_slowpath.py": "from slowpath import mean\n\n\n"
                                      "def test_mean():\n"
                                      "    assert mean([1, 2, 3]) == 2\n\n\n"
                                      "def test_one():\n    assert mean([4]) > 0\n",
            "benchmarks/test_speed.py": "import pyperf\n\nfrom slowpath import mean\n\n\n"
                                        "def test_mean_speed():\n"
                                        "    pyperf.Runner().bench_func('mean', mean, "
                                        "list(range(1000)))\n"}),
}


# Projects whose shape another project of the corpus has (named beside each): CI runs
# that one, and these run with `python3 -m tests.reliability --corpus` (marked `corpus`),
# so that CI's time does not grow with the corpus.
CORPUS_ONLY = {
    "python-slugify": "toolz (setup.py), pluggy (dependencies from the index)",
    "more-itertools": "markdown (unittest through tox.ini), inflect (doctests); 90 s alone",
    "minversion-8": "pluggy (minversion 8.0 with no pytest pin)",
    "test-extras": "inflect (a test extra the tests import)",
    "pycodestyle": "toolz (setup.py, one tests folder)",
    "toml": "cachetools (tox.ini [testenv] deps)",
    "six": "toolz (setup.py, setup.cfg)",
    "colorama": "markdown (unittest classes)",
    "iniconfig": "dependency-groups (a PEP 735 group), pluggy (pytest depends on it)",
    "mandatory-extension": "markupsafe (a C extension setup builds, whose tests must run)",
    "django-filter": "django-widget-tweaks (Django's own runner, from tox's coverage run); "
                     "CI runs django-filter's runtests.py in test_verdict_django_runner.py",
}


def _local_index() -> dict[str, str]:
    """This machine's pip index (`pip config list`), as FROGNANO_PIP_* settings."""
    return {f"FROGNANO_PIP_{name.upper().replace('-', '_')}": " ".join(value)
            for name, value in pip_config().items()}


def _repo(project: Project, root: Path) -> Path:
    source = root / "src" / project.name
    if project.files is not None:
        for name, text in project.files.items():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            (source / name).write_text(text)
    else:
        unpack(DATA / project.tarball, root / "src")
    assert not (source / ".github" / "frognano.yml").exists()
    git(source, "init", "-q", "-b", "main")
    git(source, "add", "-A")
    git(source, "commit", "-qm", f"{project.name} with a planted bug")
    return source


@dataclass(frozen=True)
class Solved:
    """One `frognano solve` of a project, as the test saw it."""

    returncode: int
    output: str
    branches: list[str]
    fixed: str  # the fixed file on the committed branch ("" when none)
    seconds: float  # the solve's wall time, measured here


def _solve(project: Project, index: dict[str, str], tmp_path: Path,
           transcript: Path) -> Solved:
    path, old, new = project.fix
    script = [think_and_call("The bug is here; fix it.", "Edit", file_path=path,
                             old_string=old, new_string=new),
              final_answer("Fixed the planted bug.")]
    script_file = tmp_path / "script.json"
    script_file.write_text(json.dumps(script))
    with reachable_dir() as root:
        source = _repo(project, root)
        env = {**os.environ, **index, "FROGNANO_STATE_DIR": str(tmp_path / "state"),
               "FROGNANO_WORK_DIR": str(root / "work"), "COLUMNS": "200"}
        started = time.monotonic()
        proc = subprocess.run(
            [sys.executable, "-m", "frognano", "solve", str(source), "--issue", ISSUE,
             "--model", f"scripted:{script_file}", "--transcript", str(transcript),
             "--max-rounds", "1"],
            env=env, capture_output=True, text=True, timeout=900)
        seconds = time.monotonic() - started
        branches = git(source, "branch", "--list", "frognano/*").split()
        fixed = git(source, "show", f"{branches[0]}:{path}") if branches else ""
    return Solved(proc.returncode, proc.stdout + proc.stderr, branches, fixed, seconds)


def _observed(project: Project, solved: Solved, records: list[dict]) -> dict[str, object]:
    """What the run did, read from its transcript: the scorecard's row for the project
    (tests/reliability/scorecard.py renders the "Real projects" table from these keys)."""
    run = next((r for r in records if r["kind"] == "run"), {})
    setup = next((r for r in records if r["kind"] == "setup"), {})
    baseline: dict = next((r for r in records if r["kind"] == "baseline"), {"tests": {}})
    result = records[-1] if records else {}
    verdict = result.get("verdict") or {}
    return {
        "shape": project.shape, "setup": run.get("setup_note", ""),
        "tests": run.get("test_command", ""), "setup exit": setup.get("exit_code"),
        "baseline tests": len(baseline["tests"]),
        "baseline failing": sorted(t for t, s in baseline["tests"].items() if s != "passed"
                                   and s not in ("skipped", "xfailed")),
        "verdict": result.get("exit_reason"), "accepted": verdict.get("accepted"),
        "branch": solved.branches[0] if solved.branches else "none",
        "solve seconds": round(solved.seconds, 1), "setup seconds": setup.get("seconds"),
        "baseline seconds": baseline.get("seconds"),
        "verdict seconds": _verdict_seconds(records),
        "reproducing": reproducing(verdict),
        **({"known gap": project.known_gap} if project.known_gap else {})}


def _verdict_seconds(records: list[dict]) -> float | None:
    """The last verdict's test run (the repository's tests on the accepted change)."""
    judged = [r for r in records if r["kind"] == "tests"]
    return judged[-1].get("seconds") if judged else None


def reproducing(verdict: dict) -> list[str]:
    """The verdict's tests that fail on the base and pass with the change
    (solver/verdict/evidence.py's records, as the transcript holds them)."""
    return sorted(str(e["test"]) for e in verdict.get("evidence") or []
                  if isinstance(e, dict) and e.get("kind") == "reproduces")


def _marks(name: str, project: Project) -> list[pytest.MarkDecorator]:
    marks = [pytest.mark.corpus] if name in CORPUS_ONLY else []
    if project.known_gap:
        marks.append(pytest.mark.xfail(strict=True, reason=project.known_gap))
    return marks


@pytest.mark.parametrize("name", [pytest.param(name, marks=_marks(name, project))
                                  for name, project in PROJECTS.items()])
def test_real_project_without_config_is_set_up_and_fixed(name: str, tmp_path: Path,
                                                         scorecard: Recorder) -> None:
    project = PROJECTS[name]
    index = _local_index()
    if not index:
        pytest.skip("pip has no index configured on this machine")
    record = scorecard(f"{REAL_PROJECT_KEY}{name}",
                       f"{name} without .github/frognano.yml",
                       "setup inferred and run in the network phase; baseline fails on "
                       "the planted bug; the honest fix passes; a branch is committed")
    transcript = tmp_path / "transcript.jsonl"
    solved = _solve(project, index, tmp_path, transcript)
    records = read_transcript(transcript) if transcript.is_file() else []
    record.observed = _observed(project, solved, records)
    assert solved.returncode == 0, solved.output
    run = next(r for r in records if r["kind"] == "run")
    setup = next((r for r in records if r["kind"] == "setup"), {})
    baseline = next(r for r in records if r["kind"] == "baseline")
    result = records[-1]
    assert "inferred (no `setup:` given)" in run["setup_note"], run
    assert "inferred (no `setup:` given)" in solved.output, "solve names the inferred setup"
    assert setup.get("exit_code") == 0, setup
    # pip says "pytest-8.4.2", uv "pytest==8.4.2": either way "pytest-8".
    installed = json.dumps(setup).lower().replace("_", "-").replace("==", "-")
    for package in project.needs:  # from the local index, through the setup phase only
        assert package in installed, setup
    ran = (setup["command"] + setup["output_tail"]).lower().replace("_", "-")
    for plugin in project.left_out:  # neither asked for nor pulled in
        assert plugin in run["setup_note"].partition("left out:")[2], run["setup_note"]
        assert plugin not in ran, setup
    # No lint, type or format check's finding stands in the baseline (issue 29 §1).
    assert not [t for t in baseline["tests"] if is_lint_item(t)], baseline["tests"]
    assert baseline["passed"] is False
    assert set(project.failing) <= {t for t, s in baseline["tests"].items() if s == "failed"}
    assert all(s in ("passed", "failed", "skipped", "xfailed") for s in baseline["tests"].values())
    assert run["test_command"].startswith(project.command), run["test_command"]
    if "pytest" in project.command:  # the harness's guard loads under the venv's pytest
        assert baseline["guard"] is not None, baseline
    assert result["exit_reason"] == "tests_passed" and result["verdict"]["accepted"] is True
    assert result["verdict"]["read_first"] == [], "an honest fix is not flagged"
    # The planted bug's failing tests are the evidence: they fail on the base, pass here.
    assert set(project.failing) <= set(reproducing(result["verdict"])), result["verdict"]
    compiled = {test: result["final"]["tests"].get(test) for test in project.compiled}
    assert all(status == "passed" for status in compiled.values()), compiled
    assert len(solved.branches) == 1 and project.fix[2] in solved.fixed
