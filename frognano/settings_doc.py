"""The settings table of docs/SETTINGS.md, generated from the settings model (bot/settings.py).

    python3 -m frognano.settings_doc                 # print the table
    python3 -m frognano.settings_doc --write docs/SETTINGS.md
    python3 -m frognano.settings_doc --check docs/SETTINGS.md   # exit 1 when it differs

The table lives between two marker lines in docs/SETTINGS.md; tests/unit/bot/test_settings.py fails
when it is not what this module makes of the model.
"""

from __future__ import annotations

import argparse
import sys
import typing
from pathlib import Path
from typing import Any

from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings

from bot.settings import GROUPS

BEGIN = ("<!-- settings table: generated from bot/settings.py by "
         "`python3 -m frognano.settings_doc --write docs/SETTINGS.md`; do not edit by hand -->")
END = "<!-- end of the settings table -->"


def _default(field: FieldInfo) -> str:
    extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
    if "shown_default" in extra:
        return str(extra["shown_default"])
    if field.default is None or field.default_factory is not None:
        return "–"
    return f"`{field.default}`"


def _meaning(field: FieldInfo) -> str:
    text = (field.description or "").strip()
    choices = [a for a in typing.get_args(field.annotation) if isinstance(a, str)] \
        if typing.get_origin(field.annotation) is typing.Literal else []
    if choices:
        text += " One of " + ", ".join(f"`{c}`" for c in choices) + "."
    old = [name for name in getattr(field.validation_alias, "choices", [])
           if isinstance(name, str) and name != field.alias]
    if old:  # a name of before (solver/old_names.py), still read
        text += " Old name, still read: " + ", ".join(f"`{name}`" for name in old) + "."
    return text.replace("|", "\\|")


def group_table(title: str, model: type[BaseSettings]) -> str:
    intro = (model.__doc__ or "").strip().splitlines()[0]
    rows = [f"**{title}**: {intro[0].lower() + intro[1:]}", "",
            "| variable | default | meaning |", "|---|---|---|"]
    own = list(model.__annotations__)  # the group's own settings first, then inherited
    fields = sorted(model.model_fields.items(),
                    key=lambda item: own.index(item[0]) if item[0] in own else len(own))
    for _, field in fields:
        rows.append(f"| `{field.alias}` | {_default(field)} | {_meaning(field)} |")
    return "\n".join(rows)


def settings_table() -> str:
    """The whole block, markers included."""
    tables = "\n\n".join(group_table(title, model) for title, model in GROUPS)
    return f"{BEGIN}\n{tables}\n{END}"


def replace_table(text: str) -> str:
    """`text` with its settings block replaced by the generated one."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError("the file has no settings table markers; add the two lines "
                         f"{BEGIN!r} and {END!r} where the table belongs")
    return text[:start] + settings_table() + text[end + len(END):]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m frognano.settings_doc")
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--write", type=Path, metavar="FILE")
    action.add_argument("--check", type=Path, metavar="FILE")
    args: Any = parser.parse_args(argv)
    if args.write is None and args.check is None:
        print(settings_table())
        return 0
    path: Path = args.write or args.check
    text = path.read_text(encoding="utf-8")
    wanted = replace_table(text)
    if args.write is not None:
        path.write_text(wanted, encoding="utf-8")
        return 0
    if wanted != text:
        print(f"{path}: the settings table differs from bot/settings.py; run "
              f"`python3 -m frognano.settings_doc --write {path}`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
