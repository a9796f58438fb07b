"""Build and judge the public example solutions of SOL-ExecBench and FlashInfer-Bench.

    python benchmarks/examples_gpu.py EXAMPLES_DIR... [-o OUT.json] [--device cuda|cpu]
                                      [--smallest N] [--deadline-s S] [--again TEXT ...]

Each EXAMPLES_DIR is searched for two layouts:
- SOL-ExecBench `examples/<language>/<name>/`: definition.json (its reference in reference.py
  beside it), workload.jsonl and one or more solution_*.json;
- FlashInfer-Bench trace sets (`examples/ffi/Example-FlashInfer-Trace/`): definitions/,
  workloads/, solutions/.
Every solution is evaluated through solforge (build, correctness, timing, T_SOL, score) and one
record per example is written: language, binding, status per workload, build seconds, message.
Resumable: examples already in OUT are skipped (`--again TEXT` judges again those whose key
contains TEXT, e.g. after installing a missing language package); the script stops starting new
ones after --deadline-s and says so. Each record carries the date it was judged. Default
output: benchmarks/results/h200-examples.json (GPU) or examples-cpu.json (CPU mode, the
smallest workload, Triton interpreted, CUDA not runnable).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "benchmarks"))

from script_common import recorded_environment  # noqa: E402

from solforge.data.solution import Solution, load_solution  # noqa: E402
from solforge.errors import SolforgeError  # noqa: E402
from solforge.harness.evaluate import EvalConfig, evaluate  # noqa: E402
from solforge.problem import load_problem  # noqa: E402
from solforge.problem.datasets import import_flashinfer_trace, import_sol_execbench  # noqa: E402
from solforge.problem.trace_set import read_trace_set  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"


@dataclass(frozen=True)
class Example:
    key: str  # stable across runs: the solution file's path under its examples folder
    problem_source: Path  # a problem folder, or a trace set root
    solution: Solution | None
    load_error: str | None = None
    trace_set: bool = False


def find_examples(root: Path) -> list[Example]:
    """SOL-ExecBench example folders and FlashInfer-Bench trace sets under `root`."""
    found: list[Example] = []
    for definition in sorted(root.rglob("definition.json")):
        folder = definition.parent
        for file in sorted(folder.glob("solution*.json")):
            found.append(_example(f"{root.name}/{file.relative_to(root)}", folder, file))
    for definitions in sorted(root.rglob("definitions")):
        set_root = definitions.parent
        for file in sorted((set_root / "solutions").rglob("*.json")):
            found.append(_example(f"{root.name}/{file.relative_to(root)}", set_root, file,
                                  trace_set=True))
    return found


def _example(key: str, source: Path, file: Path, trace_set: bool = False) -> Example:
    try:
        return Example(key, source, load_solution(file), trace_set=trace_set)
    except SolforgeError as exc:
        return Example(key, source, None, str(exc), trace_set)


def problem_folder(example: Example, scratch: Path) -> Path:
    """The example's problem as a solforge problem folder (imported into `scratch`)."""
    out = scratch / example.key.replace("/", "_")
    if example.trace_set:
        name = example.solution.definition
        definitions = [d for d in read_trace_set(example.problem_source).records("definitions")
                       if d.get("name") == name]
        if not definitions:
            raise SolforgeError(f"no definition named {name!r} in {example.problem_source}")
        report = import_flashinfer_trace(example.problem_source, out)
    else:
        report = import_sol_execbench(example.problem_source, out, tier="examples")
    written = [f for f in report.written if example.trace_set is False
               or f.name == example.solution.definition]
    if not written:
        reasons = "; ".join(str(i) for i in report.issues) or "nothing imported"
        raise SolforgeError(f"the example's problem does not load: {reasons}")
    return written[0]


