"""T_b: the reference, timed exactly like a candidate, in eager mode and under torch.compile.

The baseline runs through the same worker, timing method, cold L2 and fresh inputs as the
candidate (the driver times the reference as a trusted "candidate": roles `eager` and
`compile`). `--baseline best` takes the faster of the two, the optimized-PyTorch baseline
SOL-ExecBench scores against.

Measured baselines are stored (one JSON line each) under a key of everything that changes them:
the definition and workload (by content), the kind, the timing method and iteration counts, the
GPU, its driver and maximum SM clock, and the library versions. Evaluating many candidates of
one problem, or the suite again on another day, then times each baseline once.

Only the driver writes the store, and every line carries an HMAC-SHA256 under a key kept in a
file of its own (`baseline_key_path()`: `$SOLFORGE_BASELINE_KEY`, else
`~/.config/solforge/baseline.key`, mode 0600, made on first use). The key is never part of
a worker's configuration; a line without a valid MAC (written by anyone without the key, or
edited) is ignored, so a worker that reaches the store's file cannot plant a slow T_b.
`export_baselines` writes the verified entries as one JSON document (to commit, e.g. under
benchmarks/results); `import_baselines` signs them with this machine's key: importing is the
user's decision to trust that file, like importing traces.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from solforge.data.trace import BaselineReport
from solforge.data.workload import Workload
from solforge.errors import SolforgeError
from solforge.harness.protocol import REFERENCE_COMPILE, REFERENCE_EAGER
from solforge.problem.problem import Problem

BASELINES = ("eager", "compile", "best")
KINDS = {"eager": (REFERENCE_EAGER,), "compile": (REFERENCE_COMPILE,),
         "best": (REFERENCE_EAGER, REFERENCE_COMPILE)}


KEY_ENV = "SOLFORGE_BASELINE_KEY"
_READ: dict[str, tuple[tuple, dict[str, dict[str, Any]]]] = {}  # path -> (file version, entries)
EXPORT_FORMAT = "solforge-baselines/1"


def baseline_key_path() -> Path:
    named = os.environ.get(KEY_ENV)
    return Path(named) if named else Path.home() / ".config" / "solforge" / "baseline.key"


def signing_key(path: Path | None = None) -> bytes:
    """The store's HMAC key, created (32 random bytes, mode 0600) when missing. Several
    processes may start at once on a fresh machine: the key is written to a file of its own and
    linked into place, so every one of them reads the one complete key that won."""
    path = path or baseline_key_path()
    if not path.is_file():
        _create_key(path)
    try:
        return bytes.fromhex(path.read_text().strip())
    except ValueError:
        raise SolforgeError(f"{path}: not a baseline key (64 hex digits)") from None


def _create_key(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    draft = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    descriptor = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(descriptor, "w") as out:
            out.write(secrets.token_hex(32))
        with contextlib.suppress(FileExistsError):  # another process linked its key first
            os.link(draft, path)
    finally:
        draft.unlink(missing_ok=True)


def _mac(key: bytes, entry: dict[str, Any]) -> str:
    body = {k: v for k, v in entry.items() if k != "mac"}
    return hmac.new(key, json.dumps(body, sort_keys=True).encode(), "sha256").hexdigest()


@dataclass(frozen=True)
class BaselineCache:
    """The signed store of measured baselines: a JSONL file, the last valid line per key wins."""

    path: Path
    key: bytes | None = None  # None: signing_key()
    value: str = "median_ms"  # the number every entry carries

    def _key(self) -> bytes:
        return self.key if self.key is not None else signing_key()

    def entries(self) -> dict[str, dict[str, Any]]:
        """Every validly signed entry by key (unsigned or tampered lines are left out); read
        again only when the file changed."""
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            return {}
        key = self._key()
        version = (str(self.path), stat.st_mtime_ns, stat.st_size, self.value,
                   hashlib.sha256(key).hexdigest())
        if _READ.get(str(self.path), (None,))[0] == version:
            return _READ[str(self.path)][1]
        found: dict[str, dict[str, Any]] = {}
        for line in self.path.read_text().splitlines():
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue
            if (isinstance(entry, dict) and isinstance(entry.get("key"), str)
                    and isinstance(entry.get(self.value), (int, float))
                    and isinstance(entry.get("mac"), str)
                    and hmac.compare_digest(entry["mac"], _mac(key, entry))):
                found[entry["key"]] = entry
        _READ[str(self.path)] = (version, found)
        return found

    def get(self, key: str) -> float | None:
        entry = self.entries().get(key)
        return float(entry["median_ms"]) if entry else None

    def put(self, key: str, description: dict[str, Any], median_ms: float) -> None:
        self.write([{"key": key, "median_ms": median_ms, **description}])

    def write(self, entries: list[dict[str, Any]]) -> None:
        """Append `entries` (each with `key` and the value), signed."""
        signing = self._key()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as out:
            for entry in entries:
                body = {k: v for k, v in entry.items() if k != "mac"}
                out.write(json.dumps({**body, "mac": _mac(signing, body)}) + "\n")


def export_baselines(cache: BaselineCache | list[BaselineCache], out: Path) -> int:
    """Write the verified entries of one store, or of several merged by key (a later store's
    entry wins), to `out` as one JSON document; how many."""
    merged: dict[str, dict] = {}
    for store in cache if isinstance(cache, list) else [cache]:
        merged.update(store.entries())
    entries = sorted(merged.values(),
                     key=lambda e: (str(e.get("definition")), str(e.get("workload")),
                                    str(e.get("kind"))))
    bare = [{k: v for k, v in e.items() if k != "mac"} for e in entries]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"format": EXPORT_FORMAT, "baselines": bare}, indent=1) + "\n")
    return len(bare)


def import_baselines(cache: BaselineCache, source: Path) -> int:
    """Sign the entries of an exported file into `cache`; how many (already there: skipped)."""
    try:
        document = json.loads(source.read_text())
    except (OSError, ValueError) as exc:
        raise SolforgeError(f"{source}: not a baseline export: {exc}") from None
    if not isinstance(document, dict) or document.get("format") != EXPORT_FORMAT:
        raise SolforgeError(f"{source}: format: expected {EXPORT_FORMAT!r}")
    entries = document.get("baselines")
    if not isinstance(entries, list):
        raise SolforgeError(f"{source}: baselines: expected a list")
    for number, entry in enumerate(entries):
        if not (isinstance(entry, dict) and isinstance(entry.get("key"), str)
                and isinstance(entry.get("median_ms"), (int, float))
                and entry["median_ms"] > 0):
            raise SolforgeError(f"{source}: baselines[{number}]: needs a key and a positive "
                                "median_ms")
    known = cache.entries()
    new = [e for e in entries if known.get(e["key"], {}).get("median_ms") != e["median_ms"]]
    cache.write(new)
    return len(new)


def cache_key(problem: Problem, workload: Workload, kind: str,
              context: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The key and a readable description of one baseline measurement. The key covers the
    whole definition, reference included, so a changed reference is timed again. (Until
    2026-12-03 the description's `definition`, the name, overwrote the definition's content
    here, and the H200 bench served a rewritten reference the old reference's times.)"""
    description = {"definition": problem.name, "workload": workload.uuid, "kind": kind,
                   **context}
    material = {**description, "content": problem.definition.to_dict(),
                "workload": workload.to_dict()}
    digest = hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()
    return digest, description


def reference_solution_name(kind: str) -> str:
    """The pseudo-solution a baseline's traces are recorded under: `reference:eager`, ..."""
    return f"reference:{kind}"


def choose(baseline: str, times: dict[str, float | None], cached: bool) -> BaselineReport | None:
    """T_b from the measured kinds: the named one, or the faster for "best"."""
    eager, compiled = times.get(REFERENCE_EAGER), times.get(REFERENCE_COMPILE)
    candidates = {k: v for k, v in ((REFERENCE_EAGER, eager), (REFERENCE_COMPILE, compiled))
                  if v is not None and k in KINDS[baseline]}
    if not candidates:
        return None
    chosen = min(candidates, key=candidates.get)
    return BaselineReport(chosen, candidates[chosen], eager, compiled, cached)
