"""The candidate's process: `python -m solforge.harness.worker RESULT_FD COMMAND_FD`.

One fresh interpreter per candidate (and per reference baseline), started by the driver. It
imports the harness, snapshots what the guards watch, then imports the candidate, and from then
on only does what the driver asks (see protocol.py): run the correctness rounds on inputs from
the seeds it is sent, time the calls, send back outputs. It never sees a reference output and
never decides a verdict: outputs go to the driver, which compares them with its own reference.

Each call gets fresh input contents and freshly poisoned outputs (every byte 0xFF: NaN in every
float format), so a kernel that skips writing an element fails. The correctness rounds write
their inputs into the same tensors (same addresses, new contents: an answer cached by address
is stale there). In the timed loop the inputs of call i are generated just before it, from a
seed requested from the driver at that moment, and kept alive (memory permitting) so every call
sees new contents at a new address; the outputs of each call are copied aside before the next
call starts (per-call verification: a kernel that finishes its work later, on a thread or a
stream, is caught when the driver re-checks a random subset of them, chosen after the loop).
Warm-up and timed calls are prepared the same way, so the candidate cannot tell them apart.
"""

from __future__ import annotations

import gc
import importlib
import importlib.util
import sys
import time
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from solforge.harness import protocol
from solforge.harness.channel import Frame, FrameReader, FrameWriter
from solforge.harness.guards import Guards, Violation
from solforge.harness.protocol import WorkerConfig
from solforge.harness.timing import StopRule, Timing, TimingError, time_iterations
from solforge.harness.trace import Status
from solforge.problem.dtypes import storage_shape
from solforge.problem.inputs import make_inputs
from solforge.problem.outputs import OutputMismatch, as_output_list
from solforge.problem.problem import Problem, load_problem, tensor_shape
from solforge.problem.reference import load_reference_module
from solforge.problem.workload import Workload

_FOREVER = 1e9  # the worker waits on the driver; the driver enforces every time limit
_POISON_BYTE = 0xFF


class CandidateFault(Exception):
    """A verdict the worker can reach alone: the candidate crashed, cheated or returned junk."""

    def __init__(self, status: Status, message: str, fatal: bool = False) -> None:
        self.status = status
        self.message = message
        self.fatal = fatal
        super().__init__(message)


class Link:
    """The worker's ends of the two pipes."""

    def __init__(self, writer: FrameWriter, reader: FrameReader) -> None:
        self.writer = writer
        self.reader = reader

    def send(self, kind: str, meta: dict[str, Any] | None = None,
             values: list[Any] | tuple = ()) -> None:
        self.writer.send(kind, meta, values)

    def receive(self, *kinds: str) -> Frame:
        frame = self.reader.receive(time.monotonic() + _FOREVER)
        if frame.kind not in kinds:
            raise RuntimeError(f"protocol: expected {kinds}, got {frame.kind!r}")
        return frame


