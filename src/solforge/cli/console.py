"""The Rich console every command prints through."""

from __future__ import annotations


def console(stderr: bool = False):
    """A Rich console that stays wide enough for tables when output is piped."""
    from rich.console import Console

    probe = Console(stderr=stderr)
    return probe if probe.is_terminal else Console(stderr=stderr, width=160)
