"""The `frognano` command: the composition root. It reads the settings once
(bot/settings.py: the environment and `.env`) for every command, and lays the flags over
them; nothing below it reads the environment."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

if TYPE_CHECKING:
    from bot.settings import BotSettings
    from frognano.solve_command import SolveOptions


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="frognano",
                                     description="Issues to draft pull requests with FrogNano.")
    commands = parser.add_subparsers(dest="command", required=True)

    _add_solve_parser(commands)

    from frognano.model_command import add_model_parser

    add_model_parser(commands)

    up = commands.add_parser("up", help="run the whole bot on this host: receiver, workers, "
                                        "and a private Redis unless FROGNANO_REDIS_URL is set")
    _add_receiver_flags(up)
    # `--workers` is the older spelling; it always meant this.
    up.add_argument("--workers-per-gpu", "--workers", dest="workers_per_gpu", type=int,
                    help="run workers per GPU, each pinned to it with its own model; without "
                         "a GPU this many in all (default 1, $FROGNANO_RUN_WORKERS_PER_GPU)")

    _add_receiver_flags(commands.add_parser("serve", help="run the webhook receiver"))

    app = commands.add_parser("app", help="the GitHub App")
    app_commands = app.add_subparsers(dest="app_command", required=True)
    manifest = app_commands.add_parser("manifest", help="print the GitHub App manifest (JSON)")
    manifest.add_argument("--url",
                          help="the receiver's public URL (default: $FROGNANO_PUBLIC_URL)")
    manifest.add_argument("--org", help="the organisation that will own the App")

    commands.add_parser("doctor", help="check everything the bot needs, one line each, "
                                       "with the fix")

    worker = commands.add_parser("worker", help="run a Celery worker")
    worker.add_argument("--control", action="store_true",
                        help="take the fast accept tasks instead of runs")
    worker.add_argument("--concurrency", type=int,
                        help="parallel tasks (default: $FROGNANO_RUN_WORKERS_PER_GPU runs, "
                             "each its own model on this worker's GPU; or 8 accept tasks)")
    return parser


def _add_solve_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]
                      ) -> None:
    """`solve`'s flags; each defaults to None: unset, the setting applies (bot/settings.py,
    read in main)."""
    from solver.old_names import SOLVE_FLAGS

    solve = commands.add_parser("solve", help="solve an issue in a local git repository")
    solve.add_argument("path", type=Path, help="the local git repository")
    issue = solve.add_mutually_exclusive_group(required=True)
    issue.add_argument("--issue", help="the issue text")
    issue.add_argument("--issue-file", type=Path, help="a file holding the issue text")
    solve.add_argument("--test-cmd", help="test command (default: .github/frognano.yml, "
                                          "then autodetected)")
    # Flags default to None: unset, the setting applies (bot/settings.py, read in main).
    solve.add_argument("--model", help="OpenAI-compatible server URL, GGUF path or scripted:FILE "
                            "(default: $FROGNANO_MODEL)")
    solve.add_argument("--max-steps", type=int,
                       help="model turns in all (default 150; 100 with FROGNANO_LIMITS=agent)")
    # The flags' old spellings (solver/old_names.py) still work; --help names them.
    solve.add_argument("--max-rounds", SOLVE_FLAGS["--max-rounds"], type=int,
                       dest="max_rounds",
                       help="agent rounds, one more per test run that still fails (default 3)")
    solve.add_argument("--timeout-minutes", type=float, help="wall-time budget (default 60)")
    solve.add_argument("--sandbox", choices=["bubblewrap", "unsafe-local"],
                       help="isolation backend; unsafe-local is for development only "
                            "(default: $FROGNANO_SANDBOX, else bubblewrap)")
    solve.add_argument("--transcript", type=Path, help="where to write the JSONL transcript")
    solve.add_argument("--seed", type=int, help="sampling seed, recorded in the transcript "
                                                "(candidate k of several: seed + k - 1)")
    solve.add_argument("--candidates", SOLVE_FLAGS["--candidates"], type=int,
                       dest="candidates",
                       help="best of N: independent candidates, the smallest passing change "
                            "committed (default: `candidates` in "
                            ".github/frognano.yml, cut to $FROGNANO_MAX_CANDIDATES; "
                            "$FROGNANO_MODEL_SLOTS run at once)")
    solve.add_argument("--keep-workspace", action="store_true",
                       help="keep the private workspace for inspection")
    solve.add_argument("--n-ctx", type=int,
                       help="context size in tokens, output included (default "
                            "$FROGNANO_N_CTX, else 131072 cut to what the model's memory "
                            "holds: `frognano doctor` shows it)")
    solve.add_argument("--n-gpu-layers", type=int,
                       help="layers offloaded to the GPU for a GGUF model; -1 = all "
                            "($FROGNANO_N_GPU_LAYERS)")
    solve.add_argument("--flash-attn", choices=["auto", "on", "off"],
                       help="flash attention (default auto: where the backend has it; "
                            "$FROGNANO_FLASH_ATTN)")
    solve.add_argument("--kv-cache-type", choices=["f16", "q8_0", "q4_0"],
                       help="attention cache type (default f16; q8_0 halves its memory, "
                            "needs flash attention; $FROGNANO_KV_CACHE_TYPE)")
    solve.add_argument("--n-batch", type=int,
                       help="tokens per decode call (default 512, $FROGNANO_N_BATCH)")
    solve.add_argument("--n-ubatch", type=int,
                       help="tokens per compute step, at most --n-batch (default: --n-batch "
                            "up to 512, $FROGNANO_N_UBATCH)")
    solve.add_argument("--cpu-repack", choices=["auto", "on", "off"],
                       help="weights repacked for the CPU's kernels (default auto: off where "
                            "llama.cpp would use AMX, which crashes; $FROGNANO_CPU_REPACK)")
    solve.add_argument("--chat-template", type=Path, metavar="FILE",
                       help="Jinja chat template for a GGUF that carries none "
                            "($FROGNANO_CHAT_TEMPLATE)")


def _add_receiver_flags(command: argparse.ArgumentParser) -> None:
    """Where the receiver listens: the same for `serve` and `up`."""
    command.add_argument("--host", default="127.0.0.1",
                         help="address to bind (default 127.0.0.1: put it behind your HTTPS "
                              "proxy)")
    command.add_argument("--port", type=int, default=8000, help="port (default 8000)")


def _positive(parser: argparse.ArgumentParser, name: str, value: float | None) -> None:
    if value is not None and value <= 0:
        parser.error(f"{name} must be positive, not {value}")


def load_settings() -> BotSettings | None:
    """The one reading of the settings (environment and `.env`), for every command;
    None after saying what is wrong."""
    from pydantic import ValidationError

    from bot.settings import BotSettings

    try:
        return BotSettings()
    except ValidationError as exc:
        print(f"frognano: invalid settings:\n{exc}", file=sys.stderr)
        return None


def open_umask() -> None:
    """Clear "others may read and enter" from the umask.

    The sandbox runs as other uids (a pool of its own), and bubblewrap, as that uid, binds
    the run's folders and reads its passwd and runner: a hardened umask (077, 027) made
    them the host's alone and shut every run out. Group and write bits stay as the
    operator set them; what must be private (the App's key and its folder) is made
    0600/0700 explicitly, whatever the umask."""
    os.umask(os.umask(0) & ~0o005)


def main(argv: list[str] | None = None) -> int:
    from bot.logs import configure_text_logging

    open_umask()
    configure_text_logging(logging.WARNING)  # model text in a warning: shown, not obeyed
    parser = _parser()
    args = parser.parse_args(argv)
    console = Console(stderr=False, highlight=False)
    settings = load_settings()
    if settings is None:
        return 2
    if args.command == "solve":
        from frognano.solve_command import EXIT_BAD_INPUT, run_solve

        for name in ("max_steps", "max_rounds", "timeout_minutes", "candidates"):
            _positive(parser, "--" + name.replace("_", "-"), getattr(args, name))
        if args.issue_file is not None:
            try:
                issue = args.issue_file.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                console.print(f"[bold red]error:[/bold red] cannot read {args.issue_file}: {exc}")
                return EXIT_BAD_INPUT
        else:
            issue = args.issue
        return run_solve(_solve_options(args, issue, settings), console)
    if args.command == "app":
        from frognano.app_command import run_app_manifest

        return run_app_manifest(args.url or settings.public_url, args.org)
    if args.command in ("serve", "worker", "up", "doctor"):
        return _run_service(args, settings)
    if args.command == "model":
        from frognano.model_command import run_model_command

        return run_model_command(args, console, default_model=settings.model)
    parser.error(f"unknown command {args.command}")
    return 2


def _solve_options(args: argparse.Namespace, issue: str, settings: BotSettings
                   ) -> SolveOptions:
    """`solve`'s flags laid over the settings every other command reads too."""
    import os

    from frognano.model_host import run_limits
    from frognano.models import llama_fields
    from frognano.solve_command import SolveOptions
    from solver.limits import Limits
    from solver.setup.package_index import PackageIndex

    model = args.model or settings.model
    # One model in this process: the context cut to its memory unless a setting names one.
    limits = run_limits(settings.model_copy(update={"model": model}), os.environ, copies=1,
                        n_ctx=args.n_ctx)
    llama = llama_fields(settings, n_ctx=limits.max_context_tokens,
                         n_gpu_layers=args.n_gpu_layers,
                         flash_attn=args.flash_attn, kv_cache_type=args.kv_cache_type,
                         n_batch=args.n_batch, n_ubatch=args.n_ubatch,
                         cpu_repack=args.cpu_repack)
    minutes = args.timeout_minutes
    flags = Limits(**{name: value for name, value in (
        ("max_steps", args.max_steps), ("max_rounds", args.max_rounds),
        ("max_seconds", None if minutes is None else 60 * minutes)) if value is not None})
    return SolveOptions(
        path=args.path, issue=issue, state_dir=settings.state_dir,
        work_dir=settings.work_dir, test_cmd=args.test_cmd, model=model,
        limits=limits, flags=flags,
        sandbox=args.sandbox or settings.sandbox, transcript=args.transcript,
        seed=args.seed, keep_workspace=args.keep_workspace,
        n_gpu_layers=llama["n_gpu_layers"], llama=llama,
        chat_template=args.chat_template or settings.chat_template,
        database_url=settings.database_url, max_diff_bytes=settings.max_diff_bytes,
        candidates=args.candidates, max_candidates=settings.max_candidates,
        model_slots=settings.model_slots,
        progress_seconds=settings.progress_seconds,
        package_index=PackageIndex.from_settings(settings),
    )


def _run_service(args: argparse.Namespace, settings: BotSettings) -> int:
    if args.command == "doctor":
        from frognano.doctor import all_checks, report

        return 0 if report(all_checks(settings), sys.stdout) else 1
    if args.command == "up":
        from frognano.up_command import run_up

        per_gpu = args.workers_per_gpu
        return run_up(settings, host=args.host, port=args.port,
                      workers_per_gpu=settings.run_workers_per_gpu if per_gpu is None
                      else per_gpu, state_dir=settings.state_dir)
    if args.command == "serve":
        from frognano.serve_command import run_serve

        return run_serve(settings, args.host, args.port)
    from frognano.worker_command import run_worker

    return run_worker(settings, control=args.control, concurrency=args.concurrency)


if __name__ == "__main__":
    sys.exit(main())
