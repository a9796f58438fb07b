"""Import KernelBench problem files as FlashInfer-Trace problems.

A KernelBench problem is a program, not data: `class Model(nn.Module)` built from
`get_init_inputs()` and called on `get_inputs()`. Importing turns it into a definition and one
workload, so checking, analysis and the harness take it like any other problem:

- inputs: the forward arguments (named after `forward`'s parameters; Python scalars become
  `"shape": null` inputs), then every parameter and buffer of the model (state-dict names, dots
  replaced by underscores), so a kernel receives the weights instead of hiding them;
- axes: one const axis per tensor dimension (`x_dim0`), except that a dimension whose size is
  the value of exactly one module-level constant takes that constant's name and is shared
  (`batch_size`, `in_features`, `N`). Sharing by size alone would tie unrelated dimensions that
  happen to be equal (3 input channels and a 3x3 kernel). All axes are const: a KernelBench
  problem is one shape, and nothing says which dimensions could vary together;
- outputs: from one forward pass on the meta device (no memory, no compute);
- reference: the file's own source, then a `run` that calls the model, built once on the meta
  device, with the given tensors through `torch.func.functional_call`. The model keeps
  nn.Module's default training mode, as KernelBench runs it (batch norm normalises with batch
  statistics, and updates its running-statistics inputs in place);
- the workload: the file's shapes. Parameters are random (the input generator makes them); the
  forward tensors come from the file's own `get_inputs()`, through the definition's
  `custom_inputs_entrypoint`, because KernelBench encodes value ranges there (class ids in
  range, +-1 targets, probabilities that sum to one) that plain random inputs would break.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import keyword
import re
import types
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from solforge.data.definition import Definition, parse_definition
from solforge.data.dtypes import dtype_of
from solforge.data.workload import Workload, parse_workload
from solforge.errors import ProblemError, SolforgeError
from solforge.problem.problem import DEFINITION_FILE, WORKLOAD_FILES
from solforge.problem.reference import describe_exception, load_reference_module

FORWARD_INPUTS_ENTRYPOINT = "solforge_forward_inputs"
MODEL_GLOBAL = "_SOLFORGE_MODEL"
_LEVEL_FOLDER = re.compile(r"^level\d+$")
_SCALAR_DTYPES = {bool: "bool", int: "int64", float: "float32"}
# Packages some KernelBench files import, and the solforge extra that installs each.
_OPTIONAL_EXTRAS = {"einops": "kernelbench", "transformers": "kernelbench"}
# Level 4 builds Hugging Face models by name: their configs and weights come from the Hub.
_HUB_HINT = ("; this file loads a model from the Hugging Face Hub: import it on a machine "
             "that can reach huggingface.co once, or point HF_HOME at a cache that holds it")

# Input name -> (state-dict name, meta tensor), for the model's parameters and buffers.
StateTensors = dict[str, tuple[str, torch.Tensor]]


@dataclass(frozen=True)
class ImportResult:
    """The outcome of importing one file: the problem folder, or the reason it failed."""

    source: Path
    folder: Path | None
    error: str | None

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class _Axes:
    sizes: dict[str, int]  # axis name -> size
    shapes: dict[str, list[str]]  # tensor name -> the axis name of each dimension


@dataclass(frozen=True)
class _Probe:
    """What the file builds on the meta device: its model and its forward arguments."""

    module: types.ModuleType
    model: nn.Module
    forward_args: list[Any]


def import_kernelbench_file(path: str | Path, out_dir: str | Path,
                            name: str | None = None) -> Path:
    """Write `out_dir/<name>/` (definition.json + workload.jsonl) for one KernelBench file."""
    path = Path(path)
    name = name or path.stem
    probe = _probe(path)
    forward_values = _forward_values(probe, path)
    state = _state_tensors(probe.model, set(forward_values), path)
    definition = _definition(name, probe, forward_values, state, path)
    workload = _workload(definition, forward_values, path, index_tables(state))
    folder = Path(out_dir) / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / DEFINITION_FILE).write_text(json.dumps(definition.to_dict(), indent=2) + "\n")
    (folder / WORKLOAD_FILES[0]).write_text(json.dumps(workload.to_dict()) + "\n")
    return folder


def import_kernelbench_dir(path: str | Path, out_dir: str | Path) -> list[ImportResult]:
    """Import every `*.py` under `path`, keeping its sub-folders (level1/, ...) under `out_dir`.

    A file that fails is reported in its result and the others are still imported.
    """
    path, out_dir = Path(path), Path(out_dir)
    if not path.is_dir():
        raise ProblemError(path, "<folder>", "not a folder of KernelBench files")
    results: list[ImportResult] = []
    for source in sorted(path.rglob("*.py")):
        if source.name == "__init__.py":
            continue
        target = out_dir / source.parent.relative_to(path)
        try:
            folder = import_kernelbench_file(source, target)
        except SolforgeError as exc:
            results.append(ImportResult(source, None, str(exc)))
        else:
            results.append(ImportResult(source, folder, None))
    return results


def _probe(path: Path) -> _Probe:
    """Run the file, then build its model and forward arguments on the meta device."""
    module = _load_file(path)
    for entry in ("Model", "get_inputs", "get_init_inputs"):
        if not callable(getattr(module, entry, None)):
            raise ProblemError(path, entry, "not defined: a KernelBench file needs "
                                            "`class Model(nn.Module)`, get_inputs() and "
                                            "get_init_inputs()")
    if not (isinstance(module.Model, type) and issubclass(module.Model, nn.Module)):
        raise ProblemError(path, "Model", "is not a subclass of torch.nn.Module")
    # Distributions check their arguments with `.item()`, which meta tensors cannot answer.
    validate_args = torch.distributions.Distribution._validate_args
    torch.distributions.Distribution.set_default_validate_args(False)
    try:
        model = _build_model(module, path)
        with torch.device("meta"):
            forward_args = _call(module.get_inputs, path, "get_inputs")
    finally:
        torch.distributions.Distribution.set_default_validate_args(validate_args)
    if not isinstance(forward_args, (list, tuple)):
        raise ProblemError(path, "get_inputs",
                           f"returned {type(forward_args).__name__}, not a list")
    return _Probe(module, model, list(forward_args))


def _build_model(module: types.ModuleType, path: Path) -> nn.Module:
    """The model on the meta device, its plain tensor attributes made buffers.

    A constructor that reads values (`.item()` on a linspace, as Swin's drop-path schedule does)
    cannot run on meta tensors; it is built on the CPU instead and then moved to meta.
    """
    try:
        with torch.device("meta"):
            init_args = module.get_init_inputs()
            return tensor_attributes_as_buffers(module.Model(*init_args))
    except Exception as exc:
        on_meta = describe_exception(exc, str(path))
    init_args = _call(module.get_init_inputs, path, "get_init_inputs", "on the CPU")
    try:
        model = module.Model(*init_args)
    except Exception as exc:
        reason = (f"raised on the meta device ({on_meta}) and on the CPU: "
                  f"{describe_exception(exc, str(path))}")
        raise ProblemError(path, "Model", reason) from None
    return tensor_attributes_as_buffers(model).to("meta")


def tensor_attributes_as_buffers(model: nn.Module) -> nn.Module:
    """Register every tensor kept as a plain attribute (an RNN's `self.hidden`) as a buffer, so
    it becomes an input a kernel receives instead of state it cannot see."""
    for submodule in model.modules():
        for attribute, value in list(vars(submodule).items()):
            if isinstance(value, torch.Tensor) and not isinstance(value, nn.Parameter):
                delattr(submodule, attribute)
                submodule.register_buffer(attribute, value)
    return model


def _load_file(path: Path) -> types.ModuleType:
    try:
        source = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ProblemError(path, "<file>", f"cannot be read: {exc}") from None
    module = types.ModuleType(f"kernelbench_{path.stem}")
    module.__file__ = str(path)
    try:
        exec(compile(source, str(path), "exec"), module.__dict__)
    except ModuleNotFoundError as exc:
        extra = _OPTIONAL_EXTRAS.get((exc.name or "").split(".")[0])
        hint = f" (pip install 'solforge[{extra}]')" if extra else ""
        reason = f"needs the Python package {exc.name!r}, which is not installed{hint}"
        raise ProblemError(path, "<import>", reason) from None
    except Exception as exc:
        reason = f"raised while importing: {describe_exception(exc, str(path))}"
        if "huggingface.co" in str(exc):
            reason += _HUB_HINT
        raise ProblemError(path, "<import>", reason) from None
    return module


def _call(function, path: Path, what: str, where: str = "on the meta device") -> Any:
    try:
        return function()
    except Exception as exc:
        reason = f"raised {where}: {describe_exception(exc, str(path))}"
        raise ProblemError(path, what, reason) from None


def _forward_names(model_class: type, count: int, path: Path) -> list[str]:
    """Names for the `count` values of get_inputs(): forward's positional parameters."""
    parameters = list(inspect.signature(model_class.forward).parameters.values())[1:]  # self
    positional = [p.name for p in parameters
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    variadic = [p.name for p in parameters if p.kind == p.VAR_POSITIONAL]
    if count <= len(positional):
        return positional[:count]
    if not variadic:
        raise ProblemError(path, "get_inputs", f"returns {count} values but Model.forward "
                                               f"takes {len(positional)}")
    extra = range(count - len(positional))
    return positional + [f"{variadic[0]}{i}" for i in extra]


def _state_tensors(model: nn.Module, taken: set[str],
                   path: Path) -> StateTensors:
    """Every parameter and buffer, under the input name a kernel receives it by."""
    named = [*model.named_parameters(), *model.named_buffers()]
    state: StateTensors = {}
    for qualified, tensor in named:
        input_name = qualified.replace(".", "_")
        if not input_name.isidentifier() or keyword.iskeyword(input_name):
            input_name = f"param_{input_name}"
        if input_name in taken or input_name in state:  # `self.h0` beside forward(x, h0)
            input_name = f"state_{input_name}"
        if input_name in taken or input_name in state:
            raise ProblemError(path, "Model", f"parameter or buffer {qualified!r} becomes input "
                                              f"{input_name!r}, a name already taken")
        state[input_name] = (qualified, tensor.detach())
    return state


def _forward_values(probe: _Probe, path: Path) -> dict[str, Any]:
    """Forward parameter name -> the value get_inputs() gives it (meta tensor or scalar)."""
    names = _forward_names(probe.module.Model, len(probe.forward_args), path)
    values = dict(zip(names, probe.forward_args))
    for name, value in values.items():
        if not isinstance(value, torch.Tensor) and type(value) not in _SCALAR_DTYPES:
            raise ProblemError(path, "get_inputs", f"forward argument {name!r} is a "
                                                   f"{type(value).__name__}; only tensors and "
                                                   "Python bool/int/float can be inputs")
    return values


def _definition(name: str, probe: _Probe, forward_values: dict[str, Any],
                state: StateTensors, path: Path) -> Definition:
    tensor_args = [n for n, v in forward_values.items() if isinstance(v, torch.Tensor)]
    tables = index_tables(state)
    reference = _reference_source(path, list(forward_values), tensor_args, state)
    outputs = _meta_outputs(name, reference, forward_values, state, path)
    inputs = {**forward_values, **{input_name: t for input_name, (_, t) in state.items()}}
    axes = _name_axes({**inputs, **outputs}, _int_constants(probe.module))
    return parse_definition({
        "name": name,
        "op_type": "kernelbench",
        "description": _description(probe.module.Model, path),
        "tags": _tags(path),
        "axes": {axis: {"type": "const", "value": size} for axis, size in axes.sizes.items()},
        "custom_inputs_entrypoint": FORWARD_INPUTS_ENTRYPOINT if tensor_args or tables else None,
        "inputs": {n: _spec(n, v, axes, path) for n, v in inputs.items()},
        "outputs": {n: _spec(n, v, axes, path) for n, v in outputs.items()},
        "reference": reference,
    }, path)


def index_tables(state: StateTensors) -> dict[str, str]:
    """Integer and boolean buffers (relative-position index tables, masks, counters) by input
    name -> state-dict name: values the model computed, which random inputs would break."""
    return {name: qualified for name, (qualified, tensor) in state.items()
            if not tensor.dtype.is_floating_point and not tensor.dtype.is_complex
            and tensor.dim() > 0}  # not batch norm's 0-d step counter


def _reference_source(path: Path, forward_names: list[str], tensor_args: list[str],
                      state: StateTensors) -> str:
    """The file's source followed by the entry points the format needs."""
    tables = index_tables(state)
    table_lines = "".join(f"    found[{name!r}] = buffers[{qualified!r}]\n"
                          for name, qualified in tables.items())
    model_buffers = (
        "    with torch.device(device):  # index tables: the values the model computes\n"
        "        model = _solforge_tensor_attributes_as_buffers(Model(*get_init_inputs()))\n"
        "    buffers = dict(model.named_buffers())\n" if tables else "")
    parameters = ", ".join([*forward_names, *state])
    state_lines = "".join(f"            {qualified!r}: {name},\n"
                          for name, (qualified, _) in state.items())
    returned = ", ".join(f"{n!r}: forward_inputs[{forward_names.index(n)}]" for n in tensor_args)
    return (
        f"{path.read_text().rstrip()}\n\n\n"
        "# ---- Added by `solforge import kernelbench`: the FlashInfer-Trace entry points. ----\n"
        "import torch\n\n"
        "def _solforge_tensor_attributes_as_buffers(model):\n"
        "    for submodule in model.modules():\n"
        "        for attribute, value in list(vars(submodule).items()):\n"
        "            if isinstance(value, torch.Tensor) and "
        "not isinstance(value, torch.nn.Parameter):\n"
        "                delattr(submodule, attribute)\n"
        "                submodule.register_buffer(attribute, value)\n"
        "    return model\n\n\n"
        "def _solforge_model():\n"
        '    """Built on the meta device; on the CPU when the constructor reads values."""\n'
        "    try:\n"
        '        with torch.device("meta"):\n'
        "            return _solforge_tensor_attributes_as_buffers(Model(*get_init_inputs()))\n"
        "    except Exception:\n"
        "        model = _solforge_tensor_attributes_as_buffers(Model(*get_init_inputs()))\n"
        '        return model.to("meta")\n\n\n'
        f"{MODEL_GLOBAL} = _solforge_model()\n\n\n"
        f"def {FORWARD_INPUTS_ENTRYPOINT}(axes, device):\n"
        '    """The forward tensors from get_inputs(), which knows their value ranges."""\n'
        "    with torch.device(device):\n"
        "        forward_inputs = get_inputs()\n"
        f"    found = {{{returned}}}\n"
        f"{model_buffers}{table_lines}"
        "    return found\n\n\n"
        f"def run({parameters}):\n"
        '    """Model(*get_init_inputs())(...) with these parameters and buffers."""\n'
        "    return torch.func.functional_call(\n"
        f"        {MODEL_GLOBAL},\n"
        f"        {{\n{state_lines}        }},\n"
        f"        {_tuple_text(forward_names)},\n"
        "    )\n"
    )


def _tuple_text(names: list[str]) -> str:
    if len(names) == 1:
        return f"({names[0]},)"
    return f"({', '.join(names)})"


def _meta_outputs(name: str, reference: str, forward_values: dict[str, Any],
                  state: StateTensors,
                  path: Path) -> dict[str, torch.Tensor]:
    """Run the new reference once on meta tensors: the outputs' shapes and dtypes."""
    provisional = Definition(name=name, op_type="kernelbench", axes={}, inputs={}, outputs={},
                             reference=reference)
    run = load_reference_module(provisional, path).run
    try:
        with torch.no_grad():
            result = run(*forward_values.values(), *(t for _, t in state.values()))
    except Exception as exc:
        reason = f"fails on meta tensors: {describe_exception(exc)}"
        raise ProblemError(path, "Model.forward", reason) from None
    values = list(result) if isinstance(result, (tuple, list)) else [result]
    for value in values:
        if not isinstance(value, torch.Tensor):
            raise ProblemError(path, "Model.forward", f"returns a {type(value).__name__}; "
                                                      "only tensors can be outputs")
    if len(values) == 1:
        return {"output": values[0]}
    return {f"output{i}": value for i, value in enumerate(values)}


def _int_constants(module: types.ModuleType) -> dict[int, list[str]]:
    """Size -> the module-level integer constants with that value (`batch_size = 16`)."""
    by_value: dict[int, list[str]] = {}
    for constant, value in vars(module).items():
        if type(value) is int and not constant.startswith("_"):
            by_value.setdefault(value, []).append(constant)
    return by_value


def _name_axes(tensors: dict[str, Any], constants: dict[int, list[str]]) -> _Axes:
    """One const axis per tensor dimension, named `x_dim0`; a dimension whose size is the value
    of exactly one module-level constant takes that constant's name, shared across tensors."""
    taken = set(tensors)
    sizes: dict[str, int] = {}
    shapes: dict[str, list[str]] = {}
    for tensor_name, value in tensors.items():
        if not isinstance(value, torch.Tensor):
            continue
        shape: list[str] = []
        for dim, size in enumerate(value.shape):
            candidates = constants.get(size, [])
            named = len(candidates) == 1 and candidates[0] not in taken
            axis = candidates[0] if named else f"{tensor_name}_dim{dim}"
            sizes[axis] = size
            shape.append(axis)
        shapes[tensor_name] = shape
    return _Axes(sizes, shapes)


def _spec(name: str, value: Any, axes: _Axes, path: Path) -> dict[str, Any]:
    if not isinstance(value, torch.Tensor):
        return {"shape": None, "dtype": _SCALAR_DTYPES[type(value)]}
    try:
        dtype = dtype_of(value.dtype).name
    except KeyError:
        reason = f"{value.dtype} has no FlashInfer-Trace dtype name"
        raise ProblemError(path, name, reason) from None
    return {"shape": axes.shapes[name], "dtype": dtype}


def _workload(definition: Definition, forward_values: dict[str, Any], path: Path,
              tables: dict[str, str]) -> Workload:
    """The one workload: the file's shapes; its uuid derives from the reference, so re-importing
    the same file gives the same uuid."""
    inputs: dict[str, Any] = {}
    for input_name in definition.inputs:
        if input_name in tables:
            inputs[input_name] = {"type": "custom"}
        elif input_name not in forward_values:
            inputs[input_name] = {"type": "random"}
        elif isinstance(forward_values[input_name], torch.Tensor):
            inputs[input_name] = {"type": "custom"}
        else:
            inputs[input_name] = {"type": "scalar", "value": forward_values[input_name]}
    digest = hashlib.sha256(definition.reference.encode()).hexdigest()
    data = {"uuid": str(uuid.uuid5(uuid.NAMESPACE_OID, f"kernelbench:{digest}")), "axes": {},
            "inputs": inputs}
    return parse_workload(data, definition, path)


def _description(model_class: type, path: Path) -> str:
    summary = (inspect.getdoc(model_class) or "").split("\n\n")[0].replace("\n", " ").strip()
    origin = (f"Imported from KernelBench file {path.parent.name}/{path.name} at its own shapes; "
              "parameters and buffers are inputs. Tolerance: the default atol=rtol=1e-2, "
              "KernelBench's own.")
    return f"{summary} {origin}" if summary else origin


def _tags(path: Path) -> list[str]:
    tags = ["source:kernelbench"]
    if _LEVEL_FOLDER.match(path.parent.name):
        tags.append(f"kernelbench:{path.parent.name}")
    return tags
