"""Re-derive the `vllm` column of tests/unit/solver/agent/test_fidelity.py from vLLM's own parser.

    python -m tests.support.vllm_parser_reference /path/to/vllm-source-or-unpacked-wheel

It loads `vllm/tool_parsers/qwen3coder_tool_parser.py` from that tree (vLLM
0.20.0 for the recorded column) with small stand-ins for the vLLM modules it
imports, runs every case through `extract_tool_calls` with Leaf's tool schemas,
and prints each case whose result differs from the recorded one. Exit status 1
when any does. Nothing of vLLM is kept in this repository; pytest never runs this.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sandbox.schemas import TOOLS
from tests.unit.solver.agent.test_fidelity import CASES

PARSER = "vllm/tool_parsers/qwen3coder_tool_parser.py"


def _stand_ins() -> None:
    """The names the parser imports from vLLM, reduced to what non-streaming parsing uses."""
    def module(name: str) -> types.ModuleType:
        sys.modules[name] = types.ModuleType(name)
        return sys.modules[name]

    for name in ("vllm", "vllm.entrypoints", "vllm.entrypoints.openai",
                 "vllm.entrypoints.openai.chat_completion", "vllm.entrypoints.openai.engine",
                 "vllm.tool_parsers"):
        module(name)

    @dataclass
    class FunctionCall:
        name: str
        arguments: str

    @dataclass
    class ToolCall:
        type: str
        function: FunctionCall

    @dataclass
    class Extracted:
        tools_called: bool
        tool_calls: list[Any]
        content: str | None = None

    class Anything:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            pass

    protocol = module("vllm.entrypoints.openai.engine.protocol")
    protocol.FunctionCall, protocol.ToolCall = FunctionCall, ToolCall  # type: ignore[attr-defined]
    protocol.ExtractedToolCallInformation = Extracted  # type: ignore[attr-defined]
    for name in ("DeltaFunctionCall", "DeltaMessage", "DeltaToolCall"):
        setattr(protocol, name, Anything)
    module("vllm.entrypoints.openai.chat_completion.protocol").ChatCompletionRequest = Anything  # type: ignore[attr-defined]
    module("vllm.logger").init_logger = logging.getLogger  # type: ignore[attr-defined]
    module("vllm.tokenizers").TokenizerLike = object  # type: ignore[attr-defined]

    class ToolParser:
        def __init__(self, tokenizer: Any, tools: Any = None) -> None:
            self.model_tokenizer = self.vocab = tokenizer
            self.tools = tools

    abstract = module("vllm.tool_parsers.abstract_tool_parser")
    abstract.ToolParser, abstract.Tool = ToolParser, dict  # type: ignore[attr-defined]

    def find_tool_properties(tools: Any, name: str) -> dict[str, Any]:
        for tool in tools or []:
            function = tool.get("function", tool)
            if function.get("name") == name:
                return (function.get("parameters") or {}).get("properties", {})
        return {}

    module("vllm.tool_parsers.utils").find_tool_properties = find_tool_properties  # type: ignore[attr-defined]


def load_parser(tree: Path) -> Any:
    _stand_ins()
    spec = importlib.util.spec_from_file_location("vllm_qwen3coder", tree / PARSER)
    if spec is None or spec.loader is None:
        raise SystemExit(f"no {PARSER} under {tree}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.Qwen3CoderToolParser({"<tool_call>": 1, "</tool_call>": 2}, TOOLS)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    parser = load_parser(Path(argv[0]))
    request = types.SimpleNamespace(tools=TOOLS)
    differences = 0
    for case in CASES:
        info = parser.extract_tool_calls(case.text, request)  # reasoning split off before
        got = [(c.function.name, json.loads(c.function.arguments)) for c in info.tool_calls]
        if got != case.vllm:
            differences += 1
            print(f"{case.id}:\n  recorded {case.vllm}\n  vLLM     {got}")
    print(f"{len(CASES) - differences} of {len(CASES)} cases as recorded")
    return 1 if differences else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
