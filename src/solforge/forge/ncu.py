"""Nsight Compute metrics of a candidate's kernels: feedback for the LLM proposer.

A time alone says how far a kernel is from T_SOL, not why. A few hardware counters say which
unit is busy: DRAM throughput near its peak means the kernel is memory bound and only fewer
bytes help; low DRAM and low SM throughput together mean latency (too little occupancy or too
few programs); a low L2 hit rate on a kernel that re-reads its operands means its tile order
loses reuse. The metrics come from the sections of Nsight Compute's own reports (Speed of
Light, Occupancy, Launch Statistics, Memory Workload Analysis):

    gpu__time_duration.sum                                  kernel duration
    dram__throughput.avg.pct_of_peak_sustained_elapsed      DRAM throughput, % of peak
    sm__throughput.avg.pct_of_peak_sustained_elapsed        SM throughput, % of peak
    sm__warps_active.avg.pct_of_peak_sustained_active       achieved occupancy, %
    launch__registers_per_thread                            registers per thread
    lts__t_sector_hit_rate.pct                              L2 hit rate, %

The candidate runs in a child process under `ncu` (never in the optimizer's), and both run in
a sandbox like a worker's (harness/sandbox: a private uid, writes only to their own folders, no
ptrace of other processes), since the candidate's code is hostile: its entry point is called
WARMUP times (Triton compiles, autotuners choose) and then once between cudaProfilerStart and
cudaProfilerStop, with ncu told not to profile from the start, so only that call's kernels are
profiled (an NVTX range around it stays, as a label). Neither this nor the NVTX range filter
used before profiled any kernel in the GPU test (H200 2026-12-02, H100 2026-12-06) while the
tests' TRITON_INTERPRET=1 reached the child: its Triton kernels ran on the host. The child no
longer gets it. These metrics are feedback, never fitness: the harness's timing alone decides
the archive. Without `ncu` on PATH, or on a machine without a GPU, there are none, and the
prompt says nothing about them.

    python -m solforge.forge.ncu REQUEST.json     (the child; REQUEST names the solution, the
                                                   problem folder and the workload)
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from solforge.harness.process import python_command, python_env, run_program_sandboxed

NVTX_RANGE = "solforge_profile"
WARMUP = 2
TIMEOUT_S = 300.0
METRICS = {  # ncu metric -> KernelMetrics field
    "gpu__time_duration.sum": "duration_us",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "dram_pct",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "sm_pct",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "occupancy_pct",
    "launch__registers_per_thread": "registers",
    "lts__t_sector_hit_rate.pct": "l2_hit_pct",
}
TO_MICROSECONDS = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3,
                   "ms": 1e3, "second": 1e6, "s": 1e6}
SHOWN_KERNELS = 3  # the longest kernels of a call that the feedback lists


@dataclass(frozen=True)
class KernelMetrics:
    """One profiled launch."""

    name: str
    duration_us: float | None = None
    dram_pct: float | None = None
    sm_pct: float | None = None
    occupancy_pct: float | None = None
    registers: float | None = None
    l2_hit_pct: float | None = None

    def describe(self) -> str:
        parts = [f"{self.duration_us:.1f} us" if self.duration_us is not None else None,
                 _percent("DRAM throughput", self.dram_pct),
                 _percent("SM throughput", self.sm_pct),
                 _percent("achieved occupancy", self.occupancy_pct),
                 f"{self.registers:.0f} registers/thread" if self.registers is not None else None,
                 _percent("L2 hit rate", self.l2_hit_pct)]
        return f"{self.name}: " + ", ".join(part for part in parts if part)


@dataclass(frozen=True)
class Profile:
    """The kernels of one call of the entry point, or why there are none."""

    kernels: tuple[KernelMetrics, ...] = ()
    error: str | None = None

    def feedback(self) -> str:
        """Lines for the prompt: the longest kernels first."""
        if self.error is not None:
            return f"Nsight Compute could not profile it: {self.error}"
        ranked = sorted(self.kernels, key=lambda k: -(k.duration_us or 0.0))
        lines = [f"- {kernel.describe()}" for kernel in ranked[:SHOWN_KERNELS]]
        if len(ranked) > SHOWN_KERNELS:
            lines.append(f"- and {len(ranked) - SHOWN_KERNELS} shorter kernels")
        return "Nsight Compute, one call:\n" + "\n".join(lines)


def _percent(label: str, value: float | None) -> str | None:
    return f"{label} {value:.0f}%" if value is not None else None


def ncu_available() -> bool:
    return shutil.which("ncu") is not None


def profile_solution(solution: dict[str, Any], problem_dir: Path, workload_uuid: str,
                     timeout_s: float = TIMEOUT_S) -> Profile:
    """Profile one call of the solution's entry point on one workload, on this machine's GPU."""
    ncu = shutil.which("ncu")
    if ncu is None:
        return Profile(error="ncu is not on PATH")
    with tempfile.TemporaryDirectory(prefix="solforge-ncu-") as name:
        folder, output = Path(name), Path(name) / "report"
        folder.chmod(0o755)  # the request holds the candidate's own source: the sandbox reads it
        output.mkdir()
        request, report = folder / "request.json", output / "report.csv"
        request.write_text(json.dumps({"solution": solution, "problem": str(problem_dir),
                                       "workload": workload_uuid}))
        request.chmod(0o644)
        command = [ncu, "--csv", "--print-units", "base", "--log-file", str(report),
                   "--metrics", ",".join(METRICS), "--profile-from-start", "off",
                   *python_command("solforge.forge.ncu", str(request))]
        # ncu runs the candidate: both in a sandbox like a worker's (see capture.py), its
        # Triton compiled for the GPU (interpreted, as the CPU tests set it, its kernels would
        # run on the host: "No kernels were profiled" under pytest on the H100 and the H200)
        env = {key: value for key, value in python_env(dict(os.environ)).items()
               if key != "TRITON_INTERPRET"}
        finished = run_program_sandboxed(command, timeout_s, env, folder,
                                         output, readable=[Path(problem_dir), Path(ncu)],
                                         device_type="cuda")
        text = report.read_text(errors="replace") if report.is_file() else ""
        if finished.returncode != 0:
            reason = ("timed out" if finished.returncode is None
                      else f"exit code {finished.returncode}")
            tail = (finished.log + text)[-1500:].strip()
            return Profile(error=f"ncu {reason}: {tail}")
        kernels = parse_ncu_csv(text or finished.log)
        if not kernels:
            return Profile(error=_no_kernel_reason(finished.log + text))
        return Profile(kernels)


def _no_kernel_reason(log: str) -> str:
    """Why ncu's report holds no kernel, with what ncu said: the counters' permission (a
    driver that lets only administrators profile, and the sandbox's user is none), or the
    tail of its log."""
    if "ERR_NVGPUCTRPERM" in log:
        return ("ncu may not read the GPU's performance counters as the sandbox's unprivileged "
                "user (the driver allows profiling by administrators only: "
                "NVreg_RestrictProfilingToAdminUsers=1)")
    tail = "\n".join(line for line in log.strip().splitlines()[-12:] if line.strip())
    return "ncu profiled no kernel in the call" + (f"; it said:\n{tail}" if tail else "")


def parse_ncu_csv(text: str) -> tuple[KernelMetrics, ...]:
    """The kernels of `ncu --csv --print-units base` output, in launch order.

    One row per (launch, metric): "ID", "Kernel Name", "Metric Name", "Metric Unit",
    "Metric Value" among other columns; lines before the header are the program's and ncu's
    own messages. Values may carry thousands separators."""
    start = text.find('"ID"')
    if start < 0:
        return ()
    launches: dict[str, dict[str, Any]] = {}
    for row in csv.DictReader(io.StringIO(text[start:])):
        field = METRICS.get(row.get("Metric Name", ""))
        launch = launches.setdefault(row.get("ID", ""), {"name": row.get("Kernel Name", "?")})
        value = _number(row.get("Metric Value", ""))
        if field is None or value is None:
            continue
        if field == "duration_us":
            scale = TO_MICROSECONDS.get(row.get("Metric Unit", "").strip())
            value = value * scale if scale is not None else None
        launch[field] = value
    return tuple(KernelMetrics(**fields) for fields in launches.values())


def _number(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


# -- the child: one call of the entry point inside the profiled range ---------------------------


def _profile_main(request_path: str) -> None:
    import torch

    from solforge.data.solution import parse_solution
    from solforge.forge.capture import _loaded_entry_point, workload_arguments
    from solforge.problem.problem import load_problem

    request = json.loads(Path(request_path).read_text())
    problem = load_problem(Path(request["problem"]))
    workload = _workload(problem.workloads, request["workload"])
    solution = parse_solution(request["solution"])
    arguments = workload_arguments(solution, problem, workload, "cuda")
    with _loaded_entry_point(solution) as entry_point:
        for _ in range(WARMUP):
            entry_point(*arguments)
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        torch.cuda.nvtx.range_push(NVTX_RANGE)
        entry_point(*arguments)
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
        torch.cuda.profiler.stop()


def _workload(workloads: Sequence[Any], uuid: str) -> Any:
    for workload in workloads:
        if workload.uuid == uuid:
            return workload
    raise SystemExit(f"no workload {uuid}")


if __name__ == "__main__":
    _profile_main(sys.argv[1])
