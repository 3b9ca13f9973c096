"""The accept step: authorize a trigger, supersede older runs, acknowledge, enqueue the run.

Runs on the control queue, so a maintainer sees 👀 and "queued" at once even
while the GPU is busy. Idempotent per delivery: a redelivered accept task
reuses the generation it was given the first time.
"""

from __future__ import annotations

import logging

from bot.github_api import WRITE_PERMISSIONS, RepoRef
from bot.messages import not_allowed, status_queued
from bot.triggers import Trigger
from workers.coordination import DELIVERY_TTL, IssueCoordinator
from workers.runtime import Runtime
from workers.status import StatusComment

log = logging.getLogger(__name__)


def accept_trigger(rt: Runtime, trigger: Trigger) -> str:
    """Returns what happened: "duplicate", "refused" or "queued"."""
    accepted_key = f"frognano:accepted:{trigger.delivery_id}"
    if rt.redis.exists(accepted_key):
        return "duplicate"
    repo = RepoRef(trigger.owner, trigger.repo, trigger.installation_id)
    permission = rt.github.permission(repo, trigger.actor)
    if permission not in WRITE_PERMISSIONS:
        # One reply per delivery, even if this task is redelivered.
        if rt.redis.set(f"frognano:refused:{trigger.delivery_id}", 1, nx=True,
                        ex=DELIVERY_TTL):
            rt.github.comment(repo, trigger.issue_number, not_allowed(trigger.actor))
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
    StatusComment(rt.github, repo, trigger.issue_number).set(
        status_queued(rt.queue_length() + 1, generation))
    rt.enqueue_run({**trigger.to_kwargs(), "generation": generation})
    rt.redis.set(accepted_key, "queued", ex=DELIVERY_TTL)
    return "queued"
