"""What the receiver hands to the workers: ids, never objects, by task name.

The receiver (bot/) enqueues `ACCEPT_TASK` without importing workers/. The
accept task authorizes the trigger, supersedes an older run of the issue,
acknowledges on GitHub and enqueues `RUN_TASK` on the GPU queue.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

from bot.github_api import RepoRef

ACCEPT_TASK = "frognano.accept_trigger"
RUN_TASK = "frognano.run_issue"
CONTROL_QUEUE_SUFFIX = "-control"  # accept tasks: fast, never behind a GPU run

# cancel: `/frognano cancel` on the issue or the bot's PR (a writer's); closed: the issue, or
# the bot's PR unmerged, was closed. Neither runs anything: each is a newer generation
# that stops the issue's queued or running run at its next step.
# review: on the bot's PR, a review requesting changes or a `/frognano …` comment (a
# writer's); the run starts from the PR branch's head with the feedback as guidance.
# ci: a failed check suite or check run on the bot's own head commit of its PR, in a
# repository with `ci: run`; a review-like run from that head with the failing checks'
# names and log tails as guidance (workers/ci_repair.py).
TriggerKind = Literal["label", "retry", "cancel", "closed", "review", "ci"]
STOP_KINDS: tuple[TriggerKind, ...] = ("cancel", "closed")


@dataclass(frozen=True)
class Trigger:
    """One request to work on an issue, as parsed from a webhook delivery."""

    delivery_id: str
    installation_id: int
    owner: str
    repo: str
    issue_number: int
    kind: TriggerKind
    actor: str  # who labeled or commented
    # Their account's id (the webhook's sender.id): the commit's `Co-authored-by:` address.
    actor_id: int | None = None
    guidance: str = ""  # text after `/frognano retry`, or a review's feedback
    comment_id: int | None = None  # the command's comment, to react to
    pull_number: int | None = None  # the bot's PR the command, close or review came from
    review_id: int | None = None  # the review that asked for changes
    review_comment_id: int | None = None  # the `/frognano` review comment, to reply to
    head_sha: str | None = None  # ci: the PR head commit whose checks failed

    @property
    def issue_key(self) -> str:
        return f"{self.owner}/{self.repo}#{self.issue_number}"

    @property
    def repo_ref(self) -> RepoRef:
        """The repository as the GitHub client addresses it (through its installation)."""
        return RepoRef(self.owner, self.repo, self.installation_id)

    def to_kwargs(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_kwargs(cls, data: dict[str, Any]) -> Trigger:
        return cls(**data)
