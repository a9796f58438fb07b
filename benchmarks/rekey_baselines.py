"""Re-key an exported baseline file (h200-baselines.json) to the baseline key that covers the
definition's content, dropping every entry that may have timed another reference.

Until 2026-12-03 a baseline's key left the definition's content out (the name overwrote it), so
a rewritten reference was served its predecessor's times. The entries are still measurements;
what they lack is a key that says which reference they timed. An entry keeps its time here only
when that is certain: its problem is bundled, and the problem's definition.json has not changed
in git since the entry was measured (its trace's timestamp). The rest are left to be timed again.

    python benchmarks/rekey_baselines.py benchmarks/results/h200-baselines.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
from datetime import datetime
from pathlib import Path

from solforge.harness.baseline import EXPORT_FORMAT, cache_key
from solforge.problem import open_problem
from solforge.problem.suite import bundled_problem_dirs

NOT_CONTEXT = ("key", "median_ms", "mac", "trace", "definition", "workload", "kind")


def last_change(folder: Path) -> datetime:
    """When the problem's definition.json last changed in git (its committer time)."""
    stamp = subprocess.run(["git", "log", "-1", "--format=%cI", "--", "definition.json"],
                           cwd=folder, capture_output=True, text=True, check=True).stdout
    return datetime.fromisoformat(stamp.strip())


def measured_at(entry: dict) -> datetime | None:
    stamp = (entry.get("trace") or {}).get("evaluation", {}).get("timestamp")
    return datetime.fromisoformat(stamp) if stamp else None


def rekey(entries: list[dict]) -> tuple[list[dict], dict[str, int]]:
    """The entries that stay, under their new keys, and why the others went."""
    folders = {folder.name: folder for folder in bundled_problem_dirs()}
    problems, changed, kept = {}, {}, []
    dropped = {"not bundled": 0, "no timestamp": 0, "definition changed since": 0,
               "workload gone": 0}
    for entry in entries:
        name = entry["definition"]
        if name not in folders:
            dropped["not bundled"] += 1
            continue
        when = measured_at(entry)
        if when is None:
            dropped["no timestamp"] += 1
            continue
        if name not in problems:
            problems[name] = open_problem(folders[name])
            changed[name] = last_change(folders[name])
        if when < changed[name]:
            dropped["definition changed since"] += 1
            continue
        problem = problems[name]
        workload = next((w for w in problem.workloads if w.uuid == entry["workload"]), None)
        if workload is None:
            dropped["workload gone"] += 1
            continue
        context = {k: v for k, v in entry.items() if k not in NOT_CONTEXT}  # machine, timing
        key, description = cache_key(problem, workload, entry["kind"], context)
        kept.append({**entry, **description, "key": key})
    return kept, dropped


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("export", type=Path, help="an exported baseline file, rewritten")
    args = parser.parse_args()
    document = json.loads(args.export.read_text())
    if document.get("format") != EXPORT_FORMAT:
        raise SystemExit(f"{args.export}: format: expected {EXPORT_FORMAT!r}")
    kept, dropped = rekey(document["baselines"])
    args.export.write_text(json.dumps({**document, "baselines": kept}, indent=1) + "\n")
    print(f"{args.export}: {len(kept)} entries re-keyed; dropped: {dropped}")


if __name__ == "__main__":
    main()
