"""Trace a reference `run()` into ATen operator records without a GPU or real memory.

The reference runs on fake tensors (`FakeTensorMode`): every op computes shapes and dtypes only, so
any workload size traces in milliseconds. A dispatch mode records each ATen call; a function mode
catches `scaled_dot_product_attention` before it decomposes, so attention is costed as one op with
its causal flag and GQA head counts intact.

Data-dependent references (MoE routing, paged KV caches, ragged batches) need values, not just
shapes. The tracer keeps the concrete values of small tensors beside their fakes:
- inputs that are integers or booleans (router ids, page tables, indptr) and small float inputs get
  the problem's own generated values (custom generators included);
- an op whose inputs all have values is also run for real on the CPU when its result is small;
- an op whose output shape depends on values (`nonzero`, boolean indexing, `unique`, `.item()`) or
  whose result is an index (`topk`, `sort`, `argmax`, `multinomial`) runs for real; inputs without
  values are first drawn at random (seeded) - for a router, random logits give random routing.
Every such draw is listed in the trace's notes.

The tracer also follows, per graph input, which rows (leading-dimension slices) are actually read:
an expert's weights skipped by the routing or KV pages no sequence points at cost no bytes in the
fused bound. And it follows each tensor's `origin` precision through casts and scalings, so a
reference that dequantizes fp8 to float32 before a matmul is priced as the fp8 product.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode, unset_fake_temporarily
from torch.multiprocessing.reductions import StorageWeakRef
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
from torch.utils._pytree import tree_flatten, tree_map

from solforge.data.workload import Workload
from solforge.errors import AnalysisError
from solforge.problem.inputs import custom_inputs, make_input
from solforge.problem.problem import Problem, tensor_shape
from solforge.problem.reference import describe_exception, load_reference_module
from solforge.solar.records import OpRecord, TensorInfo

aten = torch.ops.aten

# Values are kept for tensors up to this many elements (integers: more, they are indices).
FLOAT_VALUE_LIMIT = 1 << 16
INT_VALUE_LIMIT = 1 << 24
# Custom inputs (page tables, position caches) are generated for real up to this many elements.
CUSTOM_VALUE_LIMIT = 1 << 26
# Boolean masks (attention windows up to 8192 x 8192) keep their values up to this size.
MASK_VALUE_LIMIT = 1 << 26
# A value-dependent op may draw random values for an input up to this many elements.
DRAW_LIMIT = 1 << 25

# Ops whose output *shape* depends on values: they must run on concrete values.
SHAPE_FROM_VALUES = {
    "nonzero", "masked_select", "unique", "_unique", "_unique2", "unique_consecutive", "unique_dim",
    "bincount", "repeat_interleave", "argwhere", "nonzero_numpy", "_local_scalar_dense", "item",
}
# Ops whose results are indices into other tensors: run on values so routing stays realistic.
INDEX_PRODUCING = {
    "topk", "sort", "argsort", "argmax", "argmin", "max", "min", "kthvalue", "mode",
    "multinomial", "searchsorted", "bucketize",
}
# Casts and rescalings keep the origin precision of their main operand.
_RESCALE = {"mul", "div"}
_CASTS = {"_to_copy", "to", "clone", "contiguous", "alias", "lift_fresh", "detach", "_unsafe_view"}
_BIT_OPS = {"bitwise_and", "bitwise_or", "__and__", "__or__", "bitwise_right_shift",
            "bitwise_left_shift", "__rshift__", "__lshift__", "stack", "cat", "view"}
_GATHERS = {"embedding", "index_select", "index"}
_PRODUCTS = {"mm", "bmm", "addmm", "baddbmm", "_scaled_mm", "_int_mm", "_grouped_mm",
             "_scaled_grouped_mm", "convolution", "matmul", "linear"}
_IGNORED = {"sym_size", "sym_stride", "sym_numel", "sym_storage_offset", "device", "dim", "size",
            "stride", "is_contiguous", "is_same_size", "is_nonzero"}


@dataclass(frozen=True)
class OpTrace:
    """The ATen operators one reference run executed, with its inputs and outputs."""

    records: tuple[OpRecord, ...]
    inputs: dict[str, TensorInfo | None]  # None: a Python scalar input
    outputs: tuple[TensorInfo, ...]
    input_bytes_read: dict[str, int]  # the rows of each input some op actually read
    notes: tuple[str, ...]

    @property
    def output_bytes(self) -> int:
        return sum(o.nbytes for o in self.outputs)


def trace_reference(problem: Problem, workload: Workload, seed: int = 0) -> OpTrace:
    """Run the reference of `problem` at `workload` on fake tensors and record every op."""
    file = problem.root / "definition.json"
    run = load_reference_module(problem.definition, file).run
    tracer = _Tracer(seed)
    with tracer.fake_mode:
        inputs = _fake_inputs(problem, workload, tracer, seed)
        with _FunctionHook(tracer), _Recorder(tracer):
            try:
                with torch.no_grad():
                    result = run(*inputs.values())
            except AnalysisError:
                raise
            except Exception as exc:  # foreign code
                raise AnalysisError(f"{file}: tracing the reference failed at workload "
                                    f"{workload.uuid}: {describe_exception(exc)}") from None
        outputs = tuple(tracer.info(t) for t in tree_flatten(result)[0]
                        if isinstance(t, torch.Tensor))
    input_infos = {n: tracer.info(v) if isinstance(v, torch.Tensor) else None
                   for n, v in inputs.items()}
    return OpTrace(tuple(tracer.records), input_infos, outputs, tracer.bytes_read(),
                   tuple(tracer.notes))


def _fake_inputs(problem: Problem, workload: Workload, tracer: _Tracer,
                 seed: int) -> dict[str, Any]:
    axes = problem.axes(workload)
    custom = _small_custom_inputs(problem, workload, seed, tracer)
    values: dict[str, Any] = {}
    for name, spec in problem.definition.inputs.items():
        source = workload.inputs[name]
        if source.kind == "scalar":
            values[name] = make_input(problem, workload, name, torch.device("cpu"), seed)
            continue
        shape = tensor_shape(spec, axes)
        numel = math.prod(shape)
        real = custom.get(name)
        if real is None and source.kind != "custom" and numel <= _value_limit(spec.dtype.kind):
            with unset_fake_temporarily():
                real = make_input(problem, workload, name, torch.device("cpu"), seed)
        values[name] = tracer.new_input(name, real, shape, spec.dtype)
    return values


def _value_limit(kind: str) -> int:
    return FLOAT_VALUE_LIMIT if kind == "float" else INT_VALUE_LIMIT


def _small_custom_inputs(problem: Problem, workload: Workload, seed: int,
                         tracer: _Tracer) -> dict[str, torch.Tensor]:
    axes = problem.axes(workload)
    wanted = [n for n, s in workload.inputs.items() if s.kind == "custom"]
    elements = sum(math.prod(tensor_shape(problem.definition.inputs[n], axes)) for n in wanted)
    if not wanted or elements > CUSTOM_VALUE_LIMIT:
        if wanted:
            tracer.notes.append(f"custom inputs {wanted} too large to generate: traced as shapes")
        return {}
    with unset_fake_temporarily():
        return custom_inputs(problem, workload, torch.device("cpu"), seed)


class _Tracer:
    """State shared by the dispatch and function hooks during one trace."""

    def __init__(self, seed: int) -> None:
        self.fake_mode = FakeTensorMode(allow_non_fake_inputs=False)
        self.records: list[OpRecord] = []
        self.notes: list[str] = []
        self.quiet = False
        self.generator = torch.Generator().manual_seed(seed)
        self._alive: dict[int, torch.Tensor] = {}  # keeps fakes alive so ids stay unique
        self._values: dict[int, torch.Tensor] = {}
        self._origin: dict[int, torch.dtype] = {}
        self._storage_source: dict[StorageWeakRef, str] = {}
        self._rows: dict[str, np.ndarray] = {}  # input name -> rows read
        self._row_stride: dict[str, int] = {}
        self._input_row_bytes: dict[str, int] = {}

    # ---- inputs ------------------------------------------------------------------------------

    def new_input(self, name: str, real: torch.Tensor | None, shape: tuple[int, ...],
                  dtype) -> torch.Tensor:
        from solforge.data.dtypes import storage_shape

        storage = storage_shape(shape, dtype)
        with self.quieted():
            fake = torch.empty(storage, dtype=dtype.torch_dtype)
        self._remember(fake, dtype.torch_dtype)
        if real is not None:
            self._values[id(fake)] = real
        self._storage_source[StorageWeakRef(fake.untyped_storage())] = name
        rows = storage[0] if storage else 1
        self._rows[name] = np.zeros(rows, dtype=bool)
        self._row_stride[name] = max(1, fake.numel() // rows) if rows else 1
        self._input_row_bytes[name] = (fake.numel() // rows if rows else 0) * fake.element_size()
        return fake

    def bytes_read(self) -> dict[str, int]:
        return {n: int(rows.sum()) * self._input_row_bytes[n] for n, rows in self._rows.items()}

    # ---- bookkeeping -------------------------------------------------------------------------

    def quieted(self):
        tracer = self

        class _Quiet:
            def __enter__(self):
                self.previous = tracer.quiet
                tracer.quiet = True

            def __exit__(self, *exc):
                tracer.quiet = self.previous

        return _Quiet()

    def _remember(self, fake: torch.Tensor, origin: torch.dtype) -> None:
        self._alive[id(fake)] = fake
        self._origin.setdefault(id(fake), origin)

    def source_of(self, tensor: torch.Tensor) -> str | None:
        return self._storage_source.get(StorageWeakRef(tensor.untyped_storage()))

    def info(self, tensor: torch.Tensor) -> TensorInfo:
        self._remember(tensor, tensor.dtype)
        values = self._values.get(id(tensor))
        small_index = values is not None and values.numel() <= FLOAT_VALUE_LIMIT
        if not small_index or values.is_floating_point():
            values = None
        return TensorInfo(id(tensor), tuple(tensor.shape), tuple(tensor.stride()), tensor.dtype,
                          self._origin[id(tensor)], self.source_of(tensor), values)

    def value(self, tensor: torch.Tensor, draw: bool, reason: str) -> torch.Tensor | None:
        """The concrete values of a fake tensor; draw random ones when allowed and needed."""
        known = self._values.get(id(tensor))
        if known is not None or not draw:
            return known
        if tensor.numel() > DRAW_LIMIT:
            return None
        with unset_fake_temporarily():
            drawn = _random_like(tensor, self.generator)
        self._values[id(tensor)] = drawn
        self._remember(tensor, tensor.dtype)
        self.notes.append(f"drew random values for a {list(tensor.shape)} {tensor.dtype} tensor "
                          f"({reason})")
        return drawn

    # ---- the dispatch hook -------------------------------------------------------------------

    def dispatch(self, func, args: tuple, kwargs: dict) -> Any:
        packet = func.overloadpacket.__name__
        if packet in _IGNORED:
            return func(*args, **kwargs)
        if packet in {"_local_scalar_dense", "item"}:
            return self._item(func, args)
        if packet == "index" and _has_bool_index(args):
            args = self._bool_indices_to_long(args)
        if packet in SHAPE_FROM_VALUES or packet in INDEX_PRODUCING:
            out = self._run_on_values(func, args, kwargs, required=packet in SHAPE_FROM_VALUES)
        else:
            out = func(*args, **kwargs)
            self._propagate_values(func, args, kwargs, out)
        self._follow(func, packet, args, kwargs, out)
        return out

    def _item(self, func, args: tuple) -> Any:
        values = self.value(args[0], draw=True, reason=".item()")
        if values is None:
            raise AnalysisError(f"the reference reads a value (.item()) of a "
                                f"{list(args[0].shape)} tensor too large to draw")
        self.records.append(OpRecord(str(func), {"self": self.info(args[0])}, ()))
        with unset_fake_temporarily():
            return values.item()

    def _bool_indices_to_long(self, args: tuple) -> tuple:
        indices = []
        for index in args[1]:
            if isinstance(index, torch.Tensor) and index.dtype == torch.bool:
                mask = self.value(index, draw=True, reason="boolean indexing")
                if mask is None:
                    raise AnalysisError("boolean indexing with a mask too large to draw")
                with unset_fake_temporarily():
                    positions = mask.nonzero(as_tuple=True)
                indices.extend(self._from_real(p) for p in positions)
            else:
                indices.append(index)
        return (args[0], indices, *args[2:])

    def _run_on_values(self, func, args: tuple, kwargs: dict, required: bool) -> Any:
        reason = func.overloadpacket.__name__
        real_args = tree_map(lambda t: self._real_or_none(t, reason), (args, kwargs))
        if _any_missing(real_args):
            if required:
                raise AnalysisError(f"{func} needs the values of a tensor too large to draw")
            return func(*args, **kwargs)
        with unset_fake_temporarily():
            real_out = func(*real_args[0], **real_args[1])
        return tree_map(lambda r: self._from_real(r) if isinstance(r, torch.Tensor) else r,
                        real_out)

    def _real_or_none(self, value: Any, reason: str) -> Any:
        if not isinstance(value, torch.Tensor):
            return value
        real = self.value(value, draw=True, reason=reason)
        return _MISSING if real is None else real

    def _from_real(self, real: torch.Tensor) -> torch.Tensor:
        with self.quieted():
            fake = torch.empty_strided(real.shape, real.stride(), dtype=real.dtype)
        self._values[id(fake)] = real
        self._remember(fake, real.dtype)
        return fake

    def _propagate_values(self, func, args: tuple, kwargs: dict, out: Any) -> None:
        """Run the op on values too when every tensor argument has them and the result is small."""
        tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        fake_outs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        if not fake_outs:
            return
        known = all(id(t) in self._values for t in tensors)
        masks = all(t.dtype == torch.bool for t in fake_outs)
        limit = MASK_VALUE_LIMIT if masks else INT_VALUE_LIMIT
        small = sum(t.numel() for t in fake_outs) <= limit
        if known and small:
            real_args = tree_map(lambda t: self._values[id(t)] if isinstance(t, torch.Tensor)
                                 else t, (args, kwargs))
            with unset_fake_temporarily():
                real_out = func(*real_args[0], **real_args[1])
            for fake, real in zip(fake_outs, tree_flatten(real_out)[0]):
                if isinstance(real, torch.Tensor):
                    self._values[id(fake)] = real
        elif func._schema.is_mutable:
            self._forget_values_of(fake_outs + tensors[:1])

    def _forget_values_of(self, tensors: list[torch.Tensor]) -> None:
        storages = {StorageWeakRef(t.untyped_storage()) for t in tensors}
        for ident, fake in self._alive.items():
            if ident in self._values and StorageWeakRef(fake.untyped_storage()) in storages:
                del self._values[ident]

    # ---- origins, rows read, records ---------------------------------------------------------

    def _follow(self, func, packet: str, args: tuple, kwargs: dict, out: Any) -> None:
        outs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        origin = self._origin_for(packet, args, outs)
        for tensor in outs:
            self._remember(tensor, origin if origin is not None else tensor.dtype)
            if origin is not None:
                self._origin[id(tensor)] = origin
        if not func.is_view and sum(t.numel() for t in outs) > 0:
            self._mark_rows_read(packet, args)
        self.records.append(OpRecord(
            name=str(func),
            arguments=tree_map(self._info_or_value, _bind_arguments(func, args, kwargs)),
            outputs=tuple(self.info(t) for t in outs),
            is_view=bool(func.is_view),
            tags=frozenset(tag.name for tag in func.tags),
        ))

    def _info_or_value(self, value: Any) -> Any:
        return self.info(value) if isinstance(value, torch.Tensor) else value

    def _origin_for(self, packet: str, args: tuple, outs: list[torch.Tensor]) -> torch.dtype | None:
        """The origin precision of the outputs (None: their own dtype).

        Casts, views and scalings by a broadcast factor keep their operand's origin; a lookup
        table indexed by 4-bit codes keeps the codes' origin; any other float op computes at the
        widest origin of its float inputs (products at least at 16 bits, as they accumulate), so
        a bf16 model's float32 intermediates are priced as the bf16 work a kernel would do.
        """
        tensors = [t for t in tree_flatten(args)[0] if isinstance(t, torch.Tensor)]
        if not tensors or not outs:
            return None
        main = max(tensors, key=lambda t: t.numel())
        out_dtype = outs[0].dtype
        if packet in _CASTS or packet in _BIT_OPS or _is_view_packet(packet):
            return _narrower(self._origin_of(main), out_dtype)
        if packet in _RESCALE and all(t is main or t.numel() < main.numel() for t in tensors):
            return _narrower(self._origin_of(main), out_dtype)
        lookup = self._lookup_table_origin(packet, tensors, out_dtype)
        if lookup is not None:
            return lookup
        float_origins = [self._origin_of(t) for t in tensors if t.dtype.is_floating_point]
        if not out_dtype.is_floating_point or not float_origins:
            return None
        widest = max(float_origins, key=_bits)
        if packet in _PRODUCTS and _bits(widest) < 16:
            widest = torch.bfloat16
        return _narrower(widest, out_dtype)

    def _origin_of(self, tensor: torch.Tensor) -> torch.dtype:
        return self._origin.get(id(tensor), tensor.dtype)

    def _lookup_table_origin(self, packet: str, tensors: list[torch.Tensor],
                             out_dtype: torch.dtype) -> torch.dtype | None:
        """A small table indexed by narrow codes (fp4 dequantization) keeps the codes' origin."""
        if packet not in _GATHERS or len(tensors) < 2:
            return None
        table, index = tensors[0], tensors[-1]
        index_origin = self._origin_of(index)
        if table.numel() <= 256 and _bits(index_origin) < _bits(out_dtype):
            return _narrower(index_origin, out_dtype)
        return None

    def _mark_rows_read(self, packet: str, args: tuple) -> None:
        tensors = [t for t in tree_flatten(args)[0] if isinstance(t, torch.Tensor)]
        gathered = self._gathered_table(packet, args)
        for tensor in tensors:
            name = self.source_of(tensor)
            if name is None:
                continue
            if gathered is not None and tensor is gathered[0]:
                self._mark_gathered_rows(name, tensor, gathered[1])
            else:
                self._mark_span(name, tensor)

    def _gathered_table(self, packet: str, args: tuple) -> tuple[torch.Tensor, Any] | None:
        """(table, index values) for a dim-0 gather with known indices, else None."""
        if packet == "embedding":
            table, index = args[0], args[1]
        elif packet == "index_select" and args[1] == 0:
            table, index = args[0], args[2]
        elif packet == "index" and args[1] and isinstance(args[1][0], torch.Tensor):
            table, index = args[0], args[1][0]
        else:
            return None
        values = self._values.get(id(index))
        return None if values is None else (table, values)

    def _mark_span(self, name: str, view: torch.Tensor) -> None:
        if view.numel() == 0:
            return
        first, last = _offset_span(view)
        stride = self._row_stride[name]
        self._rows[name][first // stride:last // stride + 1] = True

    def _mark_gathered_rows(self, name: str, table: torch.Tensor, index: torch.Tensor) -> None:
        with unset_fake_temporarily():
            rows = np.unique(index.reshape(-1).to(torch.int64).numpy())
        rows = rows[(rows >= 0) & (rows < table.shape[0])]
        inner = sum((s - 1) * st for s, st in zip(table.shape[1:], table.stride()[1:]))
        first = table.storage_offset() + rows * table.stride(0)
        stride = self._row_stride[name]
        for lo, hi in zip(first // stride, (first + inner) // stride):
            self._rows[name][lo:hi + 1] = True

    # ---- the function hook: attention as one op ----------------------------------------------

    def attention(self, func: Callable, args: tuple, kwargs: dict) -> torch.Tensor:
        names = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale",
                 "enable_gqa")
        bound = dict(zip(names, args))
        bound.update(kwargs)
        query, key, value = bound["query"], bound["key"], bound["value"]
        mask = bound.get("attn_mask")
        kept = 1.0
        if isinstance(mask, torch.Tensor):
            values = self.value(mask, draw=False, reason="attention mask")
            if values is None:
                self.notes.append(f"attention mask {list(mask.shape)} has no known values: "
                                  "costed as full attention")
            else:
                with _disable_current_modes():
                    kept = _mask_kept_fraction(values)
        with self.quieted():  # the output's shape only: running attention on fakes is slow
            out = torch.empty((*query.shape[:-1], value.shape[-1]), dtype=query.dtype)
        self._remember(out, out.dtype)
        for tensor in (query, key, value):
            name = self.source_of(tensor)
            if name is not None:
                self._mark_span(name, tensor)
        self.records.append(OpRecord(
            name="solforge.sdpa",
            arguments={"query": self.info(query), "key": self.info(key),
                       "value": self.info(value), "is_causal": bool(bound.get("is_causal")),
                       "attn_mask": self.info(mask) if isinstance(mask, torch.Tensor) else None,
                       "mask_kept_fraction": kept},
            outputs=(self.info(out),),
        ))
        return out


class _Recorder(TorchDispatchMode):
    def __init__(self, tracer: _Tracer) -> None:
        super().__init__()
        self.tracer = tracer

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.tracer.quiet:
            return func(*args, **kwargs)
        return self.tracer.dispatch(func, args, kwargs)


class _FunctionHook(TorchFunctionMode):
    """Sees torch functions before they decompose; also keeps `device="cuda"` on the fake CPU."""

    def __init__(self, tracer: _Tracer) -> None:
        super().__init__()
        self.tracer = tracer

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.Tensor.cuda:
            return args[0]
        args, kwargs = tree_map(_cuda_to_cpu, (args, kwargs))
        if func is F.scaled_dot_product_attention and not self.tracer.quiet:
            return self.tracer.attention(func, args, kwargs)
        return func(*args, **kwargs)


def _cuda_to_cpu(value: Any) -> Any:
    if isinstance(value, torch.device) and value.type == "cuda":
        return torch.device("cpu")
    if isinstance(value, str) and value.startswith("cuda"):
        return "cpu"
    return value


def _bind_arguments(func, args: tuple, kwargs: dict) -> dict[str, Any]:
    """Name every argument of an ATen call by its schema, filling in defaults."""
    bound: dict[str, Any] = {}
    for position, argument in enumerate(func._schema.arguments):
        if position < len(args) and not argument.kwarg_only:
            bound[argument.name] = args[position]
        elif argument.name in kwargs:
            bound[argument.name] = kwargs[argument.name]
        elif argument.has_default_value():
            bound[argument.name] = argument.default_value
    return bound


_MISSING = object()


def _any_missing(tree: Any) -> bool:
    return any(v is _MISSING for v in tree_flatten(tree)[0])


def _has_bool_index(args: tuple) -> bool:
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in args[1])


