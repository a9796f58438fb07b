"""A candidate kernel: the FlashInfer-Bench / SOL-ExecBench solution JSON, or a bare `.py` file.

The JSON form carries its sources inline (`sources: [{path, content}]`), an entry point
`"file.py::fn"`, its languages (`spec.languages`, or the older single `spec.language`) and the
calling convention: with `destination_passing_style` (the default) the harness pre-allocates the
outputs and passes them after the inputs; without it `fn(*inputs)` returns them. A bare `.py` file
is a convenience: its `run(*inputs)` returns the outputs.

Languages fall in two families. Python ones (pytorch, triton, cute_dsl, ...) are imported in the
candidate's process; C++ ones (cuda_cpp, cutlass, cudnn, cublas, ...) are first built into a
Python extension by a separate compile phase. Source paths are checked here (relative, no `..`),
so writing them to disk can never escape the build folder.
"""

from __future__ import annotations

import io
import json
import re
import tokenize
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from solforge.data.languages import (
    CPP_LANGUAGES,
    PYTHON_LANGUAGES,
    TORCH_BINDING,
    TVM_FFI_BINDING,
    TVM_FFI_EXPORT,
    preload_modules,
)
from solforge.errors import SolforgeError

CPP_SUFFIXES = (".cu", ".cpp", ".cc", ".cxx", ".c")
# Names in a Python source's code (not its comments or strings) that reach torch._dynamo:
# torch.compile and torch.compiler, dynamo and inductor themselves, torch.export, and
# flex_attention, which runs through dynamo even when called eagerly. See uses_dynamo.
DYNAMO_NAMES = frozenset({"compile", "compiler", "_dynamo", "_inductor", "export", "_export",
                          "flex_attention", "_higher_order_ops"})
# The same reached from another language (C++ embedding Python names them as dotted text).
_DYNAMO_PATH = re.compile(
    r"\btorch\s*\.\s*(?:_dynamo|_inductor|_export|compiler|compile|export)\b")
# Libraries a solution declares in spec.dependencies that the worker imports before the guards'
# snapshot (their import starts threads or patches torch, which is not the candidate's doing).
LIBRARY_PRELOADS = {"flashinfer": "flashinfer", "flashinfer-python": "flashinfer",
                    "nvmath": "nvmath", "nvmath-python": "nvmath"}


class SolutionError(SolforgeError):
    """A solution file that cannot be used, with the file and the reason."""

    def __init__(self, file: str | Path, reason: str) -> None:
        super().__init__(f"{file}: {reason}")


@dataclass(frozen=True)
class SourceFile:
    path: str  # relative, POSIX separators
    content: str


@dataclass(frozen=True)
class CompileOptions:
    """Flags for the C++ compile phase (SOL-ExecBench's defaults)."""

    cflags: tuple[str, ...] = ()
    cuda_cflags: tuple[str, ...] = ("-O3", "--use_fast_math")
    ld_flags: tuple[str, ...] = ("-lcuda",)

    def to_dict(self) -> dict[str, list[str]]:
        return {"cflags": list(self.cflags), "cuda_cflags": list(self.cuda_cflags),
                "ld_flags": list(self.ld_flags)}


