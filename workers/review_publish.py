"""Publishing a review run's passing change: one commit on top of the PR branch.

A review run (changes requested, or a `/frognano` comment on the bot's PR) starts from
the PR branch's head; its change goes on top of that head without force
(`workers/publish.push_on_top`), then the reply and the PR body's test report.
"""

from __future__ import annotations

from bot.github_api import RepoRef
from bot.messages import (
    RunReport,
    pr_body,
    review_not_pushed,
    review_pushed,
    status_done,
    status_failed,
)
from bot.triggers import Trigger
from workers.agent.result import SolveResult
from workers.hostgit import HostRepo
from workers.publish import BranchMoved, branch_for, push_on_top
from workers.runtime import Runtime
from workers.status import StatusComment


def publish_review(rt: Runtime, trigger: Trigger, generation: int, host: HostRepo,
                   result: SolveResult, report: RunReport, status: StatusComment,
                   title: str, message: str) -> str:
    """A review's passing change: a new commit on the PR branch, a reply, the PR body's
    test report updated; a conflict with commits pushed meanwhile leaves the branch."""
    repo = RepoRef(trigger.owner, trigger.repo, trigger.installation_id)
    branch = branch_for(trigger.issue_number)
    pull_number = trigger.pull_number or trigger.issue_number
    assert result.snapshot is not None  # decide() publishes only a readable change
    try:
        commit, replayed_on = push_on_top(
            github=rt.github, cache=rt.repo_cache, repo=repo, host=host,
            snapshot=result.snapshot, branch=branch, message=message)
    except BranchMoved as exc:
        rt.github.comment(repo, pull_number, review_not_pushed(str(exc)))
        status.set(status_failed(str(exc), generation))
        return "conflict"
    pull = rt.github.find_open_pull(repo, branch)
    if pull is not None:
        rt.github.update_pull(repo, pull.number, title=title, body=pr_body(report))
    reply = review_pushed(trigger.actor, commit, report.final_summary, replayed_on)
    if trigger.review_comment_id is not None:  # answered where it was asked
        rt.github.reply_to_review_comment(repo, pull_number, trigger.review_comment_id, reply)
    else:
        rt.github.comment(repo, pull_number, reply)
    status.set(status_done(pull.url if pull else branch, generation))
    return "pushed"
