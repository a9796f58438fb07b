"""Whether the tests' Triton kernels run in Triton's interpreter or compiled for the GPU.

Triton reads TRITON_INTERPRET when a kernel is decorated, so one test process takes one mode.
The CPU tests need the interpreter: their tensors are the CPU's. A GPU test given the interpreter
sends every block of a GPU's tensors through the host, minutes where the kernel takes
microseconds, and no CUDA graph can capture it: under it the HGEMM tests failed on an H100
(2026-12-06) and the driver's comparison kernel hung (2026-12-05).
"""

from __future__ import annotations


def interprets(markexpr: str, has_gpu: bool) -> bool:
    """True unless the run takes only the `gpu`-marked tests (`pytest -m gpu`, as
    benchmarks/run_gpu_checks.sh runs them) on a machine with a GPU."""
    return not (has_gpu and markexpr.strip() == "gpu")
