"""`frognano doctor`: one line per thing the bot needs, each with the fix when it is missing.

`frognano up` prints the same lines at start, so a half-configured host says what is
missing before the first issue is labelled instead of failing on it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from bot.settings import BotSettings, webhook_secret_problem

PROBE_SECONDS = 15


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # "ok", "warn" (works, but not as it should) or "fail"
    detail: str
    fix: str = ""

    def line(self) -> str:
        mark = {"ok": "ok  ", "warn": "warn", "fail": "FAIL"}[self.status]
        text = f"{mark}  {self.name:<16} {self.detail}"
        return text + (f"\n      {'':<16} fix: {self.fix}" if self.fix and self.status != "ok"
                       else "")


def _run(argv: list[str]) -> subprocess.CompletedProcess[str] | None:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=PROBE_SECONDS,
                              stdin=subprocess.DEVNULL, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None


def check_bubblewrap() -> Check:
    fix = "apt-get install bubblewrap; if it is installed, allow unprivileged user " \
          "namespaces (sysctl kernel.unprivileged_userns_clone=1, or on Ubuntu 24.04 " \
          "kernel.apparmor_restrict_unprivileged_userns=0)"
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return Check("bubblewrap", "fail", "bwrap is not on PATH", fix)
    # The sandbox needs a user namespace of its own and no network: probe exactly that.
    done = _run([bwrap, "--unshare-all", "--unshare-user", "--ro-bind", "/", "/",
                 "--proc", "/proc", "--dev", "/dev", "true"])
    if done is None or done.returncode != 0:
        why = (done.stderr.strip() if done else "it did not answer") or "unknown error"
        return Check("bubblewrap", "fail", f"{bwrap} cannot start a sandbox: {why}", fix)
    return Check("bubblewrap", "ok", f"{bwrap}, user namespaces work")


def check_binary(name: str, package: str, why: str) -> Check:
    path = shutil.which(name)
    if path is None:
        return Check(name, "fail", f"not on PATH ({why})", f"apt-get install {package}")
    return Check(name, "ok", path)


def check_redis(settings: BotSettings) -> Check:
    if "redis_url" in settings.model_fields_set:
        import redis

        try:
            redis.Redis.from_url(settings.redis_url, socket_timeout=3).ping()
        except (redis.RedisError, ValueError) as exc:
            return Check("redis", "fail", f"{settings.redis_url} does not answer: {exc}",
                         "start that Redis, or unset FROGNANO_REDIS_URL to let "
                         "`frognano up` run a private one")
        return Check("redis", "ok", f"{settings.redis_url} answers")
    found = check_binary("redis-server", "redis-server", "`frognano up` starts a private one")
    return Check("redis", found.status, found.detail, found.fix)


def check_database(settings: BotSettings) -> Check:
    from sqlalchemy import create_engine, text
    from sqlalchemy.exc import SQLAlchemyError

    url = settings.run_database_url
    shown = url.split("@")[-1] if "@" in url else url  # never print a password
    if url.startswith("sqlite:///"):
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    try:
        engine = create_engine(url)
        with engine.connect() as connection:
            connection.execute(text("select 1"))
        engine.dispose()
    except (SQLAlchemyError, OSError, ImportError) as exc:
        return Check("database", "fail", f"{shown}: {str(exc).splitlines()[0][:200]}",
                     "fix FROGNANO_DATABASE_URL (postgresql+psycopg://user:pw@host/db), "
                     "or unset it for SQLite in FROGNANO_STATE_DIR")
    return Check("database", "ok", shown)


def check_model(settings: BotSettings) -> list[Check]:
    fix = "frognano model pull, then export FROGNANO_MODEL=\"$(frognano model path)\""
    from solver.models.spec import ModelSpec, ModelSpecError

    if not settings.model:
        return [Check("model", "fail", "FROGNANO_MODEL is not set", fix)]
    try:
        model = ModelSpec.parse(settings.model)
    except ModelSpecError as exc:
        return [Check("model", "fail", str(exc), fix)]
    if model.served:
        return [Check("model", "ok", f"OpenAI-compatible server {model} (not probed)")]
    if model.kind == "scripted":
        return [Check("model", "warn", f"{model} is a scripted model, for tests",
                      fix)]
    from solver.models.base import ModelLoadError
    from solver.models.gguf_file import read_gguf_info

    try:
        info = read_gguf_info(model.path)
    except ModelLoadError as exc:
        return [Check("model", "fail", str(exc), fix)]
    checks = [Check("model", "ok", f"{info.path} ({info.architecture}, "
                                   f"{info.parameter_count / 1e9:.2f} B parameters)")]
    if settings.chat_template is not None:
        from solver.models.chat_template import load_chat_template

        try:
            load_chat_template(settings.chat_template)
            checks.append(Check("chat template", "ok", f"{settings.chat_template} "
                                                       "(FROGNANO_CHAT_TEMPLATE)"))
        except ModelLoadError as exc:
            checks.append(Check("chat template", "fail", str(exc),
                                "fix or unset FROGNANO_CHAT_TEMPLATE"))
    elif info.chat_template is None:
        checks.append(Check("chat template", "fail", "the GGUF carries no chat template",
                            "use a FrogNano GGUF (bartowski/FrogNano-4B-2609-GGUF), or set "
                            "FROGNANO_CHAT_TEMPLATE to a Jinja template file"))
    else:
        checks.append(Check("chat template", "ok", f"{len(info.chat_template)} characters"))
    checks.append(check_gpu())
    return checks + check_gpus(settings, os.environ, info.path.stat().st_size)


CUDA_BUILD = ('CMAKE_ARGS="-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=native" pip install '
              "--force-reinstall --no-cache-dir llama-cpp-python==0.3.36 (in the venv)")


def check_gpu(environ: Mapping[str, str] | None = None) -> Check:
    """Whether llama.cpp offloads to a GPU; the CUDA build command only where there is a
    GPU to build for (on a CPU-only host it would only fail)."""
    try:
        import llama_cpp
    except ImportError as exc:
        return Check("gpu offload", "fail", f"llama-cpp-python does not import: {exc}",
                     "scripts/install.sh")
    if llama_cpp.llama_supports_gpu_offload():
        return Check("gpu offload", "ok", "llama.cpp was built with GPU offload")
    from frognano.gpus import scan_gpus

    scan = scan_gpus(os.environ if environ is None else environ)
    if not scan.gpus:
        return Check("gpu offload", "ok", f"a CPU build, and no GPU here ({scan.source}): "
                                          "runs on the CPU (slow for a 4B model)")
    return Check("gpu offload", "warn", f"llama.cpp was built for the CPU only, but this "
                                        f"host has {len(scan.gpus)} GPU(s) (slow)", CUDA_BUILD)


def check_gpus(settings: BotSettings, environ: Mapping[str, str], model_bytes: int
               ) -> list[Check]:
    """The GPUs `frognano up` spreads its run workers over, and whether that many copies of
    this model's weights fit on the smallest."""
    from frognano.gpus import scan_gpus

    per_gpu = settings.run_workers_per_gpu
    scan = scan_gpus(environ)
    if not scan.gpus:
        return [Check("gpus", "ok", f"none ({scan.source}): `frognano up` runs {per_gpu} run "
                                    "worker(s) on the CPU")]
    found = Check("gpus", "ok", f"{len(scan.gpus)} from {scan.source}: "
                                f"{', '.join(gpu.describe() for gpu in scan.gpus)}; "
                                f"{per_gpu} run worker(s) each (FROGNANO_RUN_WORKERS_PER_GPU)")
    sizes = [gpu.memory_mib for gpu in scan.gpus if gpu.memory_mib is not None]
    if len(sizes) < len(scan.gpus):  # a device nvidia-smi could not name
        return [found]
    weights_mib, smallest = model_bytes / 2**20, min(sizes)
    fits = int(smallest // weights_mib) if weights_mib else 0
    detail = (f"{per_gpu} × the model's weights ({weights_mib:,.0f} MiB) in {smallest:,} MiB "
              f"(the smallest GPU; {fits} would fit), and each run worker adds its own "
              f"context cache (the context line says how large; docs/BENCHMARKS.md, runs per "
              "GPU, measures both)")
    if per_gpu > fits:
        return [found, Check("vram", "warn", detail, "lower FROGNANO_RUN_WORKERS_PER_GPU")]
    return [found, Check("vram", "ok", detail)]


# Where the receiver listens when no --host/--port says otherwise (frognano/cli.py).
DEFAULT_LOCAL_URL = "http://127.0.0.1:8000"


def public_url_example(local_url: str) -> str:
    """What GitHub posts webhooks to: the receiver at `local_url` behind HTTPS, a reverse
    proxy or a tunnel (the README's "A public URL for GitHub")."""
    local = local_url.rstrip("/")
    return ("the HTTPS address GitHub reaches the receiver at, e.g. "
            "FROGNANO_PUBLIC_URL=https://frognano.example.org (a reverse proxy to "
            f"{local}), or the https://….trycloudflare.com address "
            f"`cloudflared tunnel --url {local}` prints")


DASHBOARD_TOKEN_FIX = "export FROGNANO_DASHBOARD_TOKEN=\"$(openssl rand -hex 16)\""


def dashboard_access(settings: BotSettings, base_url: str) -> tuple[str, str]:
    """How the dashboard is reached here ("ok", "warn" or "fail") and the words for it: the
    `/runs?token=` address to open once, or what to set. It refuses everyone until one of
    its settings is set (bot/settings.DashboardSettings)."""
    runs = base_url.rstrip("/") + "/runs"
    if settings.dashboard_user and not settings.dashboard_password:
        return "fail", "FROGNANO_DASHBOARD_USER is set without FROGNANO_DASHBOARD_PASSWORD"
    if settings.dashboard_token is not None and settings.dashboard_token.get_secret_value():
        return "ok", f"open {runs}?token=$FROGNANO_DASHBOARD_TOKEN once (then a cookie)"
    if settings.dashboard_user:
        return "ok", f"{runs} with HTTP basic auth (user {settings.dashboard_user})"
    return "warn", (f"{runs} refuses everyone: no FROGNANO_DASHBOARD_TOKEN (or "
                    "FROGNANO_DASHBOARD_USER and _PASSWORD) is set")


def check_dashboard(settings: BotSettings, local_url: str = DEFAULT_LOCAL_URL) -> Check:
    # The local address follows `up`'s --host/--port, so the line names the right port.
    base = settings.public_url or local_url
    status, detail = dashboard_access(settings, base)
    fix = (f"{DASHBOARD_TOKEN_FIX}, restart, then open "
           f"{base.rstrip('/')}/runs?token=$FROGNANO_DASHBOARD_TOKEN")
    return Check("dashboard", status, detail, fix)


def check_app(settings: BotSettings, local_url: str = DEFAULT_LOCAL_URL) -> list[Check]:
    setup = "open the receiver's / page and create the App (the setup token is in its log)"
    checks = []
    if settings.github_app_id is None:
        checks.append(Check("app id", "fail", "GITHUB_APP_ID is not set", setup))
    else:
        checks.append(Check("app id", "ok", str(settings.github_app_id)))
    try:
        key = settings.private_key()
    except OSError as exc:
        key, problem = None, f"GITHUB_PRIVATE_KEY_PATH cannot be read: {exc.strerror}"
    else:
        problem = "GITHUB_PRIVATE_KEY (or GITHUB_PRIVATE_KEY_PATH) is not set"
    if key:
        from cryptography.hazmat.primitives.serialization import load_pem_private_key

        try:
            load_pem_private_key(key.encode(), password=None)
        except (ValueError, TypeError) as exc:
            key, problem = None, f"the App private key is not a PEM key: {exc}"
    checks.append(Check("app key", "ok", "a PEM private key") if key
                  else Check("app key", "fail", problem, setup))
    secret = settings.webhook_secret or ""
    secret_problem = webhook_secret_problem(secret)
    if not secret.strip() and not secret_problem:
        checks.append(Check("webhook secret", "fail", "GITHUB_WEBHOOK_SECRET is not set", setup))
    elif secret_problem:
        checks.append(Check("webhook secret", "fail", secret_problem.split(", which")[0],
                            "openssl rand -hex 32, in GITHUB_WEBHOOK_SECRET and the App"))
    else:
        checks.append(Check("webhook secret", "ok", f"{len(secret)} characters"))
    url = settings.public_url
    if not url:
        checks.append(Check("public url", "fail", "FROGNANO_PUBLIC_URL is not set",
                            public_url_example(local_url)))
    elif not url.startswith("https://"):
        checks.append(Check("public url", "warn", f"{url} is not HTTPS",
                            "put the receiver behind an HTTPS reverse proxy: "
                            + public_url_example(local_url)))
    else:
        checks.append(Check("public url", "ok", url))
    return checks


INDEX_PROBE_PROJECT = "setuptools"  # every index that builds sdists serves it


def check_package_index(settings: BotSettings) -> list[Check]:
    """Each configured index (and find-links entry) as the setup phase's pip reaches it:
    through the host-side index endpoint, with its credentials and HTTPS_PROXY."""
    import urllib.error
    import urllib.request

    from sandbox.index_endpoint import IndexEndpoint, redact
    from solver.setup.package_index import PackageIndex

    index = PackageIndex.from_settings(settings)
    sources = index.sources()
    endpoint = IndexEndpoint(sources, os.getuid(), os.getgid(),
                             proxy=index.sandbox_fields()["outbound_proxy"], tcp=True)
    probes = [(f"/i/0/{INDEX_PROBE_PROJECT}/", sources.index_url, "FROGNANO_PIP_INDEX_URL")]
    probes += [(f"/i/{k}/{INDEX_PROBE_PROJECT}/", url, "FROGNANO_PIP_EXTRA_INDEX_URL")
               for k, url in enumerate(sources.extra_index_urls, start=1)]
    probes += [(f"/l/{k}/", url, "FROGNANO_PIP_FIND_LINKS")
               for k, url in enumerate(sources.find_links)]
    checks = []
    try:
        for path, url, setting in probes:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{endpoint.port}{path}",
                                            timeout=PROBE_SECONDS) as answer:
                    status, why = answer.status, ""
            except urllib.error.HTTPError as exc:
                status, why = exc.code, str(exc.reason)
            except OSError as exc:
                status, why = 0, f"no answer in {PROBE_SECONDS} s ({exc})"
            checks.append(_index_check(path, redact(url), setting, status, why,
                                       configured=setting in _set_aliases(settings)))
    finally:
        endpoint.close()
    return checks