@dataclass(frozen=True)
class Solution:
    name: str
    definition: str
    author: str
    languages: tuple[str, ...]
    entry_file: str
    entry_function: str
    destination_passing_style: bool
    sources: tuple[SourceFile, ...]
    compile_options: CompileOptions = CompileOptions()
    description: str | None = None
    spec_extra: dict[str, Any] = field(default_factory=dict)  # target_hardware, dependencies...

    @property
    def is_cpp(self) -> bool:
        return any(language in CPP_LANGUAGES for language in self.languages)

    @property
    def binding(self) -> str:
        """How a C++ solution meets Python: `spec.binding` when given (FlashInfer-Bench's field),
        else TVM-FFI when a source exports through it, else a PyTorch extension."""
        declared = self.spec_extra.get("binding")
        if declared in (TORCH_BINDING, TVM_FFI_BINDING):
            return declared
        if self.is_cpp and any(TVM_FFI_EXPORT in s.content for s in self.sources):
            return TVM_FFI_BINDING
        return TORCH_BINDING

    @property
    def dependencies(self) -> tuple[str, ...]:
        raw = self.spec_extra.get("dependencies")
        return tuple(d for d in raw if isinstance(d, str)) if isinstance(raw, list) else ()

    @property
    def entry_point(self) -> str:
        return f"{self.entry_file}::{self.entry_function}"

    def preload_modules(self) -> tuple[str, ...]:
        """Modules the worker imports before the guards' snapshot (torch._dynamo where a source
        uses it: see uses_dynamo)."""
        modules = list(preload_modules(self.languages, self.binding))
        modules += [LIBRARY_PRELOADS[d] for d in self.dependencies if d in LIBRARY_PRELOADS]
        if any(uses_dynamo(source) for source in self.sources):
            modules.append("torch._dynamo")
        return tuple(modules)

    def write_sources(self, folder: Path) -> None:
        for source in self.sources:
            target = folder / source.path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(source.content)

    def to_dict(self) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "languages": list(self.languages),
            "entry_point": self.entry_point,
            "destination_passing_style": self.destination_passing_style,
        }
        if self.is_cpp:
            spec["compile_options"] = self.compile_options.to_dict()
        spec.update(self.spec_extra)
        out: dict[str, Any] = {"name": self.name, "definition": self.definition,
                               "author": self.author}
        if self.description is not None:
            out["description"] = self.description
        out["spec"] = spec
        out["sources"] = [{"path": s.path, "content": s.content} for s in self.sources]
        return out


def uses_dynamo(source: SourceFile) -> bool:
    """Whether the source's code names torch.compile, dynamo, inductor or export.

    Importing torch._dynamo re-binds torch functions (torch.manual_seed, ...), and the first
    compile registers kernels, modes and threads. For a solution that uses them the worker
    imports dynamo and compiles once before the guards' snapshot, so none of it is mistaken for
    the candidate's doing; that warm-up costs seconds, so it is not paid for a word in a comment
    or a docstring ("compiled for sm_90a", "1.1x torch.compile"): in Python only the code's
    names count (DYNAMO_NAMES), in other languages a dotted `torch.compile`-like path. A source
    that reaches dynamo only through names it builds (getattr with a string,
    importlib.import_module("torch._dynamo")) gets no warm-up, and the guards flag what dynamo
    re-binds: obfuscated code is judged as such.
    """
    if not source.path.endswith(".py"):
        return _DYNAMO_PATH.search(source.content) is not None
    try:
        return any(token.type == tokenize.NAME and token.string in DYNAMO_NAMES
                   for token in tokenize.generate_tokens(io.StringIO(source.content).readline))
    except (tokenize.TokenError, SyntaxError):  # not Python: it fails its import anyway
        return _DYNAMO_PATH.search(source.content) is not None


def load_solution(path: str | Path, definition_name: str = "") -> Solution:
    """A solution from a `.json` file, or a `.py` file whose `run(...)` returns the outputs."""
    path = Path(path)
    if not path.is_file():
        raise SolutionError(path, "no such file")
    if path.suffix == ".py":
        return solution_from_python(path.read_text(), path.stem, definition_name)
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise SolutionError(path, f"invalid JSON at line {exc.lineno}: {exc.msg}") from None
    return parse_solution(data, path)


def solution_from_python(source: str, name: str, definition_name: str = "") -> Solution:
    """A one-file Python solution: `kernel.py::run`, returning its outputs (no DPS)."""
    language = "triton" if "import triton" in source else "pytorch"
    return Solution(name=name, definition=definition_name, author="unknown",
                    languages=(language,), entry_file="kernel.py", entry_function="run",
                    destination_passing_style=False,
                    sources=(SourceFile("kernel.py", source),))


