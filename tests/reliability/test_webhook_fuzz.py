"""Scenario 7: webhook fuzzing. hypothesis varies bodies, headers and signatures sent to
the real receiver (`create_app` with its Celery enqueuer on a real redis-server). Never a
5xx; nothing unsigned is ever enqueued (the control queue's length is checked after
every delivery); a signed delivery enqueues at most once.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from bot.app import create_app
from bot.settings import BotSettings
from bot.triggers import CONTROL_QUEUE_SUFFIX
from bot.webhook_events import sign
from tests.reliability.conftest import Recorder
from tests.support.redis_server import RedisServer, start_redis

pytestmark = pytest.mark.reliability

SECRET = "fuzz-secret-of-at-least-32-characters"
QUEUE = "frognano"
BOT = "frognano[bot]"
EXAMPLES = 700
_DELETE = object()  # a mutation that removes the key


@dataclass
class Receiver:
    client: TestClient
    redis: RedisServer

    def queued(self) -> int:
        with self.redis.client() as client:
            return int(client.llen(QUEUE + CONTROL_QUEUE_SUFFIX))


@pytest.fixture(scope="module")
def receiver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Receiver]:
    redis = start_redis(tmp_path_factory.mktemp("fuzz-redis"))
    settings_ = BotSettings(GITHUB_WEBHOOK_SECRET=SECRET, FROGNANO_REDIS_URL=redis.url,
                            FROGNANO_QUEUE=QUEUE, _env_file=None)
    try:
        with TestClient(create_app(settings_, bot_login=BOT),
                        raise_server_exceptions=False) as client:
            yield Receiver(client, redis)
    finally:
        redis.stop()


# --- what hypothesis varies ----------------------------------------------------------------

def _user(login: str) -> dict[str, Any]:
    return {"login": login, "id": 1, "type": "User"}


BASE_PAYLOADS = {
    "issues": {"action": "labeled", "label": {"name": "frognano"},
               "issue": {"number": 1, "title": "t"}, "sender": _user("alice"),
               "repository": {"name": "calc", "owner": _user("octo")},
               "installation": {"id": 42}},
    "issue_comment": {"action": "created", "issue": {"number": 1, "title": "t"},
                      "comment": {"id": 7, "body": "/frognano retry", "user": _user("alice")},
                      "sender": _user("alice"),
                      "repository": {"name": "calc", "owner": _user("octo")},
                      "installation": {"id": 42}},
}
PATHS = [("action",), ("label",), ("label", "name"), ("issue",), ("issue", "number"),
         ("issue", "pull_request"), ("comment", "body"), ("comment", "id"), ("comment", "user"),
         ("sender",), ("sender", "login"), ("sender", "type"), ("repository", "name"),
         ("repository", "owner", "login"), ("installation", "id"), ("installation",)]
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner,
                                                                 max_size=3),
    max_leaves=8)
header_text = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=60)


def _mutated(base: dict[str, Any], mutations: list[tuple[tuple[str, ...], Any]]) -> Any:
    payload = json.loads(json.dumps(base))
    for path, value in mutations:
        node = payload
        for key in path[:-1]:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, dict):
            if value is _DELETE:
                node.pop(path[-1], None)
            else:
                node[path[-1]] = value
    return payload


@st.composite
def bodies(draw: st.DrawFn) -> bytes:
    kind = draw(st.sampled_from(["mutated", "mutated", "json", "bytes"]))
    if kind == "bytes":
        return draw(st.binary(max_size=300))
    if kind == "json":
        return json.dumps(draw(json_values)).encode()
    base = BASE_PAYLOADS[draw(st.sampled_from(sorted(BASE_PAYLOADS)))]
    mutations = draw(st.lists(st.tuples(st.sampled_from(PATHS),
                                        json_values | st.just(_DELETE)), max_size=3))
    return json.dumps(_mutated(base, mutations)).encode()


SIGNATURES = ["valid", "valid", "missing", "empty", "garbage", "random-hex", "wrong-secret",
              "other-body", "sha1", "no-prefix"]


def signature_for(kind: str, body: bytes, noise: str) -> str | None:
    valid = sign(SECRET, body)
    return {"valid": valid, "missing": None, "empty": "", "garbage": noise,
            "random-hex": "sha256=" + uuid.uuid4().hex * 2,
            "wrong-secret": sign(SECRET + "x", body), "other-body": sign(SECRET, body + b" "),
            "sha1": "sha1=" + valid[7:47],
            "no-prefix": valid.removeprefix("sha256=")}[kind]


@st.composite
def deliveries(draw: st.DrawFn) -> tuple[bytes, dict[str, str], bool]:
    body = draw(bodies())
    signature_kind = draw(st.sampled_from(SIGNATURES))
    headers = {"Content-Type": draw(st.sampled_from(["application/json", "text/plain", ""]))}
    event = draw(st.sampled_from(["issues", "issue_comment", "ping", "push", None])
                 | header_text)
    if event is not None:
        headers["X-GitHub-Event"] = event
    delivery = draw(st.sampled_from(["uuid", "uuid", "text", None]))
    if delivery is not None:
        headers["X-GitHub-Delivery"] = str(uuid.uuid4()) if delivery == "uuid" \
            else draw(header_text)
    signature = signature_for(signature_kind, body, draw(header_text))
    if signature is not None:
        headers["X-Hub-Signature-256"] = signature
    return body, headers, signature_kind == "valid"


# Shapes random search rarely reaches, each signed: (what it is, body).
HOSTILE_SHAPES = [
    ("arrays nested 100,000 deep", b"[" * 100_000 + b"]" * 100_000),
    ("objects nested 100,000 deep", b'{"a":' * 100_000 + b"1" + b"}" * 100_000),
    ("a 4,000-digit issue number", json.dumps({**BASE_PAYLOADS["issues"], "issue": {
        "number": int("9" * 4000), "title": "t"}}).encode()),
    ("NaN and Infinity", b'{"action": NaN, "issue": {"number": Infinity}}'),
    ("a lone surrogate", b'{"action": "labeled", "label": {"name": "\\ud800"}}'),
]
def test_webhook_fuzz(receiver: Receiver, scorecard: Recorder) -> None:
    record = scorecard("7-webhook-fuzz", "Webhook fuzzing (hypothesis)",
                       "never a 5xx; nothing unsigned is ever enqueued; a signed delivery "
                       "enqueues at most one task")
    statuses: Counter[int] = Counter()
    counts: Counter[str] = Counter()

    @settings(max_examples=EXAMPLES, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(deliveries())
    def one(delivery: tuple[bytes, dict[str, str], bool]) -> None:
        body, headers, signed = delivery
        before = receiver.queued()
        status = receiver.client.post("/webhooks/github", content=body,
                                      headers=headers).status_code
        enqueued = receiver.queued() - before
        statuses[status] += 1
        counts["signed" if signed else "unsigned"] += 1
        counts["enqueued"] += enqueued
        counts["unsigned enqueued"] += 0 if signed else enqueued
        assert status < 500, f"{status} for {headers} {body[:200]!r}"  # never the whole body
        if not signed:
            assert enqueued == 0 and status == 401, f"unsigned delivery answered {status}"
        assert enqueued == (1 if status == 202 else 0)

    shape_answers = {}
    for name, body in HOSTILE_SHAPES:
        before = receiver.queued()
        shape_answers[name] = receiver.client.post("/webhooks/github", content=body, headers={
            "X-GitHub-Event": "issues", "X-GitHub-Delivery": str(uuid.uuid4()),
            "X-Hub-Signature-256": sign(SECRET, body)}).status_code
        counts["enqueued"] += receiver.queued() - before
        statuses[shape_answers[name]] += 1
    try:
        one()
        failing = {name: code for name, code in shape_answers.items() if code >= 500}
        if failing:
            record.notes.append(
                "deep nesting makes json.loads raise RecursionError, which bot/app.py does "
                "not catch (a 500): it must parse with bot.webhook_events.parse_json_body")
        assert not failing, f"hostile shapes answered 5xx: {failing}"
    finally:
        record.observed = {"deliveries": sum(statuses.values()),
                           "signed": counts["signed"], "unsigned": counts["unsigned"],
                           "answers": ", ".join(f"{s}×{n}" for s, n in sorted(statuses.items())),
                           "5xx": sum(n for s, n in statuses.items() if s >= 500),
                           "enqueued": counts["enqueued"],
                           "enqueued from unsigned": counts["unsigned enqueued"]}
