"""Scenario: the setup cache (issue 20, "a second run sets up from a cache").

A real project (src/ layout, setuptools built in pip's isolated build, a test requirement
file, an editable install) goes through the real harness, real bubblewrap and real pip
against this machine's package index, in a new run directory each time, as the worker
makes one per run. The second run must set up from the cache (no venv made, nothing
fetched, nothing installed) and still pass its tests from its own workspace path; a
changed requirement file must miss. Then the attack: a setup that plants a link in the
venv to the cache on the host, and a model whose Bash writes into its venv (a start-up
`.pth`, a changed module, writes through the link), in the run that stored the entry and
in one that reused it. Neither the cache nor the next run's venv may see any of it.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from sandbox import SandboxConfig, open_sandbox
from sandbox.index_endpoint import PackageSources
from sandbox.trees import walk_tree
from solver.agent.harness import SolveResult, solve
from solver.agent.transcript import Transcript, read_transcript
from solver.models.scripted import ScriptedModel, final_answer, think_and_call
from solver.run import open_workspace
from solver.setup.python_setup import infer_python_setup
from solver.verdict.repo_tests import PYTEST_COMMAND
from tests.conftest import git, make_repo
from tests.reliability.conftest import Recorder
from tests.support.pip_config import pip_config
from tests.support.sandbox_support import HAVE_BWRAP, reachable_dir

pytestmark = [pytest.mark.reliability,
              pytest.mark.skipif(not HAVE_BWRAP, reason="bubblewrap is not installed")]

PROJECT = {
    "pyproject.toml": '[build-system]\nrequires = ["setuptools>=61"]\n'
                      'build-backend = "setuptools.build_meta"\n\n[project]\n'
                      'name = "tally"\nversion = "1.0"\n\n'
                      '[tool.setuptools.packages.find]\nwhere = ["src"]\n',
    "requirements-test.txt": "iniconfig\n",
    "src/tally/__init__.py": "def count(items):\n    return len(items) + 1\n",
    # The import goes through the editable install (src/ is on no path otherwise), and
    # must lead to this run's workspace as the sandbox sees it.
    "tests/test_tally.py": "import importlib.metadata\n\nimport iniconfig\nimport tally\n\n\n"
                           "def test_count():\n    assert tally.count([1, 2]) == 2\n\n\n"
                           "def test_installed_here():\n"
                           "    assert tally.__file__.startswith('/workspace/src/')\n"
                           "    assert importlib.metadata.version('tally') == '1.0'\n"
                           "    assert iniconfig.__name__ == 'iniconfig'\n",
}
FIX = think_and_call("The count is off by one.", "Edit", file_path="src/tally/__init__.py",
                     old_string="len(items) + 1", new_string="len(items)")
SITE = "/frognano/venv/lib/python3*/site-packages"
# The model's moves against its venv: a start-up hook, a changed module of a dependency,
# and writes through the link a hostile setup planted (to the cache's host path).
ATTACK = (f"echo 'import os' > {SITE}/zz_planted.pth; "
          f"echo 'PLANTED = 1' >> {SITE}/iniconfig/__init__.py; "
          "mkdir -p /frognano/venv/cache-link/entries/x 2>/dev/null; "
          "echo planted > /frognano/venv/cache-link/planted 2>/dev/null; "
          "ls /frognano/venv/lib/python3*/site-packages | head -3; true")


def _local_sources(cache: Path) -> PackageSources:
    """This machine's pip index (`pip config list`: file:// indexes and a wheel folder),
    with the caches under `cache`."""
    values = pip_config()
    indexes = values.get("index-url", []) + values.get("extra-index-url", [])
    if not indexes:
        pytest.skip("pip has no index configured on this machine")
    return PackageSources(indexes[0], tuple(indexes[1:]), tuple(values.get("find-links", [])),
                          cache_dir=cache / "package-cache",
                          venv_cache_dir=cache / "venv-cache", cache_max_bytes=4 * 1024**3)


@dataclass
class Run:
    result: SolveResult
    setup: dict  # the transcript's setup record


@dataclass
class Runs:
    """Runs of one repository, each in a run directory of its own, sharing the caches."""

    root: Path
    source: Path
    sources: PackageSources
    count: int = 0

    def solve(self, *steps: str, setup_extra: str = "") -> Run:
        self.count += 1
        run_dir = self.root / "work" / f"run-{self.count}"
        host = open_workspace(self.source, None, run_dir)
        inferred = infer_python_setup(host.work_tree)
        assert inferred is not None
        config = SandboxConfig(workspace=host.work_tree, private_dir=run_dir / "private",
                               package_sources=self.sources)
        model = ScriptedModel([FIX, *steps, final_answer("Fixed the count.")])
        transcript = run_dir.parent / f"run-{self.count}.jsonl"
        with open_sandbox("bubblewrap", config) as sandbox, Transcript(transcript) as out:
            result = solve(model, sandbox, "count() is off by one", PYTEST_COMMAND, out,
                           repo=host, setup_command=inferred.command + setup_extra)
        setup = next(r for r in read_transcript(transcript) if r["kind"] == "setup")
        return Run(result, setup)


@pytest.fixture
def runs(tmp_path: Path) -> Iterator[Runs]:
    # The caches under pytest's tmp_path: a root-only directory no sandbox uid can reach.
    with reachable_dir() as root:
        yield Runs(root, make_repo(root / "src", PROJECT), _local_sources(tmp_path))


def _tree_digest(root: Path) -> str:
    """Every path, kind, mode and content under `root` (links by their target)."""
    digest = hashlib.sha256()
    for path, info in sorted(walk_tree(root, max_entries=1_000_000, max_seconds=120)):
        digest.update(f"{path}\0{info.st_mode}\0".encode())
        full = root / path
        if full.is_symlink():
            digest.update(os.readlink(full).encode())
        elif full.is_file():
            digest.update(full.read_bytes())
    return digest.hexdigest()


def _download_marks(sources: PackageSources) -> dict[str, int]:
    """The download cache's files and their last use (the endpoint touches a hit)."""
    folder = sources.cache_dir / "sha256" if sources.cache_dir else None
    return {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} if folder else {}


