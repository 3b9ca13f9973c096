"""FROGNANO_PIP_*: what the setup phase gets, and that only the setup phase gets it.

The sandbox half runs real bubblewrap: the agent's own Bash call and a harness command
without network look for the index and its variable, and must find neither.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox import SandboxConfig, open_sandbox
from tests.sandbox_support import HAVE_BWRAP, make_git_workspace, reachable_dir
from workers.package_index import PackageIndex


def test_settings_become_pip_variables_and_local_directories(tmp_path: Path) -> None:
    (tmp_path / "idx" / "simple").mkdir(parents=True)
    (tmp_path / "wheels").mkdir()
    index = PackageIndex.from_settings(
        f"file://{tmp_path}/idx/simple",
        " https://example.org/simple  ", f"{tmp_path}/wheels file://{tmp_path}/gone")
    assert index.env() == {"PIP_INDEX_URL": f"file://{tmp_path}/idx/simple",
                           "PIP_EXTRA_INDEX_URL": "https://example.org/simple",
                           "PIP_FIND_LINKS": f"{tmp_path}/wheels file://{tmp_path}/gone"}
    # A PEP 503 index links to ../../files: its root is bound; a URL is not a path; a
    # directory that does not exist is not bound (bwrap would fail the whole setup).
    assert index.local_paths() == [(tmp_path / "idx").resolve(),
                                   (tmp_path / "wheels").resolve()]
    assert PackageIndex.from_settings(None, "", None).env() == {}


@pytest.mark.skipif(not HAVE_BWRAP, reason="bubblewrap is not installed")
def test_only_the_setup_phase_sees_the_index() -> None:
    with reachable_dir() as root:
        index_dir = root / "index"
        index_dir.mkdir()
        (index_dir / "marker.txt").write_text("the index\n")
        (index_dir / "marker.txt").chmod(0o666)  # only the read-only bind keeps it
        index_dir.chmod(0o755)
        config = SandboxConfig(workspace=make_git_workspace(root), private_dir=root / "private",
                               setup_env={"PIP_INDEX_URL": f"file://{index_dir}"},
                               setup_ro_binds=[index_dir])
        probe = f'echo "var=${{PIP_INDEX_URL:-none}}"; cat {index_dir}/marker.txt || true'
        with open_sandbox("bubblewrap", config) as sandbox:
            setup = sandbox.exec(probe, network=True)
            tests = sandbox.exec(probe)
            agent = sandbox.run_tool("Bash", {"command": probe})
            write = sandbox.exec(f"echo x > {index_dir}/marker.txt", network=True)
        after = (index_dir / "marker.txt").read_text()
    assert setup.ok, setup
    assert f"var=file://{index_dir}" in setup.stdout and "the index" in setup.stdout
    for seen in (tests.stdout + tests.stderr, agent):
        assert "var=none" in seen and "the index" not in seen, seen
    assert not write.ok, "bound read-only"
    assert after == "the index\n"


def test_unsafe_local_gives_the_variables_to_setup_alone() -> None:
    with reachable_dir() as root:
        config = SandboxConfig(workspace=make_git_workspace(root), private_dir=root / "private",
                               setup_env={"PIP_INDEX_URL": "file:///nowhere"})
        probe = 'echo "var=${PIP_INDEX_URL:-none}"'
        with open_sandbox("unsafe-local", config) as sandbox:
            setup, tests = sandbox.exec(probe, network=True), sandbox.exec(probe)
            agent = sandbox.run_tool("Bash", {"command": probe})
    assert "var=file:///nowhere" in setup.stdout
    assert "var=none" in tests.stdout and "var=none" in agent
