"""Library baselines: where a well-known library implements a problem's op, time it as a third
baseline beside eager PyTorch and torch.compile.

A library baseline is an ordinary value-returning solution (generated source, language pytorch)
judged by the same harness as any candidate, so it is timed the same way and must be correct.
Which library fits is read from the definition, never from its name alone:
- `cudnn-sdpa`: a reference that calls `scaled_dot_product_attention` runs as written with
  PyTorch's cuDNN attention backend forced (every attention, prefill and decode problem);
- `cublaslt`: a two-input GEMM (`x @ w.T` or `a @ b`, one output) through nvmath-python's
  cuBLASLt matmul (compute in float32 for 16-bit inputs, as cuBLAS does);
- `flashinfer-rmsnorm`: an RMSNorm of 16-bit rows (a 2-D activation, a 1-D weight, a scalar
  eps; no residual, no bias) through `flashinfer.norm.rmsnorm`, or `gemma_rmsnorm` where the
  reference scales by 1 + weight: both recognised as the forge's row-norm template recognises
  them (problem/row_norm.py, a CPU run of the reference against each form);
- `flashinfer-rope`: a RoPE of q and k through a float32 cos/sin cache (vLLM's layout: row p is
  [cos | sin] of position p) through `flashinfer.rope.apply_rope_with_cos_sin_cache`, for
  16-bit q and k. The roles and whether the reference rotates NeoX halves or interleaved pairs
  are recognised as the forge's RoPE template recognises them (problem/rope.py: the reference
  runs on a few CPU tokens, and its outputs are compared with both rotations); a reference
  that matches neither, a partial rotation say, gets no baseline;
- `flashinfer-top-k-renorm`: top-k renormalisation of a probability table (a 2-D float32
  table, a scalar k) through `flashinfer.sampling.top_k_renorm_probs`;
- `flashinfer-paged-decode`: batched decode attention over a paged KV cache (recognised by
  problem/paged_decode.py, layout included) through `BatchDecodeWithPagedKVCacheWrapper`: `plan`
  (the page table copied to the host, the split-KV schedule) and `run` on every call. The harness
  gives every timed call new inputs, as a new decode step would, so nothing planned can be
  reused; a server plans once per step for all its layers, so on small batches this time is an
  upper bound of FlashInfer's per-layer cost. Tensor cores for 4 or more query heads per KV
  head (FlashInfer's advice for large GQA groups), CUDA cores below.
- `flashinfer-ragged-prefill`: prefill attention over a ragged batch (recognised by
  problem/ragged_prefill.py, causal or not) through `BatchPrefillWithRaggedKVCacheWrapper`,
  planned and run on every call like the paged decode, for the same reason: the plan's host
  work (the indptrs copied to the host, the schedule) is inside the timed call, so on the
  smallest batches this time is an upper bound of FlashInfer's. Tried before `cudnn-sdpa`: a
  reference that pads the batch to its longest prompt for SDPA would time cuDNN on the padding
  too.
FlashInfer's samplers are not baselines: they draw their own random numbers, and the sampling
problems take theirs as an input so that a sample can be checked.
The score against it is the SOL score with T_b = the library's time:
S_lib = (T_lib - T_SOL) / ((T_k - T_SOL) + (T_lib - T_SOL)).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from solforge.data.definition import Definition, TensorSpec
from solforge.data.solution import Solution, SourceFile
from solforge.problem.paged_decode import recognise_paged_decode
from solforge.problem.ragged_prefill import recognise_ragged_prefill
from solforge.problem.rope import RopeRoles, recognise_rope
from solforge.problem.row_norm import recognise_row_norm
from solforge.score import sol_score

ENTRY = "solforge_library_run"


@dataclass(frozen=True)
class LibraryBaseline:
    name: str  # cudnn-sdpa, cublaslt, flashinfer-rmsnorm, flashinfer-rope, ...
    library: str  # what a reader installs: the pip package
    solution: Solution


def library_baseline(definition: Definition) -> LibraryBaseline | None:
    """The library baseline that fits this definition, or None."""
    for match in (_flashinfer_ragged_prefill, _cudnn_sdpa, _cublaslt, _flashinfer_rmsnorm,
                  _flashinfer_rope, _flashinfer_top_k_renorm, _flashinfer_paged_decode):
        found = match(definition)
        if found is not None:
            return found
    return None


def score_against_library(kernel_ms: float, library_ms: float, sol_ms: float) -> float:
    return sol_score(kernel_ms, library_ms, sol_ms)


def _solution(definition: Definition, name: str, source: str,
              dependencies: list[str]) -> Solution:
    return Solution(name=f"library-{name}", definition=definition.name, author="library",
                    languages=("pytorch",), entry_file="kernel.py", entry_function=ENTRY,
                    destination_passing_style=False, sources=(SourceFile("kernel.py", source),),
                    description=f"library baseline: {name}",
                    spec_extra={"dependencies": dependencies, "target_hardware": ["LOCAL"]})


def _tensor_inputs(definition: Definition) -> list[tuple[str, tuple[str, ...]]]:
    return [(n, tuple(s.shape)) for n, s in definition.inputs.items() if not s.is_scalar]


def _cudnn_sdpa(definition: Definition) -> LibraryBaseline | None:
    if "scaled_dot_product_attention" not in definition.reference:
        return None
    names = ", ".join(definition.inputs)
    source = (f"{definition.reference.rstrip()}\n\n\n"
              "from torch.nn.attention import SDPBackend as _SDPBackend\n"
              "from torch.nn.attention import sdpa_kernel as _sdpa_kernel\n\n\n"
              f"def {ENTRY}({names}):\n"
              '    """The reference, its attention on cuDNN only (no fallback)."""\n'
              "    with _sdpa_kernel([_SDPBackend.CUDNN_ATTENTION]):\n"
              f"        return run({names})\n")
    return LibraryBaseline("cudnn-sdpa", "torch", _solution(definition, "cudnn-sdpa", source,
                                                              ["torch"]))


def _cublaslt(definition: Definition) -> LibraryBaseline | None:
    tensors = _tensor_inputs(definition)
    outputs = list(definition.outputs.values())
    if len(definition.inputs) != 2 or len(tensors) != 2 or len(outputs) != 1:
        return None
    (a, a_shape), (b, b_shape) = tensors
    if len(a_shape) != 2 or len(b_shape) != 2 or outputs[0].is_scalar:
        return None
    out_shape = tuple(outputs[0].shape)
    if a_shape[1] == b_shape[1] and out_shape == (a_shape[0], b_shape[0]):
        operand = f"{b}.T"  # x [M, K] @ w[N, K].T
    elif a_shape[1] == b_shape[0] and out_shape == (a_shape[0], b_shape[1]):
        operand = b
    else:
        return None
    source = ("import nvmath\n\n\n"
              f"def {ENTRY}({a}, {b}):\n"
              '    """cuBLASLt through nvmath-python (its heuristic\'s first algorithm)."""\n'
              f"    return nvmath.linalg.advanced.matmul({a}, {operand})\n")
    return LibraryBaseline("cublaslt", "nvmath-python",
                           _solution(definition, "cublaslt", source, ["nvmath-python"]))


