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

from bot.ci_checks import FAILED as CHECK_FAILED
from bot.ci_checks import is_bots_commit
from bot.github_api import CommitInfo
from bot.triggers import Trigger, TriggerKind
from solver.agent.prompts import review_feedback

SIGNATURE_PREFIX = "sha256="
RETRY_COMMAND = "/frognano retry"
# The command must be a whole word: `/frognano retrying` is not a retry.
_RETRY_RE = re.compile(re.escape(RETRY_COMMAND) + r"(?=\s|$)")
CANCEL_COMMAND = "/frognano cancel"
_CANCEL_RE = re.compile(re.escape(CANCEL_COMMAND) + r"(?=\s|$)")
# The bot's PR body opens with `Fixes #N` (bot/messages.pr_body) and its branch is
# `frognano/issue-N` (solver/policy.branch_for): how a PR leads back to its issue.
# On the bot's PR any `/frognano …` comment is feedback for a new run (after `cancel`).
_COMMAND_RE = re.compile(r"/frognano(?=\s|$)")
_PR_ISSUE_RE = re.compile(r"Fixes #(\d+)\b")
_BOT_BRANCH_RE = re.compile(r"frognano/issue-(\d+)")


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
    id: int | None = None  # the account's id: the `Co-authored-by:` address is `id+login@…`


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
    body: str | None = None
    user: User | None = None  # for a PR: who opened it
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


class Branch(_Model):
    ref: str


class PullRequest(_Model):
    number: int
    user: User
    head: Branch
    merged: bool | None = None


class Review(_Model):
    id: int
    body: str | None = None
    state: str  # webhooks send it lower case: approved, changes_requested, commented
    user: User


class ReviewComment(_Model):
    id: int
    body: str | None = None
    user: User
    path: str = ""
    line: int | None = None
    diff_hunk: str = ""


class PullRequestReviewEvent(_Model):
    action: str
    review: Review
    pull_request: PullRequest
    repository: Repository
    sender: User
    installation: Installation


class PullRequestReviewCommentEvent(_Model):
    action: str
    comment: ReviewComment
    pull_request: PullRequest
    repository: Repository
    sender: User
    installation: Installation


class PullRequestEvent(_Model):
    action: str
    pull_request: PullRequest
    repository: Repository
    sender: User
    installation: Installation


# The deliveries about a pull request the bot may own (closed, reviewed, commented on).
_PullEvent = PullRequestEvent | PullRequestReviewEvent | PullRequestReviewCommentEvent


class IssueCommentEvent(_Model):
    action: str
    issue: Issue
    comment: Comment
    repository: Repository
    sender: User
    installation: Installation


class CheckApp(_Model):
    slug: str | None = None


class CommitPerson(_Model):
    name: str = ""
    email: str = ""


class HeadCommit(_Model):
    id: str
    author: CommitPerson | None = None
    committer: CommitPerson | None = None


class CheckPull(_Model):
    number: int
    head: Branch


class CheckSuite(_Model):
    id: int
    head_branch: str | None = None
    head_sha: str
    conclusion: str | None = None
    app: CheckApp | None = None
    pull_requests: list[CheckPull] = []
    head_commit: HeadCommit | None = None  # check_suite deliveries carry it


class CheckSuiteRef(_Model):
    id: int
    head_branch: str | None = None


class CheckRun(_Model):
    id: int
    name: str = ""
    head_sha: str
    conclusion: str | None = None
    app: CheckApp | None = None
    check_suite: CheckSuiteRef | None = None
    pull_requests: list[CheckPull] = []


class CheckSuiteEvent(_Model):
    action: str
    check_suite: CheckSuite
    repository: Repository
    sender: User
    installation: Installation


class CheckRunEvent(_Model):
    action: str
    check_run: CheckRun
    repository: Repository
    sender: User
    installation: Installation


def parse_issues_event(payload: Any) -> IssuesEvent:
    return _parse(IssuesEvent, "issues", payload)


def parse_issue_comment_event(payload: Any) -> IssueCommentEvent:
    return _parse(IssueCommentEvent, "issue_comment", payload)


def parse_pull_request_event(payload: Any) -> PullRequestEvent:
    return _parse(PullRequestEvent, "pull_request", payload)


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


def parse_command(body: str | None) -> str | None:
    """The text after a leading `/frognano` ("" when none), or None when there is none."""
    text = (body or "").lstrip()
    match = _COMMAND_RE.match(text)
    return None if match is None else text[match.end():].strip()


def is_cancel_command(body: str | None) -> bool:
    """Whether the comment is `/frognano cancel` (text after it is allowed and ignored)."""
    return _CANCEL_RE.match((body or "").lstrip()) is not None


