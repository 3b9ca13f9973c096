"""`--model` / FROGNANO_MODEL parsed once (solver/models/spec.py), and the one factory of a
run's models (`ModelMaker`), as solve and the worker build them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from solver.models import ModelMaker, ModelSpec, ModelSpecError, check_model_slots
from solver.models.scripted import ScriptedModel


@pytest.mark.parametrize(("text", "kind", "target", "served", "in_process"), [
    ("http://127.0.0.1:8080/v1", "server", "http://127.0.0.1:8080/v1", True, False),
    ("https://models.example/v1", "server", "https://models.example/v1", True, False),
    ("/models/FrogNano-4B-Q4_K_M.gguf", "gguf", "/models/FrogNano-4B-Q4_K_M.gguf", False,
     True),
    ("scripted:/tmp/s.json", "scripted", "/tmp/s.json", False, False),
])
def test_each_kind_is_read_from_the_text_once(text: str, kind: str, target: str,
                                              served: bool, in_process: bool) -> None:
    spec = ModelSpec.parse(text)
    assert (spec.kind, spec.target, spec.served, spec.in_process) == (kind, target, served,
                                                                      in_process)
    assert str(spec) == text, "shown as the user typed it"


@pytest.mark.parametrize(("text", "said"), [
    (None, "no model given"), ("", "no model given"),
    ("model.bin", "is not a model: use an http"), ("ftp://x/v1", "is not a model"),
])
def test_what_is_no_model_is_refused_saying_what_would_work(text: str | None,
                                                            said: str) -> None:
    with pytest.raises(ModelSpecError, match=said):
        ModelSpec.parse(text)
    assert ModelSpec.read(text) is None


def test_several_slots_need_a_model_that_serves_several_streams() -> None:
    check_model_slots(ModelSpec.parse("http://127.0.0.1:9/v1"), 4)
    check_model_slots(ModelSpec.parse("scripted:s.json"), 4)
    check_model_slots(ModelSpec.parse("m.gguf"), 1)
    with pytest.raises(ModelSpecError, match="llama-server --parallel N"):
        check_model_slots(ModelSpec.parse("m.gguf"), 2)


def test_the_maker_builds_a_fresh_client_per_candidate_with_its_seed(tmp_path: Path
                                                                      ) -> None:
    script = tmp_path / "s.json"
    script.write_text(json.dumps([["zero"], ["one"]]))
    make = ModelMaker(ModelSpec.parse(f"scripted:{script}"))
    first, second = make(0), make(1)
    assert isinstance(first, ScriptedModel) and isinstance(second, ScriptedModel)
    assert first is not second
    assert (first._steps, second._steps) == (["zero"], ["one"])
    assert (first.seed, second.seed, make().seed) == (0, 1, None)


def test_a_chat_template_is_refused_for_a_model_that_renders_its_own(tmp_path: Path
                                                                      ) -> None:
    make = ModelMaker(ModelSpec.parse("http://127.0.0.1:9/v1"),
                      chat_template=tmp_path / "t.jinja")
    with pytest.raises(ModelSpecError, match=r"applies only to a \.gguf"):
        make(0)
