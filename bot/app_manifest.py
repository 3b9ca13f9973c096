"""The GitHub App manifest: what the App may do, in the one shape GitHub accepts.

Used by `frognano app manifest` (to create the App by hand) and by the built-in
manifest flow (`bot/setup_flow.py`), so both ask for exactly the same App.
"""

from __future__ import annotations

from typing import Any

WEBHOOK_PATH = "/webhooks/github"  # the receiver's route (bot/app.py)
SETUP_CALLBACK_PATH = "/setup/callback"
MAX_NAME_LENGTH = 34  # GitHub's limit on App names
# pull_request: closing the bot's PR unmerged cancels its run (`closed` only); the review
# events: a review or review comment on the bot's PR continues its run from the branch;
# check_suite, check_run: a failed check on the bot's own head starts a CI repair round
# (`ci: run` repositories; GitHub sends them to an App holding `checks`).
EVENTS = ("issues", "issue_comment", "pull_request", "pull_request_review",
          "pull_request_review_comment", "check_suite", "check_run")
# The least the bot needs. `workflows` is left out on purpose: without it GitHub refuses
# a push that touches .github/workflows/, so a model-written change can never alter CI.
# checks: read lists a head's check runs (GET .../commits/{ref}/check-runs); actions:
# read downloads a failed Actions job's log (GET .../actions/jobs/{id}/logs).
PERMISSIONS = {"metadata": "read", "issues": "write", "contents": "write",
               "pull_requests": "write", "checks": "read", "actions": "read"}


def app_manifest(public_url: str, *, name: str = "FrogNano", org: str | None = None,
                 ) -> dict[str, Any]:
    """The manifest for an App whose receiver is reachable at `public_url`.

    `org` does not choose the owner (where the manifest is posted does); it only goes into
    the name, since App names are unique across GitHub. GitHub's form lets the user edit a
    name that is taken.
    """
    base = public_url.rstrip("/")
    if not base.startswith(("https://", "http://")):
        raise ValueError(f"the public URL must start with https:// or http://, not {base!r}")
    return {
        "name": (f"{name}-{org}" if org else name)[:MAX_NAME_LENGTH],
        "url": base,
        "hook_attributes": {"url": base + WEBHOOK_PATH, "active": True},
        "redirect_url": base + SETUP_CALLBACK_PATH,
        "public": False,
        "default_events": list(EVENTS),
        "default_permissions": dict(PERMISSIONS),
    }