def _flashinfer_rmsnorm(definition: Definition) -> LibraryBaseline | None:
    roles = recognise_row_norm(definition)
    if roles is None or roles.norm != "rms" or roles.residual is not None \
            or roles.bias is not None or not _sixteen_bit(definition.inputs[roles.x]):
        return None
    # Gemma scales by (1 + weight): FlashInfer has a kernel of its own for that form.
    function = "gemma_rmsnorm" if roles.weight_mode == "offset" else "rmsnorm"
    return _flashinfer(definition, "flashinfer-rmsnorm", f"FlashInfer's fused {function} kernel.",
                       [f"return flashinfer.norm.{function}({roles.x}, {roles.weight}, "
                        f"eps={roles.eps})"])


def _flashinfer(definition: Definition, name: str, summary: str, body: list[str],
                preamble: str = "") -> LibraryBaseline:
    """A FlashInfer baseline: `preamble` after the import, then the entry function (the
    definition's inputs as its parameters) with `summary` as its docstring and `body`."""
    source = ("import flashinfer\n" + preamble + "\n\n"
              f"def {ENTRY}({', '.join(definition.inputs)}):\n"
              f'    """{summary}"""\n' + "".join(f"    {line}\n" for line in body))
    return LibraryBaseline(name, "flashinfer-python",
                           _solution(definition, name, source, ["flashinfer"]))


def _sixteen_bit(spec: TensorSpec) -> bool:
    """FlashInfer's norm and RoPE kernels take float16 and bfloat16 activations."""
    return spec.dtype.torch_dtype in (torch.bfloat16, torch.float16)


def _flashinfer_rope(definition: Definition) -> LibraryBaseline | None:
    roles = recognise_rope(definition)
    if roles is None or not _flashinfer_rope_dtypes(definition, roles):
        return None
    q, k, positions, cache = roles.q, roles.k, roles.positions, roles.cache
    neox = not roles.interleaved
    style = "NeoX halves" if neox else "interleaved pairs"
    return _flashinfer(definition, "flashinfer-rope",
                       f"FlashInfer's RoPE through the float32 cos/sin cache ({style}).",
                       ["q_out, k_out = flashinfer.rope.apply_rope_with_cos_sin_cache(",
                        f"    {positions}, {q}.reshape({q}.shape[0], -1), "
                        f"{k}.reshape({k}.shape[0], -1), {q}.shape[-1],",
                        f"    {cache}, is_neox={neox})",
                        f"return q_out.view({q}.shape), k_out.view({k}.shape)"])


