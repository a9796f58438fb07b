"""T_b: the reference, timed exactly like a candidate, in eager mode and under torch.compile.

The baseline runs through the same worker, timing method, cold L2 and fresh inputs as the
candidate (the driver times the reference as a trusted "candidate": roles `eager` and
`compile`). `--baseline best` takes the faster of the two, the optimized-PyTorch baseline
SOL-ExecBench scores against.

Measured baselines are cached (one JSON line each) under a key of everything that changes them:
the definition and workload, the kind, the timing method and iteration counts, the GPU and the
library versions. Evaluating many candidates of one problem then times the baseline once.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from solforge.data.trace import BaselineReport
from solforge.data.workload import Workload
from solforge.harness.protocol import REFERENCE_COMPILE, REFERENCE_EAGER
from solforge.problem.problem import Problem

BASELINES = ("eager", "compile", "best")
KINDS = {"eager": (REFERENCE_EAGER,), "compile": (REFERENCE_COMPILE,),
         "best": (REFERENCE_EAGER, REFERENCE_COMPILE)}


@dataclass(frozen=True)
class BaselineCache:
    path: Path

    def get(self, key: str) -> float | None:
        if not self.path.is_file():
            return None
        found = None
        for line in self.path.read_text().splitlines():
            try:
                entry = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(entry, dict) and entry.get("key") == key:
                found = entry.get("median_ms")
        return float(found) if isinstance(found, (int, float)) else None

    def put(self, key: str, description: dict[str, Any], median_ms: float) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as out:
            out.write(json.dumps({"key": key, "median_ms": median_ms, **description}) + "\n")


def cache_key(problem: Problem, workload: Workload, kind: str,
              context: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The key and a readable description of one baseline measurement."""
    description = {"definition": problem.name, "workload": workload.uuid, "kind": kind,
                   **context}
    material = {"definition": problem.definition.to_dict(), "workload": workload.to_dict(),
                **description}
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