def parse_solution(data: Any, file: str | Path = "<solution>") -> Solution:
    if not isinstance(data, Mapping):
        raise SolutionError(file, "expected a JSON object")
    spec = data.get("spec")
    if not isinstance(spec, Mapping):
        raise SolutionError(file, "`spec` is missing or not an object")
    name = _text(data, "name", file)
    languages = _languages(spec, file)
    sources = _sources(data.get("sources"), file)
    entry_file, entry_function = _entry_point(spec.get("entry_point"), sources, file)
    dps = spec.get("destination_passing_style", True)
    if not isinstance(dps, bool):
        raise SolutionError(file, "spec.destination_passing_style must be true or false")
    known = {"languages", "language", "entry_point", "destination_passing_style",
             "compile_options"}
    return Solution(
        name=name, definition=str(data.get("definition") or ""),
        author=str(data.get("author") or "unknown"), languages=languages,
        entry_file=entry_file, entry_function=entry_function, destination_passing_style=dps,
        sources=sources, compile_options=_compile_options(spec.get("compile_options"), file),
        description=data.get("description") if isinstance(data.get("description"), str) else None,
        spec_extra={k: v for k, v in spec.items() if k not in known},
    )


def _text(data: Mapping, key: str, file) -> str:
    value = data.get(key)
    if not isinstance(value, str) or not value.strip():
        raise SolutionError(file, f"`{key}` is missing or not a non-empty string")
    return value


def _languages(spec: Mapping, file) -> tuple[str, ...]:
    raw = spec.get("languages", spec.get("language"))
    values = [raw] if isinstance(raw, str) else raw
    if not isinstance(values, list) or not values or not all(isinstance(v, str) for v in values):
        raise SolutionError(file, "spec.languages must be a non-empty list of language names")
    languages = tuple(v.lower() for v in values)
    known = PYTHON_LANGUAGES + CPP_LANGUAGES
    unknown = [lang for lang in languages if lang not in known]
    if unknown:
        raise SolutionError(file, f"unknown languages {unknown} (known: {', '.join(known)})")
    python = [lang for lang in languages if lang in PYTHON_LANGUAGES]
    cpp = [lang for lang in languages if lang in CPP_LANGUAGES]
    if python and cpp:
        raise SolutionError(file, f"cannot mix Python languages {python} with C++ ones {cpp}")
    return languages


def _sources(raw: Any, file) -> tuple[SourceFile, ...]:
    if not isinstance(raw, list) or not raw:
        raise SolutionError(file, "`sources` must be a non-empty list of {path, content}")
    sources: list[SourceFile] = []
    seen: set[str] = set()
    for i, entry in enumerate(raw):
        if not isinstance(entry, Mapping):
            raise SolutionError(file, f"sources[{i}] is not an object")
        path, content = entry.get("path"), entry.get("content")
        if not isinstance(path, str) or not isinstance(content, str):
            raise SolutionError(file, f"sources[{i}] needs string `path` and `content`")
        pure = PurePosixPath(path)
        if not path or pure.is_absolute() or ".." in pure.parts or "\\" in path:
            raise SolutionError(file, f"sources[{i}].path {path!r} must be a relative path "
                                      "without '..'")
        if path in seen:
            raise SolutionError(file, f"sources[{i}].path {path!r} appears twice")
        seen.add(path)
        sources.append(SourceFile(pure.as_posix(), content))
    return tuple(sources)


def _entry_point(raw: Any, sources: tuple[SourceFile, ...], file) -> tuple[str, str]:
    if not isinstance(raw, str) or not raw:
        raise SolutionError(file, "spec.entry_point must be a string like 'kernel.py::run'")
    entry_file, _, function = raw.partition("::")
    function = function or "run"
    if not function.isidentifier():
        raise SolutionError(file, f"spec.entry_point: {function!r} is not a function name")
    if entry_file not in {s.path for s in sources}:
        raise SolutionError(file, f"spec.entry_point: {entry_file!r} is not one of the sources")
    return entry_file, function


def _compile_options(raw: Any, file) -> CompileOptions:
    if raw is None:
        return CompileOptions()
    if not isinstance(raw, Mapping):
        raise SolutionError(file, "spec.compile_options must be an object")
    defaults = CompileOptions()
    values: dict[str, tuple[str, ...]] = {}
    for key in ("cflags", "cuda_cflags", "ld_flags"):
        flags = raw.get(key, list(getattr(defaults, key)))
        if not isinstance(flags, list) or not all(isinstance(f, str) for f in flags):
            raise SolutionError(file, f"spec.compile_options.{key} must be a list of strings")
        values[key] = tuple(flags)
    return CompileOptions(**values)
