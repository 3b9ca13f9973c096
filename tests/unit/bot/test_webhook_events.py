"""Signature, payload parsing and routing: pure functions, no HTTP."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from bot.triggers import Trigger
from bot.webhook_events import (
    Ignore,
    PayloadError,
    bot_pull_issue,
    is_cancel_command,
    parse_issue_comment_event,
    parse_retry_command,
    route,
    sign,
    verify_signature,
)

SECRET = "It's a Secret to Everybody"
BOT = "frognano[bot]"


def labeled(label: str = "frognano", sender: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "action": "labeled",
        "issue": {"number": 7, "title": "add() is broken", "user": {"login": "carol"}},
        "label": {"id": 1, "name": label, "color": "00ff00"},
        "repository": {"id": 9, "name": "calc", "full_name": "acme/calc",
                       "owner": {"login": "acme", "type": "Organization"}},
        "sender": sender or {"login": "alice", "type": "User"},
        "installation": {"id": 42, "node_id": "x"},
    }


def commented(body: str, *, pull_request: bool = False,
              sender: dict[str, Any] | None = None) -> dict[str, Any]:
    sender = sender or {"login": "bob", "type": "User"}
    issue: dict[str, Any] = {"number": 7, "title": "add() is broken"}
    if pull_request:
        issue["pull_request"] = {"url": "https://api.github.com/repos/acme/calc/pulls/7"}
    return {
        "action": "created",
        "issue": issue,
        "comment": {"id": 555, "body": body, "user": sender},
        "repository": {"name": "calc", "owner": {"login": "acme"}},
        "sender": sender,
        "installation": {"id": 42},
    }


def do_route(event: str, payload: Any, bot_login: str | None = BOT) -> Trigger | Ignore:
    return route(event, payload, trigger_label="frognano", bot_login=bot_login,
                 delivery_id="d-1")


# --- signature ------------------------------------------------------------------------------


def test_signature_matches_githubs_documented_example() -> None:
    # https://docs.github.com/webhooks/using-webhooks/validating-webhook-deliveries
    header = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
    assert verify_signature(SECRET, b"Hello, World!", header)
    assert sign(SECRET, b"Hello, World!") == header


@pytest.mark.parametrize("header", [
    None, "", "sha256=", "sha1=757107ea0eb2509fc211221cce984b8a37570b6d",
    "757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
    "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e18",
    "sha256=ünïcödé",
])
def test_bad_or_missing_signature_is_refused(header: str | None) -> None:
    assert not verify_signature(SECRET, b"Hello, World!", header)


def test_signature_covers_the_body_and_the_secret() -> None:
    header = sign(SECRET, b"{}")
    assert not verify_signature(SECRET, b"{} ", header)
    assert not verify_signature("other", b"{}", header)
    assert not verify_signature("", b"{}", sign("", b"{}"))  # no secret never verifies


# --- label -----------------------------------------------------------------------------------


def test_trigger_label_starts_a_run() -> None:
    assert do_route("issues", labeled()) == Trigger(
        delivery_id="d-1", installation_id=42, owner="acme", repo="calc", issue_number=7,
        kind="label", actor="alice")


def test_label_matches_regardless_of_case_like_github() -> None:
    assert isinstance(do_route("issues", labeled("FrogNano")), Trigger)


@pytest.mark.parametrize("payload", [
    labeled("bug"), {**labeled(), "action": "unlabeled"}, {**labeled(), "action": "opened"}])
def test_other_labels_and_actions_are_ignored(payload: dict[str, Any]) -> None:
    assert isinstance(do_route("issues", payload), Ignore)


def test_label_by_the_bot_itself_is_ignored() -> None:
    decision = do_route("issues", labeled(sender={"login": "frognano[bot]", "type": "Bot"}))
    assert decision == Ignore("sent by the bot itself")


def test_label_by_another_bot_starts_a_run() -> None:
    payload = labeled(sender={"login": "triage[bot]", "type": "Bot"})
    assert isinstance(do_route("issues", payload), Trigger)


# --- retry -----------------------------------------------------------------------------------


def test_retry_comment_carries_the_guidance_and_comment_id() -> None:
    decision = do_route("issue_comment", commented(
        "  /frognano retry look at calc.py\nthe sign is wrong\n\n"))
    assert decision == Trigger(
        delivery_id="d-1", installation_id=42, owner="acme", repo="calc", issue_number=7,
        kind="retry", actor="bob", guidance="look at calc.py\nthe sign is wrong",
        comment_id=555)


@pytest.mark.parametrize(("body", "guidance"), [
    ("/frognano retry", ""),
    ("/frognano retry\n", ""),
    ("\n\t/frognano retry\nuse the fast path", "use the fast path"),
    ("/frognano retry   x  ", "x"),
])
def test_retry_command_parsing(body: str, guidance: str) -> None:
    assert parse_retry_command(body) == guidance


@pytest.mark.parametrize("body", [
    "/Frognano retry", "/frognano retrying", "please /frognano retry", "/frognano", "", None,
    "> /frognano retry",
])
def test_not_a_retry_command(body: str | None) -> None:
    assert parse_retry_command(body) is None


def test_plain_comment_is_ignored() -> None:
    assert isinstance(do_route("issue_comment", commented("thanks!")), Ignore)


def test_retry_on_a_pull_request_is_ignored() -> None:
    decision = do_route("issue_comment", commented("/frognano retry", pull_request=True))
    assert decision == Ignore("comment on a pull request the bot did not open")


@pytest.mark.parametrize("bot_login", ["frognano[bot]", "frognano", "FrogNano[bot]"])
def test_own_comment_is_ignored(bot_login: str) -> None:
    payload = commented("/frognano retry\nfrom a failure comment",
                        sender={"login": "frognano[bot]", "type": "Bot"})
    assert do_route("issue_comment", payload, bot_login=bot_login) == Ignore(
        "sent by the bot itself")


def test_a_human_named_like_the_app_slug_is_not_the_bot() -> None:
    payload = commented("/frognano retry", sender={"login": "frognano", "type": "User"})
    assert isinstance(do_route("issue_comment", payload, bot_login="frognano"), Trigger)


@pytest.mark.parametrize("action", ["edited", "deleted"])
def test_edited_or_deleted_comments_are_ignored(action: str) -> None:
    assert isinstance(do_route("issue_comment", {**commented("/frognano retry"),
                                                 "action": action}), Ignore)


# --- other events and bad shapes ------------------------------------------------------------


@pytest.mark.parametrize("event", ["push", "pull_request", "installation", "star"])
def test_other_events_are_ignored(event: str) -> None:
    assert isinstance(do_route(event, {"action": "created", "anything": 1}), Ignore)


def _without(payload: dict[str, Any], *path: str) -> dict[str, Any]:
    broken = copy.deepcopy(payload)
    target = broken
    for key in path[:-1]:
        target = target[key]
    del target[path[-1]]
    return broken


@pytest.mark.parametrize(("event", "payload"), [
    ("issues", _without(labeled(), "installation")),
    ("issues", _without(labeled(), "installation", "id")),
    ("issues", _without(labeled(), "label")),
    ("issues", _without(labeled(), "issue", "number")),
    ("issues", {**labeled(), "issue": {"number": "seven"}}),
    ("issues", _without(labeled(), "action")),
    ("issues", [labeled()]),
    ("issues", "labeled"),
    ("issue_comment", _without(commented("/frognano retry"), "comment")),
    ("issue_comment", _without(commented("/frognano retry"), "sender", "login")),
    ("issue_comment", _without(commented("/frognano retry"), "installation")),
])
def test_malformed_payloads_raise(event: str, payload: Any) -> None:
    with pytest.raises(PayloadError):
        do_route(event, payload)


def test_payload_error_names_the_missing_field() -> None:
    with pytest.raises(PayloadError, match=r"installation: Field required"):
        parse_issue_comment_event(_without(commented("x"), "installation"))


def test_ignored_actions_do_not_need_the_full_shape() -> None:
    assert isinstance(do_route("issues", {"action": "opened"}), Ignore)


def test_json_nested_too_deep_is_a_payload_error_not_a_crash() -> None:
    from bot.webhook_events import PayloadError, parse_json_body

    with pytest.raises(PayloadError, match="nested too deeply"):
        parse_json_body(b"[" * 100_000 + b"]" * 100_000)
    with pytest.raises(PayloadError, match="not JSON"):
        parse_json_body(b"\xff{")
    assert parse_json_body(b'{"a": [1]}') == {"a": [1]}


# --- cancel: the command, closing the issue, closing the bot's PR unmerged -------------------


def on_bot_pull(body: str, pr_body: str = "Fixes #3\n\nThe change.",
                author: str = BOT) -> dict[str, Any]:
    payload = commented(body, pull_request=True)
    payload["issue"].update(number=12, body=pr_body,
                            user={"login": author, "type": "Bot" if author == BOT else "User"})
    return payload


def pull_closed(*, merged: bool = False, author: str = BOT, head: str = "frognano/issue-3",
                sender: str = "alice") -> dict[str, Any]:
    return {"action": "closed",
            "pull_request": {"number": 12, "merged": merged, "head": {"ref": head},
                             "user": {"login": author, "type": "Bot"}},
            "repository": {"name": "calc", "owner": {"login": "acme"}},
            "sender": {"login": sender, "type": "User"}, "installation": {"id": 42}}


@pytest.mark.parametrize(("body", "expected"), [
    ("/frognano cancel", True), ("  /frognano cancel please", True),
    ("/frognano cancel\nit is wrong", True), ("/frognano cancelled", False),
    ("please /frognano cancel", False), ("/frognano retry", False), (None, False)])
def test_cancel_command(body: str | None, expected: bool) -> None:
    assert is_cancel_command(body) is expected


def test_cancel_on_the_issue_is_a_cancel_trigger() -> None:
    decision = do_route("issue_comment", commented("/frognano cancel"))
    assert decision == Trigger(
        delivery_id="d-1", installation_id=42, owner="acme", repo="calc", issue_number=7,
        kind="cancel", actor="bob", comment_id=555)


def test_cancel_on_the_bots_pr_cancels_the_issue_it_fixes() -> None:
    decision = do_route("issue_comment", on_bot_pull("/frognano cancel"))
    assert isinstance(decision, Trigger)
    assert (decision.kind, decision.issue_number, decision.pull_number) == ("cancel", 3, 12)


@pytest.mark.parametrize(("payload", "reason"), [
    (on_bot_pull("/frognano cancel", author="mallory"),
     "comment on a pull request the bot did not open"),
    (on_bot_pull("looks good"),
     "comment on the bot's pull request is not a /frognano command"),
    (on_bot_pull("/frognano cancel", pr_body="rewritten by hand"),
     "the bot's pull request does not say which issue it fixes"),
])
def test_pr_comments_that_cancel_nothing(payload: dict[str, Any], reason: str) -> None:
    assert do_route("issue_comment", payload) == Ignore(reason)


def test_bots_own_cancel_comment_is_ignored() -> None:
    payload = commented("/frognano cancel", sender={"login": BOT, "type": "Bot"})
    assert do_route("issue_comment", payload) == Ignore("sent by the bot itself")


def test_closing_the_issue_is_a_closed_trigger() -> None:
    decision = do_route("issues", {**labeled(), "action": "closed"})
    assert decision == Trigger(
        delivery_id="d-1", installation_id=42, owner="acme", repo="calc", issue_number=7,
        kind="closed", actor="alice")


def test_closing_the_bots_pr_unmerged_cancels_its_issue() -> None:
    decision = do_route("pull_request", pull_closed())
    assert isinstance(decision, Trigger)
    assert (decision.kind, decision.issue_number, decision.pull_number, decision.actor) == (
        "closed", 3, 12, "alice")


@pytest.mark.parametrize(("payload", "reason"), [
    (pull_closed(merged=True), "pull request was merged"),
    (pull_closed(author="mallory"), "pull request the bot did not open"),
    (pull_closed(sender=BOT), "sent by the bot itself"),
    (pull_closed(head="feature/x"),
     "the bot's pull request has a branch it does not use: 'feature/x'"),
    ({**pull_closed(), "action": "reopened"}, "pull_request.reopened is not handled"),
])
def test_pull_request_events_that_cancel_nothing(payload: dict[str, Any], reason: str) -> None:
    assert do_route("pull_request", payload) == Ignore(reason)


def test_a_closed_pull_request_without_its_head_is_a_payload_error() -> None:
    with pytest.raises(PayloadError):
        do_route("pull_request", _without(pull_closed(), "pull_request", "head"))


def test_bot_pull_issue_reads_only_the_first_line() -> None:
    assert bot_pull_issue("Fixes #41\n\nbody") == 41
    assert bot_pull_issue("Some text\nFixes #41") is None


# --- continue from a review ----------------------------------------------------------------


def bot_pr(author: str = BOT, head: str = "frognano/issue-3") -> dict[str, Any]:
    return {"number": 12, "head": {"ref": head, "sha": "a" * 40},
            "user": {"login": author, "type": "Bot" if author == BOT else "User"}}


def reviewed(state: str = "changes_requested", body: str | None = "Name the sum.",
             reviewer: str = "alice", **pull: Any) -> dict[str, Any]:
    user = {"login": reviewer, "type": "Bot" if reviewer == BOT else "User"}
    return {"action": "submitted",
            "review": {"id": 77, "body": body, "state": state, "user": user},
            "pull_request": bot_pr(**pull),
            "repository": {"name": "calc", "owner": {"login": "acme"}},
            "sender": user, "installation": {"id": 42}}


def review_commented(body: str, author: str = "alice", pr_author: str = BOT
                     ) -> dict[str, Any]:
    user = {"login": author, "type": "Bot" if author == BOT else "User"}
    return {"action": "created",
            "comment": {"id": 88, "body": body, "user": user, "path": "calc.py", "line": 2,
                        "diff_hunk": "@@ -1,2 +1,2 @@\n def add(a, b):\n-    return a - b"},
            "pull_request": bot_pr(author=pr_author),
            "repository": {"name": "calc", "owner": {"login": "acme"}},
            "sender": user, "installation": {"id": 42}}


def test_a_review_requesting_changes_continues_the_issue_from_its_pr() -> None:
    decision = do_route("pull_request_review", reviewed())
    assert isinstance(decision, Trigger)
    assert (decision.kind, decision.issue_number, decision.pull_number, decision.review_id,
            decision.actor) == ("review", 3, 12, 77, "alice")
    assert "Name the sum." in decision.guidance


def test_a_commenting_review_that_is_a_command_continues_too() -> None:
    decision = do_route("pull_request_review", reviewed("commented", "/frognano rename it"))
    assert isinstance(decision, Trigger) and "rename it" in decision.guidance


@pytest.mark.parametrize(("payload", "reason"), [
    (reviewed("approved"), "review is approved, not changes requested"),
    (reviewed("commented", "nice"), "review is commented, not changes requested"),
    (reviewed(reviewer=BOT), "sent by the bot itself"),
    # Written by the bot, delivered with a person as sender (an edit, a re-delivery).
    ({**reviewed(reviewer=BOT), "sender": {"login": "alice", "type": "User"}},
     "sent by the bot itself"),
    (reviewed(author="mallory"), "pull request the bot did not open"),
    (reviewed(head="main"), "the bot's pull request has a branch it does not use: 'main'"),
    ({**reviewed(), "action": "dismissed"}, "pull_request_review.dismissed is not handled"),
])
def test_reviews_that_start_nothing(payload: dict[str, Any], reason: str) -> None:
    assert do_route("pull_request_review", payload) == Ignore(reason)


def test_a_review_comment_command_carries_file_line_and_hunk() -> None:
    decision = do_route("pull_request_review_comment",
                        review_commented("/frognano use a + b here"))
    assert isinstance(decision, Trigger)
    assert (decision.kind, decision.issue_number, decision.review_comment_id) == (
        "review", 3, 88)
    assert "calc.py, line 2" in decision.guidance and "use a + b here" in decision.guidance
    assert "-    return a - b" in decision.guidance
    assert "/frognano" not in decision.guidance


@pytest.mark.parametrize(("payload", "reason"), [
    (review_commented("plain remark"), "review comment is not a /frognano command"),
    (review_commented("/frognano fix", author=BOT), "sent by the bot itself"),
    ({**review_commented("/frognano fix", author=BOT),
      "sender": {"login": "alice", "type": "User"}}, "sent by the bot itself"),
    (review_commented("/frognano fix", pr_author="mallory"),
     "pull request the bot did not open"),
])
def test_review_comments_that_start_nothing(payload: dict[str, Any], reason: str) -> None:
    assert do_route("pull_request_review_comment", payload) == Ignore(reason)


def test_a_frognano_comment_on_the_bots_pr_is_feedback() -> None:
    decision = do_route("issue_comment", on_bot_pull("/frognano keep the docstring"))
    assert isinstance(decision, Trigger)
    assert (decision.kind, decision.issue_number, decision.pull_number) == ("review", 3, 12)
    assert "keep the docstring" in decision.guidance


# --- CI on the bot's PR (issue 23 §2): check_suite and check_run completed ----------------

BOT_EMAIL = "frognano[bot]@users.noreply.github.com"


def check_suite(conclusion: str = "failure", *, branch: str = "frognano/issue-7",
                author: str = BOT_EMAIL, committer: str = BOT_EMAIL,
                app: str = "github-actions", action: str = "completed") -> dict[str, Any]:
    return {
        "action": action,
        "check_suite": {
            "id": 31, "head_branch": branch, "head_sha": "a" * 40, "status": "completed",
            "conclusion": conclusion, "app": {"id": 15368, "slug": app},
            "pull_requests": [{"number": 12, "head": {"ref": branch, "sha": "a" * 40}}],
            "head_commit": {"id": "a" * 40, "author": {"name": "x", "email": author},
                            "committer": {"name": "x", "email": committer}}},
        "repository": {"name": "calc", "owner": {"login": "acme"}},
        "sender": {"login": BOT, "type": "Bot"},  # the bot's push started the CI
        "installation": {"id": 42},
    }


def check_run(conclusion: str = "failure", *, branch: str | None = "frognano/issue-7",
              pulls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "action": "completed",
        "check_run": {"id": 77, "name": "tests (3.11)", "head_sha": "b" * 40,
                      "status": "completed", "conclusion": conclusion,
                      "app": {"id": 15368, "slug": "github-actions"},
                      "check_suite": {"id": 31, "head_branch": branch},
                      "pull_requests": pulls if pulls is not None else []},
        "repository": {"name": "calc", "owner": {"login": "acme"}},
        "sender": {"login": "github-actions[bot]", "type": "Bot"},
        "installation": {"id": 42},
    }


def test_a_failed_check_suite_on_the_bots_head_is_a_ci_round() -> None:
    trigger = do_route("check_suite", check_suite())
    assert isinstance(trigger, Trigger)
    assert (trigger.kind, trigger.issue_number, trigger.pull_number, trigger.head_sha) == (
        "ci", 7, 12, "a" * 40)
    assert trigger.actor == "github-actions" and trigger.installation_id == 42
    for conclusion in ("timed_out", "startup_failure"):
        assert isinstance(do_route("check_suite", check_suite(conclusion)), Trigger)


def test_a_check_suite_that_did_not_fail_or_is_not_the_bots_starts_nothing() -> None:
    for conclusion in ("success", "neutral", "cancelled", "skipped", "action_required", None):
        decision = do_route("check_suite", check_suite(conclusion))  # type: ignore[arg-type]
        assert isinstance(decision, Ignore), conclusion
    assert isinstance(do_route("check_suite", check_suite(action="requested")), Ignore)
    assert "branch" in do_route("check_suite", check_suite(branch="main")).reason  # type: ignore[union-attr]
    assert isinstance(do_route("check_suite", check_suite(branch="frognano/issue-7x")), Ignore)
    person = do_route("check_suite", check_suite(author="m@example.com",
                                                 committer="m@example.com"))
    assert isinstance(person, Ignore) and "person" in person.reason
    amended = do_route("check_suite", check_suite(committer="m@example.com"))
    assert isinstance(amended, Ignore), "a person's amend keeps the bot as the author"
    own = do_route("check_suite", check_suite(app="frognano"))
    assert isinstance(own, Ignore) and "own App" in own.reason


def test_a_check_suite_on_a_commit_github_made_for_the_bot_counts() -> None:
    """Commits made through the Git Data API: GitHub's id+login email, GitHub committing."""
    made = check_suite(author="4242+frognano[bot]@users.noreply.github.com",
                       committer="noreply@github.com")
    assert isinstance(do_route("check_suite", made), Trigger)


