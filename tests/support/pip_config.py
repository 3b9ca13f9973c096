"""This machine's pip index, as `pip config list` reports it: the tests and benchmarks that
install real projects fetch through it (file:// indexes and a wheel folder here)."""

from __future__ import annotations

import subprocess
import sys

KEYS = ("index-url", "extra-index-url", "find-links")


def pip_config() -> dict[str, list[str]]:
    """index-url, extra-index-url and find-links (those set), each split into its entries
    as pip splits them (on whitespace)."""
    found = subprocess.run([sys.executable, "-m", "pip", "config", "list"],
                           capture_output=True, text=True, timeout=60).stdout
    values: dict[str, list[str]] = {}
    for line in found.splitlines():
        key, _, value = line.partition("=")
        name = key.rsplit(".", 1)[-1]
        if name in KEYS:
            values.setdefault(name, value.strip().strip("'\"").split())
    return values
