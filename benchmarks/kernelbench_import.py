"""Import every KernelBench file of levels 1-3 (and 4 with transformers) and analyze each one.

    python benchmarks/kernelbench_import.py KERNELBENCH_DIR [-o OUT.json] [--levels 1,2,3]

KERNELBENCH_DIR is a KernelBench checkout's `KernelBench/` folder (level1/ ... level4/). Each file
is imported into a temporary folder, its problem loaded, and its reference analyzed on the H200
profile: the JSON lists per file whether it imported, the error if not, and any op the analysis
could not cost. Writes benchmarks/results/kernelbench-import-cpu.json by default. No GPU needed.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

from solforge.errors import SolforgeError  # noqa: E402
from solforge.hardware.load import load_profile  # noqa: E402
from solforge.problem import load_problem  # noqa: E402
from solforge.problem.kernelbench import import_kernelbench_file  # noqa: E402
from solforge.solar.analysis import analyze_workload  # noqa: E402

RESULTS = REPO / "benchmarks" / "results" / "kernelbench-import-cpu.json"


def import_and_analyze(source: Path, out_dir: Path, hardware: str = "H200") -> dict[str, Any]:
    """One file: imported, loaded and analyzed, or the reason it was not."""
    record: dict[str, Any] = {"file": f"{source.parent.name}/{source.name}"}
    start = time.perf_counter()
    try:
        folder = import_kernelbench_file(source, out_dir)
        problem = load_problem(folder)
    except SolforgeError as exc:
        return {**record, "imported": False, "error": str(exc),
                "seconds": round(time.perf_counter() - start, 2)}
    record["imported"] = True
    try:
        analysis = analyze_workload(problem, problem.workloads[0], load_profile(hardware))
        record["uncosted_ops"] = sorted(set(analysis.unknown_ops))
        record["t_sol_ms"] = analysis.t_sol_ms
    except Exception as exc:  # an analysis failure is recorded, not fatal to the sweep
        record["analysis_error"] = f"{type(exc).__name__}: {exc}"
    record["seconds"] = round(time.perf_counter() - start, 2)
    return record


def kernelbench_files(root: Path, levels: list[int]) -> list[Path]:
    files = []
    for level in levels:
        folder = root / f"level{level}"
        if not folder.is_dir():
            raise SystemExit(f"{root}: no level{level}/ folder (give the KernelBench/ folder)")
        files += sorted(p for p in folder.glob("*.py") if p.name != "__init__.py")
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", type=Path)
    parser.add_argument("-o", "--output", type=Path, default=RESULTS)
    parser.add_argument("--levels", default="1,2,3")
    parser.add_argument("--only", nargs="*", default=None, metavar="LEVEL/FILE.py",
                        help="re-run these files and merge them into an existing OUT")
    args = parser.parse_args(argv)
    levels = [int(x) for x in args.levels.split(",")]
    if 4 in levels and importlib.util.find_spec("transformers") is None:
        print("level 4 needs the transformers package; skipping it")
        levels.remove(4)
    files = kernelbench_files(args.root, levels)
    kept: dict[str, dict[str, Any]] = {}
    if args.only is not None:
        files = [f for f in files if f"{f.parent.name}/{f.name}" in set(args.only)]
        if args.output.is_file():
            kept = {r["file"]: r for r in json.loads(args.output.read_text())["files"]}
    records = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, source in enumerate(files, 1):
            record = import_and_analyze(source, Path(tmp) / source.parent.name)
            records.append(record)
            flag = "ok" if record["imported"] else "FAIL"
            extra = record.get("error") or record.get("analysis_error") or \
                ", ".join(record.get("uncosted_ops", []))
            print(f"[{i}/{len(files)}] {flag} {record['file']} {extra}"[:200], flush=True)
    merged = {**kept, **{r["file"]: r for r in records}}
    records = [merged[key] for key in sorted(merged)]
    imported = sum(r["imported"] for r in records)
    uncosted = sorted({op for r in records for op in r.get("uncosted_ops", [])})
    summary = {"imported": imported, "files": len(records), "levels": levels,
               "analysis_errors": sum("analysis_error" in r for r in records),
               "uncosted_ops": uncosted,
               "machine": {"python": platform.python_version(), "torch": torch.__version__,
                           "einops": importlib.util.find_spec("einops") is not None},
               "date": time.strftime("%Y-%m-%d")}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps({"summary": summary, "files": records}, indent=1) + "\n")
    print(f"{imported}/{len(records)} imported; uncosted ops: {uncosted or 'none'}; "
          f"wrote {args.output}")
    return 0 if imported == len(records) and not uncosted else 1


if __name__ == "__main__":
    sys.exit(main())
