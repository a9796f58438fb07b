"""Where evaluations run: a pool of local processes, or a Ray cluster.

`bench` (and the optimizer) hand units of work to a runner and take results back as they
complete; see base.py for the interface, local.py and ray.py for the two runners.

    with open_runner("ray", "cuda", ray_address="auto") as runner:
        runner.submit(EvalTask("l1/rmsnorm_llama3_1_8b", EvalConfig(device="cuda"),
                               solution=solution_json))
        for result in runner.results():
            ...
"""

from __future__ import annotations

from solforge.errors import SolforgeError
from solforge.runners.base import (
    DEFAULT_RETRIES,
    EvalTask,
    Machine,
    TaskResult,
    TaskRunner,
    describe_machine,
    failure_traces,
)

RUNNERS = ("local", "ray")

__all__ = [
    "DEFAULT_RETRIES",
    "RUNNERS",
    "EvalTask",
    "Machine",
    "TaskResult",
    "TaskRunner",
    "describe_machine",
    "failure_traces",
    "open_runner",
]


def open_runner(kind: str, device: str, workers: int | None = None,
                ray_address: str | None = None, retries: int = DEFAULT_RETRIES,
                per_gpu: int = 1) -> TaskRunner:
    """A runner for evaluations on `device` ("cuda", "cuda:N" or "cpu"): `local` runs one
    process per visible GPU (per core in CPU mode), `ray` one Ray task per unit on the cluster
    at `ray_address` ("auto", "HOST:PORT", or None for an instance of its own). `workers`
    caps how many units run at once. `per_gpu` > 1 (local, GPUs): that many units share each
    GPU, their timed calls one at a time (harness/device_lock.py)."""
    if workers is not None and workers < 1:
        raise SolforgeError(f"--workers {workers}: at least one worker is needed")
    if kind == "local":
        if ray_address is not None:
            raise SolforgeError("--ray-address is only for --runner ray")
        from solforge.runners.local import LocalRunner

        return LocalRunner(device, workers, retries, per_gpu)
    if per_gpu != 1:
        raise SolforgeError("--per-gpu is for --runner local")
    if kind == "ray":
        from solforge.runners.ray import RayRunner

        return RayRunner(device, ray_address, workers, retries)
    raise SolforgeError(f"--runner {kind}: unknown; the runners are {', '.join(RUNNERS)}")
