"""`frognano app manifest`: print the GitHub App manifest as JSON."""

from __future__ import annotations

import json
import sys

from bot.app_manifest import app_manifest

EXIT_BAD_INPUT = 2


def run_app_manifest(public_url: str | None, org: str | None) -> int:
    if not public_url:
        print("frognano: error: no public URL: pass --url or set FROGNANO_PUBLIC_URL "
              "(where GitHub can reach this receiver)", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        manifest = app_manifest(public_url, org=org)
    except ValueError as exc:
        print(f"frognano: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(json.dumps(manifest, indent=2))
    return 0
