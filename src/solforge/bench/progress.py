"""The bench's progress: on a terminal a bar (traces measured out of those planned, elapsed time,
time left); otherwise (a log file, CI) one line per trace as it is saved, so a redirected run
shows its progress as it happens instead of nothing until the end."""

from __future__ import annotations

import time

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from solforge.data.trace import Trace
from solforge.humanize import plural


class ProgressBar:
    """A `Reporter` (see run.py) drawn with Rich; use it as a context manager."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.live = console.is_terminal
        self.progress = Progress(
            TextColumn("{task.description}", style="cyan"), BarColumn(),
            MofNCompleteColumn(), TextColumn("traces"),
            TextColumn("elapsed"), TimeElapsedColumn(),
            TextColumn("left"), TimeRemainingColumn(),
            console=console, disable=not self.live)
        self.task: TaskID | None = None
        self.total = 0
        self.done = 0
        self.started = time.monotonic()

    def __enter__(self) -> ProgressBar:
        self.progress.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.progress.stop()

    def start(self, total: int, skipped: int) -> None:
        if skipped:
            self.console.print(f"{plural(skipped, 'trace')} already in the store: skipped "
                               "(--fresh measures them again)", highlight=False)
        self.total, self.done, self.started = total, 0, time.monotonic()
        self.task = self.progress.add_task("starting", total=total)

    def working_on(self, text: str) -> None:
        if self.task is not None:
            self.progress.update(self.task, description=_shorten(text))

    def saved(self, trace: Trace) -> None:
        self.done += 1
        if self.task is not None:
            self.progress.advance(self.task)
        if not self.live:
            self.console.print(progress_line(self.done, self.total, trace,
                                             time.monotonic() - self.started),
                               highlight=False, markup=False, soft_wrap=True)


def progress_line(done: int, total: int, trace: Trace, elapsed_s: float) -> str:
    """`[3/40 12s] rmsnorm_llama3_1_8b triton_rmsnorm 6cb55020 PASSED`: one saved trace."""
    width = len(str(total))
    return (f"[{done:>{width}}/{total} {elapsed_s:.0f}s] {trace.definition} {trace.solution} "
            f"{trace.workload['uuid'][:8]} {trace.status.value}")


def _shorten(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else "..." + text[-(limit - 3):]