def bot_pull_issue(body: str | None) -> int | None:
    """The issue a bot PR's body says it fixes (its first line), or None."""
    match = _PR_ISSUE_RE.match((body or "").lstrip())
    return int(match.group(1)) if match else None


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
    if event_name not in ("issues", "issue_comment", "pull_request", "pull_request_review",
                          "pull_request_review_comment", "check_suite", "check_run"):
        return Ignore(f"event {event_name!r} is not handled")
    if not isinstance(payload, dict):
        raise PayloadError(f"{event_name} payload is not a JSON object")
    action = payload.get("action")
    if not isinstance(action, str):
        raise PayloadError(f"{event_name} payload has no action")
    if event_name == "issues":
        return _route_issues(payload, action, trigger_label, bot_login, delivery_id)
    if event_name == "pull_request":
        return _route_pull_request(payload, action, bot_login, delivery_id)
    if event_name == "pull_request_review":
        return _route_review(payload, action, bot_login, delivery_id)
    if event_name == "pull_request_review_comment":
        return _route_review_comment(payload, action, bot_login, delivery_id)
    if event_name in ("check_suite", "check_run"):
        return _route_check(event_name, payload, action, bot_login, delivery_id)
    return _route_comment(payload, action, bot_login, delivery_id)


def _route_issues(payload: dict[str, Any], action: str, trigger_label: str,
                  bot_login: str | None, delivery_id: str) -> Trigger | Ignore:
    if action == "closed":
        event = parse_issues_event(payload)
        if is_own_sender(event.sender, bot_login):
            return Ignore("sent by the bot itself")
        return Trigger(
            delivery_id=delivery_id, installation_id=event.installation.id,
            owner=event.repository.owner.login, repo=event.repository.name,
            issue_number=event.issue.number, kind="closed", actor=event.sender.login,
            actor_id=event.sender.id)
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
        issue_number=event.issue.number, kind="label", actor=event.sender.login,
            actor_id=event.sender.id)


def _route_comment(payload: dict[str, Any], action: str, bot_login: str | None,
                   delivery_id: str) -> Trigger | Ignore:
    if action != "created":
        return Ignore(f"issue_comment.{action} is not handled")
    event = parse_issue_comment_event(payload)
    if is_own_sender(event.sender, bot_login) or is_own_sender(event.comment.user, bot_login):
        return Ignore("sent by the bot itself")
    if event.issue.is_pull_request:
        return _route_pull_comment(event, bot_login, delivery_id)
    if is_cancel_command(event.comment.body):
        return Trigger(
            delivery_id=delivery_id, installation_id=event.installation.id,
            owner=event.repository.owner.login, repo=event.repository.name,
            issue_number=event.issue.number, kind="cancel", actor=event.sender.login,
            actor_id=event.sender.id,
            comment_id=event.comment.id)
    guidance = parse_retry_command(event.comment.body)
    if guidance is None:
        return Ignore("comment is not a /frognano retry command")
    return Trigger(
        delivery_id=delivery_id, installation_id=event.installation.id,
        owner=event.repository.owner.login, repo=event.repository.name,
        issue_number=event.issue.number, kind="retry", actor=event.sender.login,
            actor_id=event.sender.id,
        guidance=guidance, comment_id=event.comment.id)


def _route_pull_comment(event: IssueCommentEvent, bot_login: str | None,
                        delivery_id: str) -> Trigger | Ignore:
    """A comment on a PR the bot opened: `/frognano cancel`, or `/frognano <feedback>`."""
    if event.issue.user is None or not is_own_sender(event.issue.user, bot_login):
        return Ignore("comment on a pull request the bot did not open")
    command = parse_command(event.comment.body)
    if command is None:
        return Ignore("comment on the bot's pull request is not a /frognano command")
    issue = bot_pull_issue(event.issue.body)
    if issue is None:
        return Ignore("the bot's pull request does not say which issue it fixes")
    cancel = is_cancel_command(event.comment.body)
    return Trigger(
        delivery_id=delivery_id, installation_id=event.installation.id,
        owner=event.repository.owner.login, repo=event.repository.name,
        issue_number=issue, kind="cancel" if cancel else "review", actor=event.sender.login,
            actor_id=event.sender.id,
        comment_id=event.comment.id, pull_number=event.issue.number,
        guidance="" if cancel else review_feedback(command, []))


def _route_pull_request(payload: dict[str, Any], action: str, bot_login: str | None,
                        delivery_id: str) -> Trigger | Ignore:
    """The bot's PR closed without a merge stops the issue's run (a merge ends nothing:
    by then no run of the issue can be going on except one a maintainer started)."""
    if action != "closed":
        return Ignore(f"pull_request.{action} is not handled")
    event = parse_pull_request_event(payload)
    if event.pull_request.merged:
        return Ignore("pull request was merged")
    issue = _bot_pull_issue(event, event.sender, bot_login)
    if isinstance(issue, Ignore):
        return issue
    return _pull_trigger(event, delivery_id, issue, "closed", event.sender)


def _bot_pull_issue(event: _PullEvent, author: User, bot_login: str | None) -> int | Ignore:
    """The issue behind the bot's own PR, for a delivery neither sent nor written by
    the bot."""
    pull = event.pull_request
    if not is_own_sender(pull.user, bot_login):
        return Ignore("pull request the bot did not open")
    if is_own_sender(event.sender, bot_login) or is_own_sender(author, bot_login):
        return Ignore("sent by the bot itself")
    match = _BOT_BRANCH_RE.fullmatch(pull.head.ref)
    if match is None:
        return Ignore(f"the bot's pull request has a branch it does not use: {pull.head.ref!r}")
    return int(match.group(1))


