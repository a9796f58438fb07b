"""Solution languages: bindings, packages per extra, GPU limits, compiler-flag allow-list, cache."""

from __future__ import annotations

import json

import pytest
from helpers import TESTS

from solforge.data import languages
from solforge.data.solution import load_solution, parse_solution
from solforge.data.trace import Status
from solforge.harness.build import BuildFailure, build_solution
from solforge.harness.compile_flags import refused_flag

EXPLOIT = TESTS / "exploits" / "build_flag_shell" / "solution.json"
TVM_FFI_RMSNORM = TESTS / "fixtures" / "languages" / "tvm_ffi_rmsnorm" / "solution.json"
CPP_RMSNORM = TESTS / "fixtures" / "harness" / "honest" / "cpp_rmsnorm" / "solution.json"


def _solution(languages_: list[str], content: str = "def run(x):\n    return x\n",
              path: str = "kernel.py", **spec) -> dict:
    return {"name": "s", "definition": "d", "spec": {"languages": languages_,
                                                     "entry_point": f"{path}::run", **spec},
            "sources": [{"path": path, "content": content}]}


# -- compiler flags ----------------------------------------------------------------------------

ALLOWED_CUDA = ["-O3", "--use_fast_math", "-std=c++17", "-lineinfo", "--expt-relaxed-constexpr",
                "-gencode=arch=compute_90a,code=sm_90a", "-arch=sm_100a", "-Xptxas=-v",
                "-DNDEBUG", "-DBLOCK=128", "-UFOO", "--maxrregcount=128",
                "-Xcompiler=-fopenmp,-O3", "-U__CUDA_NO_HALF_OPERATORS__", "-Iinclude"]


@pytest.mark.parametrize("flag", ALLOWED_CUDA)
def test_ordinary_cuda_flags_are_allowed(flag):
    assert refused_flag((), (flag,), ()) is None


@pytest.mark.parametrize("flag", [
    "-DX=`touch /tmp/pwn`", "$(id)", "-O3;id", "-O3 -o /tmp/x", "-O3|sh", "-O3&&id",
    "-I/etc", "-I../../secret", "-fplugin=evil", "-Xcompiler=-fplugin=evil", "-o", "-O3\n",
    "'-O3'", "-D$X", "--compiler-bindir=/tmp/cc", "-ccbin=/tmp/cc", "-Wl,-rpath,/tmp"])
def test_shell_and_path_tricks_are_refused(flag):
    refused = refused_flag((), (flag,), ())
    assert refused is not None and refused.flag == flag
    assert "spec.compile_options.cuda_cflags" in refused.message()


def test_linker_takes_only_libraries():
    assert refused_flag((), (), ("-lcuda", "-lcudnn", "-lcublasLt")) is None
    assert refused_flag((), (), ("-L/tmp",)).flag == "-L/tmp"
    assert refused_flag(("-O2",), (), ("-O3",)).field == "ld_flags"


def test_sol_execbench_example_flags_are_allowed():
    """The flags the public examples ship (cuda_cpp, cudnn, cutlass) build unchanged."""
    for cflags, cuda, ld in ((["-std=c++17"], ["-std=c++17"], []),
                             ([], ["-O3", "--use_fast_math", "-std=c++17"], ["-lcuda"]),
                             ([], [], ["-lcudnn"])):
        assert refused_flag(tuple(cflags), tuple(cuda), tuple(ld)) is None


def test_backquoted_flag_is_a_compile_error_and_runs_nothing(tmp_path):
    solution = load_solution(EXPLOIT)
    with pytest.raises(BuildFailure) as caught:
        build_solution(solution, tmp_path, "cpu", timeout_s=60)
    assert caught.value.status is Status.COMPILE_ERROR
    assert "`touch solforge_build_flag_ran`" in caught.value.message
    assert "\n" not in caught.value.message
    assert not list(tmp_path.rglob("solforge_build_flag_ran"))
    assert not list(tmp_path.rglob("build.ninja"))


# -- packages and extras -----------------------------------------------------------------------

@pytest.mark.parametrize(("language", "extra"), [("cute_dsl", "cute-dsl"), ("cutile", "cutile"),
                                                 ("tilelang", "tilelang")])
