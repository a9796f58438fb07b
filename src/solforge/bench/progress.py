"""The bench's progress bar: traces measured out of those planned, elapsed time, time left."""

from __future__ import annotations

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


class ProgressBar:
    """A `Reporter` (see run.py) drawn with Rich; use it as a context manager."""

    def __init__(self, console: Console) -> None:
        self.progress = Progress(
            TextColumn("{task.description}", style="cyan"), BarColumn(),
            MofNCompleteColumn(), TextColumn("traces"),
            TextColumn("elapsed"), TimeElapsedColumn(),
            TextColumn("left"), TimeRemainingColumn(),
            console=console)
        self.task: TaskID | None = None

    def __enter__(self) -> ProgressBar:
        self.progress.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.progress.stop()

    def start(self, total: int, skipped: int) -> None:
        if skipped:
            self.progress.console.print(f"{skipped} traces already in the store: skipped "
                                        "(--fresh measures them again)", highlight=False)
        self.task = self.progress.add_task("starting", total=total)

    def working_on(self, text: str) -> None:
        if self.task is not None:
            self.progress.update(self.task, description=_shorten(text))

    def saved(self, trace: Trace) -> None:
        if self.task is not None:
            self.progress.advance(self.task)


def _shorten(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else "..." + text[-(limit - 3):]