def _set_aliases(settings: BotSettings) -> set[str]:
    fields = type(settings).model_fields
    return {str(fields[name].alias) for name in settings.model_fields_set if name in fields}


def _index_check(path: str, shown: str, setting: str, status: int, why: str, *,
                 configured: bool) -> Check:
    name = "package index" if setting != "FROGNANO_PIP_FIND_LINKS" else "find links"
    if status == 200:
        return Check(name, "ok", f"{shown} answers through the setup phase's index endpoint")
    if status == 404 and setting == "FROGNANO_PIP_EXTRA_INDEX_URL":
        return Check(name, "ok", f"{shown} answers (it has no {INDEX_PROBE_PROJECT}: pip "
                                 "finds that elsewhere)")
    fix = (f"fix {setting} (its URL, its credentials), or HTTPS_PROXY / NO_PROXY if the "
           "host reaches it only through a proxy")
    detail = f"{shown} does not answer the setup phase's index endpoint" + (
        f": {status} {why}" if status else f": {why}")
    if status == 404:
        detail = f"{shown} has no {INDEX_PROBE_PROJECT}, which most setups need"
    # PyPI by default, with nothing configured: a host without it still runs repositories
    # that need no setup, so warn; an index the operator set must work.
    return Check(name, "fail" if configured else "warn", detail,
                 fix if configured else f"set {setting} to an index this host reaches")


