"""What the sandbox costs per candidate: starting a sandboxed interpreter against a plain
`python -I`, making and removing the private folder, killing everything it started, and (with
--evaluate) a whole evaluation of an honest solution with the sandbox on and off. The kernel
probe runs once per driver process and is reported apart. `--device cuda` (on the H200) uses
the GPU's policy (no PID namespace as root) and evaluates on the GPU. Goal: <= 0.5 s per
candidate.

    python benchmarks/sandbox_cost.py OUT.json [--repeats 10] [--evaluate] [--device cpu|cuda]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from solforge.harness.process import python_command, python_env, start
from solforge.harness.sandbox import Sandbox, policy_for, protected_driver
from solforge.harness.sandbox.policy import probe

ROOT = Path(__file__).resolve().parents[1]
HONEST = ROOT / "tests" / "fixtures" / "harness" / "honest" / "pytorch_rmsnorm"
PROBLEM = ROOT / "tests" / "fixtures" / "harness" / "rmsnorm_small"


def timed(action) -> float:
    began = time.perf_counter()
    action()
    return time.perf_counter() - began


def one_start(sandboxed: bool, script: Path, device: str) -> dict[str, float]:
    """Seconds to a sandboxed (or plain) interpreter's first line, and to clean up after it."""
    policy = policy_for((str(PROBLEM),), device)
    began = time.perf_counter()
    sandbox = Sandbox(policy) if sandboxed else None
    spec = sandbox.spec() if sandbox else None
    argv = (python_command(str(script), sandbox=spec) if spec
            else [sys.executable, "-I", str(script)])
    env = sandbox.env(python_env(dict(os.environ))) if sandbox else dict(os.environ)
    process = start(argv, env, Path(spec.cwd) if spec else Path.cwd())
    process.stdout.readline()
    ready = time.perf_counter() - began
    cleanup = timed(lambda: (sandbox.kill(process), sandbox.remove()) if sandbox
                    else process.wait())
    process.stdout.close()
    return {"ready_s": ready, "cleanup_s": cleanup}


def start_costs(repeats: int, device: str) -> dict[str, float]:
    script = Path(tempfile.mkdtemp()) / "ready.py"
    script.write_text("print('ready', flush=True)\n")
    os.chmod(script.parent, 0o755)
    with protected_driver():
        plain = [one_start(False, script, device) for _ in range(repeats)]
        boxed = [one_start(True, script, device) for _ in range(repeats)]
    median = {f"{kind}_{key}": statistics.median(r[key] for r in runs)
              for kind, runs in (("plain", plain), ("sandboxed", boxed))
              for key in ("ready_s", "cleanup_s")}
    median["overhead_s"] = (median["sandboxed_ready_s"] + median["sandboxed_cleanup_s"]
                            - median["plain_ready_s"] - median["plain_cleanup_s"])
    return median


def evaluation_costs(device: str) -> dict[str, float]:
    """One evaluation of an honest solution (baseline cached first), sandbox on and off."""
    from solforge.data.solution import load_solution
    from solforge.harness.evaluate import EvalConfig, evaluate
    from solforge.harness.session import Limits
    from solforge.problem import load_problem

    problem = load_problem(PROBLEM)
    solution = load_solution(HONEST / "solution.py", problem.name)
    found = {}
    for sandboxed in (True, False, True, False):
        config = EvalConfig(device=device, baseline="eager", smallest=1,
                            limits=replace(Limits(), sandbox=sandboxed),
                            cache_dir=Path(tempfile.mkdtemp()))
        evaluate(problem, solution, config)  # the baseline, cached for the timed run
        seconds = timed(lambda c=config: evaluate(problem, solution, c))
        found[f"evaluate_{'on' if sandboxed else 'off'}_s"] = seconds  # the second of each
    found["evaluate_overhead_s"] = found["evaluate_on_s"] - found["evaluate_off_s"]
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--evaluate", action="store_true")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    args = parser.parse_args()
    probe_s = timed(probe)
    print(f"probe: {probe_s:.3f} s", flush=True)
    result = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "machine": {"platform": platform.platform(), "cpu_count": os.cpu_count(),
                          "python": platform.python_version(), "root": os.geteuid() == 0},
              "device": args.device, "probe_once_s": probe_s, "repeats": args.repeats,
              "protections": policy_for((str(PROBLEM),), args.device).active,
              "per_candidate": start_costs(args.repeats, args.device)}
    print(json.dumps(result["per_candidate"], indent=1), flush=True)
    if args.evaluate:
        result["evaluation"] = evaluation_costs(args.device)
        print(json.dumps(result["evaluation"], indent=1), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    try:
        main()
    except subprocess.SubprocessError as error:
        raise SystemExit(f"sandbox_cost: {error}") from None
