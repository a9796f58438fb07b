"""Time the library baselines (cuDNN SDPA, cuBLASLt, FlashInfer) of the bundled problems
that map to one, and score the shipped solutions against them.

    python benchmarks/library_baselines_gpu.py [PROBLEM...] [-o OUT.json] [--device cuda|cpu]
                                               [--smallest N] [--deadline-s S]
                                               [--problem-limit-s S]
                                               [--retry-failed] [--again TEXT ...]
                                               [--flashinfer-setup FILE]

Without PROBLEM: every bundled problem with a library baseline (harness/library_baselines.py).
Each library solution is judged by the harness like any candidate (correctness first, kernel-only
time), so its time is T_lib; a shipped solution of the same problem gets
S_lib = (T_lib - T_SOL) / ((T_k - T_SOL) + (T_lib - T_SOL)) per workload. Resumable (problems in
OUT are skipped, and so are those under its "failed", with the error that ended them, unless
--retry-failed; one problem's crash is recorded there and the run goes on; --again TEXT judges
again the recorded problems whose address contains a TEXT) and starts no problem that
could not end before --deadline-s (as long as the longest one so far). With --problem-limit-s
each problem is judged in a child process, and one still running after that long is stopped and
recorded under "failed" (cuDNN SDPA on a paged decode took more than 525 s on the H200, the
whole call, and the call exported nothing). On a GPU, a problem whose library is not installed
is left for a machine that has it, and with --flashinfer-setup (flashinfer_setup.py's record), so
is a FlashInfer baseline whose module that record does not hold as built: a sandboxed worker
would have to build it inside its time limit. Writes
benchmarks/results/h200-library-baselines.json (or library-baselines-cpu.json in CPU mode,
where the libraries cannot run and each record says why).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "benchmarks"))

from flashinfer_setup import built  # noqa: E402
from script_common import log, recorded_environment  # noqa: E402

from solforge.data.solution import load_solution  # noqa: E402
from solforge.data.trace import Trace  # noqa: E402
from solforge.harness.build import missing_library  # noqa: E402
from solforge.harness.evaluate import EvalConfig, evaluate  # noqa: E402
from solforge.harness.library_baselines import (  # noqa: E402
    library_baseline,
    score_against_library,
)
from solforge.problem.suite import address_of, bundled_problem_dirs, open_problem  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"
SHIPPED = REPO / "src" / "solforge" / "solutions"


def per_workload(traces: list[Trace]) -> dict[str, dict[str, Any]]:
    found = {}
    for trace in traces:
        evaluation = trace.evaluation
        found[trace.workload["uuid"]] = {
            "status": evaluation.status.value,
            "latency_ms": evaluation.performance.latency_ms if evaluation.performance else None,
            "t_sol_ms": evaluation.t_sol_ms, "sol_score": evaluation.sol_score,
            "message": (evaluation.evidence or evaluation.log or "").strip().split("\n")[0][:300],
        }
    return found


class LibraryMissing(Exception):
    """The library this problem's baseline calls is not installed here."""


class ProblemTooLong(Exception):
    """A problem still running after --problem-limit-s."""


def judge_problem(address: str, config: EvalConfig) -> dict[str, Any] | None:
    problem = open_problem(address)
    baseline = library_baseline(problem.definition)
    if baseline is None:
        return None
    missing = missing_library(baseline.solution)
    if missing is not None and config.device == "cuda":  # the CPU run records why instead
        raise LibraryMissing(missing)
    log(f"{address}: judging")  # a call cut short still says where its time went
    library = per_workload(evaluate(problem, baseline.solution, config))
    record: dict[str, Any] = {"problem": address, "library": baseline.name,
                              "package": baseline.library, "workloads": library, "shipped": {}}
    for file in sorted((SHIPPED / address).glob("*.json")):
        solution = load_solution(file)
        shipped = per_workload(evaluate(problem, solution, config))
        for uuid, result in shipped.items():
            lib = library.get(uuid, {})
            if result["latency_ms"] and lib.get("latency_ms") and result["t_sol_ms"]:
                result["sol_score_vs_library"] = score_against_library(
                    result["latency_ms"], lib["latency_ms"], result["t_sol_ms"])
        record["shipped"][solution.name] = shipped
    return record


def judge_within(address: str, config: EvalConfig,
                 limit_s: float | None) -> dict[str, Any] | None:
    """judge_problem, in a child process stopped after `limit_s` seconds (in this one without a
    limit). Raises LibraryMissing as judge_problem does, ProblemTooLong when stopped."""
    if limit_s is None:
        return judge_problem(address, config)
    with tempfile.TemporaryDirectory() as folder:
        answer = Path(folder) / "answer.json"
        argv = [sys.executable, __file__, "--one", address, str(answer), "--device",
                config.device]
        if config.smallest:
            argv += ["--smallest", str(config.smallest)]
        child = subprocess.Popen(argv, start_new_session=True)  # its workers in its group
        try:
            child.wait(timeout=limit_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)
            child.wait()
            raise ProblemTooLong(f"did not finish within {limit_s:g} s") from None
        if not answer.is_file():
            raise RuntimeError(f"the child judging {address} ended with exit status "
                               f"{child.returncode} and no answer")
        found = json.loads(answer.read_text())
    if found.get("missing"):
        raise LibraryMissing(found["missing"])
    if found.get("error"):
        raise RuntimeError(found["error"])
    return found["record"]


