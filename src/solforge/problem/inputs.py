"""Seeded, realistic inputs for a workload, on any device and for every format dtype.

Random tensors follow the habits of SOL-ExecBench's generator, so references see the value ranges
real models give them:
- floats: standard normal; 2-D+ weight matrices scaled by 1/sqrt(fan_in) (activations stay O(1));
- norm weights near one (1 + 0.05 N) and norm biases near zero (0.05 N): not exactly 1 and 0, so a
  kernel that ignores them still fails the check;
- variances, std and rstd positive;
- fp8: normal clamped to [-2, 2]; fp4 (packed two per byte): normal rounded to the e2m1 grid;
  e8m0 scales: exponents near 2^0;
- integers in a bounded non-negative range, booleans fair coins.
Each input draws from its own generator seeded by (seed, input name), so adding an input never
changes the values of the others.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

import torch

from solforge.data.dtypes import DTYPES, DType, storage_shape
from solforge.data.workload import Workload
from solforge.errors import ProblemError
from solforge.problem.problem import Problem, tensor_shape
from solforge.problem.reference import describe_exception, load_reference_module

_NORM_WEIGHT = re.compile(r"(^|_)(norm|ln|layernorm|rmsnorm)\w*_?(weight|gamma|scale)$|"
                          r"^(norm_?weight|gamma|ln_?w|norm_?w)$")
_NORM_BIAS = re.compile(r"(^|_)(norm|ln|layernorm)\w*_?(bias|beta)$|^(norm_?bias|beta)$")
_POSITIVE = re.compile(r"(^|_)(var|variance|std|rstd)$")
_WEIGHT_MATRIX = re.compile(r"(weight|^w\d*$|^w_|_w\d*$|_proj$|kernel)")
_INT_HIGH = {torch.int8: 128, torch.uint8: 256}
_E2M1_GRID = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


def input_seed(seed: int, name: str) -> int:
    digest = hashlib.sha256(f"{seed}:{name}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def make_inputs(problem: Problem, workload: Workload, device: str | torch.device = "cpu",
                seed: int = 0) -> dict[str, Any]:
    """All inputs of a workload, in definition order (tensors, 0-D tensors or Python scalars).

    On the meta device the tensors have their shapes, dtypes and strides but no data (what a
    compile specialises on; nothing runs): custom inputs are generated on the CPU and moved."""
    device = torch.device(device)
    if device.type == "meta":
        values = {name: value.to(device) if isinstance(value, torch.Tensor) else value
                  for name, value in custom_inputs(problem, workload, torch.device("cpu"),
                                                   seed).items()}
    else:
        values = custom_inputs(problem, workload, device, seed)
    for name in problem.definition.inputs:
        if name not in values:
            values[name] = make_input(problem, workload, name, device, seed)
    return {name: values[name] for name in problem.definition.inputs}


def make_input(problem: Problem, workload: Workload, name: str, device: torch.device,
               seed: int = 0) -> Any:
    """One non-custom input (custom ones come from `custom_inputs`, all at once)."""
    spec = problem.definition.inputs[name]
    source = workload.inputs[name]
    if source.kind == "scalar":
        return _scalar(source.value, spec.dtype)
    shape = tensor_shape(spec, problem.axes(workload))
    if source.kind == "safetensors":
        return _load_safetensors(problem, source, name, shape, spec.dtype, device)
    if source.kind == "custom":
        raise ValueError(f"{name} is a custom input: use custom_inputs()")
    if device.type == "meta":
        return torch.empty(storage_shape(shape, spec.dtype), dtype=spec.dtype.torch_dtype,
                           device=device)
    generator = torch.Generator(device=device).manual_seed(input_seed(seed, name))
    return random_tensor(name, shape, spec.dtype, device, generator)


def _scalar(value: Any, dtype: DType) -> Any:
    if dtype.kind == "bool":
        return bool(value)
    if dtype.kind == "int":
        return int(value)
    return float(value)


def random_tensor(name: str, shape: tuple[int, ...], dtype: DType, device: torch.device,
                  generator: torch.Generator) -> torch.Tensor:
    """One realistic random tensor of logical `shape` (see the module docstring)."""
    torch_dtype = dtype.torch_dtype
    lowered = name.lower()
    if dtype.kind == "bool":
        return torch.randint(0, 2, shape, device=device, generator=generator).bool()
    if dtype.kind == "int":
        high = _INT_HIGH.get(torch_dtype, 1024)
        low = -128 if torch_dtype == torch.int8 else 0
        return torch.randint(low, high, shape, device=device, generator=generator,
                             dtype=torch_dtype)
    if dtype.name == "float8_e8m0fnu":
        exponents = torch.randint(124, 131, shape, device=device, generator=generator)
        return exponents.to(torch.uint8).view(torch.float8_e8m0fnu)
    # Scaled in place: the float32 draw is the one temporary. A DeepSeek-V3 expert stack is
    # 28 GiB in float32, and an out-of-place scale made a second one (the H200 ran out of memory).
    normal = torch.randn(shape, device=device, generator=generator, dtype=torch.float32)
    if dtype.elements_per_storage == 2:
        return pack_fp4(normal.mul_(2.0))
    if dtype.name.startswith("float8"):
        return normal.clamp_(-2.0, 2.0).to(torch_dtype)
    if _NORM_WEIGHT.search(lowered):
        normal.mul_(0.05).add_(1.0)
    elif _NORM_BIAS.search(lowered):
        normal.mul_(0.05)
    elif _POSITIVE.search(lowered):
        normal.abs_().add_(0.1)
    elif len(shape) >= 2 and _WEIGHT_MATRIX.search(lowered) and shape[-1] > 0:
        normal.div_(shape[-1] ** 0.5)
    return normal.to(torch_dtype)


def pack_fp4(values: torch.Tensor) -> torch.Tensor:
    """Round float32 values to the nearest e2m1 number and pack two per byte (low nibble first)."""
    storage_shape(tuple(values.shape), DTYPES["float4_e2m1fn_x2"])  # last dimension even?
    midpoints = ((_E2M1_GRID[1:] + _E2M1_GRID[:-1]) / 2).to(values.device)
    magnitude = values.abs().clamp_(max=6.0)
    # index of the nearest grid value; a tie (a midpoint) goes to the larger one
    codes = torch.bucketize(magnitude, midpoints, right=True).to(torch.uint8)
    codes |= (values < 0).to(torch.uint8) << 3
    packed = codes[..., 0::2] | (codes[..., 1::2] << 4)
    return packed.view(torch.float4_e2m1fn_x2)


def unpack_fp4(packed: torch.Tensor) -> torch.Tensor:
    """The float32 values of a packed e2m1 tensor (last dimension doubled)."""
    raw = packed.view(torch.uint8)
    codes = torch.stack((raw & 0xF, raw >> 4), dim=-1).flatten(-2)
    grid = _E2M1_GRID.to(packed.device)
    magnitude = grid[(codes & 0x7).long()]
    return torch.where((codes & 0x8) != 0, -magnitude, magnitude)


def custom_inputs(problem: Problem, workload: Workload, device: torch.device,
                  seed: int = 0) -> dict[str, torch.Tensor]:
    """The inputs the definition's custom_inputs_entrypoint generates, checked."""
    axes = problem.axes(workload)
    wanted = [n for n, s in workload.inputs.items() if s.kind == "custom"]
    if not wanted:
        return {}
    definition = problem.definition
    file = problem.root / "definition.json"
    entry = definition.custom_inputs_entrypoint
    module = load_reference_module(definition, file)
    scalars = {n: s.value for n, s in workload.inputs.items() if s.kind == "scalar"}
    devices = [device] if device.type != "cpu" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(input_seed(seed, "custom_inputs"))
        try:
            produced = getattr(module, entry)({**axes, **scalars}, device)
        except Exception as exc:
            raise ProblemError(file, "custom_inputs_entrypoint",
                               f"{entry} raised {describe_exception(exc)}") from None
    if not isinstance(produced, dict):
        raise ProblemError(file, "custom_inputs_entrypoint",
                           f"{entry} returned {type(produced).__name__}, not a dict")
    for name in wanted:
        if name not in produced:
            raise ProblemError(file, "custom_inputs_entrypoint",
                               f"{entry} did not produce custom input {name!r}")
        _check_tensor(produced[name], name, tensor_shape(definition.inputs[name], axes),
                      definition.inputs[name].dtype, file, "custom_inputs_entrypoint")
    return {n: produced[n].to(device) for n in wanted}


