"""Live progress of a run in the terminal: step, tool, the current turn's tokens and
time, tokens/s, elapsed. The line is drawn by the clock, not only on events, so a turn
that runs for minutes shows its tokens growing; without a terminal (a pipe, CI) a plain
progress line is printed every `every_seconds`. With several candidates (`solve
--candidates`) every line says whose it is, and the live line has each running
candidate's step."""

from __future__ import annotations

import threading
import time
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.text import Text

from bot.inert import visible
from solver.agent.run_events import (
    BaselineDone,
    Event,
    SetupStarted,
    TestsJudged,
    TestsStarted,
    ToolStarted,
    TurnDone,
    TurnStarted,
    TurnTokens,
)
from solver.best_of import CandidateEnded, CandidateOfThread, CandidateStarted


def shown(text: str) -> str:
    """The model's or the repository's text for a rich markup string: its control
    characters shown, not obeyed (an OSC 52 would write the user's clipboard, an ESC[2K
    erase the line quoting it), and its brackets never read as markup."""
    return escape(visible(text))


class Progress:
    def __init__(self, console: Console, *, every_seconds: float = 30.0) -> None:
        self.console = console
        self.started = time.monotonic()
        self.step = 0
        self.tool = "-"
        self.tokens_per_second = 0.0
        self.phase = "starting"
        self.turn_started: float | None = None  # while the model generates a turn
        self.turn_tokens = 0  # generated so far in the current (or last) turn
        self.who = ""  # "candidate k · " before each line of one of several candidates
        self._whose = CandidateOfThread()
        self._steps: dict[int, int] = {}  # running candidates (of several) → their step
        self.every_seconds = every_seconds
        self._stopped = threading.Event()
        self._ticker: threading.Thread | None = None
        # get_renderable: each of Live's refreshes (4 a second) draws the line anew, so
        # the clock and the token count move while no event comes.
        self.live = Live(get_renderable=self._render, console=console, refresh_per_second=4,
                         transient=True)

    def _render(self) -> Text:
        now = time.monotonic()
        steps = ", ".join(f"candidate {k + 1} at {step}"
                          for k, step in sorted(self._steps.items()))
        turn = ""
        if self.turn_started is not None:
            turn_seconds = now - self.turn_started
            if turn_seconds > 0 and self.turn_tokens:
                self.tokens_per_second = self.turn_tokens / turn_seconds
            turn = f"turn {_clock(turn_seconds)}, {self.turn_tokens:,} tokens · "
        # Not markup: a Text shows brackets as they are; the tool name is the model's.
        return Text(visible(
            f"{self.phase} · {f'steps: {steps}' if steps else f'step {self.step}'} · "
            f"tool {self.tool} · {turn}"
            f"{self.tokens_per_second:.1f} tok/s · {_clock(now - self.started)}"),
            style="cyan")

    def __enter__(self) -> Progress:
        self.live.__enter__()
        if not self.console.is_terminal:  # Live draws nothing there: a line now and then
            self._ticker = threading.Thread(target=self._tick, name="progress", daemon=True)
            self._ticker.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stopped.set()
        if self._ticker is not None:
            self._ticker.join()
        self.live.__exit__(*exc)

    def _tick(self) -> None:
        while not self._stopped.wait(self.every_seconds):
            self.console.print(Text("progress: ").append(self._render()), highlight=False)

    def emit(self, event: Event) -> None:
        """As an output of the run's events (solver/agent/run_events.py)."""
        index = self._whose.see(event)
        self.who = "" if index is None else f"candidate {index + 1} · "
        if isinstance(event, CandidateStarted):
            self._steps[event.index] = 0
            seed = f" (seed {event.seed})" if event.seed is not None else ""
            self.console.print(f"[bold]candidate {event.index + 1} of {event.of}{seed}[/bold] "
                               "started", highlight=False)
        elif isinstance(event, CandidateEnded):
            self._steps.pop(event.index, None)
            self.console.print(f"[bold]candidate {event.index + 1}[/bold] ended: "
                               f"{shown(event.exit_reason)}", highlight=False)
        elif isinstance(event, TurnStarted):
            self.phase, self.step = "thinking", event.step
            self.turn_started, self.turn_tokens = time.monotonic(), 0
            if index is not None:
                self._steps[index] = event.step
        elif isinstance(event, TurnTokens):
            self.turn_tokens = event.tokens
        elif isinstance(event, TurnDone):
            usage = event.turn.usage
            self.turn_started, self.turn_tokens = None, usage.completion_tokens
            seconds = usage.completion_seconds or event.model_seconds
            if usage.completion_tokens and seconds > 0:
                self.tokens_per_second = usage.completion_tokens / seconds
        elif isinstance(event, ToolStarted):
            self.phase, self.tool = "tool", event.name
            # Tool names and arguments are the model's data: escaped, never markup.
            self.console.print(f"[dim]{self.who}step {event.step:>3}[/dim] {shown(event.name)} "
                               f"{shown(_brief(event.arguments))}", highlight=False)
        elif isinstance(event, TestsStarted):
            self.phase, self.turn_started = f"tests ({event.phase})", None
        elif isinstance(event, BaselineDone):
            self._tests("baseline", event.tests.summary())
        elif isinstance(event, TestsJudged):
            verdict = "; accepted" if event.verdict.accepted else \
                "; not accepted: " + "; ".join(event.verdict.reasons[:3])
            self._tests("after", event.tests.summary() + verdict)
        elif isinstance(event, SetupStarted):
            self.phase = "setup"

    def _tests(self, phase: str, summary: str) -> None:
        self.console.print(f"[bold]{self.who}tests {phase}:[/bold] {shown(summary)}",
                           highlight=False)


def _clock(seconds: float) -> str:
    whole = int(seconds)
    return f"{whole // 60:02d}:{whole % 60:02d}"


def _brief(arguments: dict[str, Any]) -> str:
    for key in ("command", "file_path", "path", "pattern"):
        if key in arguments:
            value = str(arguments[key]).replace("\n", " ")
            return value if len(value) <= 80 else value[:77] + "..."
    return ""
