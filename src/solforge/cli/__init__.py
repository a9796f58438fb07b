"""The `solforge` command. Each sub-command lives in its own module and holds no logic."""

from __future__ import annotations

import importlib
import sys

from rich.console import Console

from solforge.cli.app import app
from solforge.errors import SolforgeError

# Importing a command module registers its commands on `app`; one line per module.
COMMAND_MODULES = [
    "check",
    "analyze",
    "importer",
    "calibrate",
    "hardware",
    "eval",
    "problems",
    "report",
    "bench",
    "traces",
    "optimize",
    "hgemm",
    "baselines",
]
for _name in COMMAND_MODULES:
    importlib.import_module(f"solforge.cli.{_name}")

_errors = Console(stderr=True)


def main() -> None:
    try:
        app()
    except SolforgeError as exc:
        _errors.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
        sys.exit(2)
