"""GitHub webhook deliveries, sans I/O: signature check, payload parsing and routing.

Nothing here touches the network, Redis or the clock, so every rule about which
delivery starts a run is unit-testable with plain dicts.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from bot.triggers import Trigger

SIGNATURE_PREFIX = "sha256="
RETRY_COMMAND = "/frognano retry"
# The command must be a whole word: `/frognano retrying` is not a retry.
_RETRY_RE = re.compile(re.escape(RETRY_COMMAND) + r"(?=\s|$)")


class PayloadError(ValueError):
    """The delivery is not the shape GitHub documents for its event (answered with 400)."""


@dataclass(frozen=True)
class Ignore:
    """The delivery is valid but starts nothing; `reason` goes to the logs and the 204."""

    reason: str


def verify_signature(secret: str | bytes, body: bytes, header: str | None) -> bool:
    """True when `header` is the `sha256=` HMAC of `body` under `secret` (constant time)."""
    if not secret or not header or not header.startswith(SIGNATURE_PREFIX):
        return False
    key = secret.encode() if isinstance(secret, str) else secret
    expected = SIGNATURE_PREFIX + hmac.new(key, body, hashlib.sha256).hexdigest()
    # Bytes, not str: compare_digest raises on non-ASCII str, and the header is untrusted.
    return hmac.compare_digest(expected.encode(), header.encode("utf-8", "replace"))


def sign(secret: str | bytes, body: bytes) -> str:
    """The `X-Hub-Signature-256` value GitHub would send for `body` (tests and benchmarks)."""
    key = secret.encode() if isinstance(secret, str) else secret
    return SIGNATURE_PREFIX + hmac.new(key, body, hashlib.sha256).hexdigest()


def parse_json_body(body: bytes) -> Any:
    """The delivery's JSON; PayloadError for anything that is not JSON we can hold, including
    nesting deep enough to exhaust the parser's recursion (a RecursionError, not a
    ValueError, which would otherwise become a 500)."""
    try:
        return json.loads(body)
    except RecursionError:
        raise PayloadError("JSON nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, int digit limits
        raise PayloadError(f"not JSON: {exc}") from None


# --- payload shapes: only the fields the router reads; GitHub adds fields freely ---------


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


_M = TypeVar("_M", bound=_Model)


class User(_Model):
    login: str
    type: str = "User"


class Installation(_Model):
    id: int


class Repository(_Model):
    name: str
    owner: User


class Label(_Model):
    name: str


class Issue(_Model):
    number: int
    title: str = ""
    pull_request: dict[str, Any] | None = None  # present when the "issue" is a PR

    @property
    def is_pull_request(self) -> bool:
        return self.pull_request is not None


class Comment(_Model):
    id: int
    body: str | None = None
    user: User


class IssuesEvent(_Model):
    action: str
    issue: Issue
    label: Label | None = None
    repository: Repository
    sender: User
    installation: Installation


class IssueCommentEvent(_Model):
    action: str
    issue: Issue
    comment: Comment
    repository: Repository
    sender: User
    installation: Installation


def parse_issues_event(payload: Any) -> IssuesEvent:
    return _parse(IssuesEvent, "issues", payload)


def parse_issue_comment_event(payload: Any) -> IssueCommentEvent:
    return _parse(IssueCommentEvent, "issue_comment", payload)


def _parse(model: type[_M], event_name: str, payload: Any) -> _M:
    try:
        return model.model_validate(payload)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in error['loc']) or '(root)'}: {error['msg']}"
            for error in exc.errors()[:5])
        raise PayloadError(f"unexpected {event_name} payload: {problems}") from None


# --- routing --------------------------------------------------------------------------


def parse_retry_command(body: str | None) -> str | None:
    """The guidance after `/frognano retry` ("" when none), or None when it is no command."""
    text = (body or "").lstrip()
    match = _RETRY_RE.match(text)
    if match is None:
        return None
    return text[match.end():].strip()


def is_own_sender(sender: User, bot_login: str | None) -> bool:
    """Whether the bot itself sent this; `bot_login` may be given with or without `[bot]`."""
    if not bot_login:
        return False
    login = sender.login.casefold()
    wanted = bot_login.casefold()
    app_login = wanted if wanted.endswith("[bot]") else wanted + "[bot]"
    # A human may own the bare name, so the bare form only counts for a Bot account.
    return login == app_login or (sender.type == "Bot" and login == wanted)


def route(event_name: str, payload: Any, *, trigger_label: str, bot_login: str | None,
          delivery_id: str) -> Trigger | Ignore:
    """What a verified delivery asks for: a Trigger to enqueue, or why it starts nothing.

    Raises PayloadError when an event we act on does not have the documented shape.
    """
    if event_name not in ("issues", "issue_comment"):
        return Ignore(f"event {event_name!r} is not handled")
    if not isinstance(payload, dict):
        raise PayloadError(f"{event_name} payload is not a JSON object")
    action = payload.get("action")
    if not isinstance(action, str):
        raise PayloadError(f"{event_name} payload has no action")
    if event_name == "issues":
        return _route_issues(payload, action, trigger_label, bot_login, delivery_id)
    return _route_comment(payload, action, bot_login, delivery_id)


def _route_issues(payload: dict[str, Any], action: str, trigger_label: str,
                  bot_login: str | None, delivery_id: str) -> Trigger | Ignore:
    if action != "labeled":
        return Ignore(f"issues.{action} is not handled")
    event = parse_issues_event(payload)
    if event.label is None:
        raise PayloadError("issues.labeled payload has no label")
    # GitHub label names are unique regardless of case, so compare them that way.
    if event.label.name.casefold() != trigger_label.casefold():
        return Ignore(f"label {event.label.name!r} is not the trigger label")
    if is_own_sender(event.sender, bot_login):
        return Ignore("sent by the bot itself")
    return Trigger(
        delivery_id=delivery_id, installation_id=event.installation.id,
        owner=event.repository.owner.login, repo=event.repository.name,
        issue_number=event.issue.number, kind="label", actor=event.sender.login)


def _route_comment(payload: dict[str, Any], action: str, bot_login: str | None,
                   delivery_id: str) -> Trigger | Ignore:
    if action != "created":
        return Ignore(f"issue_comment.{action} is not handled")
    event = parse_issue_comment_event(payload)
    if event.issue.is_pull_request:
        return Ignore("comment on a pull request")
    if is_own_sender(event.sender, bot_login) or is_own_sender(event.comment.user, bot_login):
        return Ignore("sent by the bot itself")
    guidance = parse_retry_command(event.comment.body)
    if guidance is None:
        return Ignore("comment is not a /frognano retry command")
    return Trigger(
        delivery_id=delivery_id, installation_id=event.installation.id,
        owner=event.repository.owner.login, repo=event.repository.name,
        issue_number=event.issue.number, kind="retry", actor=event.sender.login,
        guidance=guidance, comment_id=event.comment.id)