class Worker:
    def __init__(self, config: WorkerConfig, link: Link) -> None:
        self.config = config
        self.link = link
        self.device = torch.device(config.device)
        self.problem: Problem = load_problem(config.problem_dir)
        self.workloads = {w.uuid: w for w in self.problem.workloads}
        self.guards: Guards | None = None
        self.guard_check: Callable[[], list[Violation]] | None = None
        self.function: Callable[..., Any] | None = None
        self.reference_module = None

    # -- setup -----------------------------------------------------------------------------

    def start(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        for package in self.config.preload:
            importlib.import_module(package)
        self._warm_up_harness()
        if self.config.role == protocol.CANDIDATE:
            self.guards = Guards(self.device)
            self.guard_check = self.guards.check  # bound before the candidate exists
        began = time.perf_counter()
        try:
            self.function = self._load_function()
        except Exception as exc:
            raise CandidateFault(Status.COMPILE_ERROR, f"loading the solution failed:\n"
                                                       f"{_format(exc)}", fatal=True) from None
        self._check_guards("while being imported", fatal=True)
        self.link.send(protocol.READY, {"import_seconds": time.perf_counter() - began})

    def _warm_up_harness(self) -> None:
        """Start what the harness itself starts lazily (profiler, thread pools, CUDA context), so
        the guards' baselines and the first timed call see none of it."""
        torch.randn(1 << 16, device=self.device).sum()
        time_iterations(lambda i: None, iterations=1, warmup=0, method=self.config.timing_method,
                        flush_bytes=self.config.flush_bytes)

    def _load_function(self) -> Callable[..., Any]:
        config = self.config
        if config.role != protocol.CANDIDATE:
            self.reference_module = load_reference_module(self.problem.definition)
            return self.reference_module.run
        if config.library is not None:
            spec = importlib.util.spec_from_file_location(config.module_name, config.library)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        else:
            sys.path.insert(0, config.source_dir)
            module_name = config.entry_file.removesuffix(".py").replace("/", ".")
            module = importlib.import_module(module_name)
        function = getattr(module, config.entry_function, None)
        if not callable(function):
            raise AttributeError(f"the solution defines no callable {config.entry_function!r}")
        return function

    # -- one workload ----------------------------------------------------------------------

    def serve(self) -> None:
        """Evaluate workloads as the driver names them, until it kills this process."""
        while True:
            frame = self.link.receive(protocol.START)
            workload = self.workloads[frame.meta["workload"]]
            try:
                self._evaluate(workload, frame.meta["round_seeds"])
            except Exception as exc:
                fault = _fault_from(exc, self.device)
                self.link.send(protocol.FAILURE, {"workload": workload.uuid,
                                                  "status": fault.status.value,
                                                  "message": fault.message,
                                                  "fatal": fault.fatal})
                if fault.fatal:
                    return
            _release_memory(self.device)

    def _evaluate(self, workload: Workload, round_seeds: list[int]) -> None:
        if self.config.role == protocol.REFERENCE_COMPILE:
            torch._dynamo.reset()
            self.function = torch.compile(self.reference_module.run, dynamic=False)
        first_call_ms = None
        inputs = buffers = None
        for number, seed in enumerate(round_seeds):
            began = time.perf_counter()
            inputs, buffers, values = self._checked_round(workload, seed, inputs, buffers)
            if number == 0:
                first_call_ms = (time.perf_counter() - began) * 1e3
                if self.guards is not None:
                    self.guards.settle_native_threads()
            self._check_guards(f"in correctness round {number}")
            self.link.send(protocol.ROUND, {"workload": workload.uuid, "round": number}, values)
        self.link.send(protocol.ROUNDS_DONE, {"workload": workload.uuid,
                                              "first_call_ms": first_call_ms})
        if self.link.receive(protocol.TIME, protocol.SKIP).kind == protocol.SKIP:
            return
        calls = TimedCalls(self, workload)
        timing = self._time(calls)
        self._check_guards("during the timed iterations")
        self.link.send(protocol.TIMING, {"workload": workload.uuid, **_timing_meta(timing)})
        wanted = self.link.receive(protocol.VERIFY).meta["iterations"]
        for iteration in wanted:
            self.link.send(protocol.TIMED_OUTPUT, {"workload": workload.uuid,
                                                   "iteration": iteration},
                           calls.frozen[iteration])
        self.link.send(protocol.WORKLOAD_DONE, {"workload": workload.uuid})

    def _checked_round(self, workload: Workload, seed: int, previous: list[Any] | None,
                       buffers: OutputBuffers | None) -> tuple[list[Any], OutputBuffers | None,
                                                               list[Any]]:
        """One correctness round. Its fresh inputs are written into the previous round's
        tensors and the output buffers are re-poisoned in place: same addresses, new contents,
        so an answer cached by address is stale here (the timed calls, in contrast, each get a
        new address, so such a cache never saves work there)."""
        fresh = list(make_inputs(self.problem, workload, self.device, seed).values())
        inputs = fresh if previous is None else [_refill(old, new)
                                                 for old, new in zip(previous, fresh)]
        pristine = [v.clone() if isinstance(v, torch.Tensor) else v for v in inputs]
        if buffers is None:
            buffers = self.allocate(workload)
        else:
            for tensor in buffers.tensors:
                poison_(tensor)
        result = self.call(inputs, buffers)
        synchronize(self.device)
        outputs = self.collect(workload, result, buffers)
        _check_inputs_unchanged(inputs, pristine, list(self.problem.definition.inputs))
        return inputs, buffers, outputs

    def call(self, inputs: list[Any], buffers: OutputBuffers | None) -> Any:
        """One call of the candidate, nothing else (it may be inside the timed window)."""
        if buffers is not None:
            self.function(*inputs, *buffers.tensors)
            return buffers.tensors
        return self.function(*inputs)

    def collect(self, workload: Workload, result: Any, buffers: OutputBuffers | None) -> list[Any]:
        """The outputs of a call, checked: exact types first (before touching a value: a lazy
        subclass runs code on access), then storage, device, shape and dtype."""
        try:
            values = as_output_list(result, self.problem.definition)
        except OutputMismatch as exc:
            raise CandidateFault(Status.INCORRECT_SHAPE, str(exc)) from None
        axes = self.problem.axes(workload)
        checked = []
        for index, (name, spec) in enumerate(self.problem.definition.outputs.items()):
            value = values[index]
            if spec.shape is None and buffers is None:
                if type(value) not in (int, float, bool):
                    raise CandidateFault(Status.INCORRECT_DTYPE, f"output {name!r} is "
                                         f"{type(value).__name__}, not a Python number")
                checked.append(value)
                continue
            if isinstance(value, torch.Tensor) and type(value) is not torch.Tensor:
                raise CandidateFault(Status.REWARD_HACK, f"output {name!r} is a "
                                     f"{type(value).__name__}, not exactly torch.Tensor (a lazy "
                                     "tensor subclass computes outside the timed call)")
            if type(value) is not torch.Tensor:
                raise CandidateFault(Status.INCORRECT_DTYPE, f"output {name!r} is "
                                     f"{type(value).__name__}, not a tensor")
            if buffers is not None and value.data_ptr() != buffers.addresses[index]:
                raise CandidateFault(Status.REWARD_HACK, f"output {name!r}: the pre-allocated "
                                     "buffer was pointed at other storage (a cached result?)")
            expected = storage_shape(tensor_shape(spec, axes) or (), spec.dtype)
            _check_tensor(name, value, expected, spec.dtype.torch_dtype, self.device)
            checked.append(value.item() if spec.shape is None else value)
        return checked

    def allocate(self, workload: Workload) -> OutputBuffers | None:
        """Poisoned output buffers for a destination-passing solution (None otherwise)."""
        if not self.config.destination_passing_style:
            return None
        axes = self.problem.axes(workload)
        tensors = []
        for spec in self.problem.definition.outputs.values():
            shape = storage_shape(tensor_shape(spec, axes) or (), spec.dtype)
            tensors.append(poisoned(shape, spec.dtype.torch_dtype, self.device))
        return OutputBuffers(tensors, [t.data_ptr() for t in tensors])

    def _time(self, calls: TimedCalls) -> Timing:
        minimum = self.config.min_iterations
        try:
            timing = time_iterations(calls.run, self.config.iterations, self.config.warmup,
                                     method=self.config.timing_method,
                                     flush_bytes=self.config.flush_bytes,
                                     before_iteration=calls.before,
                                     stop=StopRule(minimum) if minimum > 0 else None)
        except TimingError as exc:
            raise CandidateFault(Status.RUNTIME_ERROR, f"timing failed: {exc}") from None
        calls.freeze(self.config.warmup + len(timing.times_ms) - 1)
        return timing

    def request_seed(self, workload: Workload, iteration: int) -> int:
        self.link.send(protocol.SEED_REQUEST, {"workload": workload.uuid, "iteration": iteration})
        return int(self.link.receive(protocol.SEED).meta["seed"])

    def _check_guards(self, when: str, fatal: bool = False) -> None:
        if self.guard_check is None:
            return
        violations = self.guard_check()
        if violations:
            found = "; ".join(v.message for v in violations)
            raise CandidateFault(Status.REWARD_HACK, f"{when}: {found}", fatal=fatal)


@dataclass(frozen=True)
class OutputBuffers:
    """Pre-allocated outputs and their addresses when handed out."""

    tensors: list[torch.Tensor]
    addresses: list[int]


class TimedCalls:
    """The inputs and outputs of every timed call, for `time_iterations`.

    `before(i)` (untimed) freezes the outputs of call i-1, asks the driver for the seed of call i,
    generates its inputs and poisons its output buffers; `run(i)` is the call alone.
    """

    def __init__(self, worker: Worker, workload: Workload) -> None:
        self.worker = worker
        self.workload = workload
        self.inputs: deque[list[Any]] = deque()  # the latest calls' inputs, kept alive
        self.buffers: dict[int, OutputBuffers | None] = {}
        self.results: dict[int, Any] = {}
        self.frozen: dict[int, list[Any]] = {}
        self.budget = worker.config.retain_bytes // 2  # half for inputs, half for outputs
        self.frozen_bytes = 0

    def before(self, i: int) -> None:
        if i > 0:
            self.freeze(i - 1)
        worker = self.worker
        seed = worker.request_seed(self.workload, i)
        inputs = list(make_inputs(worker.problem, self.workload, worker.device, seed).values())
        self.inputs.append(inputs)
        while len(self.inputs) > 2 and _nbytes(self.inputs) > self.budget:
            self.inputs.popleft()  # memory is short: addresses may repeat, contents never do
        self.buffers[i] = worker.allocate(self.workload)

    def run(self, i: int) -> None:
        self.results[i] = self.worker.call(self.inputs[-1], self.buffers[i])

    def freeze(self, i: int) -> None:
        """Copy call i's outputs aside as they are now, checked like a round's."""
        values = self.worker.collect(self.workload, self.results.pop(i), self.buffers.pop(i))
        size = sum(v.nbytes for v in values if isinstance(v, torch.Tensor))
        keep_on_device = self.frozen_bytes + size <= self.budget
        self.frozen[i] = [_copy(v, keep_on_device) for v in values]
        self.frozen_bytes += size if keep_on_device else 0


def poisoned(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    return poison_(torch.empty(shape, dtype=dtype, device=device))


def poison_(buffer: torch.Tensor) -> torch.Tensor:
    """Set every byte to 0xFF: NaN in each float format, -1 in signed ints (True for bool)."""
    if buffer.dtype == torch.bool:
        return buffer.fill_(True)
    buffer.reshape(-1).view(torch.uint8).fill_(_POISON_BYTE)
    return buffer


def _refill(old: Any, new: Any) -> Any:
    """`new`'s contents in `old`'s memory when they fit, else `new`."""
    if (type(old) is torch.Tensor and isinstance(new, torch.Tensor) and old.shape == new.shape
            and old.dtype == new.dtype):
        return old.copy_(new)
    return new


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _copy(value: Any, keep_on_device: bool) -> Any:
    if not isinstance(value, torch.Tensor):
        return value
    return value.clone() if keep_on_device else value.to("cpu")


def _nbytes(inputs: deque[list[Any]]) -> int:
    return sum(v.nbytes for values in inputs for v in values if isinstance(v, torch.Tensor))


def _check_tensor(name: str, value: torch.Tensor, shape: tuple[int, ...], dtype: torch.dtype,
                  device: torch.device) -> None:
    if value.device.type != device.type:
        raise CandidateFault(Status.RUNTIME_ERROR, f"output {name!r} is on {value.device}, "
                                                   f"expected {device.type}")
    if tuple(value.shape) != shape:
        raise CandidateFault(Status.INCORRECT_SHAPE, f"output {name!r} has shape "
                                                     f"{tuple(value.shape)}, expected {shape}")
    if value.dtype != dtype:
        raise CandidateFault(Status.INCORRECT_DTYPE, f"output {name!r} has dtype {value.dtype}, "
                                                     f"expected {dtype}")


def _check_inputs_unchanged(inputs: list[Any], pristine: list[Any], names: list[str]) -> None:
    for name, now, before in zip(names, inputs, pristine):
        if not isinstance(before, torch.Tensor):
            continue
        same = (type(now) is torch.Tensor and now.shape == before.shape
                and now.dtype == before.dtype
                and torch.equal(now.reshape(-1).view(torch.uint8),
                                before.reshape(-1).view(torch.uint8)))
        if not same:
            raise CandidateFault(Status.RUNTIME_ERROR, f"the solution modified its input "
                                                       f"{name!r}; inputs are read-only")


def _timing_meta(timing: Timing) -> dict[str, Any]:
    return {"method": timing.method, "times_ms": list(timing.times_ms),
            "median_ms": timing.median_ms, "min_ms": timing.min_ms, "max_ms": timing.max_ms,
            "spread": timing.spread, "sm_clock_mhz": timing.sm_clock_mhz,
            "mem_clock_mhz": timing.mem_clock_mhz,
            "kernels_per_iteration": timing.kernels_per_iteration}


def _fault_from(exc: BaseException, device: torch.device) -> CandidateFault:
    if isinstance(exc, CandidateFault):
        return exc
    if isinstance(exc, torch.OutOfMemoryError):
        return CandidateFault(Status.RUNTIME_ERROR, f"out of memory: {_format(exc)}")
    return CandidateFault(Status.RUNTIME_ERROR, _format(exc), fatal=not _device_usable(device))


def _device_usable(device: torch.device) -> bool:
    """False after a sticky CUDA error (illegal address, ...): the context is gone."""
    try:
        synchronize(device)
    except Exception:
        return False
    return True


def _release_memory(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda" and _device_usable(device):
        torch.cuda.empty_cache()


def _format(exc: BaseException, chars: int = 4000) -> str:
    text = "".join(traceback.format_exception(exc)).strip()
    return text if len(text) <= chars else "..." + text[-chars:]


def main(result_fd: int, command_fd: int) -> None:
    config_frame = FrameReader(command_fd, b"").receive(time.monotonic() + _FOREVER)
    config = WorkerConfig.from_dict(config_frame.meta)
    key = bytes.fromhex(config.key_hex)
    link = Link(FrameWriter(result_fd, key), FrameReader(command_fd, key))
    worker = Worker(config, link)
    try:
        worker.start()
    except CandidateFault as fault:
        link.send(protocol.FAILURE, {"workload": None, "status": fault.status.value,
                                     "message": fault.message, "fatal": True})
        return
    worker.serve()


if __name__ == "__main__":
    sys.path[:] = [p for p in sys.path if p not in ("", str(Path.cwd()))]
    main(int(sys.argv[1]), int(sys.argv[2]))
