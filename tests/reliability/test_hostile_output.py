"""Hostile issue, issue 9 §6 and §7: what a stranger or a steered model can make the bot
do on GitHub without touching the host.

- a stranger reaches a fresh receiver first and sends the code of their own App to the
  setup callback (a real uvicorn receiver, the fake GitHub's manifest flow);
- a captured signed delivery is sent again under new delivery ids (the whole stack);
- the model's final answer mentions, links, embeds and references; test output closes
  its code fence and mentions (the whole stack, the scripted model; what lands on the
  fake GitHub is parsed by a real CommonMark parser).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from dotenv import dotenv_values

from bot.app_manifest import app_manifest
from bot.markdown import ZWSP
from solver.models.scripted import final_answer, think_and_call
from tests.reliability.conftest import Recorder
from tests.reliability.stack import FIX_CALC, OWNER, Stack, StackOptions, running_stack, wait_for
from tests.support.fake_github import FakeGitHub
from tests.support.sandbox_support import HAVE_BWRAP
from tests.unit.bot.test_markdown_safety import EVIL, SUMMARY, live, tokens
from tests.unit.bot.test_setup_flow import TOKEN, Receiver, manifest_form, redeem, unconfigured

pytestmark = [pytest.mark.reliability]

LOUD_CALC = ('def add(a, b):\n    print("````\\n@octocat ![pixel](' + EVIL + ')\\n````")\n'
             "    return a-b\n\n\ndef mul(a, b):\n    return a * b\n")
SCRIPT = [
    think_and_call("Make add loud where asked.", "Bash",
                   command="if [ -f LOUD ]; then cp LOUD calc.py; fi; true"),
    FIX_CALC,  # finds nothing to replace in the loud calc.py, which keeps failing
    final_answer(SUMMARY),
]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    if not HAVE_BWRAP:
        pytest.skip("bubblewrap is not installed")
    with running_stack(tmp_path_factory.mktemp("hostile-output"),
                       StackOptions(SCRIPT)) as stack:
        stack.add_calc_repo("calc-summary")
        stack.add_calc_repo("calc-loud", {"LOUD": LOUD_CALC,
                                          ".github/frognano.yml": "max_rounds: 1\n"})
        stack.add_calc_repo("calc-replay")
        yield stack


def test_a_stranger_cannot_claim_a_fresh_receiver(tmp_path: Path, scorecard: Recorder) -> None:
    record = scorecard(
        "10-hostile-setup-claim", "Hostile setup: a stranger claims a fresh receiver",
        "without the printed one-time token /setup and the callback answer 403 and no "
        "credentials are written; the operator with the token completes setup")
    env_path = tmp_path / ".env"
    env_path.write_text("")
    fake = FakeGitHub(tmp_path / "github").start()
    try:
        with Receiver(unconfigured(fake), env_path) as url, httpx.Client() as stranger, \
                httpx.Client() as operator:
            code = fake.confirm_manifest(app_manifest(url), None).code  # the stranger's App
            answers = {"/setup": stranger.get(url + "/setup").status_code,
                       "/setup?token=guess": stranger.get(
                           url + "/setup", params={"token": "guess"}).status_code,
                       "callback with own code": stranger.get(
                           url + "/setup/callback",
                           params={"code": code, "state": "x"}).status_code}
            written_by_stranger = dotenv_values(env_path)
            redeem(operator, url)
            reused = stranger.get(url + "/", params={"token": TOKEN}).status_code
            action, fields = manifest_form(operator.get(url + "/setup").text)
            finished = operator.post(action, data=fields, follow_redirects=True).status_code
        record.observed = {**answers, "credentials written for the stranger":
                           len(written_by_stranger), "used token again": reused,
                           "operator's setup": finished,
                           "stranger's code converted": fake.manifest_codes[code].used}
        assert set(answers.values()) == {403} and written_by_stranger == {}
        assert reused == 403 and finished == 200
        assert dotenv_values(env_path)["GITHUB_APP_ID"] == str(fake.app_id)
        assert fake.manifest_codes[code].used is False
    finally:
        fake.stop()


def test_a_replayed_delivery_starts_no_second_run(stack: Stack, scorecard: Recorder) -> None:
    record = scorecard(
        "10-hostile-replay", "Hostile replay: a captured delivery under new delivery ids",
        "the same signed body under 5 new delivery ids is answered 200 replayed; one run")
    body, headers = stack.signed("issues", stack.label_payload("calc-replay", 1))
    first = stack.client.post("/webhooks/github", content=body, headers=headers)
    replays = [stack.client.post("/webhooks/github", content=body, headers={
        **headers, "X-GitHub-Delivery": f"replay-{n}"}) for n in range(5)]
    wait_for(lambda: stack.fake.pulls(OWNER, "calc-replay"), timeout=120, message="the PR")
    record.observed = {"first": first.status_code,
                       "replays answered": sorted({r.status_code for r in replays}),
                       "runs": len(stack.transcripts("calc-replay"))}
    assert first.status_code == 202
    assert all(r.status_code == 200 and r.json()["replayed"] for r in replays)
    assert len(stack.transcripts("calc-replay")) == 1


def test_the_models_summary_is_inert_in_the_pr(stack: Stack, scorecard: Recorder) -> None:
    record = scorecard(
        "10-hostile-markdown-summary", "Hostile Markdown: the model's summary in the PR",
        "no mention, link, image, raw HTML, issue reference or bare URL from the model is "
        "live in the PR body (parsed with a CommonMark parser)")
    assert stack.label("calc-summary", 1).status_code == 202
    [pull] = wait_for(lambda: stack.fake.pulls(OWNER, "calc-summary"), timeout=120,
                      message="the PR")
    found = live(pull.body)
    links = found.pop("link_open", [])
    references = found.pop("reference", [])
    record.observed = {"links": len(links), "references": references,
                       "other live": sorted(found), "CI caution": "CI and secrets" in pull.body}
    assert links == [str({"href": "https://frognano.example/runs/octo/calc-summary/1/1"})]
    assert references == ["#1"] and found == {}
    assert "CI and secrets" in pull.body


def test_test_output_cannot_break_out_of_the_failure_comment(stack: Stack,
                                                             scorecard: Recorder) -> None:
    record = scorecard(
        "10-hostile-markdown-fence", "Hostile Markdown: test output closes its fence",
        "test output with four-backtick lines, a mention and an image stays inside one "
        "code fence of the failure comment")
    assert stack.label("calc-loud", 1).status_code == 202
    comment = wait_for(lambda: next((c.body for c in stack.fake.comments(
        OWNER, "calc-loud", 1) if "did not open a pull request" in c.body), None),
        timeout=120, message="the failure comment")
    fences = [t for t in tokens(comment) if t.type == "fence"]
    found = live(comment)
    # The run's page and its transcript (issue 22 §4), the bot's own links.
    page = f"https://frognano.example/runs/{OWNER}/calc-loud/1/1"
    own_links = found.pop("link_open", None) == [str({"href": url})
                                                 for url in (page, f"{page}#events")]
    record.observed = {"fences": len(fences), "live": sorted(found),
                       "run links, the bot's own": own_links,
                       "output in the fence": bool(fences) and "````" in fences[0].content}
    assert len(fences) == 1 and "````" in fences[0].content
    assert f"@{ZWSP}octocat" in fences[0].content
    assert own_links and found == {}
