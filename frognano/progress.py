"""Live progress of a run in the terminal: step, tool, tokens/s, elapsed."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.text import Text


class Progress:
    def __init__(self, console: Console) -> None:
        self.console = console
        self.started = time.monotonic()
        self.step = 0
        self.tool = "-"
        self.tokens_per_second = 0.0
        self.phase = "starting"
        self.live = Live(self._render(), console=console, refresh_per_second=4,
                         transient=True)

    def _render(self) -> Text:
        elapsed = int(time.monotonic() - self.started)
        return Text(f"{self.phase} · step {self.step} · tool {self.tool} · "
                    f"{self.tokens_per_second:.1f} tok/s · {elapsed // 60:02d}:{elapsed % 60:02d}",
                    style="cyan")

    def __enter__(self) -> Progress:
        self.live.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.live.__exit__(*exc)

    def event(self, kind: str, data: dict[str, Any]) -> None:
        if kind == "turn_start":
            self.phase, self.step = "thinking", data["step"]
        elif kind == "turn":
            usage = data["usage"]
            seconds = usage.completion_seconds or data["seconds"]
            if usage.completion_tokens and seconds > 0:
                self.tokens_per_second = usage.completion_tokens / seconds
        elif kind == "tool":
            self.phase, self.tool = "tool", data["name"]
            # Tool names and arguments are the model's data: escaped, never markup.
            self.console.print(f"[dim]step {data['step']:>3}[/dim] "
                               f"{escape(str(data['name']))} "
                               f"{escape(_brief(data['arguments']))}", highlight=False)
        elif kind == "tests":
            self.phase = f"tests ({data['phase']})"
        elif kind == "tests_done":
            judgement = data.get("judgement")
            verdict = ""
            if judgement is not None:
                verdict = "; accepted" if judgement.accepted else \
                    "; refused: " + "; ".join(judgement.reasons[:3])
            self.console.print(f"[bold]tests {escape(data['phase'])}:[/bold] "
                               f"{escape(data['verdict'].summary() + verdict)}",
                               highlight=False)
        elif kind == "setup":
            self.phase = "setup"
        self.live.update(self._render())


def _brief(arguments: dict[str, Any]) -> str:
    for key in ("command", "file_path", "path", "pattern"):
        if key in arguments:
            value = str(arguments[key]).replace("\n", " ")
            return value if len(value) <= 80 else value[:77] + "..."
    return ""