def _random_like(fake: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    shape = tuple(fake.shape)
    if fake.dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=generator).bool()
    if not fake.dtype.is_floating_point:
        return torch.randint(0, 16, shape, generator=generator, dtype=fake.dtype)
    return torch.randn(shape, generator=generator).to(fake.dtype)


def _offset_span(view: torch.Tensor) -> tuple[int, int]:
    """First and last storage element a strided view touches."""
    first = view.storage_offset()
    last = first
    for size, stride in zip(view.shape, view.stride()):
        if stride >= 0:
            last += (size - 1) * stride
        else:
            first += (size - 1) * stride
    return first, last


def _mask_kept_fraction(mask: torch.Tensor) -> float:
    """Fraction of query-key pairs an attention mask keeps (bool: True keeps; float: > -inf)."""
    keep = mask if mask.dtype == torch.bool else mask > float("-inf")
    return float(keep.float().mean())


def _bits(dtype: torch.dtype) -> int:
    from solforge.data.dtypes import packing

    return dtype.itemsize * 8 // packing(dtype)


def _narrower(a: torch.dtype, b: torch.dtype) -> torch.dtype:
    return a if _bits(a) < _bits(b) else b


def _is_view_packet(packet: str) -> bool:
    op = getattr(aten, packet, None)
    return op is not None and any(getattr(op, o).is_view for o in op.overloads())