def _check_tensor(value: Any, name: str, logical: tuple[int, ...], dtype: DType, file,
                  field: str) -> None:
    if not isinstance(value, torch.Tensor):
        raise ProblemError(file, field, f"input {name!r} is {type(value).__name__}, not a tensor")
    expected = storage_shape(logical, dtype)
    if tuple(value.shape) != expected or value.dtype != dtype.torch_dtype:
        raise ProblemError(file, field, f"input {name!r} is {tuple(value.shape)} {value.dtype}, "
                                        f"expected {expected} {dtype.torch_dtype}")


def _load_safetensors(problem: Problem, source, name: str, logical, dtype: DType,
                      device: torch.device) -> torch.Tensor:
    try:
        from safetensors.torch import load_file
    except ImportError:
        raise ProblemError(problem.root, f"inputs.{name}",
                           "safetensors inputs need the `safetensors` package") from None
    path = problem.root / source.path
    if not path.is_file():
        raise ProblemError(path, f"inputs.{name}", "safetensors file not found")
    tensors = load_file(str(path))
    if source.tensor_key not in tensors:
        raise ProblemError(path, f"inputs.{name}.tensor_key",
                           f"{source.tensor_key!r} not in the file ({', '.join(tensors)})")
    tensor = tensors[source.tensor_key]
    _check_tensor(tensor, name, logical, dtype, path, f"inputs.{name}")
    return tensor.to(device)