def _pull_trigger(event: _PullEvent, delivery_id: str, issue: int, kind: TriggerKind,
                  actor: User, **extra: Any) -> Trigger:
    return Trigger(
        delivery_id=delivery_id, installation_id=event.installation.id,
        owner=event.repository.owner.login, repo=event.repository.name,
        issue_number=issue, kind=kind, actor=actor.login, actor_id=actor.id,
        pull_number=event.pull_request.number, **extra)


def _route_review(payload: dict[str, Any], action: str, bot_login: str | None,
                  delivery_id: str) -> Trigger | Ignore:
    """A submitted review of the bot's PR that requests changes, or whose body is a
    `/frognano` command, continues from the PR's head."""
    if action != "submitted":
        return Ignore(f"pull_request_review.{action} is not handled")
    event = _parse(PullRequestReviewEvent, "pull_request_review", payload)
    review = event.review
    issue = _bot_pull_issue(event, review.user, bot_login)
    if isinstance(issue, Ignore):
        return issue
    command = parse_command(review.body)
    if review.state.casefold() != "changes_requested" and command is None:
        return Ignore(f"review is {review.state}, not changes requested")
    if command is not None and is_cancel_command(review.body):
        return Ignore("a cancel is a comment, not a review")
    return _pull_trigger(
        event, delivery_id, issue, "review", review.user, review_id=review.id,
        guidance=review_feedback(command if command is not None else review.body or "", []))


def _route_review_comment(payload: dict[str, Any], action: str, bot_login: str | None,
                          delivery_id: str) -> Trigger | Ignore:
    """A review comment on the bot's PR starting with `/frognano`: feedback on one line."""
    if action != "created":
        return Ignore(f"pull_request_review_comment.{action} is not handled")
    event = _parse(PullRequestReviewCommentEvent, "pull_request_review_comment", payload)
    comment = event.comment
    issue = _bot_pull_issue(event, comment.user, bot_login)
    if isinstance(issue, Ignore):
        return issue
    if parse_command(comment.body) is None:
        return Ignore("review comment is not a /frognano command")
    if is_cancel_command(comment.body):
        return Ignore("a cancel is an issue or pull request comment, not a review comment")
    return _pull_trigger(event, delivery_id, issue, "review", comment.user,
                         review_comment_id=comment.id, guidance=review_feedback("", [comment]))


# --- CI on the bot's PR (`ci: run`): a red check is the next verdict --------------------


def _route_check(event_name: str, payload: dict[str, Any], action: str,
                 bot_login: str | None, delivery_id: str) -> Trigger | Ignore:
    """A completed, failed check suite or check run on `frognano/issue-N` whose head the
    bot pushed: a CI repair round (the accept task checks the rest: `ci: run`, the PR's
    head is still this commit and the bot's, the round limit, one round per head)."""
    if action != "completed":
        return Ignore(f"{event_name}.{action} is not handled")
    check: CheckSuite | CheckRun
    where: CheckSuiteEvent | CheckRunEvent
    if event_name == "check_suite":
        where = _parse(CheckSuiteEvent, event_name, payload)
        check = where.check_suite
        branch, head_commit = where.check_suite.head_branch, where.check_suite.head_commit
    else:
        where = _parse(CheckRunEvent, event_name, payload)
        check = where.check_run
        suite = where.check_run.check_suite
        branch, head_commit = (suite.head_branch if suite else None), None
    if check.conclusion not in CHECK_FAILED:
        return Ignore(f"{event_name} concluded {check.conclusion!r}, not a failure")
    slug = check.app.slug if check.app else None
    if bot_login and slug and slug.casefold() == bot_login.casefold().removesuffix("[bot]"):
        return Ignore("a check of the bot's own App")
    pulls = [p.number for p in check.pull_requests
             if branch is None or p.head.ref == branch]
    branch = branch or (check.pull_requests[0].head.ref if check.pull_requests else "")
    match = _BOT_BRANCH_RE.fullmatch(branch or "")
    if match is None:
        return Ignore(f"{event_name} on a branch the bot does not use: {branch!r}")
    if head_commit is not None and bot_login and not _bots_commit(head_commit, bot_login):
        return Ignore("the head commit is not the bot's (a person pushed to the branch)")
    return Trigger(
        delivery_id=delivery_id, installation_id=where.installation.id,
        owner=where.repository.owner.login, repo=where.repository.name,
        issue_number=int(match.group(1)), kind="ci", actor=slug or "ci",
        pull_number=pulls[0] if pulls else None, head_sha=check.head_sha)


def _bots_commit(commit: HeadCommit, bot_login: str) -> bool:
    """Whether the bot wrote and committed it (a person's amend makes them the committer)."""
    return is_bots_commit(CommitInfo(
        commit.id, commit.author.email if commit.author else "",
        commit.committer.email if commit.committer else ""), bot_login)
