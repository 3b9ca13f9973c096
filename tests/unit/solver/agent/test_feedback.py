"""The refusal the model reads teaches the rules, never the detector (issue 19 §3).

A model trained on test rewards that is told "the pytest guard was silent" learns to
keep the guard talking. For every kind of refusal the verdict makes, the feedback names
the rules and the original tests that do not pass, by id, and no part of how tampering
is found; the full reasons stay in the verdict, for people.
"""

from __future__ import annotations

import dataclasses

import pytest

from solver.agent.prompts import verdict_feedback_message
from solver.policy import SOURCE_TEXT, SOURCE_TEXT_RULE
from solver.verdict.outside_pytest import DISAGREES
from solver.verdict.repo_tests import TestVerdict
from solver.verdict.suite_paths import TreePlan
from solver.verdict.verdict import Verdict, decide

# Words that tell the model how the harness looks at a run.
DETECTOR_WORDS = ("guard", "junit", "report", "pipe", "audit", "fifo", "identity",
                  "plugin", "hook", "outside", "plain python", "tamper", "shadow", "patch",
                  "atexit", "token", "channel", "written", "silent", "exit code", "exited",
                  "frognano_", "pytest_addopts", "sitecustomize", "entry point", "metadata",
                  "while the tests ran", "bound")
FAILING = "tests/test_calc.py::test_add"
PASSING = "tests/test_calc.py::test_sub"
OUTPUT = ("FAILED tests/test_calc.py::test_add - assert -1 == 5\n"
          "- generated xml file: <the harness's report> -\n1 failed, 1 passed in 0.1s\n")


def _run(tests: dict[str, str], exit_code: int = 1, **kw: object) -> TestVerdict:
    return TestVerdict(command="python3 -m pytest", exit_code=exit_code, timed_out=False,
                       seconds=0.1, output=OUTPUT, tests=tests, report="junit",
                       report_writes=1, guard={}, **kw)  # type: ignore[arg-type]


BASELINE = _run({FAILING: "failed", PASSING: "passed"})
FIXED = _run({FAILING: "passed", PASSING: "passed"}, exit_code=0)


def _case(final: TestVerdict, plan: TreePlan | None = None,
          model_tests: TestVerdict | None = None) -> tuple[Verdict, TestVerdict]:
    return decide(BASELINE, final, plan or TreePlan(), model_tests), final


PYC = "calc/__pycache__/calc.cpython-311.pyc"
PYC_REFUSAL = (f"{SOURCE_TEXT}: the change adds or edits compiled or binary code, which is "
               f"never part of a fix, whatever .gitignore says: {PYC} (compiled Python)")


def _refusals() -> dict[str, tuple[Verdict, TestVerdict]]:
    """Each kind of refusal, made by the verdict itself where it can make it."""
    guarded = {"plugin": {"plugins": ["p.py"]},
               "patched": {"patched": ["_pytest.reports.TestReport (from p.py)"]},
               "import hook": {"import_hooks": ["p.py"]},
               "test code swapped": {"swapped": [FAILING]}}
    made = {
        "still fails": _case(BASELINE),
        "no longer runs": _case(_run({PASSING: "passed"})),
        "now skipped": _case(_run({FAILING: "passed", PASSING: "skipped"}, 0)),
        "timed out": _case(dataclasses.replace(FIXED, timed_out=True)),
        "no report": _case(dataclasses.replace(FIXED, report="missing")),
        "exit disagrees": _case(_run({FAILING: "failed", PASSING: "passed"}, 0)),
        "report twice": _case(dataclasses.replace(FIXED, report_writes=2)),
        "guard silent": _case(dataclasses.replace(FIXED, guard=None)),
        **{kind: _case(dataclasses.replace(FIXED, guard=found))
           for kind, found in guarded.items()},
        "tests changed while running": _case(dataclasses.replace(
            FIXED, changed_during_run=["tests/test_calc.py"])),
        "plan refusal": _case(FIXED, TreePlan(refusals=[
            "the change adds pytest.py, which would shadow `pytest` when the tests run"])),
        "not source text": _case(FIXED, TreePlan(refusals=[PYC_REFUSAL])),
        "new test fails": _case(FIXED, TreePlan(model_tests=["tests/test_new.py"]),
                                _run({**FIXED.tests, "tests/test_new.py::test_x": "failed"})),
    }
    outside, _ = _case(FIXED)
    outside.accepted = False  # what check_outside_pytest does to an accepted verdict
    outside.reasons.append(f"{DISAGREES}{FAILING} failed when its module is run by plain "
                           "python (AssertionError)")
    made["outside pytest"] = (outside, FIXED)
    return made


