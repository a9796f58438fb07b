"""Build FlashInfer's modules for the library baselines once, and install them ahead of time.

FlashInfer compiles a module (norm, RoPE, sampling, paged decode, ...) the first time it is
called, 40 s or more each on the H200, into a workspace. A judged solution runs in a sandboxed
worker with a workspace of its own, which starts empty: every worker would build again, inside
its time limit. So this script, run once per machine after FlashInfer is installed, calls every
FlashInfer library baseline of the bundled problems once on its problem's smallest workload, in
this process (our own generated code, not a candidate's), and copies each module it built into
FlashInfer's ahead-of-time folder (`flashinfer/data/aot/<module>/<module>.so`), which every
process, sandboxed or not, loads before it would build.

    python benchmarks/flashinfer_setup.py [PROBLEM...] [-o OUT.json] [--skip-recorded FILE]
                                          [--deadline-s S]

`--skip-recorded` leaves out the problems a library-baselines record (library_baselines_gpu.py's
output) already holds: their modules need not be built on this machine (about 40 s each).
Writes the modules compiled on the CPU machine and installed before it ran (`prebuilt`), what
was built, how long each first call took, each baseline's error if it failed, and
the modules installed, after every problem: a call stopped by its time limit keeps what it
built and installed, and the next run goes on from OUT (the problems built there are skipped; a
failed one is tried again, its partial build resumed by ninja). `complete` says whether every
problem was built. With --deadline-s, no problem starts that could not end before it (as long
as the longest first call so far; a prefill module takes minutes). Needs a CUDA GPU and
FlashInfer; this script builds nothing on the CPU (carry_flashinfer_aot.sh does, beforehand).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "benchmarks"))

from script_common import log, recorded_environment  # noqa: E402

from solforge.harness.library_baselines import ENTRY, library_baseline  # noqa: E402
from solforge.problem import make_inputs  # noqa: E402
from solforge.problem.suite import address_of, bundled_problem_dirs, open_problem  # noqa: E402


def flashinfer_problems(recorded: Path | None = None) -> list[str]:
    """Bundled problems whose library baseline calls FlashInfer, less those `recorded` holds."""
    done = set()
    if recorded is not None and recorded.is_file():
        done = {r["problem"] for r in json.loads(recorded.read_text()).get("problems", [])}
    found = []
    for folder in bundled_problem_dirs():
        address = address_of(folder)
        baseline = library_baseline(open_problem(address).definition)
        if baseline is not None and baseline.library == "flashinfer-python" \
                and address not in done:
            found.append(address)
    return found


def first_call(address: str, device: str = "cuda") -> dict[str, Any]:
    """One call of the problem's FlashInfer baseline on its smallest workload: its JIT build."""
    problem = open_problem(address)
    baseline = library_baseline(problem.definition)
    namespace: dict[str, Any] = {}
    exec(compile(baseline.solution.sources[0].content, f"<{baseline.name}>", "exec"), namespace)
    inputs = make_inputs(problem, problem.smallest_workload(), device)
    began = time.perf_counter()
    try:
        namespace[ENTRY](*inputs.values())
        if device == "cuda":
            torch.cuda.synchronize()
    except Exception as exc:  # recorded: the libraries stage will judge it failed as well
        return {"baseline": baseline.name, "error": f"{type(exc).__name__}: {exc}"[:500]}
    return {"baseline": baseline.name, "first_call_s": round(time.perf_counter() - began, 2)}


def install_ahead_of_time() -> list[str]:
    """Copy every module FlashInfer built in its JIT folder into its AOT folder."""
    from flashinfer.jit import env as jit_env

    installed = []
    for built in sorted(Path(jit_env.FLASHINFER_JIT_DIR).glob("*/*.so")):
        name = built.parent.name
        if built.name != f"{name}.so":
            continue
        target = Path(jit_env.FLASHINFER_AOT_DIR) / name / built.name
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(built, target)
        installed.append(name)
    return installed


def prebuilt() -> list[str]:
    """The modules compiled on the CPU machine (carry_flashinfer_aot.sh) that the flashinfer
    stage installed ahead of time: their first calls load them, no build."""
    from flashinfer.jit import env as jit_env

    manifest = Path(jit_env.FLASHINFER_AOT_DIR) / "flashinfer-aot.json"
    return list(json.loads(manifest.read_text())["modules"]) if manifest.is_file() else []


def built(record: dict[str, Any]) -> set[str]:
    """The problems a setup record holds as built (a first call that raised nothing)."""
    return {address for address, result in record.get("problems", {}).items()
            if "error" not in result}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("problems", nargs="*", help="tier/name (default: every FlashInfer one)")
    parser.add_argument("-o", "--out", type=Path, default=Path("flashinfer-setup.json"))
    parser.add_argument("--skip-recorded", type=Path, metavar="FILE")
    parser.add_argument("--deadline-s", type=float, default=None)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        log("no CUDA GPU: FlashInfer builds nothing here")
        return 2
    import flashinfer

    began = time.monotonic()
    record: dict[str, Any] = {"problems": {}}
    if args.out.is_file():
        record = json.loads(args.out.read_text())
    record |= {"flashinfer": flashinfer.__version__, "environment": recorded_environment("cuda"),
               "prebuilt": prebuilt()}
    wanted = args.problems or flashinfer_problems(args.skip_recorded)
    longest = 0.0
    for address in [a for a in wanted if a not in built(record)]:
        if args.deadline_s is not None and time.monotonic() - began + longest > args.deadline_s:
            log(f"deadline: {address} and later left for the next run (the longest first call "
                f"took {longest:.0f} s)")
            break
        log(f"{address}: first call")
        started = time.monotonic()
        record["problems"][address] = result = first_call(address)
        longest = max(longest, time.monotonic() - started)
        log(f"{address}: {result}")
        save(args.out, record, wanted)
    save(args.out, record, wanted)
    log(f"installed ahead of time: {', '.join(record['installed_ahead_of_time']) or 'none'}")
    return 0 if record["complete"] else 1


def save(out: Path, record: dict[str, Any], wanted: list[str]) -> None:
    """Install what is built, and write the record: after every problem, so that a run stopped
    by its time limit loses nothing it built."""
    record["installed_ahead_of_time"] = install_ahead_of_time()
    record["complete"] = set(wanted) <= built(record)
    out.write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(main())