def sandbox_limits() -> list[Check]:
    """Which limits bind a sandbox as a whole here and which only each process: said, so
    an operator need not read the code to learn that memory is watched, not enforced."""
    from sandbox.enforcement import describe_host

    return [Check("sandbox limits", "ok", line) for line in describe_host()]


def check_services(**roots: str) -> list[Check]:
    """The test services a repository's `services:` may ask for (sandbox/services.py):
    which this worker can start. A missing one warns: only the repositories that ask for
    it fail, each with a comment naming it."""
    from sandbox.services import available

    package = {"postgresql": "postgresql", "redis": "redis-server"}
    return [Check(f"service {name}", "ok" if ok else "warn", detail,
                  f"apt-get install {package[name]} (scripts/install.sh installs it)")
            for name, (ok, detail) in available(**roots).items()]


def check_sandbox_python(prefixes: list[str] | None = None) -> Check:
    """The Python the sandbox's commands get: the worker's own, with its pytest and
    database clients, only when the sandbox's uid can enter every prefix; else the
    system's python3 without them, which repositories that install nothing then lack."""
    from sandbox.bubblewrap import interpreter, reachable
    from sandbox.uid_pool import POOL_BASE

    found = prefixes if prefixes is not None else interpreter()[1]
    uid = POOL_BASE if os.geteuid() == 0 else os.getuid()  # root runs them as pool uids
    blocked = [prefix for prefix in found if not reachable(prefix, uid, uid)]
    if not blocked:
        return Check("sandbox python", "ok", f"{', '.join(found)} (uid {uid} can enter it)")
    return Check("sandbox python", "warn", f"uid {uid} cannot enter {', '.join(blocked)}: "
                 "commands in the sandbox get the system python3 without the worker's "
                 "packages", "run scripts/install.sh again (as root it opens its venv to "
                 "the sandbox's uids), or chmod o+x every parent directory")


