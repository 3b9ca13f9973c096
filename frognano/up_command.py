"""`frognano up`: the whole bot on one host, as one supervised process tree.

Children, each in its own process group so a Ctrl-C in the terminal reaches only this
supervisor, which then stops them in order:

- a private `redis-server` (only when no FROGNANO_REDIS_URL is configured), with an
  append-only file under the state directory, so queued tasks survive a restart;
- the webhook receiver; without App credentials it still serves the setup pages;
- one control worker and N run workers per GPU (frognano/gpus.py: each pinned to its GPU
  with CUDA_VISIBLE_DEVICES, each with its own model; on the CPU N in all), only when the
  App and the model are configured.

A child that dies unexpectedly is restarted with backoff. Shutdown stops the receiver
first (no new deliveries), then lets the workers finish their running tasks (Celery's warm
shutdown; tasks are acknowledged late, so one cut short is redelivered), then saves and
stops Redis.
"""

from __future__ import annotations

import argparse
import fcntl
import io
import os
import shutil
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import redis

from bot.settings import BotSettings, credentials_path
from frognano.doctor import all_checks
from frognano.doctor import report as doctor_report
from frognano.gpus import plan_run_workers, scan_gpus
from frognano.supervisor import (
    DEFAULT_WORKER_GRACE_S,
    EXIT_BAD_SETUP,
    EXIT_FAILED,
    EXIT_OK,
    READY_TIMEOUT_S,
    Child,
    ChildSpec,
    Output,
    StopRequests,
    Supervisor,
)
from solver.models.spec import ModelSpec

