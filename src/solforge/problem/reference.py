"""Turn a definition's reference source into callable Python.

The source is compiled under a stable file name and registered with `linecache`, so a reference
that raises shows its own lines in the error instead of `<string>`.
"""

from __future__ import annotations

import linecache
import traceback
import types
from collections.abc import Callable

from solforge.data.definition import Definition
from solforge.errors import ProblemError


def reference_filename(definition: Definition) -> str:
    return f"<reference of {definition.name}>"


def load_reference_module(definition: Definition, file=None) -> types.ModuleType:
    """Execute the reference source in a fresh module; errors name the failing line."""
    filename = reference_filename(definition)
    source = definition.reference
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    module = types.ModuleType(f"solforge_reference_{abs(hash(definition.name))}")
    module.__file__ = filename
    try:
        exec(compile(source, filename, "exec"), module.__dict__)
    except Exception as exc:
        reason = f"raised while importing: {describe_exception(exc)}"
        raise ProblemError(file, "reference", reason) from None
    if not callable(getattr(module, "run", None)):
        raise ProblemError(file, "reference", "defines no callable `run`")
    return module


def reference_run(definition: Definition, file=None) -> Callable:
    return load_reference_module(definition, file).run


def describe_exception(exc: BaseException, filename_hint: str = "<reference") -> str:
    """`Type: message (line N: source)` for the innermost frame inside reference code."""
    frames = traceback.extract_tb(exc.__traceback__)
    inside = [f for f in frames if f.filename.startswith(filename_hint)]
    where = ""
    if inside:
        frame = inside[-1]
        where = f" (line {frame.lineno}: {(frame.line or '').strip()})"
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {message}{where}"