def test_second_run_sets_up_from_the_cache(runs: Runs, scorecard: Recorder) -> None:
    record = scorecard("setup-cache-second-run", "a second run of the same repository",
                       "sets up from the venv cache: no venv made, nothing fetched or "
                       "installed; its tests pass from its own workspace")
    first = runs.solve()
    assert first.setup["exit_code"] == 0, first.setup
    assert "Successfully installed" in first.setup["output_tail"], first.setup
    assert "setup cache: stored as entry" in first.setup["output_tail"], first.setup
    assert first.result.tests_passed, first.result
    downloads = _download_marks(runs.sources)
    assert downloads, "the first run fetched through the download cache"
    second = runs.solve()
    tail = second.setup["output_tail"]
    record.observed = {"first setup s": first.setup["seconds"],
                       "second setup s": second.setup["seconds"], "second output": tail}
    assert "restored from entry" in tail and "the setup command did not run" in tail, tail
    assert "Collecting" not in tail and "Successfully installed" not in tail, tail
    assert second.setup["network"] == [], second.setup
    assert _download_marks(runs.sources) == downloads, "the index endpoint served nothing"
    assert second.result.tests_passed, second.result
    assert second.result.baseline is not None
    assert second.result.baseline.tests["tests/test_tally.py::test_installed_here"] \
        == "passed", "the cached editable install leads to this run's workspace"
    assert second.setup["seconds"] < 0.5 * first.setup["seconds"], record.observed


def test_changed_requirement_file_misses(runs: Runs, scorecard: Recorder) -> None:
    record = scorecard("setup-cache-input-changed", "a run after the requirement file changed",
                       "misses the venv cache: setup runs and installs the new requirement")
    first = runs.solve()
    assert "setup cache: stored as entry" in first.setup["output_tail"], first.setup
    (runs.source / "requirements-test.txt").write_text("iniconfig\npackaging\n")
    git(runs.source, "commit", "-qam", "test with packaging too")
    second = runs.solve()
    tail = second.setup["output_tail"]
    record.observed = {"second output": tail[-600:]}
    assert "restored from entry" not in tail, tail
    assert "Successfully installed" in tail and "packaging" in tail, tail
    assert "setup cache: stored as entry" in tail, tail
    assert second.result.tests_passed, second.result


