"""`python3 -m bench`: run every benchmark and record the figures in docs/BENCHMARKS.md.

Each benchmark module has `run() -> list[dict]` with rows of
name, value, unit, target (text, may be empty) and ok (bool or None).
"""

from __future__ import annotations

import argparse
import importlib
import os
import platform
import re
import sys
import time
from pathlib import Path

BENCHMARKS = {
    "sandbox_overhead": "Sandbox: tool-call overhead, start and teardown",
    "prompt_reuse": "llama.cpp: prompt reuse over a 30-turn session (hybrid model)",
    "model_residency": "llama.cpp: model residency across runs in one process",
    "llama_speed": "llama.cpp: prefill and decode speed",
    "workspace_prep": "Workspace preparation: second issue on a 2,000-commit repository",
    "receiver": "Webhook receiver: signed deliveries with the enqueue, beside bare FastAPI",
    "setup_cache": "Setup cache: a second run's setup, and the harness's own share of a run",
    "setup_installer": "Setup with uv: first setups with uv beside pip's, and the second setup",
}
# `python3 -m bench gpu [--cpu-scale]` (bench/gpu.py) is run on its own: it needs a GPU.
DOC = Path(__file__).resolve().parent.parent / "docs" / "BENCHMARKS.md"


def _table(rows: list[dict]) -> str:
    lines = ["| measure | value | target | ok |", "|---|---:|---|---|"]
    for row in rows:
        ok = {True: "yes", False: "**no**", None: "–"}[row.get("ok")]
        lines.append(f"| {row['name']} | {row['value']:.3f} {row['unit']} | "
                     f"{row.get('target') or '–'} | {ok} |")
    return "\n".join(lines)


def _gpu_blocks(text: str) -> str:
    """The `bench gpu` blocks of the doc: written by `python3 -m bench gpu` (run rarely, on a
    GPU), so a full `python3 -m bench` rewrite keeps them."""
    found = re.finditer(r"<!-- bench gpu: ([\w-]+) -->.*?<!-- /bench gpu: \1 -->", text, re.S)
    return "".join(f"\n{match.group(0)}\n" for match in found)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["gpu"]:  # its own options; not in the default run (it needs a GPU)
        from bench import gpu

        return gpu.main(argv[1:])
    parser = argparse.ArgumentParser(prog="python3 -m bench")
    parser.add_argument("names", nargs="*", choices=[[], *BENCHMARKS], default=[],
                        help="benchmarks to run (default: all)")
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args(argv)
    names = args.names or list(BENCHMARKS)
    sections, failed = [], False
    for name in names:
        module = importlib.import_module(f"bench.{name}")
        rows = module.run()
        failed |= any(row.get("ok") is False for row in rows)
        section = f"## {BENCHMARKS[name]}\n\n{_table(rows)}\n"
        print(section)
        sections.append(section)
    if not args.no_write and names == list(BENCHMARKS):
        header = (
            "# Benchmarks\n\n"
            "Written by `python3 -m bench` (run it again to refresh). Figures are from one run "
            f"on {time.strftime('%Y-%m-%d')}: {platform.machine()}, {os.cpu_count()} cores, "
            f"Python {platform.python_version()}, kernel {platform.release()}.\n\n"
        )
        DOC.parent.mkdir(exist_ok=True)
        kept = _gpu_blocks(DOC.read_text()) if DOC.exists() else ""
        DOC.write_text(header + "\n".join(sections) + kept)
        print(f"written to {DOC}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
