"""The tuned table: for each shape, the best kernel and settings found, its times and the
baselines' times, and the dispatcher's choice; one JSON object per line.

The tuner appends a line as each shape finishes (flushed and synced), so a call cut off by a
time limit loses at most the shape in progress, and the next call resumes where it stopped. A
line left half-written by such a cut is skipped on load (and a newline is written before the
next append, so it never swallows a good line). Every line carries the environment it was
measured in (GPU, versions, date): a table grown over several calls stays self-describing.

Times are medians in milliseconds, cold L2: "kernel" from the profiler's kernel records (host
launch cost left out), "graph" from CUDA-graph replays; calls back to back ("offline") and, for
the tuned kernel and torch.matmul, spaced by Poisson gaps ("server_kernel", "server_graph").
Each entry holds the dispatcher's choice per mode: `use_kernel` for eager calls, `use_in_graph`
for calls captured in a CUDA graph. Methods: "tuned" (the best kernel
here), "torch" (torch.matmul, cuBLAS), "cublaslt_heuristic" and "cublaslt_autotuned"
(cuBLASLt through nvmath-python, its first heuristic pick and its best measured algorithm).
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch
import triton

from solforge.hgemm.space import Config, Shape

METHODS = ("tuned", "torch", "cublaslt_heuristic", "cublaslt_autotuned")
TABLE_DIR = Path(__file__).parent / "tables"  # tables shipped with the package, one per GPU


@dataclass(frozen=True)
class MethodTimes:
    """One method at one shape: medians in ms (None when not measured) and its error."""

    kernel_ms: float | None = None
    graph_ms: float | None = None
    error: float | None = None  # ||C - C_ref|| / ||C_ref|| against the float32 product
    note: str | None = None  # why something is missing
    server_kernel_ms: float | None = None  # calls spaced by Poisson gaps (server mode)
    server_graph_ms: float | None = None
    # server mode end to end: one call between two synchronizes, its host launch cost included
    server_events_ms: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {"kernel_ms": self.kernel_ms, "graph_ms": self.graph_ms, "error": self.error,
                "note": self.note, "server_kernel_ms": self.server_kernel_ms,
                "server_graph_ms": self.server_graph_ms,
                "server_events_ms": self.server_events_ms}

    @classmethod
    def from_json(cls, record: dict[str, Any]) -> MethodTimes:
        return cls(record.get("kernel_ms"), record.get("graph_ms"), record.get("error"),
                   record.get("note"), record.get("server_kernel_ms"),
                   record.get("server_graph_ms"), record.get("server_events_ms"))


@dataclass(frozen=True)
class ConfigTrial:
    """One setting tried at a shape: its screening time, error, or why it failed."""

    config: Config
    screen_ms: float | None = None
    error: float | None = None
    failure: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"config": self.config.to_json(), "screen_ms": self.screen_ms,
                "error": self.error, "failure": self.failure}

    @classmethod
    def from_json(cls, record: dict[str, Any]) -> ConfigTrial:
        return cls(Config.from_json(record["config"]), record.get("screen_ms"),
                   record.get("error"), record.get("failure"))


@dataclass(frozen=True)
class TableEntry:
    shape: Shape
    best: Config | None  # the fastest correct candidate (None when none passed)
    use_kernel: bool  # eager calls: True runs `best`, False runs torch.matmul
    times: dict[str, MethodTimes]  # by method (METHODS)
    candidates: tuple[ConfigTrial, ...] = ()
    environment: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0  # device-machine wall time spent tuning this shape
    notes: tuple[str, ...] = ()
    use_in_graph: bool | None = None  # calls captured in a CUDA graph; None: as use_kernel

    def __post_init__(self) -> None:
        if self.use_in_graph is None:
            object.__setattr__(self, "use_in_graph", self.use_kernel)

    def time(self, method: str, timing: str = "kernel") -> float | None:
        times = self.times.get(method)
        return None if times is None else getattr(times, f"{timing}_ms")

    def to_json(self) -> dict[str, Any]:
        return {"shape": self.shape.to_json(), "key": self.shape.key,
                "best": self.best.to_json() if self.best else None,
                "use_kernel": self.use_kernel, "use_in_graph": self.use_in_graph,
                "times": {name: t.to_json() for name, t in self.times.items()},
                "candidates": [c.to_json() for c in self.candidates],
                "environment": self.environment, "seconds": self.seconds,
                "notes": list(self.notes)}

    @classmethod
    def from_json(cls, record: dict[str, Any]) -> TableEntry:
        best = record.get("best")
        return cls(Shape.from_json(record["shape"]), Config.from_json(best) if best else None,
                   bool(record["use_kernel"]),
                   {name: MethodTimes.from_json(t) for name, t in record["times"].items()},
                   tuple(ConfigTrial.from_json(c) for c in record.get("candidates", ())),
                   record.get("environment", {}), float(record.get("seconds", 0.0)),
                   tuple(record.get("notes", ())), record.get("use_in_graph"))


@dataclass
class Table:
    entries: dict[str, TableEntry] = field(default_factory=dict)  # by Shape.key
    skipped_lines: int = 0  # lines that did not parse (a write cut short)

    def get(self, shape: Shape) -> TableEntry | None:
        return self.entries.get(shape.key)

    def add(self, entry: TableEntry) -> None:
        self.entries[entry.shape.key] = entry

    def __len__(self) -> int:
        return len(self.entries)

    def __iter__(self) -> Iterator[TableEntry]:
        return iter(self.entries.values())


def read_jsonl(path: Path) -> tuple[list[dict[str, Any]], int]:
    """The objects of a JSON-lines file and the number of lines that did not parse."""
    if not path.is_file():
        return [], 0
    records, skipped = [], 0
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            skipped += 1
    return records, skipped


def append_jsonl(path: Path, record: dict[str, Any]) -> None:
    """Append one object as a line, on a line of its own, flushed to disk."""
    path.parent.mkdir(parents=True, exist_ok=True)
    cut_short = path.is_file() and path.stat().st_size > 0 and not _ends_with_newline(path)
    with path.open("a") as handle:
        if cut_short:
            handle.write("\n")
        handle.write(json.dumps(record) + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def _ends_with_newline(path: Path) -> bool:
    with path.open("rb") as handle:
        handle.seek(-1, os.SEEK_END)
        return handle.read(1) == b"\n"


def load_table(path: Path) -> Table:
    """The table in a JSON-lines file (empty when the file does not exist). A later line for
    the same shape replaces an earlier one."""
    records, skipped = read_jsonl(Path(path))
    table = Table(skipped_lines=skipped)
    for record in records:
        try:
            table.add(TableEntry.from_json(record))
        except (KeyError, TypeError, ValueError):
            table.skipped_lines += 1
    return table


def append_entry(path: Path, entry: TableEntry) -> None:
    append_jsonl(Path(path), entry.to_json())


SHIPPED_METHODS = ("tuned", "torch", "cublaslt_autotuned")


def shippable(entry: TableEntry) -> TableEntry:
    """The entry as the package ships it: the choice, the times it rests on, the notes; the
    candidates tried (most of a tuned line) left in the run's own table."""
    times = {name: t for name, t in entry.times.items() if name in SHIPPED_METHODS}
    return replace(entry, times=times, candidates=())


