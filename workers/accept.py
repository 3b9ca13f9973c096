"""The accept step: authorize a trigger, supersede older runs, acknowledge, enqueue the run.

Runs on the control queue, so a maintainer sees 👀 and "queued" at once even
while the GPU is busy. Idempotent per delivery: a redelivered accept task
reuses the generation it was given the first time.
"""

from __future__ import annotations

import logging

from bot.github_api import WRITE_PERMISSIONS, RepoRef
from bot.messages import (
    cancel_reason,
    not_allowed,
    not_allowed_cancel,
    nothing_to_cancel,
)
from bot.triggers import STOP_KINDS, Trigger
from workers.ci_repair import accept_ci
from workers.coordination import DELIVERY_TTL, IssueCoordinator
from workers.runtime import Runtime
from workers.status import RunStatus

log = logging.getLogger(__name__)


def accept_trigger(rt: Runtime, trigger: Trigger) -> str:
    """Returns what happened: "duplicate", "refused", "queued", or for a cancel or a
    close "cancelled" or "nothing_to_cancel"."""
    accepted_key = f"frognano:accepted:{trigger.delivery_id}"
    if rt.redis.exists(accepted_key):
        return "duplicate"
    repo = trigger.repo_ref
    if trigger.kind == "ci":  # no person asked: the checks of the bot's own head failed
        outcome = accept_ci(rt, trigger)
        rt.redis.set(accepted_key, outcome, ex=DELIVERY_TTL)
        return outcome
    if trigger.kind in STOP_KINDS:
        outcome = _accept_stop(rt, trigger, repo)
        rt.redis.set(accepted_key, outcome, ex=DELIVERY_TTL)
        return outcome
    permission = rt.github.permission(repo, trigger.actor)
    if permission not in WRITE_PERMISSIONS:
        # One reply per delivery (even if this task is redelivered), where the command
        # was written; a review is anyone's right, so a non-writer's gets no reply.
        if trigger.review_id is None:
            _reply_once(rt, repo, trigger, not_allowed(trigger.actor))
        rt.redis.set(accepted_key, "refused", ex=DELIVERY_TTL)
        log.info("refused %s for %s (permission %s)", trigger.issue_key, trigger.actor,
                 permission)
        return "refused"

    generation = IssueCoordinator(rt.redis, trigger.issue_key).assign_generation(
        trigger.delivery_id)
    if trigger.comment_id is not None:
        rt.github.react(repo, "eyes", comment_id=trigger.comment_id)
    else:
        rt.github.react(repo, "eyes", issue_number=trigger.issue_number)
    RunStatus.of(rt.github, trigger, generation).queued(rt.queue_length() + 1)
    rt.enqueue_run({**trigger.to_kwargs(), "generation": generation})
    rt.redis.set(accepted_key, "queued", ex=DELIVERY_TTL)
    return "queued"


def _reply_once(rt: Runtime, repo: RepoRef, trigger: Trigger, body: str) -> None:
    """One reply per delivery, where the command was written (the issue or the PR)."""
    if rt.redis.set(f"frognano:refused:{trigger.delivery_id}", 1, nx=True, ex=DELIVERY_TTL):
        rt.github.comment(repo, trigger.pull_number or trigger.issue_number, body)


def _accept_stop(rt: Runtime, trigger: Trigger, repo: RepoRef) -> str:
    """A cancel is a newer generation that runs nothing: the queued run finds itself stale
    when it takes the lock, the running one at its next step (it pushes nothing after
    that), and both end as "cancelled" because this generation says who cancelled."""
    coordinator = IssueCoordinator(rt.redis, trigger.issue_key)
    if trigger.kind == "cancel":
        permission = rt.github.permission(repo, trigger.actor)
        if permission not in WRITE_PERMISSIONS:
            _reply_once(rt, repo, trigger, not_allowed_cancel(trigger.actor))
            log.info("refused a cancel of %s by %s (permission %s)", trigger.issue_key,
                     trigger.actor, permission)
            return "refused"
    if not coordinator.is_active():
        # A close with nothing running says nothing; a command gets an answer.
        if trigger.kind == "cancel":
            _reply_once(rt, repo, trigger, nothing_to_cancel(trigger.actor))
        return "nothing_to_cancel"
    stopped = coordinator.current_generation()
    generation = coordinator.assign_generation(trigger.delivery_id)
    reason = cancel_reason(trigger.kind, trigger.actor, trigger.pull_number)
    coordinator.record_cancel(generation, reason)
    coordinator.mark_done(generation)
    if trigger.comment_id is not None:
        rt.github.react(repo, "eyes", comment_id=trigger.comment_id)
    RunStatus.of(rt.github, trigger, stopped).cancelled(reason)
    log.info("%s: run %s %s", trigger.issue_key, stopped, reason)
    return "cancelled"