def test_a_failed_check_run_is_a_ci_round_too() -> None:
    trigger = do_route("check_run", check_run())
    assert isinstance(trigger, Trigger) and trigger.kind == "ci"
    assert (trigger.issue_number, trigger.head_sha, trigger.pull_number) == (7, "b" * 40, None)
    # The branch from the PR when the suite does not name it.
    pulls = [{"number": 12, "head": {"ref": "frognano/issue-9", "sha": "b" * 40}}]
    from_pull = do_route("check_run", check_run(branch=None, pulls=pulls))
    assert isinstance(from_pull, Trigger) and (from_pull.issue_number,
                                               from_pull.pull_number) == (9, 12)
    assert isinstance(do_route("check_run", check_run("success")), Ignore)


def test_a_malformed_check_delivery_is_a_payload_error() -> None:
    broken = check_suite()
    del broken["check_suite"]["head_sha"]
    with pytest.raises(PayloadError):
        do_route("check_suite", broken)
    broken_run = check_run()
    broken_run["check_run"]["id"] = "x"
    with pytest.raises(PayloadError):
        do_route("check_run", broken_run)


def test_the_senders_account_id_goes_with_the_trigger_for_its_co_author_trailer() -> None:
    """The commit credits whoever asked (`Co-authored-by: login <id+login@…>`): the id is
    the webhook's own, for a label, a command and a review alike (the reviewer's)."""
    alice = {"login": "alice", "id": 1234, "type": "User"}
    label = do_route("issues", labeled(sender=alice))
    retry = do_route("issue_comment", commented("/frognano retry", sender=alice))
    payload = reviewed()
    payload["review"]["user"] = payload["sender"] = alice
    review = do_route("pull_request_review", payload)
    for decision in (label, retry, review):
        assert isinstance(decision, Trigger) and decision.actor_id == 1234, decision
    assert isinstance(plain := do_route("issues", labeled()), Trigger)
    assert plain.actor_id is None  # no id, no trailer