def write_table(path: Path, table: Table) -> None:
    """`table` as one JSON-lines file, each entry shippable()."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text("".join(json.dumps(shippable(entry).to_json()) + "\n"
                                  for entry in table))


def gpu_slug(name: str) -> str:
    """"NVIDIA H200" -> "h200": the file name of a GPU's shipped table."""
    words = name.lower().replace("nvidia", "").split()
    return words[0] if words else "unknown"


def default_table_path(device: torch.device | None = None) -> Path | None:
    """$SOLFORGE_HGEMM_TABLE, else the shipped table of this GPU, else None."""
    override = os.environ.get("SOLFORGE_HGEMM_TABLE")
    if override:
        return Path(override)
    if not torch.cuda.is_available():
        return None
    path = TABLE_DIR / f"{gpu_slug(torch.cuda.get_device_name(device))}.jsonl"
    return path if path.is_file() else None


def environment() -> dict[str, Any]:
    """Where and when a measurement was taken."""
    info: dict[str, Any] = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(), "torch": torch.__version__,
        "triton": triton.__version__, "cuda": torch.version.cuda,
        "nvmath": _package_version("nvmath-python"),
    }
    if torch.cuda.is_available():
        properties = torch.cuda.get_device_properties(torch.cuda.current_device())
        info.update(gpu=properties.name, sm_count=properties.multi_processor_count,
                    capability=f"{properties.major}.{properties.minor}",
                    l2_bytes=properties.L2_cache_size)
    return info


def _package_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None