SETUP_TOKEN_ENV = "FROGNANO_SETUP_TOKEN"  # from `up` to its receiver child only


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _port_taken(host: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            probe.bind((host, port))
        except OSError:
            return True
    return False


def _redis_argv(binary: str, directory: Path, port: int) -> list[str]:
    return [binary, "--port", str(port), "--bind", "127.0.0.1", "--protected-mode", "yes",
            "--dir", str(directory), "--appendonly", "yes", "--appendfsync", "everysec",
            "--daemonize", "no", "--logfile", ""]


def _wait_for_redis(url: str, child: Child, timeout: float, stop: threading.Event) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and child.running() and not stop.is_set():
        try:
            with redis.Redis.from_url(url, socket_connect_timeout=0.5,
                                      socket_timeout=1) as probe:
                probe.ping()  # a server still loading its AOF answers LOADING, an error
            return True
        except redis.RedisError:
            time.sleep(0.05)
    return False


def start_private_redis(supervisor: Supervisor, directory: Path, port: int | None,
                        env: dict[str, str]) -> str | None:
    """Start redis-server and return its URL, or None (the reason is already printed)."""
    binary = shutil.which("redis-server")
    if binary is None:
        supervisor.output.note("redis-server is not installed (apt install redis-server), "
                               "and no FROGNANO_REDIS_URL is configured")
        return None
    directory.mkdir(parents=True, exist_ok=True)
    # A free port can be taken between probing and binding; try a few.
    for _ in range(1 if port is not None else 3):
        chosen = port if port is not None else _free_port()
        url = f"redis://127.0.0.1:{chosen}/0"
        spec = ChildSpec("redis", "redis", _redis_argv(binary, directory, chosen),
                         essential=True)
        child = supervisor.add(spec, env)
        if _wait_for_redis(url, child, READY_TIMEOUT_S, supervisor.stops.graceful):
            supervisor.redis_url = url
            return url
        if supervisor.stops.graceful.is_set():
            supervisor.redis_url = url  # stopped by the shutdown, which saves
            return None
        child.kill_group()
        child.drain()
        supervisor.children.remove(child)
    supervisor.output.note(f"redis-server did not start; see its output above ({directory})")
    return None


# --- composition --------------------------------------------------------------------------


def _missing_for_workers(settings: BotSettings) -> list[str]:
    missing = []
    if settings.github_app_id is None:
        missing.append("GITHUB_APP_ID")
    try:
        key = settings.private_key()
    except OSError:
        key = None
    if not key:
        missing.append("GITHUB_PRIVATE_KEY (or a readable GITHUB_PRIVATE_KEY_PATH)")
    if not settings.model:
        missing.append("FROGNANO_MODEL")
    return missing


def _browser_host(host: str) -> str:
    return "localhost" if host in ("0.0.0.0", "::", "") else host


def _wait_until_listening(host: str, port: int, child: Child, timeout: float,
                          stop: threading.Event) -> bool:
    target = "127.0.0.1" if host in ("0.0.0.0", "") else "::1" if host == "::" else host
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and child.running() and not stop.is_set():
        try:
            with socket.create_connection((target, port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.05)
    return False


@contextmanager
def _state_lock(state_dir: Path) -> Iterator[bool]:
    """Two `up`s on one state directory would share (and corrupt) one Redis data dir."""
    with (state_dir / "up.lock").open("w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True


def _banner(url: str, redis_text: str, workers_text: str, state_dir: Path,
            next_step: str, dashboard: str = "") -> str:
    return "\n".join([
        "",
        "frognano is up",
        f"  receiver  {url}  (webhooks at {url}webhooks/github, health at {url}healthz)",
        *([f"  dashboard {dashboard}"] if dashboard else []),
        f"  workers   {workers_text}",
        f"  redis     {redis_text}",
        f"  state     {state_dir}",
        # Not the working directory, which is often the clone (bot/setup_flow.py).
        f"  app keys  {credentials_path(state_dir)} (written by setup, mode 0600)",
        f"  next      {next_step}",
        "  stop      Ctrl-C; queued work is kept for the next `frognano up`",
        "", ""])


def _dashboard_text(settings: BotSettings, url: str) -> str:
    """The banner's dashboard line: where the run pages are, and how to get in."""
    from frognano.doctor import DASHBOARD_TOKEN_FIX, dashboard_access

    status, detail = dashboard_access(settings, url)
    if status == "ok":
        return detail
    return f"{detail}; {DASHBOARD_TOKEN_FIX} and restart"


def run_up(settings: BotSettings, *, host: str, port: int, workers_per_gpu: int,
           state_dir: Path, redis_port: int | None = None,
           worker_grace_s: float = DEFAULT_WORKER_GRACE_S, stream: IO[str] | None = None
           ) -> int:
    """Run the bot on this host until SIGINT/SIGTERM; return the exit status."""
    output = Output(stream or sys.stdout)
    if workers_per_gpu < 1:
        output.note(f"--workers-per-gpu must be at least 1, not {workers_per_gpu}")
        return EXIT_BAD_SETUP
    state_dir.mkdir(parents=True, exist_ok=True)
    if _port_taken(host, port):
        output.note(f"{host}:{port} is already in use; choose another with --port")
        return EXIT_BAD_SETUP
    with _state_lock(state_dir) as locked:
        if not locked:
            output.note(f"another `frognano up` is running with {state_dir}")
            return EXIT_BAD_SETUP
        with StopRequests().installed() as stops:
            supervisor = Supervisor(output, stops, worker_grace_s)
            try:
                return _run(supervisor, settings, host=host, port=port,
                            workers_per_gpu=workers_per_gpu, state_dir=state_dir,
                            redis_port=redis_port)
            finally:
                supervisor.shutdown()
                output.note("stopped")


def _run(supervisor: Supervisor, settings: BotSettings, *, host: str, port: int,
         workers_per_gpu: int, state_dir: Path, redis_port: int | None) -> int:
    output = supervisor.output
    url = f"http://{_browser_host(host)}:{port}/"
    # The same checks as `frognano doctor`, so what is missing is said before it matters;
    # their addresses name this receiver's --host and --port.
    checks = io.StringIO()
    doctor_report(all_checks(settings, url), checks)
    for line in checks.getvalue().splitlines():
        output.line("doctor", line)
    env = {**os.environ, "FROGNANO_STATE_DIR": str(state_dir), "PYTHONUNBUFFERED": "1"}
    redis = _redis_for(supervisor, settings, state_dir, redis_port, env)
    if redis is None:
        return EXIT_OK if supervisor.stops.graceful.is_set() else EXIT_FAILED
    redis_url, redis_text = redis
    env["FROGNANO_REDIS_URL"] = redis_url

    from bot.setup_flow import app_configured, new_setup_token, setup_link

    # Made here so the banner can show the link; only the receiver is given it.
    setup_token = None if app_configured(settings) else new_setup_token()
    receiver = supervisor.add(ChildSpec(
        "receiver", "receiver",
        [sys.executable, "-m", "frognano.up_command", "--host", host, "--port", str(port)],
        essential=True), {**env, SETUP_TOKEN_ENV: setup_token} if setup_token else env)
    listening = _wait_until_listening(host, port, receiver, READY_TIMEOUT_S,
                                      supervisor.stops.graceful)
    if supervisor.stops.graceful.is_set():  # Ctrl-C while starting
        return EXIT_OK
    if not listening:
        output.note("the receiver did not start listening; see its output above")
        return EXIT_FAILED

    setup_url = setup_link(settings.public_url or url, setup_token) if setup_token else url
    workers_text, next_step = _start_workers(supervisor, settings, env, workers_per_gpu,
                                             setup_url)
    output.write(_banner(url, redis_text, workers_text, state_dir, next_step,
                         _dashboard_text(settings, url)))

    supervisor.supervise()
    if supervisor.failure is not None:
        output.note(f"shutting down: {supervisor.failure}")
        return EXIT_FAILED
    output.note("shutting down (signal received)")
    return EXIT_OK


def _redis_for(supervisor: Supervisor, settings: BotSettings, state_dir: Path,
               redis_port: int | None, env: dict[str, str]) -> tuple[str, str] | None:
    """The broker's URL and the banner's words for it: the operator's own Redis when
    FROGNANO_REDIS_URL is set, else a private one started here (None: it did not start)."""
    if "redis_url" in settings.model_fields_set:
        return settings.redis_url, f"{settings.redis_url} (FROGNANO_REDIS_URL; not managed here)"
    started = start_private_redis(supervisor, state_dir / "redis", redis_port, env)
    if started is None:
        return None
    return started, f"private, {started}, append-only data in {state_dir / 'redis'}"


def _start_workers(supervisor: Supervisor, settings: BotSettings, env: dict[str, str],
                   workers_per_gpu: int, setup_url: str) -> tuple[str, str]:
    """Start the control worker and the run workers when the bot is configured; the
    banner's workers line and next step either way."""
    missing = _missing_for_workers(settings)
    if missing:
        supervisor.output.note("workers not started: " + ", ".join(missing) + " not configured")
        return ("not started: set " + ", ".join(missing),
                f"open {setup_url} to create the GitHub App, set FROGNANO_MODEL "
                "(`frognano model pull`), then restart `frognano up`")
    supervisor.add(ChildSpec("control", "worker",
                             [sys.executable, "-m", "frognano", "worker", "--control"],
                             essential=False), env)
    # A model server (an http(s) URL) holds the GPUs itself; an in-process model is
    # loaded by every run worker, so those are spread over the GPUs.
    spec = ModelSpec.read(settings.model)
    served = spec is not None and spec.served
    run_workers, placed = plan_run_workers(workers_per_gpu,
                                           None if served else scan_gpus(os.environ))
    for worker in run_workers:
        supervisor.add(ChildSpec(worker.name, "worker",
                                 [sys.executable, "-m", "frognano", "worker",
                                  "--concurrency", "1"], essential=False),
                       {**env, **worker.env})
    next_step = f"label an issue `{settings.trigger_label}` in a repository the App is installed on"
    if not settings.webhook_secret:
        next_step = f"set GITHUB_WEBHOOK_SECRET (or open {setup_url}); webhooks answer 503"
    return f"1 control worker and {placed}", next_step


# --- the receiver child -------------------------------------------------------------------


def _receiver_main(argv: list[str]) -> int:
    """`python -m frognano.up_command --host H --port P`: the receiver as `up` runs it,
    serving the setup pages even before the App (and its webhook secret) exists."""
    from frognano.cli import _add_receiver_flags, load_settings
    from frognano.serve_command import run_serve

    parser = argparse.ArgumentParser(prog="frognano up (receiver)")
    _add_receiver_flags(parser)  # `up` passes its own --host and --port on
    args = parser.parse_args(argv)
    settings = load_settings()  # the same reading as every other command's
    if settings is None:
        return EXIT_BAD_SETUP
    return run_serve(settings, args.host, args.port, allow_unconfigured=True,
                     setup_token=os.environ.pop(SETUP_TOKEN_ENV, None))


if __name__ == "__main__":
    sys.exit(_receiver_main(sys.argv[1:]))
