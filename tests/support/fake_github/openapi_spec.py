"""GitHub's official OpenAPI description, fetched once with npm, and a checker on it.

`ensure_openapi_spec()` runs `npm pack @octokit/openapi@<OCTOKIT_OPENAPI_VERSION>`
once and keeps `generated/api.github.com.json` (13 MB, with $refs; the 73 MB
dereferenced copy buys nothing since openapi-core resolves refs lazily) under
`~/.cache/frognano/openapi/<version>/` (or `$FROGNANO_OPENAPI_CACHE/<version>/`);
`$FROGNANO_OPENAPI_SPEC` names a ready file instead, for machines without npm.
Building the checker takes ~0.3 s and one request check a few milliseconds.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tarfile
import tempfile
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path

from jsonschema_path import SchemaPath
from openapi_core import Config, OpenAPI
from openapi_core.testing import MockRequest, MockResponse

OCTOKIT_OPENAPI_VERSION = "23.0.2"
# The REST API version that description is of: @octokit/openapi builds
# generated/api.github.com.json from GitHub's descriptions/api.github.com/api.github.com.json,
# the 2022-11-28 one (the file names no version; newer ones are separate files upstream,
# not in the npm package). The fake serves this version only.
DESCRIPTION_API_VERSION = "2022-11-28"
SPEC_MEMBER = "package/generated/api.github.com.json"
GITHUB_API = "https://api.github.com"
# `{path}` of the contents API and `{ref}` of the git refs API span slashes, which
# openapi-core's path matcher does not.
_CONTENTS_PATH = re.compile(r"^(/repos/[^/]+/[^/]+/(?:contents|git/refs?)/)(.+)$")


def cache_dir() -> Path:
    root = os.environ.get("FROGNANO_OPENAPI_CACHE")
    base = Path(root) if root else Path.home() / ".cache/frognano/openapi"
    return base / OCTOKIT_OPENAPI_VERSION


def ensure_openapi_spec() -> Path:
    """The path of `api.github.com.json`, downloading it with npm the first time."""
    if given := os.environ.get("FROGNANO_OPENAPI_SPEC"):
        return Path(given)
    target = cache_dir() / "api.github.com.json"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        try:
            packed = subprocess.run(
                ["npm", "pack", f"@octokit/openapi@{OCTOKIT_OPENAPI_VERSION}",
                 "--pack-destination", scratch, "--silent"],
                check=True, capture_output=True, text=True, timeout=300,
            ).stdout.strip().splitlines()[-1]
        except (OSError, subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
            detail = getattr(exc, "stderr", "") or exc
            raise RuntimeError(f"could not fetch @octokit/openapi with npm: {detail}") from exc
        with tarfile.open(Path(scratch) / packed) as archive:
            member = archive.extractfile(SPEC_MEMBER)
            if member is None:
                raise RuntimeError(f"{SPEC_MEMBER} missing from {packed}")
            partial = Path(scratch) / "api.github.com.json"
            partial.write_bytes(member.read())
        os.replace(partial, target)  # atomic: a concurrent run sees all or nothing
    return target


@lru_cache(maxsize=1)
def _openapi() -> OpenAPI:
    spec = json.loads(ensure_openapi_spec().read_text())
    # The contents API's 200 is a oneOf with a discriminator on "type", which a directory
    # (a JSON array) cannot carry: a known slip of the description, which githubkit's
    # code generator unsets too (its versions.lock "discriminator = <unset>" override).
    contents_200 = spec["paths"]["/repos/{owner}/{repo}/contents/{path}"]["get"][
        "responses"]["200"]["content"]["application/json"]["schema"]
    contents_200.pop("discriminator", None)
    # The spec itself is trusted; validating it would cost seconds per process.
    return OpenAPI(SchemaPath.from_dict(spec), config=Config(spec_validator_cls=None))


class OpenApiChecker:
    """Says what GitHub's OpenAPI description finds wrong with a request or response."""

    def __init__(self) -> None:
        self._api = _openapi()

    @staticmethod
    def _request(method: str, path: str, query: Mapping[str, str], body: bytes,
                 content_type: str) -> MockRequest:
        match = _CONTENTS_PATH.match(path)
        if match:
            path = match.group(1) + match.group(2).replace("/", "%2F")
        return MockRequest(GITHUB_API, method.lower(), path, args=dict(query),
                           data=body or None, content_type=content_type or "application/json")

    def request_errors(self, method: str, path: str, query: Mapping[str, str], body: bytes,
                       content_type: str) -> list[str]:
        request = self._request(method, path, query, body, content_type)
        try:
            self._api.validate_request(request)
        except Exception as exc:  # openapi-core raises many types; all mean "invalid"
            return [_describe(exc)]
        return []

    def response_errors(self, method: str, path: str, query: Mapping[str, str], body: bytes,
                        content_type: str, status: int, response_body: bytes) -> list[str]:
        request = self._request(method, path, query, body, content_type)
        response = MockResponse(response_body, status_code=status,
                                content_type="application/json" if response_body else "")
        try:
            self._api.validate_response(request, response)
        except Exception as exc:
            return [_describe(exc)]
        return []


def _describe(exc: Exception) -> str:
    """The schema errors (with where they are), not openapi-core's dump of the whole value."""
    details: list[str] = []
    for source in (exc, exc.__cause__):
        for error in getattr(source, "schema_errors", None) or ():
            where = "/".join(str(p) for p in getattr(error, "absolute_path", ()))
            details.append(f"{where or '<root>'}: {getattr(error, 'message', error)}"[:300])
    if details:
        return f"{type(exc).__name__}: " + "; ".join(details)
    cause = f" | {exc.__cause__}" if exc.__cause__ is not None else ""
    return f"{type(exc).__name__}: {exc}{cause}"[:1000]
