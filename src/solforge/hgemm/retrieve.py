"""Kernels for shapes the table does not hold: try the winners of the nearest tuned shapes,
keep one only if it is right and beats torch.matmul here, and remember the choice.

CUDA-L2 pads an unseen shape up to the nearest larger tuned one, which pays for
the padding on every call and trusts a kernel never measured at this shape. Here distance is
taken in log2 space (log2 M, log2 N, log2 K: 1000 x 1000 x 1000 is as near to 2048^3 as
4096 x 4096 x 4096 is to 2048^3; a dtype change adds half a step), the k nearest tuned shapes
with the same B layout and accumulation lend their best settings, and each is verified at the
new shape: correct against a float32 product, then timed beside torch.matmul (kernel-only,
cold L2). The winner, or torch.matmul when no candidate wins by more than the noise, is cached
in memory and appended to a JSON-lines file, so each shape is verified once per machine.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch

from solforge.hgemm import kernels
from solforge.hgemm.measure import Measurer, median_ms, poisoned_output, relative_error
from solforge.hgemm.space import Config, Shape, check, tolerance
from solforge.hgemm.table import Table, TableEntry, append_jsonl, read_jsonl

DTYPE_STEP = 0.5  # distance added between float16 and bfloat16 shapes (in log2 steps)
NOISE = 0.02  # a candidate must beat torch.matmul by this fraction (the repeatability seen)
VERIFY_ROUNDS = 5


def log_distance(a: Shape, b: Shape) -> float:
    squares = sum((math.log2(x) - math.log2(y)) ** 2
                  for x, y in ((a.m, b.m), (a.n, b.n), (a.k, b.k)))
    return math.sqrt(squares) + (DTYPE_STEP if a.dtype != b.dtype else 0.0)


def nearest(table: Table, shape: Shape, count: int) -> list[TableEntry]:
    """The `count` nearest tuned shapes with a best kernel, same layout and accumulation."""
    near = [entry for entry in table
            if entry.best is not None and entry.shape.layout == shape.layout
            and entry.shape.accumulate == shape.accumulate and entry.shape != shape]
    return sorted(near, key=lambda entry: (log_distance(entry.shape, shape),
                                           entry.shape.key))[:count]


def neighbour_configs(table: Table, shape: Shape, count: int) -> list[Config]:
    """The best settings of the nearest tuned shapes that are valid at `shape`."""
    configs = [entry.best for entry in nearest(table, shape, count)]
    return [config for config in dict.fromkeys(configs) if check(config, shape) is None]


@dataclass(frozen=True)
class Choice:
    """What the dispatcher runs at one shape: `config`, or torch.matmul when None."""

    shape: Shape
    config: Config | None
    reason: str
    kernel_ms: float | None = None
    torch_ms: float | None = None

    def to_json(self) -> dict[str, object]:
        return {"shape": self.shape.to_json(), "key": self.shape.key,
                "config": self.config.to_json() if self.config else None,
                "reason": self.reason, "kernel_ms": self.kernel_ms, "torch_ms": self.torch_ms}

    @classmethod
    def from_json(cls, record: dict) -> Choice:
        config = record.get("config")
        return cls(Shape.from_json(record["shape"]), Config.from_json(config) if config else None,
                   record.get("reason", ""), record.get("kernel_ms"), record.get("torch_ms"))


def verify(shape: Shape, candidates: list[Config], measurer: Measurer,
           noise: float = NOISE, rounds: int = VERIFY_ROUNDS) -> Choice:
    """The fastest correct candidate at `shape` if it beats torch.matmul, else torch.matmul."""
    if not candidates:
        return Choice(shape, None, "no tuned neighbour has a kernel valid at this shape")
    operands = measurer.operands(shape)
    a, b = operands.a, operands.b
    correct = {}
    for config in candidates:
        if not kernels.runs_here(config, measurer.device):
            continue
        out = poisoned_output(shape, measurer.device)
        try:
            kernels.launch(config, a, b, out)
        except Exception:  # a compile or launch failure rules the candidate out, whatever it is
            continue
        if relative_error(out, operands.reference) <= tolerance(shape):
            correct[config.label] = config
    if not correct:
        return Choice(shape, None, "no neighbour's kernel was correct here")
    out = torch.empty_like(operands.reference, dtype=a.dtype)
    calls = {label: _launcher(config, a, b, out) for label, config in correct.items()}
    calls["torch"] = lambda: torch.matmul(a, b, out=out)
    times = {name: median_ms(result) for name, result in
             measurer.time(calls, "kernel", rounds).items()}
    torch_ms = times.pop("torch")
    timed = {label: ms for label, ms in times.items() if ms is not None}
    if torch_ms is None or not timed:
        return Choice(shape, None, "the candidates could not be timed here")
    label = min(timed, key=timed.__getitem__)
    if timed[label] <= torch_ms * (1 - noise):
        return Choice(shape, correct[label], "a tuned neighbour's kernel won here",
                      timed[label], torch_ms)
    return Choice(shape, None, "torch.matmul was as fast here", timed[label], torch_ms)


def _launcher(config: Config, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor):
    return lambda: kernels.launch(config, a, b, out)


class Retriever:
    """Chooses for unseen shapes (module docstring); one verification per shape."""

    def __init__(self, table: Table, measurer: Measurer, cache_path: Path | None = None,
                 neighbours: int = 3) -> None:
        self.table = table
        self.measurer = measurer
        self.cache_path = cache_path
        self.neighbours = neighbours
        self.choices: dict[str, Choice] = {}
        if cache_path is not None:
            for record in read_jsonl(cache_path)[0]:
                choice = Choice.from_json(record)
                self.choices[choice.shape.key] = choice

    def choose(self, shape: Shape) -> Choice:
        if shape.key not in self.choices:
            choice = verify(shape, neighbour_configs(self.table, shape, self.neighbours),
                            self.measurer)
            self.choices[shape.key] = choice
            if self.cache_path is not None:
                append_jsonl(self.cache_path, choice.to_json())
        return self.choices[shape.key]
