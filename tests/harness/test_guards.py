"""What the worker's guards watch, held to what the harness runs between calls."""

from __future__ import annotations


def test_the_l2_flush_runs_only_ops_whose_dispatcher_entries_are_watched():
    """Between two timed calls the flush runs on the harness's own tensors: a kernel a
    candidate registered over any op it runs (a row's `select` once) could shrink what it
    writes. Every op it dispatches, making its buffers too, is one whose entries are compared
    at every return (WATCHED_OPS)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from solforge.harness.guards import WATCHED_OPS
    from solforge.measure import timing

    class Recorder(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.ops: set[str] = set()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            namespace, name, overload = str(func).split(".", 2)
            self.ops.add(f"{namespace}::{name}" + ("" if overload == "default" else
                                                   f".{overload}"))
            return func(*args, **(kwargs or {}))

    with Recorder() as recorder:
        timing._flush(timing._flush_buffer(4096, "cpu"), 3)
    assert recorder.ops == {"aten::empty.memory_format", "aten::fill_.Scalar", "aten::amax"}
    assert recorder.ops <= set(WATCHED_OPS)
