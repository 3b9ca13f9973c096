"""FROGNANO_PIP_* and the setup egress settings: what the sandbox is built with, and that
the index URLs (and the token in one) stay on the host while the setup phase's pip still
installs from them.

The sandbox half runs real bubblewrap and real pip against a private index behind basic
auth (tests/support/private_index.py): setup installs a package only that index has, and neither
setup, the agent's own Bash call nor a harness command without network finds the token,
the index's URL or the local index directory.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.settings import BotSettings
from sandbox import SandboxConfig, open_sandbox
from sandbox.index_endpoint import PackageSources
from solver.setup.package_index import PackageIndex
from tests.support.private_index import make_wheel, private_index
from tests.support.sandbox_support import HAVE_BWRAP, make_git_workspace, reachable_dir

TOKEN = "tok-8d2e61"


def test_settings_become_the_sandboxs_network_config(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {
            "FROGNANO_PIP_INDEX_URL": f"https://ci:{TOKEN}@pypi.corp/simple",
            "FROGNANO_PIP_EXTRA_INDEX_URL": " file:///opt/pypi/simple  https://x.example/s ",
            "FROGNANO_PIP_FIND_LINKS": "/opt/wheels",
            "FROGNANO_SETUP_EGRESS_HOSTS": "github.com, .corp.example",
            "FROGNANO_SETUP_EGRESS_ALLOW": "10.0.0.0/8",
            "HTTPS_PROXY": "http://proxy.corp:3128", "NO_PROXY": "pypi.corp,.internal",
            "FROGNANO_SETUP_FETCH_MAX_GB": "0.5",
            "FROGNANO_STATE_DIR": str(tmp_path / "state")}.items():
        monkeypatch.setenv(name, value)
    index = PackageIndex.from_settings(BotSettings(_env_file=None))
    fields = index.sandbox_fields()
    sources = fields["package_sources"]
    shown = repr(index) + repr(SandboxConfig(workspace=tmp_path, private_dir=tmp_path, **fields))
    assert TOKEN not in shown and "https://***@pypi.corp/simple" in shown  # a log line
    assert sources.index_url == f"https://ci:{TOKEN}@pypi.corp/simple"
    assert sources.extra_index_urls == ("file:///opt/pypi/simple", "https://x.example/s")
    assert sources.find_links == ("/opt/wheels",)
    assert sources.cache_dir == (tmp_path / "state" / "package-cache").resolve()
    assert sources.fetch_max_bytes == 512 * 1024**2  # each setup's budget (issue 30 §2)
    assert fields["egress_hosts"] == ("github.com", ".corp.example")
    assert fields["egress_allow"] == ("10.0.0.0/8",)
    assert fields["outbound_proxy"].url == "http://proxy.corp:3128"
    assert fields["outbound_proxy"].no_proxy == ("pypi.corp", ".internal")
    # Inside, pip is told the endpoint's paths: no URL, no token, no local path.
    inside = " ".join(sources.sandbox_env("http://127.0.0.1:3141").values())
    assert TOKEN not in inside and "corp" not in inside and "/opt" not in inside
    default = PackageIndex().sandbox_fields()["package_sources"]
    assert default == PackageSources() and default.hosts() == ("pypi.org",
                                                               "files.pythonhosted.org")


PROBE = "env | sort; ls /opt/pypi 2>&1 | head -1"
# Inside bubblewrap, every file the sandbox can read too (unsafe-local reads the host's).
FILES_PROBE = PROBE + "; grep -rs {token} /frognano /tmp /etc /run 2>/dev/null | head -3"
INSTALL = ('python3 -m venv "$HOME/v" && "$HOME/v/bin/pip" install --no-deps corp-helper 2>&1 '
           '| tail -2 && "$HOME/v/bin/python" -c "import corp_helper; print(corp_helper.VALUE)"')


@pytest.mark.skipif(not HAVE_BWRAP, reason="bubblewrap is not installed")
@pytest.mark.parametrize("backend", ["bubblewrap", "unsafe-local"])
def test_setup_installs_from_a_private_index_it_never_sees(backend: str) -> None:
    with reachable_dir() as root:
        wheel = make_wheel(root, "corp-helper", "1.0", "VALUE = 42\n")
        with private_index(TOKEN, [wheel]) as index:
            sources = PackageSources(index.url, ("file:///opt/pypi/simple",))
            config = SandboxConfig(workspace=make_git_workspace(root),
                                   private_dir=root / "private", package_sources=sources)
            probe = (FILES_PROBE if backend == "bubblewrap" else PROBE).format(token=TOKEN)
            with open_sandbox(backend, config) as sandbox:
                install = sandbox.exec(INSTALL, network=True, timeout=120)
                setup = sandbox.exec(probe, network=True)
                tests = sandbox.exec(probe)
                agent = sandbox.run_tool("Bash", {"command": probe})
    assert install.ok and install.stdout.strip().endswith("42"), install
    assert any(r["path"].startswith("/files/corp_helper") and r["authorized"]
               for r in index.requests), index.requests
    assert "PIP_INDEX_URL=http://127.0.0.1:" in setup.stdout, setup
    for seen in (install.stdout + install.stderr, setup.stdout + setup.stderr,
                 tests.stdout + tests.stderr, agent):
        assert TOKEN not in seen and f":{index.port}" not in seen, seen
    for seen in (tests.stdout, agent):
        assert "PIP_INDEX_URL" not in seen, seen
    if backend == "bubblewrap":  # the file:// index is read by the host, never bound
        assert "No such file or directory" in setup.stdout, setup


UV_INSTALL = ('uv venv -q "$HOME/v" && uv pip install -q --python "$HOME/v/bin/python" '
              'corp-helper 2>&1 | tail -2 && "$HOME/v/bin/python" -c '
              '"import corp_helper; print(corp_helper.VALUE)"; command -v uv; '
              'ls -d "$UV_CACHE_DIR"; : > "$(command -v uv)" || echo uv-read-only')
UV_PROBE = "command -v uv; echo UV_CACHE_DIR=${UV_CACHE_DIR-}; ls /run/frognano/bin 2>&1"


@pytest.mark.skipif(not HAVE_BWRAP, reason="bubblewrap is not installed")
def test_uv_in_setup_reaches_the_same_private_index_and_leaves_no_cache() -> None:
    """uv, bound read-only into the setup phase alone, installs from a private index
    through the same endpoint as pip (the token and the URL never inside), with a cache
    of the setup's own that the host removes after it (issue 29 §2). Bubblewrap only: the
    unsafe-local backend's login shell takes Debian's PATH from /etc/profile, so there
    the inferred setup's `uv` is not found and pip, its fallback, installs."""
    index_settings = PackageIndex.from_settings(BotSettings(_env_file=None))
    with reachable_dir() as root:
        wheel = make_wheel(root, "corp-helper", "1.0", "VALUE = 42\n")
        with private_index(TOKEN, [wheel]) as index:
            config = SandboxConfig(workspace=make_git_workspace(root),
                                   private_dir=root / "private",
                                   package_sources=PackageSources(index.url),
                                   setup_tools=index_settings.tools)
            with open_sandbox("bubblewrap", config) as sandbox:
                install = sandbox.exec(UV_INSTALL, network=True, timeout=120)
                left = sorted(p.name for p in (root / "private").iterdir())
                agent = sandbox.run_tool("Bash", {"command": UV_PROBE})
    assert install.ok and "42\n" in install.stdout, install
    assert any(r["path"].startswith("/files/corp_helper") and r["authorized"]
               for r in index.requests), index.requests
    assert TOKEN not in install.stdout + install.stderr
    assert "uv-read-only" in install.stdout, install
    assert "uv-cache" in install.stdout and "uv-cache" not in left, left
    assert "UV_CACHE_DIR=\n" in agent  # the setup phase's alone
    assert "/run/frognano/bin/uv\n" in install.stdout, install
    assert "/run/frognano/bin/uv" not in agent and "No such file" in agent, agent
