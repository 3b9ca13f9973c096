"""The runner's tool outputs against Leaf's own, case by case (issue 11).

tests/data/fidelity_tools/expected.json was generated once by running Leaf's
tool_runner.py (microsoft/FrogNano, frognano/harness/leaf/) on cases.json with
tests/support/fidelity_tools_gen.py; here the same calls go through the real runner in each
sandbox backend, with the sandbox's work directory standing for {WORKDIR}.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import pytest

from tests.support.paths import DATA as TEST_DATA
from tests.support.sandbox_support import BACKENDS, running_sandbox

DATA = TEST_DATA / "fidelity_tools"
CASES = json.loads((DATA / "cases.json").read_text())
EXPECTED = json.loads((DATA / "expected.json").read_text())


@pytest.fixture(scope="module", params=BACKENDS)
def sb(request: pytest.FixtureRequest) -> Iterator:
    with running_sandbox(request.param) as sandbox:
        yield sandbox


def substitute(value: object, workdir: str) -> object:
    if isinstance(value, str):
        return value.replace("{WORKDIR}", workdir)
    if isinstance(value, dict):
        return {key: substitute(item, workdir) for key, item in value.items()}
    return value


def test_every_case_has_leaf_outputs() -> None:
    assert [case["name"] for case in CASES] == list(EXPECTED)
    for case in CASES:
        assert len(EXPECTED[case["name"]]) == len(case["calls"])


@pytest.mark.parametrize("case", CASES, ids=[case["name"] for case in CASES])
def test_tool_output_matches_leaf(sb, case: dict) -> None:
    root = sb.config.workspace
    for name, text in case.get("files", {}).items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        if os.geteuid() == 0 and hasattr(sb, "uid"):
            for owned in (path, *path.relative_to(root).parents):
                os.chown(root / owned, sb.uid, sb.gid)
    outputs = [sb.run_tool(call["tool"], substitute(call["args"], sb.workdir))
               for call in case["calls"]]
    assert outputs == [out.replace("{WORKDIR}", sb.workdir)
                       for out in EXPECTED[case["name"]]]
