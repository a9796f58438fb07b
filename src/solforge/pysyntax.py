"""Python source parsed into an AST, one parse at a time in this process.

CPython 3.11 keeps the AST constructor's recursion counter in state shared by every thread. Two
`ast.parse` calls that interleave (a garbage collection inside one can hand the GIL to the other)
leave it unbalanced, and the later parse raises `SystemError: AST constructor recursion depth
mismatch` on valid source (CPython gh-106905). The harness loads problems and parses candidates
from thread pools, so every parse in solforge goes through one lock.
"""

from __future__ import annotations

import ast
import threading

_PARSING = threading.Lock()


def parse_python(source: str, mode: str = "exec") -> ast.AST:
    """`ast.parse(source, mode=mode)`, serialised; a SyntaxError passes through unchanged."""
    with _PARSING:
        return ast.parse(source, mode=mode)
