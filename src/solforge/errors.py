"""Errors a user can act on.

Every error raised for bad input names the file, the field and the reason, so the CLI prints one
precise line instead of a traceback.
"""

from __future__ import annotations

from pathlib import Path


class SolforgeError(Exception):
    """Base class: the message is meant for the user and is printed without a traceback."""


class ProblemError(SolforgeError):
    """A definition, workload or reference that cannot be used, located to a file and field."""

    def __init__(self, file: str | Path | None, field: str, reason: str) -> None:
        self.file = str(file) if file is not None else "<definition>"
        self.field = field
        self.reason = reason
        super().__init__(f"{self.file}: {field}: {reason}")


class AnalysisError(SolforgeError):
    """The speed-of-light analysis could not cost a reference."""


class HardwareError(SolforgeError):
    """An unknown GPU name or a malformed hardware profile file."""
