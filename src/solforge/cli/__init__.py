"""The `solforge` command. Each sub-command lives in its own module and holds no logic.

Command modules import torch (and the solforge modules that need it) inside their command
bodies only, so `solforge --help` answers in a fraction of a second.
"""

from __future__ import annotations

import importlib
import sys

from rich.console import Console
from rich.markup import escape

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

# The extra of pyproject.toml that installs each optional top-level module.
OPTIONAL_EXTRAS = {
    "triton": "triton",
    "sqlalchemy": "store",
    "optuna": "tune",
    "openai": "llm",
    "ray": "ray",
    "psycopg": "postgres",
    "matplotlib": "plot",
    "nvmath": "hgemm",
    "safetensors": "safetensors",
}
BAD_INPUT = 2  # the exit status of every error a user can fix (see README, "Exit codes")

_errors = Console(stderr=True)


def missing_extra_message(exc: ModuleNotFoundError) -> str | None:
    """One line naming the extra that installs the missing module, or None when it is not an
    optional dependency of solforge (a real bug, whose traceback the user should see)."""
    top = (exc.name or "").split(".")[0]
    extra = OPTIONAL_EXTRAS.get(top)
    if extra is None:
        return None
    return (f"this command needs the optional package {top!r}, which is not installed: "
            f"pip install 'solforge[{extra}]'")


def print_error(message: str) -> None:
    """`error: MESSAGE` on stderr; the message is escaped so `[store]` is printed as written."""
    _errors.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)


def main() -> None:
    try:
        app()
    except SolforgeError as exc:
        print_error(str(exc))
        sys.exit(BAD_INPUT)
    except ModuleNotFoundError as exc:
        message = missing_extra_message(exc)
        if message is None:
            raise
        print_error(message)
        sys.exit(BAD_INPUT)
