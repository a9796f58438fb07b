"""The Ray runner: units of evaluation work as Ray tasks, on one machine or a whole cluster.

Each unit is a task holding one GPU (`num_gpus=1`; Ray sets CUDA_VISIBLE_DEVICES for it) or,
in CPU mode, one core (`num_cpus=1`), in a Ray worker process used for that task alone
(`max_calls=1`): the same fresh process per unit as the local runner. Ray's own retries are off
(`max_retries=0`); a worker that dies surfaces here as an error and the unit is started again
by base.py, then recorded as failed. A C++/CUDA solution is first built by a CPU-only task
(prebuilt.py) and its GPU task starts only once the build is there, so compilers never hold a
GPU and a failed compile never takes one.

`address` is "auto" (the cluster this machine belongs to), "HOST:PORT" (its head node), or
None: a Ray instance of its own on this machine, stopped when the runner closes. Ray is
imported only here, inside the functions that use it (`pip install 'solforge[ray]'`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from dataclasses import dataclass, replace
from typing import Any

import torch

from solforge.errors import SolforgeError
from solforge.runners.base import (
    DEFAULT_RETRIES,
    Attempt,
    Ended,
    EvalTask,
    Machine,
    Outcome,
    TaskRunner,
    describe_machine,
    failure_traces,
)
from solforge.runners.prebuilt import BuildRefused, Prebuilt, build_unit, install, needs_build
from solforge.runners.unit import execute

REASON_CHARS = 1500


@dataclass(frozen=True)
class Flight:
    """One Ray task in flight for an attempt: its compile step or its evaluation."""

    attempt: Attempt
    started: float  # time.monotonic()
    building: bool
    build_seconds: float | None = None


def evaluate_on_worker(task: EvalTask, prebuilt: Prebuilt | None) -> Outcome:
    """The body of a unit's Ray task: install the build it was handed, evaluate, say where."""
    import ray

    if prebuilt is not None:
        install(prebuilt, task.config)
    outcome = execute(task)
    gpus = ",".join(str(gpu) for gpu in ray.get_gpu_ids())
    where = f"ray:{ray.util.get_node_ip_address()}" + (f":gpu{gpus}" if gpus else "")
    return replace(outcome, where=where)


class RayRunner(TaskRunner):
    def __init__(self, device: str, address: str | None = None, workers: int | None = None,
                 retries: int = DEFAULT_RETRIES) -> None:
        ray = _import_ray()
        device_type = torch.device(device).type
        self._owns_connection = not ray.is_initialized()
        if self._owns_connection:
            _connect(ray, address, device_type, workers)
        resource = "GPU" if device_type == "cuda" else "CPU"
        total = int(ray.cluster_resources().get(resource, 0))
        if total == 0:
            self._disconnect()
            raise SolforgeError(f"the Ray cluster has no {resource}: start its nodes with "
                                f"GPUs, or evaluate with --device cpu")
        unit_resources = {"num_gpus": 1} if device_type == "cuda" else {"num_cpus": 1}
        probe = ray.remote(max_calls=1, **unit_resources)(describe_machine)
        machine: Machine = ray.get(probe.remote(device_type))
        super().__init__(machine, workers or total, retries, in_flight=workers)
        self._evaluate = ray.remote(max_calls=1, max_retries=0,
                                    **unit_resources)(evaluate_on_worker)
        build_env = _build_env(machine)
        self._build = ray.remote(
            num_cpus=1, num_gpus=0, max_calls=1, max_retries=0,
            **({"runtime_env": {"env_vars": build_env}} if build_env else {}))(build_unit)
        self._flights: dict[Any, Flight] = {}  # by ObjectRef

    def _start(self, attempt: Attempt) -> None:
        if needs_build(attempt.task):
            ref = self._build.remote(attempt.task)
            self._flights[ref] = Flight(attempt, time.monotonic(), building=True)
        else:
            self._launch(attempt, None, None)

    def _launch(self, attempt: Attempt, prebuilt: Any, build_seconds: float | None) -> None:
        ref = self._evaluate.remote(attempt.task, prebuilt)
        self._flights[ref] = Flight(attempt, time.monotonic(), False, build_seconds)

    def _wait_any(self, timeout: float | None) -> tuple[Attempt, Ended] | None:
        ray = _import_ray()
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _ = ray.wait(list(self._flights), num_returns=1, timeout=left)
            if not ready:
                return None
            flight = self._flights.pop(ready[0])
            attempt = flight.attempt
            try:
                value = ray.get(ready[0])
            except ray.exceptions.RayError as exc:
                elapsed = time.monotonic() - flight.started
                return attempt, Ended(None, _reason(exc), "ray", elapsed, flight.build_seconds)
            if not flight.building:
                return attempt, Ended(value, "", value.where, value.seconds,
                                      flight.build_seconds)
            if isinstance(value, BuildRefused):
                traces = failure_traces(attempt.task, self.machine, value.status, value.message)
                return attempt, Ended(Outcome(traces), "", "ray (compile)", 0.0, value.seconds)
            self._launch(attempt, ready[0], value.seconds)  # the ref: no second upload

    def _stop_all(self) -> None:
        ray = _import_ray()
        for ref in self._flights:
            with contextlib.suppress(Exception):  # already finished, or its node is gone
                ray.cancel(ref)
        self._flights.clear()
        self._disconnect()

    def _disconnect(self) -> None:
        if self._owns_connection:
            _import_ray().shutdown()


def _import_ray() -> Any:
    try:
        import ray
    except ModuleNotFoundError:
        raise SolforgeError("--runner ray needs Ray: pip install 'solforge[ray]'") from None
    return ray


def _connect(ray: Any, address: str | None, device_type: str, workers: int | None) -> None:
    """Join the cluster at `address`, or start a Ray instance on this machine (None). In CPU
    mode an instance of its own has `workers` CPUs, so at most that many units run at once;
    it sends no usage statistics unless RAY_USAGE_STATS_ENABLED says otherwise."""
    options: dict[str, Any] = {"log_to_driver": False, "logging_level": logging.WARNING}
    if address is None:
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        options.update(address="local", include_dashboard=False)
        if device_type == "cpu" and workers:
            options["num_cpus"] = workers
    else:
        options["address"] = address
    try:
        ray.init(**options)
    except (ConnectionError, ValueError, RuntimeError) as exc:
        raise SolforgeError(f"--ray-address {address}: cannot join the Ray cluster: "
                            f"{exc}") from None


def _build_env(machine: Machine) -> dict[str, str]:
    """The compile task sees no GPU, so it is told what to compile for: the evaluating GPU's
    architecture, unless this machine names one itself."""
    arch = os.environ.get("TORCH_CUDA_ARCH_LIST") or machine.cuda_arch
    return {"TORCH_CUDA_ARCH_LIST": arch} if arch else {}


def _reason(exc: Exception) -> str:
    """Ray's error, named and cut short (a task error carries the whole remote traceback)."""
    text = f"{type(exc).__name__}: {exc}".strip()
    return text if len(text) <= REASON_CHARS else text[:REASON_CHARS] + "..."
