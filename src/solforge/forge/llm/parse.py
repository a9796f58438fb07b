"""From a model's answer to a solution JSON: find the code, check it is a Triton solution.

The answer is prose with fenced code blocks. The entry file is the largest Python block that
defines a top-level `run` (found with `ast`, so a `run` inside a comment or a string does not
count); other blocks join it as further files only when the answer names them (`# file: x.py`
as the block's first line, or a line such as "**x.py**" just above the fence). A block left
open at the end of the answer (a model that stopped before the closing fence) still counts.
An answer without such code raises ParseError, whose message becomes the attempt's feedback.
"""

from __future__ import annotations

import ast
import hashlib
import re
from dataclasses import dataclass
from typing import Any

from solforge.data.solution import SolutionError, parse_solution
from solforge.errors import SolforgeError
from solforge.problem.problem import Problem
from solforge.pysyntax import parse_python

ENTRY_FILE = "kernel.py"
ENTRY_FUNCTION = "run"
PYTHON_TAGS = ("", "python", "py", "python3")

# ```lang ...\n body \n``` ; the closing fence may be missing at the very end of the answer.
_FENCE = re.compile(r"^[ \t]*```[ \t]*([\w+-]*)[^\n]*\n(.*?)(?:^[ \t]*```[ \t]*$|\Z)",
                    re.DOTALL | re.MULTILINE)
_FILE_COMMENT = re.compile(r"^#\s*(?:file(?:name)?\s*:\s*)?([\w./-]+\.py)\s*$", re.IGNORECASE)
_FILE_MENTION = re.compile(r"([\w./-]+\.py)\b")


class ParseError(SolforgeError):
    """An answer that holds no usable solution; the message says what is missing."""


@dataclass(frozen=True)
class CodeBlock:
    language: str
    code: str
    path: str | None  # the file name the answer gives it, if any


def code_blocks(text: str) -> list[CodeBlock]:
    """Every fenced block of the answer, with the file name the answer gives it."""
    blocks = []
    for match in _FENCE.finditer(text):
        language, code = match.group(1).lower(), match.group(2)
        path = _named_in_block(code) or _named_above(text[:match.start()])
        blocks.append(CodeBlock(language, code.rstrip() + "\n", path))
    return blocks


def solution_from_answer(text: str, problem: Problem, author: str) -> dict[str, Any]:
    """The solution JSON (FlashInfer-Bench) of an answer: one Triton file whose `run` writes
    the outputs it is passed (destination-passing style), plus any other named files."""
    python = [b for b in code_blocks(text) if b.language in PYTHON_TAGS]
    if not python:
        raise ParseError("the answer has no ```python code block")
    entry = _entry_block(python)
    entry_path = entry.path or ENTRY_FILE
    sources = [{"path": entry_path, "content": entry.code}]
    for block in python:
        if block is not entry and block.path and block.path not in {entry_path, *_paths(sources)}:
            sources.append({"path": block.path, "content": block.code})
    if not any(_has_triton_kernel(s["content"]) for s in sources):
        raise ParseError("the code has no @triton.jit kernel: the solution must compute its "
                         "outputs in a Triton kernel")
    return _solution(problem, author, entry_path, sources)


def _entry_block(blocks: list[CodeBlock]) -> CodeBlock:
    """The largest block that parses and defines a top-level `run`."""
    with_run, syntax_errors = [], []
    for block in blocks:
        try:
            tree = parse_python(block.code)
        except SyntaxError as exc:
            syntax_errors.append(f"line {exc.lineno}: {exc.msg}")
            continue
        if ENTRY_FUNCTION in _top_level_functions(tree):
            with_run.append(block)
    if with_run:
        return max(with_run, key=lambda b: len(b.code))
    if syntax_errors:
        raise ParseError(f"no code block defines `{ENTRY_FUNCTION}(...)`; the Python blocks "
                         f"have syntax errors ({'; '.join(syntax_errors)})")
    raise ParseError(f"no code block defines a top-level function `{ENTRY_FUNCTION}(...)`")


def _top_level_functions(tree: ast.Module) -> set[str]:
    return {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}


def _has_triton_kernel(code: str) -> bool:
    """A function decorated with triton.jit (directly, or under autotune/heuristics)."""
    try:
        tree = parse_python(code)
    except SyntaxError:
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            decorators = [ast.unparse(d) for d in node.decorator_list]
            if any(d in ("triton.jit", "jit") or d.startswith("triton.jit(") for d in decorators):
                return True
    return False


def _named_in_block(code: str) -> str | None:
    first_line = code.lstrip("\n").partition("\n")[0].strip()
    match = _FILE_COMMENT.match(first_line)
    return _safe_path(match.group(1)) if match else None


def _named_above(prose: str) -> str | None:
    """A file name on the last non-empty line before the fence, e.g. "**utils.py**:"."""
    lines = [line for line in prose.splitlines() if line.strip()]
    if not lines or lines[-1].lstrip().startswith("```"):
        return None
    match = _FILE_MENTION.search(lines[-1])
    return _safe_path(match.group(1)) if match else None


def _safe_path(path: str) -> str | None:
    """A relative path without '..' (the harness refuses others), or None."""
    parts = path.split("/")
    if path.startswith("/") or ".." in parts or not all(parts):
        return None
    return path


def _paths(sources: list[dict[str, str]]) -> set[str]:
    return {s["path"] for s in sources}


def _solution(problem: Problem, author: str, entry_path: str,
              sources: list[dict[str, str]]) -> dict[str, Any]:
    digest = hashlib.sha256("\0".join(s["content"] for s in sources).encode()).hexdigest()
    solution = {
        "name": f"{problem.name}_llm_{digest[:12]}",
        "definition": problem.name,
        "author": author,
        "description": f"Written by {author} for solforge's LLM proposer.",
        "spec": {"languages": ["triton"], "entry_point": f"{entry_path}::{ENTRY_FUNCTION}",
                 "destination_passing_style": True},
        "sources": sources,
    }
    try:
        parse_solution(solution)
    except SolutionError as exc:
        raise ParseError(str(exc)) from None
    return solution
