"""Django's own test runner (issue 29 §1): detected from real files, run through the
harness's reporter on a real Django suite, per test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from solver.verdict.django_tests import django_settings, django_with_report
from solver.verdict.junit_report import parse_junit, report_request
from solver.verdict.outside_pytest import RUNNER
from solver.verdict.plain_runner import DJANGO_OWN_SETTINGS
from solver.verdict.repo_tests import PYTEST_COMMAND, detect_test_command
from solver.verdict.suite_paths import is_test_config
from solver.verdict.verdict_run import GUARD_DIR

RUNTESTS = ("import sys\n\nimport django\nfrom django.conf import settings\n"
            "from django.test.utils import get_runner\n\n\n"
            "if __name__ == '__main__':\n"
            "    settings.configure(INSTALLED_APPS=['app'], SECRET_KEY='x',\n"
            "                       DATABASES={'default': {'ENGINE': "
            "'django.db.backends.sqlite3', 'NAME': ':memory:'}})\n"
            "    django.setup()\n"
            "    failures = get_runner(settings)(verbosity=1).run_tests(sys.argv[1:] or "
            "['tests'])\n    sys.exit(bool(failures))\n")
MANAGE = ("#!/usr/bin/env python\nimport os\nimport sys\n\nif __name__ == '__main__':\n"
          "    os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'site_settings')\n"
          "    from django.core.management import execute_from_command_line\n"
          "    execute_from_command_line(sys.argv)\n")
APP = {"app/__init__.py": "",
       "app/models.py": "from django.db import models\n\n\n"
                        "class Note(models.Model):\n    text = models.TextField()\n",
       "app/shout.py": "def shout(text):\n    return text.upper() + '!'\n",
       "tests/__init__.py": "",
       "tests/test_app.py": (
           "import unittest\n\nfrom django.test import SimpleTestCase, TestCase\n\n"
           "from app.models import Note\nfrom app.shout import shout\n\n\n"
           "class ShoutTests(SimpleTestCase):\n    def test_ok(self):\n"
           "        self.assertEqual(shout('a'), 'A!')\n\n    def test_bad(self):\n"
           "        self.assertEqual(shout('a'), 'a')\n\n    @unittest.skip('later')\n"
           "    def test_later(self):\n        pass\n\n\n"
           "class NoteTests(TestCase):\n    def test_database(self):\n"
           "        Note.objects.create(text='x')\n"
           "        self.assertEqual(Note.objects.count(), 1)\n")}


def _files(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


@pytest.mark.parametrize(("files", "expected"), [
    # django-filter: tox's coverage run of its runtests.py, with an XML runner dropped.
    ({"tox.ini": "[testenv]\ncommands = coverage run --parallel-mode --source app "
                 "./runtests.py --testrunner xmlrunner.extra.djangotestrunner.XMLTestRunner "
                 "{posargs}\n", "runtests.py": RUNTESTS},
     ("tox.ini [testenv]", "python3 runtests.py")),
    # django-widget-tweaks: tox's `coverage run -m django test` with `--settings`.
    ({"tox.ini": "[testenv]\ncommands = coverage run -m django test -v2 "
                 "--settings=tests.settings\n"},
     ("tox.ini [testenv]", "python3 -m django test -v2 --settings=tests.settings")),
    # A wrapper's own options before the runner (`uv run --all-extras`, `--extra x`).
    ({"Makefile": "test:\n\tuv run --extra test --all-extras python runtests.py\n",
      "runtests.py": RUNTESTS}, ("Makefile", "python3 runtests.py")),
    ({"Makefile": "test:\n\tDJANGO_SETTINGS_MODULE=tests.settings django-admin test\n"},
     ("Makefile", "python3 -m django test --settings=tests.settings")),
    ({".github/workflows/ci.yml": "jobs:\n  t:\n    steps:\n      - run: python manage.py "
                                  "test app\n", "manage.py": MANAGE},
     (".github/workflows/ci.yml", "python3 manage.py test app")),
    # Nothing declares a command: the files that import Django, before pytest's guess.
    ({"runtests.py": RUNTESTS, "tests/test_app.py": ""}, ("django", "python3 runtests.py")),
    ({"manage.py": MANAGE, "tests/test_app.py": ""}, ("django", "python3 manage.py test")),
    # A pytest-django project (its settings in the pytest configuration) stays pytest.
    ({"manage.py": MANAGE, "tests/test_app.py": "",
      "pyproject.toml": "[tool.pytest.ini_options]\nDJANGO_SETTINGS_MODULE = 'x.settings'\n"},
     ("pytest", PYTEST_COMMAND)),
    # Settings a conftest.py configures for pytest: pytest too.
    ({"manage.py": MANAGE, "conftest.py": "", "tests/test_app.py": ""},
     ("pytest", PYTEST_COMMAND)),
    # A runtests.py that is no Django runner is not taken for one.
    ({"runtests.py": "import pytest\npytest.main()\n", "tests/test_app.py": ""},
     ("pytest", PYTEST_COMMAND)),
    ({"tox.ini": "[testenv]\ncommands = python runtests.py\n",
      "runtests.py": "import pytest\npytest.main()\n", "tests/test_app.py": ""},
     ("pytest", PYTEST_COMMAND)),
])
def test_django_runner_is_detected(tmp_path: Path, files: dict[str, str],
                                   expected: tuple[str, str]) -> None:
    _files(tmp_path, files)
    found = detect_test_command(tmp_path)
    assert found is not None and (found.source, found.command) == expected


def test_a_script_outside_the_tree_is_never_the_command(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    _files(tmp_path, {"runtests.py": RUNTESTS, "repo/tox.ini": (
        f"[testenv]\ncommands = python ../runtests.py\n    python {tmp_path}/runtests.py\n")})
    found = detect_test_command(root)
    assert found is not None and (found.source, found.command) == ("tox", "tox")


def test_only_the_detected_django_commands_go_through_the_reporter() -> None:
    assert django_with_report("python3 runtests.py -v2", "/c/r.xml") == (
        "python3 -m frognano_django_report --junitxml=/c/r.xml runtests.py -v2")
    assert django_with_report("DJANGO_SETTINGS_MODULE=t.s python3 tests/runtests.py",
                              "/c/r.xml") == ("DJANGO_SETTINGS_MODULE=t.s python3 -m "
                                              "frognano_django_report --junitxml=/c/r.xml "
                                              "tests/runtests.py")
    for other in ("python3 setup.py test", "python3 -m pytest", "python3 manage.py migrate",
                  "python3 runtests.py; rm -rf x", "python3 runtests.py $(id)"):
        assert django_with_report(other, "/c/r.xml") is None, other
    # The harness's report request rewrites it like a unittest command.
    request = report_request("python3 -m django test --settings=s", "/c", "tok",
                             guard=("/c/guard", "/c/tok.guard"))
    assert "python3 -m frognano_django_report --junitxml=/c/tok.xml -m django test " \
           "--settings=s" in request.command


def _report_run(root: Path, command: list[str]) -> tuple[subprocess.CompletedProcess[str],
                                                         dict[str, str]]:
    report = root / "report.xml"
    env = {**os.environ, "PYTHONPATH": str(GUARD_DIR)}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    proc = subprocess.run([sys.executable, "-m", "frognano_django_report",
                           f"--junitxml={report}", *command], cwd=root, env=env,
                          capture_output=True, text=True, timeout=120)
    return proc, parse_junit(report.read_bytes()) if report.is_file() else {}


EXPECTED = {"tests/test_app.py::ShoutTests::test_ok": "passed",
            "tests/test_app.py::ShoutTests::test_bad": "failed",
            "tests/test_app.py::ShoutTests::test_later": "skipped",
            "tests/test_app.py::NoteTests::test_database": "passed"}


def test_a_runtests_script_reports_each_test_with_its_sqlite_database(tmp_path: Path
                                                                      ) -> None:
    _files(tmp_path, {**APP, "runtests.py": RUNTESTS})
    proc, tests = _report_run(tmp_path, ["runtests.py"])
    assert proc.returncode == 1, proc.stderr  # runtests.py's own exit: a test failed
    assert "Ran 4 tests" in proc.stderr  # Django's own output, for the model
    assert tests == EXPECTED


def test_the_test_command_reports_each_test_by_its_settings(tmp_path: Path) -> None:
    _files(tmp_path, {**APP, "manage.py": MANAGE,
                      "site_settings.py": "INSTALLED_APPS = ['app']\nSECRET_KEY = 'x'\n"
                                          "DATABASES = {'default': {'ENGINE': "
                                          "'django.db.backends.sqlite3', 'NAME': 'db'}}\n"})
    proc, tests = _report_run(tmp_path, ["manage.py", "test", "-v2"])
    assert proc.returncode == 1 and tests == EXPECTED, proc.stderr
    proc, tests = _report_run(tmp_path, ["-m", "django", "test", "--settings=site_settings",
                                         "tests.test_app.ShoutTests.test_ok"])
    assert proc.returncode == 0 and tests == {
        "tests/test_app.py::ShoutTests::test_ok": "passed"}, proc.stderr


@pytest.mark.parametrize(("command", "files", "expected"), [
    ("python3 -m django test -v2 --settings=tests.settings", {}, "tests.settings"),
    ("python3 -m django test --settings tests.settings", {}, "tests.settings"),
    ("DJANGO_SETTINGS_MODULE=a.b python3 runtests.py", {}, "a.b"),
    ("python3 manage.py test", {"manage.py": MANAGE}, "site_settings"),  # its setdefault
    ("python3 runtests.py", {"runtests.py": "import os\nos.environ['DJANGO_SETTINGS_MODULE']"
                                            " = 'tests.settings'\n"}, "tests.settings"),
    ("python3 runtests.py", {"runtests.py": RUNTESTS}, ""),  # settings.configure(): none
    ("python3 -m django test", {}, ""),
    ("python3 -m pytest", {}, None),  # not Django's runner
])
def test_the_settings_module_a_django_command_runs_with(
        tmp_path: Path, command: str, files: dict[str, str], expected: str | None) -> None:
    _files(tmp_path, files)
    assert django_settings(command, tmp_path) == expected


# No database: what the plain run can run, once it has the settings.
WIDGET_TEST = ("import unittest\n\nfrom django.template import Context, Template\n\n\n"
               "class RenderTests(unittest.TestCase):\n    def test_upper(self):\n"
               "        text = Template('{{ word|upper }}').render(Context({'word': 'a'}))\n"
               "        self.assertEqual(text, 'A')\n")


def _plain(tree: Path, django: str | None) -> dict[str, str]:
    report = tree.parent / "report.json"
    report.write_text("")
    spec: dict[str, object] = {"report": str(report), "token": "t",
                               "tests": [["tests/test_render.py", "RenderTests::test_upper"]]}
    if django is not None:
        spec["django_settings"] = django
    subprocess.run([sys.executable, str(RUNNER)], input=json.dumps(spec), text=True,
                   cwd=tree, check=True, timeout=120, env={"PATH": os.environ["PATH"]})
    (module,) = json.loads(report.read_text())["modules"]
    return {line["status"]: line["detail"] for line in map(json.loads, module["lines"]
                                                           .splitlines())}


def test_the_run_outside_pytest_has_the_settings_the_django_runner_names(tmp_path: Path
                                                                        ) -> None:
    tree = tmp_path / "tree"
    _files(tree, {"tests/__init__.py": "", "tests/test_render.py": WIDGET_TEST,
                  "tests/settings.py": "SECRET_KEY = 'x'\nTEMPLATES = [{'BACKEND': "
                                       "'django.template.backends.django.DjangoTemplates'}]\n"})
    assert list(_plain(tree, "tests.settings")) == ["passed"]
    # Without them (the plumbing removed) the honest test fails here: a refusal.
    (detail,) = _plain(tree, None).values()
    assert "settings are not configured" in detail
    # A runtests.py that configures them inline: no settings to give, so not run at all.
    assert _plain(tree, "") == {"cannot run": DJANGO_OWN_SETTINGS}


def test_the_runner_scripts_are_test_configuration_the_verdict_puts_back() -> None:
    # tests/reliability/test_verdict_django_runner.py: a runtests.py that patched the
    # buggy function was accepted while the verdict ran the model's runtests.py.
    assert all(map(is_test_config, ("runtests.py", "tests/runtests.py", "manage.py")))
