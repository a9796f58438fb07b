"""Names the command-line help shows, kept here so `--help` never imports torch.

Each value mirrors the constant of the module that uses it (tests/test_cli.py checks they agree);
those modules import torch, which takes seconds, and help must take well under one.
"""

from __future__ import annotations

TIERS = ("l1", "l2", "quant", "fib")  # solforge.problem.suite.TIERS
DEFAULT_FP32_POLICY = "tf32"  # solforge.solar.DEFAULT_FP32_POLICY
FP32_POLICIES = {  # solforge.solar.FP32_POLICIES
    "tf32": "float32 products on the TF32 tensor cores (PyTorch with allow_tf32 / 'high')",
    "simt": "float32 products on the CUDA cores (strict IEEE float32, PyTorch's default)",
    "fastest": "float32 products at the fastest tensor-core rate of the chip (a floor no "
               "kernel can beat, whatever precision it computes in)",
}
BASELINES = ("eager", "compile", "best")
DEFAULT_STORE = "solforge.db"  # the file of solforge.store.DEFAULT_URL
