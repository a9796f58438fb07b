"""The Rich console every command prints through, and progress for long work."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

PIPED_WIDTH = 160  # tables of piped output keep this width; a terminal keeps its own


def console(stderr: bool = False):
    """A Rich console that stays wide enough for tables when output is piped (unless COLUMNS
    names a width)."""
    import os

    from rich.console import Console

    probe = Console(stderr=stderr)
    if probe.is_terminal or os.environ.get("COLUMNS", "").isdigit():
        return probe
    return Console(stderr=stderr, width=PIPED_WIDTH)


@contextmanager
def progress_lines(out, title: str) -> Iterator[Callable[[str], None]]:
    """A callable that reports progress: a live status line on a terminal, one printed line
    per message otherwise (a log file or CI shows each step as it happens)."""
    if out.is_terminal:
        with out.status(title) as status:
            yield status.update
        return
    yield lambda line: out.print(line, highlight=False, markup=False, soft_wrap=True)