REFUSALS = _refusals()


@pytest.mark.parametrize("kind", list(REFUSALS))
def test_feedback_names_the_failing_tests_and_no_detector(kind: str) -> None:
    verdict, final = REFUSALS[kind]
    assert not verdict.accepted, kind
    message = verdict_feedback_message("python3 -m pytest", verdict, BASELINE, final, 0, 2)
    named = [word for word in DETECTOR_WORDS if word in message.lower()]
    assert not named, (named, message)
    # Skipping the passing test is the one refusal whose failing test is not test_add.
    expected = PASSING if kind == "now skipped" else FAILING
    assert f"Original tests that do not pass:\n- {expected}" in message, message
    assert "edits to test files" in message and "must pass" in message
    if kind == "new test fails":
        assert "Your new tests that fail:\n- tests/test_new.py::test_x" in message
    assert verdict.reasons, "the reasons stay with the verdict, for people"


def test_feedback_on_compiled_code_says_a_fix_is_source_text_and_names_the_files() -> None:
    """Issue 28 §2: the rule and the files, so the model can delete them; no other
    refusal's feedback carries the rule."""
    verdict, final = REFUSALS["not source text"]
    message = verdict_feedback_message("python3 -m pytest", verdict, BASELINE, final, 0, 2)
    assert f"{SOURCE_TEXT_RULE}\n- {PYC_REFUSAL}" in message, message
    others = [kind for kind, (other, after) in REFUSALS.items() if kind != "not source text"
              and "source text" in verdict_feedback_message("python3 -m pytest", other,
                                                            BASELINE, after, 0, 2)]
    assert others == []


def test_feedback_keeps_the_test_output_without_the_harness_lines() -> None:
    verdict, final = REFUSALS["still fails"]
    message = verdict_feedback_message("python3 -m pytest", verdict, BASELINE, final, 1, 0)
    assert "assert -1 == 5" in message and "generated xml file" not in message
    assert "round 2; 0 left" in message


ZONE = "tests/test_zones.py::test_newest_zone"  # fails on the host, before and after


def test_feedback_on_a_preexisting_failure_says_the_rule_not_the_check() -> None:
    """A do-nothing change with a baseline failure of its own: the model reads which tests
    are not held against it, and that one failing on the base code must pass."""
    from solver.verdict.verdict import Reruns

    baseline = _run({FAILING: "failed", PASSING: "passed", ZONE: "failed"})
    nothing = decide(baseline, baseline, TreePlan(), reruns=Reruns(second=baseline))
    message = verdict_feedback_message("python3 -m pytest", nothing, baseline, baseline, 0, 2)
    assert not [word for word in DETECTOR_WORDS if word in message.lower()], message
    assert "not held against your change" in message, message
    assert f"they still do not pass:\n- {FAILING}\n- {ZONE}" in message, message
    assert "at least one test that fails on the base code pass" in message
    assert "Original tests that do not pass" not in message  # none is required as such
    # With the fix and a failing new test, only the new test is the model's to fix.
    fixed = _run({FAILING: "passed", PASSING: "passed", ZONE: "failed"})
    added = _run({**fixed.tests, "tests/test_new.py::test_x": "failed"})
    refused = decide(baseline, fixed, TreePlan(model_tests=["tests/test_new.py"]), added,
                     Reruns(second=baseline))
    message = verdict_feedback_message("python3 -m pytest", refused, baseline, fixed, 0, 2)
    assert f"- {ZONE}\n\nYour new tests" not in message, message  # not the model's to fix
    assert "Your new tests that fail:\n- tests/test_new.py::test_x" in message
    assert f"they still do not pass:\n- {ZONE}\n" in message
