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
from dataclasses import dataclass
from pathlib import Path

import pytest

from solver.agent.transcript import read_transcript
from solver.models.scripted import final_answer, think_and_call
from tests.conftest import git, unpack
from tests.reliability.conftest import Recorder
from tests.sandbox_support import HAVE_BWRAP, reachable_dir

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


PROJECTS = {
    "toolz": Project("toolz", "toolz-1.0.0-planted.tar.gz",
                     ("toolz/tests/test_itertoolz.py::test_frequencies",
                      "toolz/tests/test_recipes.py::test_countby"),
                     ("toolz/itertoolz.py", "        d[item] = 1\n", "        d[item] += 1\n")),
    "python-slugify": Project(
        "python-slugify", "python-slugify-9.2.0-planted.tar.gz",
        ("tests/test_legacy.py::TestSlugify::test_pre_translation",),
        ("slugify/special.py", "xlate.lower()", "xlate.capitalize()"),
        needs=("text-unidecode",)),
    # Issue 20 §5: a unittest suite that tox.ini runs (`unittest discover tests`), its
    # `testing` extra; pytest's guess would not collect it as the project runs it.
    "markdown": Project(
        "markdown", "markdown-3.11-planted.tar.gz",
        ("tests/test_syntax/inline/test_emphasis.py::TestNotEmphasis::test_nested_emphasis",
         "tests/test_legacy.py::TestMisc::test_em_strong_complex"),
        ("markdown/inlinepatterns.py", "STRONG_RE = r'(\\*{3})(.+?)\\1'",
         "STRONG_RE = r'(\\*{2})(.+?)\\1'"),
        needs=("coverage", "pyyaml"), command="python3 -m unittest discover -s tests"),
    # §2 and §5: requirements/testing.txt, and tox.ini's `python -m unittest`.
    "more-itertools": Project(
        "more_itertools", "more-itertools-11.2.1-planted.tar.gz",
        ("tests/test_recipes.py::QuantifyTests::test_happy_path",
         "more_itertools.recipes.quantify"),  # a doctest, through its load_tests
        ("more_itertools/recipes.py", "    return sum(map(pred, iterable)) + 1\n",
         "    return sum(map(pred, iterable))\n"),
        needs=("coverage",), command="python3 -m unittest"),
    # §2: a PEP 735 `test` group that includes another (`coverage`), resolved on the host.
    "dependency-groups": Project(
        "dependency_groups", "dependency-groups-1.3.2-planted.tar.gz",
        ("tests/test_resolver_class.py::test_lookup_on_trivial_normalization",),
        ("src/dependency_groups/_implementation.py",
         '    return re.sub(r"[-_.]+", "-", name)\n',
         '    return re.sub(r"[-_.]+", "-", name).lower()\n'),
        needs=("coverage",)),
    # §3: `minversion = "8.0"` and no pytest declared anywhere: Debian's pytest 7.2 refuses
    # to start; the venv gets pytest>=8.0 from the index.
    "minversion-8": Project(
        "minver", "", ("tests/test_minver.py::test_clamp_low",),
        ("minver/__init__.py", "min(high, value)", "min(high, max(low, value))"),
        needs=("pytest-9",), files={
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
        needs=("freezegun",), files={
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
}


def _local_index() -> dict[str, str]:
    """This machine's pip index (`pip config list`), as FROGNANO_PIP_* settings."""
    found = subprocess.run([sys.executable, "-m", "pip", "config", "list"],
                           capture_output=True, text=True, timeout=60).stdout
    values: dict[str, str] = {}
    for line in found.splitlines():
        key, _, value = line.partition("=")
        name = key.rsplit(".", 1)[-1]
        if name in ("index-url", "extra-index-url", "find-links"):
            values[name] = value.strip().strip("'\"")
    return {f"FROGNANO_PIP_{name.upper().replace('-', '_')}": value
            for name, value in values.items()}


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


@pytest.mark.parametrize("name", list(PROJECTS))
def test_real_project_without_config_is_set_up_and_fixed(name: str, tmp_path: Path,
                                                         scorecard: Recorder) -> None:
    project = PROJECTS[name]
    index = _local_index()
    if not index:
        pytest.skip("pip has no index configured on this machine")
    record = scorecard(f"13-setup-inferred-{name}",
                       f"{name} without .github/frognano.yml",
                       "setup inferred and run in the network phase; baseline fails on "
                       "the planted bug; the honest fix passes; a branch is committed")
    path, old, new = project.fix
    script = [think_and_call("The bug is here; fix it.", "Edit", file_path=path,
                             old_string=old, new_string=new),
              final_answer("Fixed the planted bug.")]
    script_file = tmp_path / "script.json"
    script_file.write_text(json.dumps(script))
    transcript = tmp_path / "transcript.jsonl"
    with reachable_dir() as root:
        source = _repo(project, root)
        env = {**os.environ, **index, "FROGNANO_STATE_DIR": str(tmp_path / "state"),
               "FROGNANO_WORK_DIR": str(root / "work"), "COLUMNS": "200"}
        proc = subprocess.run(
            [sys.executable, "-m", "frognano", "solve", str(source), "--issue", ISSUE,
             "--model", f"scripted:{script_file}", "--transcript", str(transcript),
             "--max-attempts", "1"],
            env=env, capture_output=True, text=True, timeout=900)
        output = proc.stdout + proc.stderr
        branches = git(source, "branch", "--list", "frognano/*").split()
        fixed = git(source, "show", f"{branches[0]}:{path}") if branches else ""

    records = read_transcript(transcript)
    run = next(r for r in records if r["kind"] == "run")
    setup = next((r for r in records if r["kind"] == "setup"), {})
    baseline = next(r for r in records if r["kind"] == "baseline")
    result = records[-1]
    record.observed = {
        "setup": run.get("setup_note", ""), "setup exit": setup.get("exit_code"),
        "baseline failing": sorted(t for t, s in baseline["tests"].items() if s != "passed"),
        "verdict": result.get("exit_reason"), "branch": branches[0] if branches else "none"}
    assert proc.returncode == 0, output
    assert "inferred (no `setup:` given)" in run["setup_note"], run
    assert "inferred (no `setup:` given)" in output, "solve names the inferred setup"
    assert setup.get("exit_code") == 0, setup
    installed = json.dumps(setup).lower().replace("_", "-")
    for package in project.needs:  # from the local index, through the setup phase only
        assert package in installed, setup
    assert baseline["passed"] is False
    assert set(project.failing) <= {t for t, s in baseline["tests"].items() if s == "failed"}
    assert all(s in ("passed", "failed", "skipped", "xfailed") for s in baseline["tests"].values())
    assert run["test_command"].startswith(project.command), run["test_command"]
    if "pytest" in project.command:  # the harness's guard loads under the venv's pytest
        assert baseline["guard"] is not None, baseline
    assert result["exit_reason"] == "tests_passed" and result["verdict"]["accepted"] is True
    assert result["verdict"]["read_first"] == [], "an honest fix is not flagged"
    assert len(branches) == 1 and new in fixed
