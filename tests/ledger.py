"""A ledger of test outcomes, so that a run cut short goes on where it stopped.

The GPU tests take longer than one call to the GPU machine allows (112 tests; 27 of them took
six minutes on an H100, 2026-12-06), and each call starts from a bare machine. So
`benchmarks/run_gpu_checks.sh tests` runs them with SOLFORGE_TESTS_LEDGER naming a JSON-lines
file: each test's outcome is appended the moment it is known, and a later run of the same code
leaves out the tests the ledger already holds. "The same code" is the fingerprint of the
sources under src/ and tests/: an edit anywhere runs every test again.

A test is also recorded as it starts: one that two runs started and neither finished (a hang,
or the calls' time limit twice) is left out as well, and the summary names it, so that a
single test cannot hold every later call.

    python tests/ledger.py LEDGER.jsonl     (what the ledger holds for the current code)
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

ENV = "SOLFORGE_TESTS_LEDGER"
ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("src", "tests")
SUFFIXES = frozenset({".py", ".json", ".jsonl", ".cu", ".cuh", ".cpp", ".cc", ".h", ".hpp",
                      ".toml", ".cfg", ".ini"})
STARTED = "started"
STARTS_BEFORE_LEFT_OUT = 2  # started this often and never finished: left out


def fingerprint(root: Path = ROOT) -> str:
    """The hash of every source file under src/ and tests/, path and content."""
    digest = hashlib.sha256()
    files = sorted(path for folder in SOURCES for path in (root / folder).rglob("*")
                   if path.suffix in SUFFIXES and path.is_file()
                   and "__pycache__" not in path.parts
                   and not any(part.endswith(".egg-info") for part in path.parts))
    for path in files:
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def entries(ledger: Path, code: str) -> list[dict[str, Any]]:
    """The ledger's entries for the code with this fingerprint (none if there is no ledger)."""
    if not ledger.is_file():
        return []
    found = []
    for line in ledger.read_text().splitlines():
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:  # a line cut off when a run was killed mid-write
            continue
        if isinstance(entry, dict) and entry.get("code") == code:
            found.append(entry)
    return found


def settled(found: list[dict[str, Any]]) -> tuple[dict[str, str], list[str]]:
    """Each test with an outcome, and the tests started too often with none (in order)."""
    outcomes = {e["node"]: e["outcome"] for e in found if e.get("outcome") != STARTED}
    starts = Counter(e["node"] for e in found if e.get("outcome") == STARTED)
    stuck = [node for node, count in starts.items()
             if count >= STARTS_BEFORE_LEFT_OUT and node not in outcomes]
    return outcomes, stuck


def append(ledger: Path, entry: dict[str, Any]) -> None:
    ledger.parent.mkdir(parents=True, exist_ok=True)
    with ledger.open("a") as stream:
        stream.write(json.dumps(entry) + "\n")
        stream.flush()


def summary(ledger: Path, code: str) -> str:
    outcomes, stuck = settled(entries(ledger, code))
    counts = Counter(outcomes.values())
    lines = [f"ledger {ledger} (code {code}): "
             + ", ".join(f"{counts[k]} {k}" for k in sorted(counts)) + f", {len(stuck)} stuck"]
    lines += [f"  failed: {node}" for node, outcome in outcomes.items() if outcome == "failed"]
    lines += [f"  stuck (started {STARTS_BEFORE_LEFT_OUT} times, never finished): {node}"
              for node in stuck]
    return "\n".join(lines)


if __name__ == "__main__":
    print(summary(Path(sys.argv[1]), fingerprint()))
