"""Issue 29 §1: a Django app whose tests need PostgreSQL, through `frognano solve`.

The project (written here: no small sdist on this machine's index ships a PostgreSQL
suite) has its own `runtests.py`, settings that read the database from the environment
the sandbox's services give (`PGHOST`, `PGDATABASE`, …), and a `.github/frognano.yml`
that says only `services: {postgresql: …}`: the setup and the test command are inferred.
Django's test runner creates its test database on that server, in every test run the
harness makes (the baseline, the verdict); the honest fix must be accepted with the
planted bug's test as its evidence, and the tests must have run on PostgreSQL.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sandbox.services import postgres_versions
from solver.agent.transcript import read_transcript
from solver.models.scripted import final_answer, think_and_call
from tests.conftest import git
from tests.reliability.conftest import Recorder
from tests.reliability.test_real_projects import _local_index, reproducing
from tests.support.sandbox_support import HAVE_BWRAP, reachable_dir

pytestmark = [pytest.mark.reliability,
              pytest.mark.skipif(not HAVE_BWRAP, reason="bubblewrap is not installed"),
              pytest.mark.skipif(not postgres_versions(), reason="postgresql is not installed")]

FILES = {
    "pyproject.toml": '[build-system]\nrequires = ["hatchling"]\n'
                      'build-backend = "hatchling.build"\n\n[project]\nname = "shelf"\n'
                      'version = "1.0"\ndependencies = ["django>=4.2"]\n\n'
                      '[project.optional-dependencies]\ntest = ["psycopg[binary]>=3.1"]\n',
    ".github/frognano.yml": "services:\n  postgresql: {database: shelf}\n",
    "shelf/__init__.py": "",
    "shelf/models.py": "from django.db import models\n\n\nclass Book(models.Model):\n"
                       "    title = models.CharField(max_length=100)\n"
                       "    copies = models.IntegerField()\n",
    # The planted bug: a count of rows where the copies are to be summed.
    "shelf/stock.py": "from django.db.models import Count\n\nfrom shelf.models import Book\n\n\n"
                      "def total_copies():\n"
                      '    return Book.objects.aggregate(n=Count("id"))["n"] or 0\n',
    "runtests.py": "import os\nimport sys\n\nimport django\nfrom django.conf import settings\n"
                   "from django.test.utils import get_runner\n\n"
                   'if __name__ == "__main__":\n'
                   '    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")\n'
                   "    django.setup()\n"
                   "    failures = get_runner(settings)().run_tests([\"tests\"])\n"
                   "    sys.exit(bool(failures))\n",
    "tests/__init__.py": "",
    "tests/settings.py": "import os\n\nSECRET_KEY = 'tests'\nINSTALLED_APPS = ['shelf']\n"
                         "USE_TZ = True\nDEFAULT_AUTO_FIELD = 'django.db.models.AutoField'\n"
                         "DATABASES = {'default': {\n"
                         "    'ENGINE': 'django.db.backends.postgresql',\n"
                         "    'NAME': os.environ['PGDATABASE'], 'HOST': os.environ['PGHOST'],\n"
                         "    'PORT': os.environ['PGPORT'], 'USER': os.environ['PGUSER'],\n"
                         "    'PASSWORD': os.environ['PGPASSWORD']}}\n",
    "tests/test_stock.py": "from django.db import connection\nfrom django.test import TestCase\n\n"
                           "from shelf.models import Book\nfrom shelf.stock import total_copies"
                           "\n\n\nclass StockTests(TestCase):\n"
                           "    def test_runs_on_postgresql(self):\n"
                           "        self.assertEqual(connection.vendor, 'postgresql')\n\n"
                           "    def test_total_sums_copies(self):\n"
                           "        Book.objects.create(title='a', copies=3)\n"
                           "        Book.objects.create(title='b', copies=4)\n"
                           "        self.assertEqual(total_copies(), 7)\n\n"
                           "    def test_empty_shelf(self):\n"
                           "        self.assertEqual(total_copies(), 0)\n",
}
FIX = ("shelf/stock.py", 'Count("id")', 'Sum("copies")')
FAILING = "tests/test_stock.py::StockTests::test_total_sums_copies"


def _script(tmp_path: Path) -> Path:
    path, old, new = FIX
    script = tmp_path / "script.json"
    script.write_text(json.dumps([
        think_and_call("Copies are summed, not counted.", "Edit", file_path=path,
                       old_string="from django.db.models import Count",
                       new_string="from django.db.models import Sum"),
        think_and_call("And the aggregate itself.", "Edit", file_path=path, old_string=old,
                       new_string=new),
        final_answer("total_copies sums the copies.")]))
    return script


def test_a_django_app_on_postgresql_is_set_up_judged_and_fixed(tmp_path: Path,
                                                               scorecard: Recorder) -> None:
    index = _local_index()
    if not index:
        pytest.skip("pip has no index configured on this machine")
    record = scorecard("12-verdict-django-postgresql",
                       "Django on PostgreSQL through `services:`",
                       "runtests.py detected, setup inferred, the test database made on the "
                       "sandbox's PostgreSQL in the baseline and the verdict; the honest fix "
                       "accepted with the planted bug's test as evidence")
    transcript = tmp_path / "transcript.jsonl"
    with reachable_dir() as root:
        source = root / "shelf"
        for name, text in FILES.items():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            (source / name).write_text(text)
        git(source, "init", "-q", "-b", "main")
        git(source, "add", "-A")
        git(source, "commit", "-qm", "shelf with a planted bug")
        env = {**os.environ, **index, "FROGNANO_STATE_DIR": str(tmp_path / "state"),
               "FROGNANO_WORK_DIR": str(root / "work"), "COLUMNS": "200"}
        proc = subprocess.run(
            [sys.executable, "-m", "frognano", "solve", str(source), "--issue",
             "Stock is wrong\n\nTwo books of 3 and 4 copies make 2, not 7.", "--model",
             f"scripted:{_script(tmp_path)}", "--transcript", str(transcript),
             "--max-rounds", "1"], env=env, capture_output=True, text=True, timeout=900)
        branches = git(source, "branch", "--list", "frognano/*").split()
    output = proc.stdout + proc.stderr
    records = read_transcript(transcript) if transcript.is_file() else []
    run = next((r for r in records if r["kind"] == "run"), {})
    baseline = next((r for r in records if r["kind"] == "baseline"), {"tests": {}})
    result = records[-1] if records else {}
    record.observed = {"test command": run.get("test_command"),
                       "services": [s.get("name") for s in run.get("services", [])],
                       "baseline": baseline.get("tests"), "verdict": result.get("exit_reason"),
                       "reproducing": reproducing(result.get("verdict") or {})}
    assert proc.returncode == 0, output[-4000:]
    assert run["test_command"].startswith("python3 runtests.py"), run
    assert "inferred (no `setup:` given)" in run["setup_note"], run
    assert [s["name"] for s in run["services"]] == ["postgresql"], run["services"]
    tests = baseline["tests"]
    assert tests.get(FAILING) == "failed", tests  # per-test ids from Django's own runner
    # On PostgreSQL, the test database Django made on the sandbox's server.
    assert tests.get("tests/test_stock.py::StockTests::test_runs_on_postgresql") == "passed"
    assert result["exit_reason"] == "tests_passed" and result["verdict"]["accepted"] is True
    assert FAILING in reproducing(result["verdict"]), result["verdict"]
    assert len(branches) == 1
