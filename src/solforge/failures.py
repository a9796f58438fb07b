"""Why a workload failed, in one line, from the log the harness kept.

A log is a Python traceback (the solution did not import, or raised), a compiler's output
(nvcc, g++, Triton), or a short message of the harness itself. The line a user needs is the
compiler's first error with its file:line, else the exception's last line with the place in the
user's own file where it happened; the whole log stays one flag (`--verbose`) away.
"""

from __future__ import annotations

import re
from pathlib import Path

# "kernel.cu(12): error: ..." (nvcc) and "kernel.cpp:12:5: error: ..." (gcc, clang).
_COMPILER_ERROR = re.compile(
    r"^(?P<where>\S+?(?:\(\d+\)|:\d+(?::\d+)?)):?\s+(?:fatal\s+)?error\b:?\s*(?P<what>.*)$",
    re.MULTILINE)
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+)', re.MULTILINE)
_EXCEPTION = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?(?P<name>[A-Z]\w*(?:Error|Exception|Exit|"
                        r"Interrupt|Warning))\b:?(?P<rest>.*)$")
# Frames of these files are solforge's or Python's own, never the solution's.
_PACKAGE = str(Path(__file__).resolve().parent) + "/"
_NOT_USER = (_PACKAGE, "<frozen ", "/importlib/", "/site-packages/", "/lib/python")


def failure_cause(log: str | None) -> str:
    """The one line that says why: a compiler error with its location, an exception with the
    last frame in the solution's file, or the log's last line."""
    text = (log or "").strip()
    if not text:
        return "(no log)"
    compiler = _COMPILER_ERROR.search(text)
    if compiler:
        return f"{compiler['where']}: error: {compiler['what'].strip()}"
    lines = [line.rstrip() for line in text.splitlines() if line.strip()]
    exception = _last_exception(lines)
    if exception is None:
        return lines[-1].strip()
    where = _user_frame(text)
    return f"{exception} ({where})" if where else exception


def _last_exception(lines: list[str]) -> str | None:
    """The last unindented `SomeError: message` line of a traceback."""
    for line in reversed(lines):
        if not line.startswith((" ", "\t")) and _EXCEPTION.match(line):
            return line.strip()
    return None


def _user_frame(text: str) -> str | None:
    """`kernel.py, line 12`: the last traceback frame in a file that is not solforge's or
    Python's (the solution's source), if any."""
    frames = [m for m in _FRAME.finditer(text) if not any(s in m["file"] for s in _NOT_USER)]
    if not frames:
        return None
    last = frames[-1]
    return f"{last['file'].rsplit('/', 1)[-1]}, line {last['line']}"


def wrong_problem_hint(solution_definition: str, problem_name: str,
                       causes: list[str]) -> str | None:
    """A hint that the solution may be meant for another problem: it says so in its
    `definition`, or it failed on the arguments the problem's inputs give it."""
    if solution_definition and solution_definition != problem_name:
        return (f"the solution was written for {solution_definition!r}, not {problem_name!r}: "
                "check the PROBLEM argument")
    if any("argument" in cause and "TypeError" in cause for cause in causes):
        return (f"run() did not accept the inputs of {problem_name!r}: is the solution written "
                "for this problem (`solforge analyze PROBLEM` lists its inputs)?")
    return None