def _flashinfer_rope_dtypes(definition: Definition, roles: RopeRoles) -> bool:
    """FlashInfer rotates 16-bit q and k through a float32 cache."""
    specs = definition.inputs
    return _sixteen_bit(specs[roles.q]) and specs[roles.cache].dtype.torch_dtype == torch.float32


def _flashinfer_top_k_renorm(definition: Definition) -> LibraryBaseline | None:
    if definition.op_type != "top_k_renorm_probs" or len(definition.outputs) != 1:
        return None
    specs = list(definition.inputs.items())
    if len(specs) != 2:
        return None
    (probs, ps), (top_k, ks) = specs
    if ps.is_scalar or len(ps.shape) != 2 or ps.dtype.torch_dtype != torch.float32 \
            or not ks.is_scalar or ks.dtype.kind != "int":
        return None
    return _flashinfer(definition, "flashinfer-top-k-renorm",
                       "FlashInfer's top-k renormalisation kernel.",
                       [f"return flashinfer.sampling.top_k_renorm_probs({probs}, {top_k})"])


WORKSPACE_BYTES = 128 * 1024 * 1024  # FlashInfer's recommended float workspace for split-KV
TENSOR_CORE_GROUP = 4  # query heads per KV head from which the tensor-core decode kernel is used


def _flashinfer_paged_decode(definition: Definition) -> LibraryBaseline | None:
    roles = recognise_paged_decode(definition)
    if roles is None:
        return None
    q, k, v = roles.q, roles.k_cache, roles.v_cache
    page_dim = 3 - roles.kv_heads_dim
    preamble = _wrapper_preamble("device, use_tensor_cores",
                                 f'BatchDecodeWithPagedKVCacheWrapper(workspace, "{roles.layout}", '
                                 "use_tensor_cores=use_tensor_cores)")
    return _flashinfer(definition, "flashinfer-paged-decode",
                       "FlashInfer's paged decode: the page table planned, then run.",
                       [f"heads, kv_heads = {q}.shape[1], {k}.shape[{roles.kv_heads_dim}]",
                        f"wrapper = _wrapper({q}.device, heads // kv_heads >= "
                        f"{TENSOR_CORE_GROUP})",
                        f"wrapper.plan({roles.indptr}, {roles.indices}, {roles.last_page_len}, "
                        f"heads, kv_heads, {q}.shape[2],",
                        f"             {k}.shape[{page_dim}], q_data_type={q}.dtype, "
                        f"kv_data_type={k}.dtype,",
                        f"             sm_scale=float({roles.sm_scale}))",
                        f"return wrapper.run({q}, ({k}, {v}))"],
                       preamble)


def _wrapper_preamble(parameters: str, constructor: str) -> str:
    """The source of `_wrapper(parameters)`: one FlashInfer wrapper (`flashinfer.constructor`,
    given `workspace`) per device and parameters, made on first use with its workspace zeroed
    (as FlashInfer asks) and kept, as a server keeps it."""
    return ("import torch\n\n_WRAPPERS = {}\n\n\n"
            f"def _wrapper({parameters}):\n"
            '    """One wrapper per device: its workspace and host buffers are made once."""\n'
            f"    key = ({parameters},)\n"
            "    if key not in _WRAPPERS:\n"
            f"        workspace = torch.zeros({WORKSPACE_BYTES}, dtype=torch.uint8, "
            "device=device)\n"
            f"        _WRAPPERS[key] = flashinfer.{constructor}\n"
            "    return _WRAPPERS[key]\n")


def _flashinfer_ragged_prefill(definition: Definition) -> LibraryBaseline | None:
    roles = recognise_ragged_prefill(definition)
    if roles is None:
        return None
    q, k, v = roles.q, roles.k, roles.v
    mask = "causal" if roles.causal else "no mask"
    return _flashinfer(definition, "flashinfer-ragged-prefill",
                       f"FlashInfer's ragged prefill ({mask}): the batch planned, then run.",
                       [f"wrapper = _wrapper({q}.device)",
                        f"wrapper.plan({roles.qo_indptr}, {roles.kv_indptr}, {q}.shape[1], "
                        f"{k}.shape[1], {q}.shape[2],",
                        f"             causal={roles.causal}, sm_scale=float({roles.sm_scale}), "
                        f"q_data_type={q}.dtype,",
                        f"             kv_data_type={k}.dtype)",
                        f"return wrapper.run({q}, {k}, {v})"],
                       _wrapper_preamble("device",
                                         'BatchPrefillWithRaggedKVCacheWrapper(workspace, "NHD")'))