def judge(example: Example, config: EvalConfig, scratch: Path) -> dict[str, Any]:
    record: dict[str, Any] = {"example": example.key}
    if example.solution is None:
        return {**record, "status": "INVALID_SOLUTION", "message": example.load_error}
    solution = example.solution
    record |= {"solution": solution.name, "languages": list(solution.languages),
               "binding": solution.binding if solution.is_cpp else None}
    start = time.perf_counter()
    try:
        problem = load_problem(problem_folder(example, scratch))
        traces = evaluate(problem, solution, config)
    except SolforgeError as exc:
        return {**record, "status": "INVALID_PROBLEM", "message": str(exc)}
    statuses = [t.evaluation.status.value for t in traces]
    failed = [t.evaluation for t in traces if t.evaluation.status.value != "PASSED"]
    scores = [t.evaluation.sol_score for t in traces if t.evaluation.sol_score is not None]
    record |= {
        "status": Counter(statuses).most_common(1)[0][0] if statuses else "NO_WORKLOADS",
        "statuses": statuses,
        "build_seconds": traces[0].evaluation.build_seconds if traces else None,
        "latency_ms": [t.evaluation.performance.latency_ms if t.evaluation.performance else None
                       for t in traces],
        "sol_scores": scores,
        "message": _first_line(failed[0].evidence or failed[0].log) if failed else "",
        "seconds": round(time.perf_counter() - start, 1),
    }
    return record


def _first_line(text: str | None, chars: int = 400) -> str:
    """The first line, and the first compiler or Python error line after it, if any."""
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    if not lines:
        return ""
    errors = [line for line in lines[1:] if "error" in line.lower()]
    return (lines[0] + (f" | {errors[0]}" if errors else ""))[:chars]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("roots", type=Path, nargs="+")
    parser.add_argument("-o", "--output", type=Path)
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--smallest", type=int, default=None,
                        help="only the N smallest workloads of each example")
    parser.add_argument("--deadline-s", type=float, default=540.0)
    parser.add_argument("--cache-dir", type=Path, default=None)
    parser.add_argument("--again", action="append", default=[], metavar="TEXT",
                        help="judge again the examples whose key contains TEXT (their records "
                             "are replaced), e.g. a language whose package was missing before")
    args = parser.parse_args(argv)
    output = args.output or RESULTS / ("h200-examples.json" if args.device == "cuda"
                                       else "examples-cpu.json")
    done = json.loads(output.read_text()) if output.is_file() else {"examples": []}
    done["machine"] = recorded_environment(args.device)
    done["date"] = time.strftime("%Y-%m-%d")
    done["examples"] = [r for r in done["examples"]
                        if not any(text in r["example"] for text in args.again)]
    seen = {r["example"] for r in done["examples"]}
    examples = [e for root in args.roots for e in find_examples(root)]
    config = EvalConfig(device=args.device, baseline="eager" if args.device == "cpu" else "best",
                        smallest=args.smallest or (1 if args.device == "cpu" else None),
                        cache_dir=args.cache_dir)
    began = time.monotonic()
    with tempfile.TemporaryDirectory() as scratch:
        for example in examples:
            if example.key in seen:
                continue
            if time.monotonic() - began > args.deadline_s:
                print(f"deadline reached; {len(examples) - len(seen)} examples left for the "
                      "next call", flush=True)
                break
            print(f"{example.key}: judging", flush=True)
            record = {**judge(example, config, Path(scratch)),
                      "date": time.strftime("%Y-%m-%d")}
            print(f"{example.key}: {record['status']} {record.get('message', '')}"[:300],
                  flush=True)
            done["examples"].append(record)
            seen.add(example.key)
            output.parent.mkdir(parents=True, exist_ok=True)
            output.write_text(json.dumps(done, indent=1) + "\n")
    left = [e.key for e in examples if e.key not in seen]
    print(f"{len(seen)} judged, {len(left)} left; wrote {output}")
    return 0 if not left else 3


if __name__ == "__main__":
    sys.exit(main())

