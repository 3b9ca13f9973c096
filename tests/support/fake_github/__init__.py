"""A local, stateful GitHub for the tests: REST (checked against GitHub's OpenAPI) + git."""

from tests.support.fake_github.openapi_spec import OCTOKIT_OPENAPI_VERSION, ensure_openapi_spec
from tests.support.fake_github.server import FakeGitHub, RecordedRequest

__all__ = ["OCTOKIT_OPENAPI_VERSION", "FakeGitHub", "RecordedRequest", "ensure_openapi_spec"]
