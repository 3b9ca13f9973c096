"""Leaf's five tool schemas, as data (docs/LEAF_CONTRACT.md §2).

The model was trained on exactly these names, descriptions and property orders,
so they are kept byte-faithful here and nowhere else.
"""

from __future__ import annotations

from typing import Any


def _tool(name: str, description: str, properties: list[tuple[str, str, str]],
          required: list[str]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {
                    prop: {"type": typ, "description": desc} for prop, typ, desc in properties
                },
                "required": required,
            },
        },
    }


TOOLS: list[dict[str, Any]] = [
    _tool(
        "Read",
        "Read a text file. Returns numbered lines.",
        [
            ("file_path", "string", "Path to the file to read."),
            ("offset", "integer", "Optional 1-based starting line."),
            ("limit", "integer", "Optional maximum number of lines."),
        ],
        ["file_path"],
    ),
    _tool(
        "Write",
        "Write a complete file, creating parent directories when needed.",
        [
            ("file_path", "string", "Path to write."),
            ("content", "string", "Full file contents."),
        ],
        ["file_path", "content"],
    ),
    _tool(
        "Edit",
        "Replace an exact string in a text file.",
        [
            ("file_path", "string", "Path to edit."),
            ("old_string", "string", "Exact text to replace."),
            ("new_string", "string", "Replacement text."),
            ("replace_all", "boolean", "Replace every occurrence instead of requiring one match."),
        ],
        ["file_path", "old_string", "new_string"],
    ),
    _tool(
        "Glob",
        "Find files by glob pattern.",
        [
            ("pattern", "string", "Glob pattern, e.g. **/*.py."),
            ("path", "string", "Optional directory to search from."),
        ],
        ["pattern"],
    ),
    _tool(
        "Bash",
        "Run a shell command in the repository workdir.",
        [
            ("command", "string", "Command to run."),
            ("description", "string", "Short description of the command."),
            ("timeout", "number", "Optional timeout in seconds."),
        ],
        ["command"],
    ),
]

TOOL_NAMES: tuple[str, ...] = tuple(t["function"]["name"] for t in TOOLS)

