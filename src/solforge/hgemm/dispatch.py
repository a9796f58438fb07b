"""solforge.hgemm.matmul(a, b): the tuned kernel where it beat cuBLAS at that shape, else
torch.matmul.

The choice per shape comes from the tuned table: a kernel runs only where the tuner measured it
faster than torch.matmul by more than the noise in kernel-only time and no slower in CUDA-graph
time (tune.py), so the dispatcher is never slower than cuBLAS beyond noise at a tuned shape.
Shapes the table lacks go to retrieval (retrieve.py: the nearest tuned shapes' kernels, verified
here once, the choice cached). Everything else goes to torch.matmul: CPU tensors, dtypes other
than float16 and bfloat16, mixed dtypes, A not row-major, B neither row-major nor a row-major
transpose, data not 16-byte aligned (TMA's rule), tensors that are not 2-D.

It is a torch custom operator (solforge::hgemm) with a fake implementation, so torch.compile
traces it as one opaque node (shapes from the fake) and CUDA graphs capture whatever kernel it
launches on the current stream. While a graph is being captured nothing can be timed, so a
shape met first during capture runs torch.matmul and is verified at its first eager call.
Inference only: the operator has no backward.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from solforge.hgemm import kernels
from solforge.hgemm.measure import CudaMeasurer
from solforge.hgemm.retrieve import Retriever
from solforge.hgemm.space import Config, Shape, layout_of
from solforge.hgemm.table import Table, default_table_path, load_table

ALIGNMENT = 16  # bytes: TMA descriptors need 16-byte-aligned base addresses
CACHE_ENV = "SOLFORGE_HGEMM_CACHE"


def shape_of(a: torch.Tensor, b: torch.Tensor, accumulate: str = "fp32") -> Shape | None:
    """The tuned-table shape of a @ b, or None when the dispatcher leaves it to torch.matmul."""
    if a.dim() != 2 or b.dim() != 2 or not (a.is_cuda and b.is_cuda) or a.device != b.device:
        return None
    if a.dtype != b.dtype or a.dtype not in (torch.float16, torch.bfloat16):
        return None
    if a.shape[1] != b.shape[0] or 0 in (*a.shape, b.shape[1]):
        return None
    if a.stride(1) != 1 or a.stride(0) < a.shape[1]:
        return None
    layout = layout_of(b)
    if layout is None or a.data_ptr() % ALIGNMENT or b.data_ptr() % ALIGNMENT:
        return None
    if accumulate == "fp16" and a.dtype != torch.float16:
        return None
    dtype = "float16" if a.dtype == torch.float16 else "bfloat16"
    return Shape(a.shape[0], b.shape[1], a.shape[1], dtype, layout, accumulate)


class Dispatcher:
    """Chooses a kernel per shape: the table first, then retrieval, else torch.matmul."""

    def __init__(self, table: Table, retriever: Retriever | None = None) -> None:
        self.table = table
        self.retriever = retriever
        self.choices: dict[str, Config | None] = {}

    def choose(self, a: torch.Tensor, b: torch.Tensor, accumulate: str = "fp32") -> Config | None:
        shape = shape_of(a, b, accumulate)
        return None if shape is None else self.choose_shape(shape, a.device)

    def choose_shape(self, shape: Shape, device: torch.device) -> Config | None:
        """The kernel for `shape` on `device`, or None for torch.matmul (cached per shape)."""
        if shape.key in self.choices:
            return self.choices[shape.key]
        entry = self.table.get(shape)
        if entry is not None:
            config = entry.best if entry.use_kernel else None
        elif self.retriever is None:
            config = None
        elif device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            return None  # nothing can be timed now; verify at the first eager call
        else:
            config = self.retriever.choose(shape).config
        if config is not None and not kernels.runs_here(config, device):
            config = None
        self.choices[shape.key] = config
        return config


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


@torch.library.custom_op("solforge::hgemm", mutates_args=())
def hgemm(a: torch.Tensor, b: torch.Tensor, accumulate: str = "fp32") -> torch.Tensor:
    config = active().choose(a, b, accumulate)
    if config is None:
        return torch.matmul(a, b)
    return kernels.run(config, a, b)


@hgemm.register_fake
def _hgemm_fake(a: torch.Tensor, b: torch.Tensor, accumulate: str = "fp32") -> torch.Tensor:
    torch._check(a.dim() == 2 and b.dim() == 2 and a.shape[1] == b.shape[0],
                 lambda: f"hgemm: cannot multiply {tuple(a.shape)} by {tuple(b.shape)}")
    return a.new_empty((a.shape[0], b.shape[1]))


def matmul(a: torch.Tensor, b: torch.Tensor, accumulate: str = "fp32") -> torch.Tensor:
    """a @ b for 2-D a and b: the tuned kernel where it wins, else torch.matmul. `accumulate`
    "fp16" lets float16 kernels accumulate in float16 (looser tolerance: space.tolerance)."""
    if a.dim() != 2 or b.dim() != 2:
        return torch.matmul(a, b)
    return hgemm(a, b, accumulate)
