"""The command line that starts a sandboxed interpreter.

`python -I` ignores PYTHONPATH and every PYTHON* variable and adds neither the user site nor
the script's folder to sys.path, so nothing the candidate could have written earlier runs at
start-up. solforge's own location is passed on the command line instead (a source checkout
without an install keeps working); the launcher (enter.py) then applies the spec.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

# The launcher is imported without running solforge.harness's __init__ (which imports torch):
# nothing heavier than ctypes runs before the sandbox is in place, and the probe stays fast.
_BOOT = ("import sys,types;sys.path[:0]={paths!r};import solforge;"
         "h=types.ModuleType('solforge.harness');h.__path__=[solforge.__path__[0]+'/harness'];"
         "sys.modules['solforge.harness']=h;from solforge.harness.sandbox.enter import main;"
         "del sys.modules['solforge.harness'];main(sys.argv[1:])")


def source_paths() -> list[str]:
    """Folders that must lead sys.path: solforge's source folder when run from a checkout,
    then the PYTHONPATH the driver was given (absolute)."""
    root = Path(__file__).resolve().parents[3]
    given = [str(Path(p).resolve()) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
             if p]
    paths = [str(root), *given] if root.name == "src" else given
    return list(dict.fromkeys(paths))


def command(args: Sequence[str]) -> list[str]:
    return [sys.executable, "-I", "-u", "-c", _BOOT.format(paths=source_paths()), *args]
