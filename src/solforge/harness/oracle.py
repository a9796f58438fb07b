"""The inputs and the reference outputs, made by the trusted driver in its own process.

The driver generates every input (the worker only receives them, call by call), runs the
definition's reference on its own copy, and compares. The candidate's process never holds an
expected output, and never runs the generator: mutating inputs, reading the reference through
`gc`, getting the reference's freed output back from the caching allocator, or hooking the
random-number kernels therefore find nothing. Each seed's inputs are made once and kept until
its reference is computed (or dropped, for a timed call that is not compared, and when the
workload's verdict is in); each seed's reference is computed once and cached, the latest few
while they fit in _KEPT_BYTES.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

import torch

from solforge.data.workload import Workload
from solforge.harness.memory import return_spare_memory
from solforge.problem.inputs import make_inputs
from solforge.problem.outputs import OutputMismatch, as_output_list, check_outputs
from solforge.problem.problem import Problem, tensor_shape
from solforge.problem.reference import describe_exception, load_reference_module


class ReferenceFailure(Exception):
    """The reference raised or returned the wrong outputs: INVALID_REFERENCE."""


_KEPT_REFERENCES = 4
# Bytes of reference outputs kept, the latest counted (and kept however large): four 5 GB
# log-softmaxes of a 151,936-word vocabulary (8,192 tokens, float32) would hold 20 GB of an
# 80 GB GPU in the driver, beside the workers' copies; recomputing one costs the reference's
# milliseconds.
_KEPT_BYTES = 2 << 30


class ReferenceOracle:
    def __init__(self, problem: Problem, device: torch.device) -> None:
        self.problem = problem
        self.device = device
        self.module = load_reference_module(problem.definition,
                                            problem.root / "definition.json")
        self._inputs: dict[tuple[str, int], list[Any]] = {}
        self._expected: OrderedDict[tuple[str, int], list[Any]] = OrderedDict()
        self._repeatable: dict[str, bool] = {}

    def inputs(self, workload: Workload, seed: int) -> list[Any]:
        """The inputs of `seed`, made now and kept for its reference until `expected` or
        `forget` (the caller hands a copy to the worker)."""
        key = (workload.uuid, seed)
        if key not in self._inputs:
            values = make_inputs(self.problem, workload, self.device, seed)
            self._inputs[key] = list(values.values())
            return_spare_memory(self.device)  # the generator's float32 draws, freed
        return self._inputs[key]

    def repeatable(self, workload: Workload, seed: int) -> bool:
        """Whether this workload's inputs come out bit for bit the same when made twice from
        one seed. A problem's own custom generator may draw from Python's random or the clock,
        so a baseline's worker is sent its seed only if it passes; any difference left between
        processes would show as a failed comparison, never as a silent change. Checked once per
        workload; the first copy is kept as the seed's inputs."""
        if workload.uuid not in self._repeatable:
            first = self.inputs(workload, seed)
            again = list(make_inputs(self.problem, workload, self.device, seed).values())
            self._repeatable[workload.uuid] = (
                len(first) == len(again) and all(map(same_bits, first, again)))
            del again
            return_spare_memory(self.device)
        return self._repeatable[workload.uuid]

    def kept_bytes(self, workload: Workload, seed: int) -> int:
        """The bytes of the tensors kept as `seed`'s inputs (0 when none are kept)."""
        return tensor_bytes(self._inputs.get((workload.uuid, seed), ()))

    def forget(self, workload: Workload, seed: int) -> None:
        """Drop the inputs of a seed whose outputs will not be compared."""
        self._inputs.pop((workload.uuid, seed), None)

    def release(self, workload: Workload) -> None:
        """A workload's verdict is in: drop every input still kept for it (a worker that failed
        mid-way leaves its round's inputs uncompared) and return the freed device memory from
        the caching allocator to the GPU, where the next worker can allocate it. On the H200 the
        driver of a MoE block whose inputs are 22 GB held 98.7 GiB after one failed workload,
        and the next workloads could not make their inputs."""
        for key in [key for key in self._inputs if key[0] == workload.uuid]:
            del self._inputs[key]
        return_spare_memory(self.device, spare_bytes=0)

    def output_shapes(self, workload: Workload) -> dict[str, tuple[int, ...] | None]:
        axes = self.problem.axes(workload)
        return {n: tensor_shape(s, axes) for n, s in self.problem.definition.outputs.items()}

    def expected(self, workload: Workload, seed: int) -> list[Any]:
        """The reference outputs at `seed`, computed once (on the inputs handed out)."""
        key = (workload.uuid, seed)
        if key in self._expected:
            self._expected.move_to_end(key)
            return self._expected[key]
        inputs = self._inputs.pop(key, None)
        if inputs is None:
            inputs = list(make_inputs(self.problem, workload, self.device, seed).values())
        self._keep_within(_KEPT_REFERENCES - 1, _KEPT_BYTES)  # room made before, not after
        values = self._run_reference(workload, inputs)
        del inputs
        return_spare_memory(self.device)
        self._expected[key] = values
        self._keep_within(_KEPT_REFERENCES, _KEPT_BYTES, latest=1)
        return values

    def _keep_within(self, count: int, nbytes: int, latest: int = 0) -> None:
        """Drop the oldest references until at most `count` are kept in at most `nbytes`,
        the `latest` newest always kept. Called before a reference runs too: on an 80 GB H100
        a log-softmax's reference (an 8 GiB float32 copy of its inputs, then its 8 GiB output)
        found 7 GiB free, its 8 GiB predecessor still held beside it."""
        while len(self._expected) > latest and (
                len(self._expected) > count
                or sum(map(tensor_bytes, self._expected.values())) > nbytes):
            self._expected.popitem(last=False)

    def _run_reference(self, workload: Workload, inputs: list[Any]) -> list[Any]:
        try:
            with torch.no_grad():
                result = self.module.run(*inputs)
            values = as_output_list(result, self.problem.definition)
            check_outputs(values, self.problem.definition, self.output_shapes(workload))
        except OutputMismatch as exc:
            raise ReferenceFailure(f"reference outputs do not fit the definition: {exc}") from None
        except Exception as exc:
            held = self._held(inputs) if isinstance(exc, torch.OutOfMemoryError) else ""
            raise ReferenceFailure(f"reference raised {describe_exception(exc)}{held}") from None
        return values

    def _held(self, inputs: list[Any]) -> str:
        """What the oracle holds in the driver, told when a reference runs out of memory: which
        of the driver's allocated bytes are its own. On an 80 GB H100 a log-softmax's driver
        had 20.01 GiB allocated when its reference failed, which the sizes match to the seed's
        4 GiB inputs, the 8 GiB of outputs taken for comparison and the reference's own 8 GiB
        float32 temporary; a message could only say the first of them."""
        kept = sum(map(tensor_bytes, self._inputs.values()))
        references = sum(map(tensor_bytes, self._expected.values()))
        return (f"; the driver's oracle held this reference's inputs ({_gib(tensor_bytes(inputs))}"
                f"), {len(self._inputs)} other seeds' inputs ({_gib(kept)}) and "
                f"{len(self._expected)} references ({_gib(references)})")


def tensor_bytes(values: Iterable[Any]) -> int:
    """The bytes of the tensors among `values` (numbers count nothing)."""
    return sum(v.numel() * v.element_size() for v in values if isinstance(v, torch.Tensor))


def _gib(nbytes: int) -> str:
    return f"{nbytes / (1 << 30):.2f} GiB"


def same_bits(a: Any, b: Any) -> bool:
    """Equal to the bit (NaNs and signed zeros included), for tensors and scalars."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return False
        if a.dtype != b.dtype or a.shape != b.shape or a.device != b.device:
            return False
        return torch.equal(_as_bytes(a), _as_bytes(b))
    return type(a) is type(b) and repr(a) == repr(b)


def _as_bytes(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.detach().contiguous().reshape(-1).view(torch.uint8)
