"""Safe evaluation of axis expressions and constraints.

Definitions carry small arithmetic expressions (`"batch_size * seq_len"`, `"H_qo == H_kv * G"`).
They are data, not code: only arithmetic, comparisons, `and`/`or`/`not`, and `min`/`max`/`abs`
are accepted, and names must be axes.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Mapping

from solforge.pysyntax import parse_python

_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg, ast.Not: operator.not_}
_COMPARE = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}
_FUNCTIONS = {"min": min, "max": max, "abs": abs}


class ExpressionError(ValueError):
    pass


def parse_expression(text: str) -> ast.Expression:
    if not isinstance(text, str) or not text.strip():
        raise ExpressionError("expression must be a non-empty string")
    try:
        tree = parse_python(text, mode="eval")
    except SyntaxError as exc:
        raise ExpressionError(f"syntax error in {text!r}: {exc.msg}") from None
    for node in ast.walk(tree):
        _check_node(node, text)
    return tree


def _check_node(node: ast.AST, text: str) -> None:
    allowed = (
        ast.Expression, ast.BinOp, ast.UnaryOp, ast.Compare, ast.BoolOp, ast.Constant, ast.Name,
        ast.Load, ast.Call, ast.And, ast.Or, *_BINARY, *_UNARY, *_COMPARE,
    )
    if not isinstance(node, allowed):
        raise ExpressionError(f"{type(node).__name__} is not allowed in {text!r}")
    known_call = isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and (
        node.func.id in _FUNCTIONS and not node.keywords)
    if isinstance(node, ast.Call) and not known_call:
        raise ExpressionError(f"only min/max/abs calls are allowed in {text!r}")
    if isinstance(node, ast.Constant) and not isinstance(node.value, (int, float, bool)):
        raise ExpressionError(f"only numeric constants are allowed in {text!r}")


def names_in(text: str) -> set[str]:
    """Axis names an expression refers to (function names excluded)."""
    tree = parse_expression(text)
    called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and id(n) not in called}


def evaluate(text: str, values: Mapping[str, int | float]) -> int | float | bool:
    return _eval(parse_expression(text).body, values, text)


def _eval(node: ast.AST, values: Mapping[str, int | float], text: str):
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in values:
            raise ExpressionError(f"{node.id!r} has no value in {text!r}")
        return values[node.id]
    if isinstance(node, ast.BinOp):
        left, right = _eval(node.left, values, text), _eval(node.right, values, text)
        try:
            return _BINARY[type(node.op)](left, right)
        except ZeroDivisionError:
            raise ExpressionError(f"division by zero in {text!r}") from None
    if isinstance(node, ast.UnaryOp):
        return _UNARY[type(node.op)](_eval(node.operand, values, text))
    if isinstance(node, ast.BoolOp):
        results = [_eval(v, values, text) for v in node.values]
        return all(results) if isinstance(node.op, ast.And) else any(results)
    if isinstance(node, ast.Compare):
        left = _eval(node.left, values, text)
        for op, comparator in zip(node.ops, node.comparators):
            right = _eval(comparator, values, text)
            if not _COMPARE[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.Call):
        args = [_eval(a, values, text) for a in node.args]
        return _FUNCTIONS[node.func.id](*args)
    raise ExpressionError(f"cannot evaluate {type(node).__name__} in {text!r}")
