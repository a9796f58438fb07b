"""One Python parse at a time: interleaved parses break CPython 3.11's AST constructor."""

from __future__ import annotations

import ast
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from solforge import pysyntax


def test_parses_from_many_threads_never_overlap(monkeypatch):
    inside, most = 0, 0
    count = threading.Lock()
    real_parse = ast.parse

    def slow_parse(*args, **kwargs):
        nonlocal inside, most
        with count:
            inside += 1
            most = max(most, inside)
        time.sleep(0.01)  # a thread switch in the middle, as a collection inside ast2obj gives
        with count:
            inside -= 1
        return real_parse(*args, **kwargs)

    monkeypatch.setattr(ast, "parse", slow_parse)
    with ThreadPoolExecutor(4) as pool:
        trees = list(pool.map(pysyntax.parse_python, [f"x = {i}" for i in range(12)]))
    assert most == 1
    assert [tree.body[0].value.value for tree in trees] == list(range(12))


def test_a_syntax_error_passes_through_and_frees_the_lock():
    with pytest.raises(SyntaxError):
        pysyntax.parse_python("def (")
    assert isinstance(pysyntax.parse_python("a + 1", mode="eval"), ast.Expression)
