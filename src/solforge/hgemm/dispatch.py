"""solforge.hgemm.matmul(a, b): the tuned kernel where it beat cuBLAS at that shape in the mode it
is called in, else torch.matmul.

Two modes can be told apart when a call is made: eager launches, and capture into a CUDA graph
(`torch.cuda.is_current_stream_capturing()`). The tuned table holds a choice for each: a kernel
runs eagerly only where the tuner measured it faster than torch.matmul beyond the noise in
kernel-only time, back to back and with Poisson-spaced calls (server mode), and end to end with
its host launch cost in server mode; it runs in a graph only where it also won beyond the noise
in graph replays, back to back and spaced (tune.py).
Everywhere else that mode runs torch.matmul. Shapes the table lacks go to retrieval
(retrieve.py: the nearest tuned shapes' kernels, verified here once in kernel-only time, the
choice cached), for eager calls only: a graph capture of such a shape runs torch.matmul.
Everything else goes to torch.matmul: CPU tensors, dtypes other than float16 and bfloat16,
mixed dtypes, A not row-major, B neither row-major nor a row-major transpose, data not
16-byte aligned (TMA's rule), tensors that are not 2-D.

Host cost per call: the decision is cached per call signature (sizes, strides, dtypes, device,
accumulation), so a call after the first is one tuple built, one dict lookup, the capture flag
read when the two modes differ, and an alignment test when a kernel is chosen (`route`;
`host_overhead` measures it). Eager calls go straight to the kernel or to torch.matmul; only
under torch.compile does the call go through the custom operators (solforge::hgemm, and
solforge::hgemm_out for a given output), whose fakes let the compiler trace them as opaque
nodes. While a graph is being captured nothing can be timed, so a shape met first during
capture runs torch.matmul and is verified at its first eager call. Inference only: no backward.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from solforge.hgemm import kernels
from solforge.hgemm.measure import CudaMeasurer, host_us_per_call
from solforge.hgemm.retrieve import Retriever
from solforge.hgemm.space import Config, Shape, layout_of
from solforge.hgemm.table import Table, default_table_path, load_table

ALIGNMENT = 16  # bytes: TMA descriptors need 16-byte-aligned base addresses
CACHE_ENV = "SOLFORGE_HGEMM_CACHE"
EAGER, GRAPH = 0, 1  # index of a mode's choice in a Route


def shape_of(a: torch.Tensor, b: torch.Tensor, accumulate: str = "fp32",
             aligned: bool = True) -> Shape | None:
    """The tuned-table shape of a @ b, or None when the dispatcher leaves it to torch.matmul.
    `aligned` False leaves the data's alignment out (route tests it on every call)."""
    if a.dim() != 2 or b.dim() != 2 or not (a.is_cuda and b.is_cuda) or a.device != b.device:
        return None
    if a.dtype != b.dtype or a.dtype not in (torch.float16, torch.bfloat16):
        return None
    if a.shape[1] != b.shape[0] or 0 in (*a.shape, b.shape[1]):
        return None
    if a.stride(1) != 1 or a.stride(0) < a.shape[1]:
        return None
    layout = layout_of(b)
    if layout is None or (aligned and (a.data_ptr() % ALIGNMENT or b.data_ptr() % ALIGNMENT)):
        return None
    if accumulate == "fp16" and a.dtype != torch.float16:
        return None
    dtype = "float16" if a.dtype == torch.float16 else "bfloat16"
    return Shape(a.shape[0], b.shape[1], a.shape[1], dtype, layout, accumulate)


Route = tuple[Config | None, Config | None]  # (eager choice, graph choice); None: torch.matmul
TORCH: Route = (None, None)


class Dispatcher:
    """Chooses a kernel per shape and mode: the table first, then retrieval, else torch.matmul."""

    def __init__(self, table: Table, retriever: Retriever | None = None) -> None:
        self.table = table
        self.retriever = retriever
        self.routes: dict[tuple, Route] = {}  # by call signature (route)
        self.decisions = 0  # routes worked out (not served from the cache): for the tests

    def route(self, a: torch.Tensor, b: torch.Tensor, accumulate: str = "fp32") -> Config | None:
        """The kernel for this call, or None for torch.matmul: the per-call hot path."""
        signature = (a.shape, b.shape, a.stride(), b.stride(), a.dtype, b.dtype, a.device,
                     accumulate)
        found = self.routes.get(signature)
        if found is None:
            found = self._decide(a, b, accumulate)
            if found is None:
                return None  # met first during a capture: decided at an eager call
            self.routes[signature] = found
        eager, graph = found
        config = eager if eager == graph or not torch.cuda.is_current_stream_capturing() else graph
        if config is not None and (a.data_ptr() % ALIGNMENT or b.data_ptr() % ALIGNMENT):
            return None  # a view at an odd offset: TMA cannot take it
        return config

    def _decide(self, a: torch.Tensor, b: torch.Tensor, accumulate: str) -> Route | None:
        self.decisions += 1
        shape = shape_of(a, b, accumulate, aligned=False)
        return TORCH if shape is None else self.choose_shape(shape, a.device)

    def choose(self, a: torch.Tensor, b: torch.Tensor, accumulate: str = "fp32",
               mode: int = EAGER) -> Config | None:
        """The kernel `mode` (EAGER or GRAPH) runs for a @ b, or None for torch.matmul."""
        shape = shape_of(a, b, accumulate)
        route = None if shape is None else self.choose_shape(shape, a.device)
        return None if route is None else route[mode]

    def choose_shape(self, shape: Shape, device: torch.device) -> Route | None:
        """Both modes' kernels for `shape` on `device` (None within one: torch.matmul); None
        when it cannot be decided now (an unseen shape met during a graph capture)."""
        entry = self.table.get(shape)
        if entry is not None:
            route = (entry.best if entry.use_kernel else None,
                     entry.best if entry.use_in_graph else None)
        elif self.retriever is None:
            route = TORCH
        elif device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            return None  # nothing can be timed now; verify at the first eager call
        else:
            # verified in kernel-only time alone: eager calls only, graphs keep torch.matmul
            route = (self.retriever.choose(shape).config, None)
        return tuple(c if c is not None and kernels.runs_here(c, device) else None
                     for c in route)