def judge_one(address: str, answer: Path, config: EvalConfig) -> int:
    """The child's side of judge_within: the problem's record, or why there is none."""
    try:
        found = {"record": judge_problem(address, config)}
    except LibraryMissing as exc:
        found = {"missing": str(exc)}
    except Exception as exc:  # recorded by the parent as this problem's failure
        found = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
    answer.write_text(json.dumps(found))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("problems", nargs="*")
    parser.add_argument("-o", "--output", type=Path)
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--smallest", type=int, default=None)
    parser.add_argument("--deadline-s", type=float, default=540.0)
    parser.add_argument("--problem-limit-s", type=float, default=None,
                        help="judge each problem in a child process stopped after this long")
    parser.add_argument("--one", nargs=2, metavar=("PROBLEM", "ANSWER"), default=None,
                        help=argparse.SUPPRESS)  # judge_within's child
    parser.add_argument("--retry-failed", action="store_true",
                        help="judge again the problems whose run raised before")
    parser.add_argument("--again", nargs="+", default=[], metavar="TEXT",
                        help="judge again the recorded problems whose address contains a TEXT")
    parser.add_argument("--flashinfer-setup", type=Path, metavar="FILE",
                        help="leave the FlashInfer baselines whose module FILE lacks for later")
    args = parser.parse_args(argv)
    config = EvalConfig(device=args.device, baseline="eager" if args.device == "cpu" else "best",
                        smallest=args.smallest or (1 if args.device == "cpu" else None))
    if args.one:
        return judge_one(args.one[0], Path(args.one[1]), config)
    output = args.output or RESULTS / ("h200-library-baselines.json" if args.device == "cuda"
                                       else "library-baselines-cpu.json")
    done = json.loads(output.read_text()) if output.is_file() else {"problems": []}
    done |= {"machine": recorded_environment(args.device), "date": time.strftime("%Y-%m-%d")}
    failed = {} if args.retry_failed else done.get("failed", {})
    done["failed"] = failed
    done["problems"] = [r for r in done["problems"]
                        if not any(text in r["problem"] for text in args.again)]
    seen = {r["problem"] for r in done["problems"]} | set(failed)
    addresses = args.problems or [address_of(d) for d in bundled_problem_dirs()]
    skipped: set[str] = set()
    began = time.monotonic()
    longest = 0.0  # the longest problem so far: one that cannot end before the deadline waits
    modules = (built(json.loads(args.flashinfer_setup.read_text()))
               if args.flashinfer_setup and args.flashinfer_setup.is_file() else None)
    for address in addresses:
        if address in seen:
            continue
        if modules is not None and address not in modules and _calls_flashinfer(address):
            log(f"{address}: not measured, its FlashInfer module is not built yet (the "
                "flashinfer stage builds it)")
            skipped.add(address)
            continue
        if time.monotonic() - began + longest > args.deadline_s:
            log(f"deadline reached (the longest problem took {longest:.0f} s); the next call "
                "goes on from here")
            break
        started = time.monotonic()
        limit = _limit(args.problem_limit_s, args.deadline_s - (started - began))
        try:
            record = judge_within(address, config, limit)
        except LibraryMissing as exc:
            log(f"{address}: not measured, {exc}")
            skipped.add(address)
            continue
        except ProblemTooLong as exc:
            if limit < args.problem_limit_s:  # the call's deadline stopped it, not its limit
                log(f"{address}: stopped at the deadline; the next call judges it again")
                break
            failed[address] = str(exc)
            log(f"{address}: failed, {exc}")
            record = None
        except Exception as exc:  # one problem's crash (an out-of-memory) must not end the run
            failed[address] = f"{type(exc).__name__}: {str(exc)[:300]}"
            log(f"{address}: failed, {failed[address]}")
            record = None
            if args.device == "cuda":
                import torch
                torch.cuda.empty_cache()
        seen.add(address)
        longest = max(longest, time.monotonic() - started)
        if record is not None:
            statuses = sorted({w["status"] for w in record["workloads"].values()})
            log(f"{address}: {record['library']} {', '.join(statuses)} "
                f"({time.monotonic() - started:.0f} s)")
            done["problems"].append(record)
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(json.dumps(done, indent=1) + "\n")  # a failure is kept too
    left = [a for a in addresses if a not in seen and has_library(a)]
    log(f"{len(done['problems'])} problems with a library baseline recorded, {len(left)} left "
        f"({len(skipped)} for want of their library); wrote {output}")
    return 0 if not left else 3


def _calls_flashinfer(address: str) -> bool:
    baseline = library_baseline(open_problem(address).definition)
    return baseline is not None and baseline.library == "flashinfer-python"


def _limit(problem_limit_s: float | None, until_deadline_s: float) -> float | None:
    """A problem's time in its child process: its limit, or less where the call's deadline
    comes first (so the call always ends in time to export what it measured)."""
    if problem_limit_s is None:
        return None
    return max(1.0, min(problem_limit_s, until_deadline_s))


def has_library(address: str) -> bool:
    return library_baseline(open_problem(address).definition) is not None


if __name__ == "__main__":
    sys.exit(main())