def test_sandbox_cannot_alter_the_cached_venv(runs: Runs, scorecard: Recorder) -> None:
    record = scorecard("setup-cache-hostile", "a setup's link and the model's Bash against "
                       "the cached venv",
                       "the cache and the next run's venv hold none of the model's writes; "
                       "the link is copied as a link, never followed on the host")
    cache = runs.sources.venv_cache_dir
    assert cache is not None
    plant = f" && ln -s {cache} /frognano/venv/cache-link"  # the host's path, as a guess
    attack = think_and_call("Now the venv.", "Bash", command=ATTACK)
    first = runs.solve(attack, setup_extra=plant)
    assert "setup cache: stored as entry" in first.setup["output_tail"], first.setup
    entries = [p for p in (cache / "entries").iterdir() if not p.name.startswith(".")]
    assert len(entries) == 1
    stored = _tree_digest(entries[0])
    assert not list(entries[0].glob("venv/lib/python3*/site-packages/zz_planted.pth"))
    second = runs.solve(attack, setup_extra=plant)  # a hit: the model attacks its copy
    assert "restored from entry" in second.setup["output_tail"], second.setup
    third = runs.solve(setup_extra=plant)
    venv = runs.root / "work" / "run-3" / "private" / "venv"
    site = next(venv.glob("lib/python3*/site-packages"))
    record.observed = {"entry unchanged": _tree_digest(entries[0]) == stored,
                       "planted in run 3": sorted(p.name for p in site.glob("zz_*"))}
    assert _tree_digest(entries[0]) == stored, "the cached venv changed"
    assert not (site / "zz_planted.pth").exists()
    assert "PLANTED" not in (site / "iniconfig" / "__init__.py").read_text()
    assert (venv / "cache-link").is_symlink(), "the setup's link stays a link"
    assert not (cache / "planted").exists() and not (cache / "entries" / "x").exists()
    assert third.result.tests_passed and second.result.tests_passed


def test_storing_the_cache_never_follows_a_link_setup_left(
        runs: Runs, tmp_path: Path, scorecard: Recorder) -> None:
    """Setup leaves links in its venv to a host folder shaped like a venv's lib (its pip
    has byte code), under names the store's trim of the installer's byte code walks:
    `lib-host` (a `lib*`), and `site-packages` and `pip` of a `python*` folder of its own.
    The store copies them as links; the trim, run as the worker, must not follow them."""
    record = scorecard("6zl-hostile-venv-link-bytecode",
                       "Hostile issue: setup leaves links in its venv (`lib-host`, "
                       "`python3.99/site-packages`, `python3.98/site-packages/pip`) to a "
                       "host folder holding pip's `__pycache__`, then the venv is stored "
                       "in the setup cache",
                       "the store copies the links as links and trims only the run's own "
                       "byte code: the host folder keeps every file")
    host = tmp_path / "host-lib"
    caches = [host / "python3.11" / "site-packages" / "pip" / "__pycache__",
              host / "python3.11" / "site-packages" / "__pycache__",
              host / "pip" / "__pycache__"]
    for cache in caches:
        cache.mkdir(parents=True)
        (cache / "keep.cpython-311.pyc").write_bytes(b"host byte code")
    venv = "/frognano/venv"
    plant = (f" && ln -s {host} {venv}/lib-host"
             f" && mkdir -p {venv}/lib/python3.99 {venv}/lib/python3.98/site-packages"
             f" && ln -s {host}/python3.11/site-packages {venv}/lib/python3.99/site-packages"
             f" && ln -s {host} {venv}/lib/python3.98/site-packages/pip")
    first = runs.solve(setup_extra=plant)
    tail = first.setup["output_tail"]
    kept = [str(c.relative_to(host)) for c in caches if (c / "keep.cpython-311.pyc").exists()]
    record.observed = {"stored": "setup cache: stored as entry" in tail,
                       "host byte code kept": f"{len(kept)} of {len(caches)}"}
    assert "setup cache: stored as entry" in tail, tail
    assert len(kept) == len(caches), f"the store deleted host byte code: kept only {kept}"
    cache = runs.sources.venv_cache_dir
    assert cache is not None
    [entry] = [p for p in (cache / "entries").iterdir() if not p.name.startswith(".")]
    assert (entry / "venv" / "lib-host").is_symlink(), "the link is stored as a link"
    site = next((entry / "venv").glob("lib/python3.1*/site-packages"))
    assert not list((site / "pip").rglob("__pycache__")), "the run's own are trimmed"
    assert first.result.tests_passed, first.result