_active: Dispatcher | None = None


def default_cache_path() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "solforge" /
                "hgemm-choices.jsonl")


def use_table(table: Table | Path | None, retrieval: bool = True,
              cache_path: Path | None = None) -> Dispatcher:
    """Make `table` (a Table, a JSON-lines path, or None for none) the one matmul dispatches
    with; retrieval verifies unseen shapes on this process's current CUDA device."""
    global _active
    if not isinstance(table, Table):
        table = load_table(table) if table is not None else Table()
    retriever = None
    if retrieval and torch.cuda.is_available():
        retriever = Retriever(table, CudaMeasurer(), cache_path or default_cache_path())
    _active = Dispatcher(table, retriever)
    return _active


def active() -> Dispatcher:
    """The dispatcher in use: the default table of this GPU unless use_table said otherwise."""
    if _active is None:
        return use_table(default_table_path())
    return _active


def _run(a: torch.Tensor, b: torch.Tensor, accumulate: str, out: torch.Tensor | None
         ) -> torch.Tensor:
    config = active().route(a, b, accumulate)
    if config is not None and out is not None and (out.stride(1) != 1 or out.dtype != a.dtype):
        config = None  # the kernels write a row-major C of the inputs' dtype
    if config is None:
        return torch.matmul(a, b) if out is None else torch.matmul(a, b, out=out)
    if out is None:
        return kernels.run(config, a, b)
    kernels.launch(config, a, b, out)
    return out


@torch.library.custom_op("solforge::hgemm", mutates_args=())
def hgemm(a: torch.Tensor, b: torch.Tensor, accumulate: str = "fp32") -> torch.Tensor:
    return _run(a, b, accumulate, None)


@hgemm.register_fake
def _hgemm_fake(a: torch.Tensor, b: torch.Tensor, accumulate: str = "fp32") -> torch.Tensor:
    torch._check(a.dim() == 2 and b.dim() == 2 and a.shape[1] == b.shape[0],
                 lambda: f"hgemm: cannot multiply {tuple(a.shape)} by {tuple(b.shape)}")
    return a.new_empty((a.shape[0], b.shape[1]))


@torch.library.custom_op("solforge::hgemm_out", mutates_args=("out",))
def hgemm_out(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor,
              accumulate: str = "fp32") -> None:
    _run(a, b, accumulate, out)


@hgemm_out.register_fake
def _hgemm_out_fake(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor,
                    accumulate: str = "fp32") -> None:
    return None


def matmul(a: torch.Tensor, b: torch.Tensor, accumulate: str = "fp32",
           out: torch.Tensor | None = None) -> torch.Tensor:
    """a @ b for 2-D a and b: the tuned kernel where it wins in this mode, else torch.matmul.
    `out`, a row-major [M, N] tensor of a's dtype, receives the product (as torch.matmul's
    out=). `accumulate` "fp16" lets float16 kernels accumulate in float16 (looser tolerance:
    space.tolerance)."""
    if a.dim() != 2 or b.dim() != 2:
        return torch.matmul(a, b) if out is None else torch.matmul(a, b, out=out)
    if torch.compiler.is_compiling():
        if out is None:
            return hgemm(a, b, accumulate)
        hgemm_out(a, b, out, accumulate)
        return out
    return _run(a, b, accumulate, out)


@dataclass(frozen=True)
class HostOverhead:
    """Host microseconds per call, measured over many calls with a warm route cache."""

    route_us: float  # the dispatcher's decision alone (Dispatcher.route)
    dispatch_us: float  # matmul(a, b, out=...) end to end on the host
    torch_us: float  # torch.matmul(a, b, out=...) the same way
    calls: int

    @property
    def extra_us(self) -> float:
        """What the dispatcher adds to a call over torch.matmul (negative: saves)."""
        return self.dispatch_us - self.torch_us

    def to_json(self) -> dict[str, float]:
        return {"route_us": self.route_us, "dispatch_us": self.dispatch_us,
                "torch_us": self.torch_us, "extra_us": self.extra_us, "calls": self.calls}


def host_overhead(a: torch.Tensor, b: torch.Tensor, calls: int = 2000,
                  accumulate: str = "fp32") -> HostOverhead:
    """The dispatcher's host cost at this call signature (CPU tensors: the fallback path; CUDA
    tensors: launches are asynchronous, so this is host time as long as the GPU keeps up, as it
    does for small products). Each figure is the best of three runs of `calls` calls, after an
    untimed one."""
    out = torch.empty((a.shape[0], b.shape[1]), dtype=a.dtype, device=a.device)
    dispatcher = active()
    dispatcher.route(a, b, accumulate)  # warm: the first call decides and caches

    def per_call_us(call: Callable[[], object]) -> float:
        return host_us_per_call(call, calls, device=a.device)

    return HostOverhead(per_call_us(lambda: dispatcher.route(a, b, accumulate)),
                        per_call_us(lambda: matmul(a, b, accumulate, out=out)),
                        per_call_us(lambda: torch.matmul(a, b, out=out)), calls)