def test_missing_language_package_names_the_extra(language, extra, tmp_path, monkeypatch):
    monkeypatch.setattr(languages, "is_installed", lambda module: False)
    solution = parse_solution(_solution([language]))
    with pytest.raises(BuildFailure) as caught:
        build_solution(solution, tmp_path, "cpu", timeout_s=60)
    assert caught.value.status is Status.COMPILE_ERROR
    assert f"solforge[{extra}]" in caught.value.message
    assert "\n" not in caught.value.message


def test_missing_tvm_ffi_names_its_extra(tmp_path, monkeypatch):
    monkeypatch.setattr(languages, "is_installed", lambda module: module != "tvm_ffi")
    solution = load_solution(TVM_FFI_RMSNORM)
    with pytest.raises(BuildFailure) as caught:
        build_solution(solution, tmp_path, "cpu", timeout_s=60)
    assert "TVM-FFI" in caught.value.message and "solforge[tvm-ffi]" in caught.value.message


def test_cutile_refused_before_blackwell_in_one_line():
    message = languages.unsupported_gpu(("cutile",), (9, 0), "NVIDIA H200")
    assert message == ("language cutile runs on GPUs of compute capability 10.0 or newer "
                       "(Blackwell); this NVIDIA H200 is 9.0")
    assert languages.unsupported_gpu(("cutile",), (10, 0), "NVIDIA B200") is None
    assert languages.unsupported_gpu(("triton",), (8, 0), "NVIDIA A100") is None


def test_every_language_has_a_family_and_extras_exist_in_pyproject():
    pyproject = (TESTS.parent / "pyproject.toml").read_text()
    for language in languages.LANGUAGES.values():
        assert language.family in (languages.PYTHON, languages.CPP)
        if language.extra is not None:
            assert f"\n{language.extra} = [" in pyproject, language.extra
    assert f"\n{languages.TVM_FFI_EXTRA} = [" in pyproject


# -- bindings and headers ----------------------------------------------------------------------

def test_binding_from_spec_or_sources():
    tvm = load_solution(TVM_FFI_RMSNORM)
    assert tvm.binding == languages.TVM_FFI_BINDING
    assert "tvm_ffi" in tvm.preload_modules()
    assert load_solution(CPP_RMSNORM).binding == languages.TORCH_BINDING
    exported = _solution(["cuda"], "TVM_FFI_DLL_EXPORT_TYPED_FUNC(run, run);", "kernel.cu")
    assert parse_solution(exported).binding == languages.TVM_FFI_BINDING  # FlashInfer-Bench's
    assert parse_solution(_solution(["cuda"], "PYBIND11_MODULE(m, x) {}", "k.cu")).binding == \
        languages.TORCH_BINDING


def test_cutlass_headers_come_from_the_wheel(tmp_path, monkeypatch):
    include = tmp_path / "cutlass_library" / "source" / "include"
    (include / "cute").mkdir(parents=True)
    monkeypatch.setattr(languages, "_package_dir",
                        lambda module: tmp_path / module if module == "cutlass_library" else None)
    assert languages.cutlass_include_dirs() == [include]


def test_spec_round_trip_keeps_binding_and_dependencies():
    data = json.loads(TVM_FFI_RMSNORM.read_text())
    spec = parse_solution(data).to_dict()["spec"]
    assert spec["binding"] == "tvm-ffi" and spec["dependencies"] == []


# -- a real TVM-FFI build, run and cache (where apache-tvm-ffi is installed) -----------------

@pytest.mark.slow
def test_tvm_ffi_solution_builds_passes_and_is_cached(tmp_path):
    pytest.importorskip("tvm_ffi", reason="needs apache-tvm-ffi (the tvm-ffi extra)")
    from solforge.harness.evaluate import EvalConfig, evaluate
    from solforge.problem import load_problem

    problem = load_problem(TESTS / "fixtures" / "harness" / "rmsnorm_small")
    solution = load_solution(TVM_FFI_RMSNORM)
    config = EvalConfig(device="cpu", baseline="eager", smallest=1, cache_dir=tmp_path)
    first = evaluate(problem, solution, config)
    again = evaluate(problem, solution, config)
    assert [t.evaluation.status for t in first + again] == [Status.PASSED] * 2, first[0]
    assert first[0].evaluation.build_seconds > 0
    assert again[0].evaluation.build_seconds == 0.0  # the identical solution is not rebuilt