def check_context(settings: BotSettings, environ: Mapping[str, str]) -> Check:
    """The context each run worker's model gets, and why: the one `frognano worker` and
    `up` choose (frognano/model_host.py), the preset's unless the memory cuts it."""
    from frognano.model_host import run_context

    choice = run_context(settings, environ, copies=settings.run_workers_per_gpu)
    cut = "cut from" in choice.reason
    return Check("context", "warn" if "may not load" in choice.reason else "ok",
                 choice.reason, "a smaller model or FROGNANO_KV_CACHE_TYPE=q8_0, or fewer "
                 "FROGNANO_RUN_WORKERS_PER_GPU" if cut else "")


def all_checks(settings: BotSettings, local_url: str = DEFAULT_LOCAL_URL) -> list[Check]:
    """Every check, its addresses naming `local_url`, where the receiver listens."""
    sections: list[Callable[[], list[Check]]] = [
        lambda: [check_bubblewrap()],
        sandbox_limits,
        lambda: [check_sandbox_python()],
        check_services,
        lambda: [check_binary("git", "git", "the repo cache and the patch")],
        lambda: [check_redis(settings)],
        lambda: [check_database(settings)],
        lambda: check_model(settings),
        lambda: [check_context(settings, os.environ)],
        lambda: check_app(settings, local_url),
        lambda: [check_dashboard(settings, local_url)],
        lambda: check_package_index(settings),
    ]
    return [check for section in sections for check in section()]


def report(checks: list[Check], stream: IO[str]) -> bool:
    """Print one line per check; whether nothing failed."""
    for check in checks:
        stream.write(check.line() + "\n")
    failed = sum(check.status == "fail" for check in checks)
    stream.write(f"{failed} of {len(checks)} checks failed\n" if failed
                 else f"all {len(checks)} checks passed\n")
    return not failed
