"""Import the public problem datasets, SOL-ExecBench and flashinfer-trace, as solforge problems.

Both datasets hold the same two records, a FlashInfer-Trace definition and its workloads, in
different containers:
- SOL-ExecBench on Hugging Face (`nvidia/SOL-ExecBench`): one row per problem in four configs
  (L1, L2, Quant, FlashInfer-Bench). A row has the columns name, description, hf_id, axes, inputs,
  outputs, reference, custom_inputs_entrypoint and workloads; axes, inputs, outputs and workloads
  hold JSON text. The project's scripts/download_solexecbench.py unpacks the rows into
  <config>/<name>/definition.json + workload.jsonl, and its FlashInfer-Bench problems load their
  safetensors blobs from a flashinfer-trace checkout.
- flashinfer-trace (`flashinfer-ai/flashinfer-trace`): definitions/<op_type>/<name>.json and
  workloads/<op_type>/<name>.jsonl, whose lines are workload traces {"definition", "workload"};
  safetensors inputs live under blob/, their paths relative to the dataset root.
Either may also come as plain problem folders (definition.json + workload.jsonl).

Every definition becomes <out>/<tier>/<name>/ with definition.json and workload.jsonl. solforge
resolves a safetensors path against the problem folder, so each blob is copied into the new folder
(or, on request, referenced by a path relative to it). A definition or workload that does not load
is reported with its file, field and reason, and the import goes on with the rest.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from solforge.data.definition import Definition, parse_definition
from solforge.data.workload import Workload, parse_workload
from solforge.errors import ProblemError
from solforge.problem.problem import DEFINITION_FILE, WORKLOAD_FILES, load_problem

# SOL-ExecBench's configs (its scripts/run_dataset.py CATEGORIES) and solforge's tiers.
TIER_OF_CATEGORY = {"l1": "l1", "l2": "l2", "quant": "quant", "flashinfer-bench": "fib",
                    "fib": "fib"}
ROW_FILE_SUFFIXES = (".json", ".jsonl", ".parquet")
_JSON_TEXT_COLUMNS = ("axes", "inputs", "outputs", "constraints", "tags", "workloads")
_LFS_POINTER = b"version https://git-lfs"


@dataclass(frozen=True)
class ImportIssue:
    """Something that was not imported: where it came from and why."""

    file: str
    field: str
    reason: str

    @classmethod
    def of(cls, error: ProblemError) -> ImportIssue:
        return cls(error.file, error.field, error.reason)

    def __str__(self) -> str:
        return f"{self.file}: {self.field}: {self.reason}"


@dataclass(frozen=True)
class ImportReport:
    written: tuple[Path, ...]  # problem folders, each loads with load_problem
    issues: tuple[ImportIssue, ...]


@dataclass(frozen=True)
class SourceWorkload:
    data: Any  # one decoded workload (bare or a workload trace)
    file: str  # where it came from, for reports
    line: int


@dataclass(frozen=True)
class SourceProblem:
    """One definition and its workloads as a dataset holds them, not yet checked."""

    definition: Any
    workloads: tuple[SourceWorkload, ...]
    file: str  # where the definition came from, for reports
    tier: str | None
    blob_roots: tuple[Path, ...]  # folders a relative safetensors path is resolved against


@dataclass(frozen=True)
class DatasetScan:
    """What a dataset holds: its problems, unchecked, and the files that could not be read."""

    problems: list[SourceProblem]
    issues: list[ImportIssue]


def tier_of_category(category: str) -> str | None:
    """solforge's tier for a SOL-ExecBench config name (`L1`, `Quant`, `FlashInfer-Bench`)."""
    return TIER_OF_CATEGORY.get(category.strip().lower())


def import_sol_execbench(path: str | Path, out_dir: str | Path, *, tier: str | None = None,
                         blob_roots: Iterable[str | Path] = (),
                         copy_blobs: bool = True) -> ImportReport:
    """Import SOL-ExecBench rows (.json, .jsonl, .parquet) or problem folders under `path`.

    The tier is the config named in the path (`L1/`, `Quant/train/0000.parquet`) unless `tier`
    is given. Safetensors paths resolve against the problem folder or row file's folder, `path`,
    then each of `blob_roots` (a flashinfer-trace checkout, for the FlashInfer-Bench config).
    """
    scan = scan_sol_execbench(Path(path), tuple(Path(r) for r in blob_roots))
    if tier is not None:
        scan = DatasetScan([replace(p, tier=tier) for p in scan.problems], scan.issues)
    return write_problems(scan, Path(out_dir), copy_blobs)


def import_flashinfer_trace(path: str | Path, out_dir: str | Path, *,
                            blob_roots: Iterable[str | Path] = (),
                            copy_blobs: bool = True) -> ImportReport:
    """Import a flashinfer-trace dataset root (definitions/ + workloads/), or problem folders
    under `path`, into `out_dir/fib/`."""
    scan = scan_flashinfer_trace(Path(path), tuple(Path(r) for r in blob_roots))
    return write_problems(scan, Path(out_dir), copy_blobs)


# ---- reading SOL-ExecBench ----------------------------------------------------------------------

def scan_sol_execbench(path: Path, blob_roots: tuple[Path, ...] = ()) -> DatasetScan:
    if path.is_file() and path.name == DEFINITION_FILE:
        path = path.parent
    if path.is_file():
        return _scan_row_file(path, path.parent, blob_roots)
    scans = [_scan_folders(path, blob_roots, lambda folder: _tier_in_path(folder, path))]
    folders = {p.parent for p in path.rglob(DEFINITION_FILE)}
    for file in sorted(path.rglob("*")):
        inside_a_folder = any(parent in folders for parent in file.parents)
        if file.suffix in ROW_FILE_SUFFIXES and file.is_file() and not inside_a_folder:
            scans.append(_scan_row_file(file, path, blob_roots))
    return DatasetScan([p for scan in scans for p in scan.problems],
                       [i for scan in scans for i in scan.issues])


def _scan_row_file(file: Path, root: Path, blob_roots: tuple[Path, ...]) -> DatasetScan:
    tier = _tier_in_path(file.with_suffix(""), root)
    roots = (file.parent, root, *blob_roots)
    try:
        rows, issues = _read_rows(file)
    except ProblemError as exc:
        return DatasetScan([], [ImportIssue.of(exc)])
    problems = []
    for number, row in rows:
        try:
            problems.append(_row_problem(row, f"{file} row {number}", tier, roots))
        except ProblemError as exc:
            issues.append(ImportIssue.of(exc))
    return DatasetScan(problems, issues)


def _read_rows(file: Path) -> tuple[list[tuple[int, Any]], list[ImportIssue]]:
    """(row number, row) pairs; a JSONL line that is not JSON is an issue, not a row."""
    if file.suffix == ".parquet":
        return list(enumerate(_parquet_rows(file), start=1)), []
    if file.suffix == ".jsonl":
        return _jsonl_objects(file)
    data = _json_file(file)
    if isinstance(data, Mapping) and isinstance(data.get("rows"), list):
        # The Hugging Face dataset viewer's /rows answer: {"rows": [{"row_idx", "row"}, ...]}.
        data = [r.get("row", r) if isinstance(r, Mapping) else r for r in data["rows"]]
    rows = data if isinstance(data, list) else [data]
    return list(enumerate(rows, start=1)), []


def _parquet_rows(file: Path) -> list[dict[str, Any]]:
    try:
        import pyarrow.parquet as parquet
    except ImportError:
        raise ProblemError(file, "<file>", "reading parquet needs the `pyarrow` package; "
                                           "install it or convert the rows to JSONL") from None
    try:
        return parquet.read_table(file).to_pylist()
    except Exception as exc:  # pyarrow raises its own error types for damaged files
        raise ProblemError(file, "<file>", f"not a readable parquet file: {exc}") from None


def _row_problem(row: Any, label: str, tier: str | None,
                 roots: tuple[Path, ...]) -> SourceProblem:
    """A dataset row: the definition's fields plus `workloads`, some of them JSON text."""
    if not isinstance(row, Mapping):
        raise ProblemError(label, "<row>", f"expected an object, got {type(row).__name__}")
    name = row.get("name")
    label = f"{label} ({name})" if isinstance(name, str) else label
    fields = {key: _decoded_column(key, value, label) for key, value in row.items()}
    workloads = fields.pop("workloads", None)
    if not isinstance(workloads, list):
        raise ProblemError(label, "workloads", "missing, or not a list of workloads")
    where = f"{label}.workloads"
    items = tuple(SourceWorkload(w, where, i) for i, w in enumerate(workloads, start=1))
    return SourceProblem(fields, items, label, tier, roots)


def _decoded_column(key: str, value: Any, label: str) -> Any:
    if key not in _JSON_TEXT_COLUMNS or not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        raise ProblemError(label, key, f"invalid JSON text: {exc.msg}") from None


def _tier_in_path(path: Path, root: Path) -> str | None:
    """The tier of the last SOL-ExecBench config named in `path` (from `root`'s name on)."""
    parts = (root.name, *path.relative_to(root).parts)
    tiers = [tier_of_category(p) for p in parts]
    found = [t for t in tiers if t is not None]
    return found[-1] if found else None


# ---- reading flashinfer-trace -------------------------------------------------------------------

def scan_flashinfer_trace(path: Path, blob_roots: tuple[Path, ...] = ()) -> DatasetScan:
    if path.is_file() and path.name == DEFINITION_FILE:
        path = path.parent
    if not (path / "definitions").is_dir():
        return _scan_folders(path, blob_roots, lambda folder: "fib")
    workloads, issues = _trace_set_workloads(path / "workloads")
    problems = []
    for file in sorted((path / "definitions").rglob("*.json")):
        try:
            definition = _json_file(file)
        except ProblemError as exc:
            issues.append(ImportIssue.of(exc))
            continue
        name = definition.get("name") if isinstance(definition, Mapping) else None
        items = tuple(workloads.pop(name, []))
        problems.append(SourceProblem(definition, items, str(file), "fib", (path, *blob_roots)))
    for name, items in workloads.items():
        issues.append(ImportIssue(items[0].file, "definition",
                                  f"no definition named {name!r} under definitions/"))
    return DatasetScan(problems, issues)


def _trace_set_workloads(folder: Path) -> tuple[dict[str, list[SourceWorkload]],
                                                list[ImportIssue]]:
    """Workload traces by definition name; a bare workload belongs to the file's stem."""
    by_name: dict[str, list[SourceWorkload]] = {}
    issues: list[ImportIssue] = []
    for file in sorted(folder.rglob("*.jsonl")) if folder.is_dir() else []:
        lines, bad = _jsonl_objects(file)
        issues.extend(bad)
        for number, data in lines:
            name = data.get("definition") if isinstance(data, Mapping) else None
            key = name if isinstance(name, str) else file.stem
            by_name.setdefault(key, []).append(SourceWorkload(data, str(file), number))
    return by_name, issues


# ---- reading problem folders --------------------------------------------------------------------

def _scan_folders(root: Path, blob_roots: tuple[Path, ...],
                  tier_of: Callable[[Path], str | None]) -> DatasetScan:
    """Every folder under `root` (or `root` itself) holding a definition.json."""
    problems: list[SourceProblem] = []
    issues: list[ImportIssue] = []
    for folder in sorted(p.parent for p in root.rglob(DEFINITION_FILE)):
        roots = (folder, root, *blob_roots)
        try:
            definition = _json_file(folder / DEFINITION_FILE)
        except ProblemError as exc:
            issues.append(ImportIssue.of(exc))
            continue
        reference = folder / "reference.py"  # SOL-ExecBench's unpacked copy of `reference`
        if isinstance(definition, dict) and "reference" not in definition and reference.is_file():
            definition["reference"] = reference.read_text()
        workload_file = next((folder / n for n in WORKLOAD_FILES if (folder / n).is_file()), None)
        if workload_file is None:
            issues.append(ImportIssue(str(folder), WORKLOAD_FILES[0],
                                      f"no such file beside {DEFINITION_FILE} (a problem needs "
                                      f"its workloads, one JSON object a line): not imported"))
            continue
        lines, bad = _jsonl_objects(workload_file)
        issues.extend(bad)
        items = tuple(SourceWorkload(d, str(workload_file), n) for n, d in lines)
        problems.append(SourceProblem(definition, items, str(folder / DEFINITION_FILE),
                                      tier_of(folder), roots))
    return DatasetScan(problems, issues)


def _json_file(file: Path) -> Any:
    try:
        return json.loads(file.read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise ProblemError(file, "<file>", f"cannot be read: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ProblemError(file, f"line {exc.lineno}", f"invalid JSON: {exc.msg}") from None


def _jsonl_objects(file: Path) -> tuple[list[tuple[int, Any]], list[ImportIssue]]:
    """(line number, decoded line) for each non-empty line; an undecodable line is an issue."""
    try:
        lines = file.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        return [], [ImportIssue(str(file), "<file>", f"cannot be read: {exc}")]
    objects: list[tuple[int, Any]] = []
    issues: list[ImportIssue] = []
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        try:
            objects.append((number, json.loads(text)))
        except json.JSONDecodeError as exc:
            issues.append(ImportIssue(str(file), f"line {number}", f"invalid JSON: {exc.msg}"))
    return objects, issues


# ---- writing problem folders --------------------------------------------------------------------

def write_problems(scan: DatasetScan, out_dir: Path, copy_blobs: bool = True) -> ImportReport:
    written: list[Path] = []
    issues = list(scan.issues)
    for source in scan.problems:
        folder, problem_issues = write_problem(source, out_dir, copy_blobs, written)
        issues.extend(problem_issues)
        if folder is not None:
            written.append(folder)
    return ImportReport(tuple(written), tuple(issues))


def write_problem(source: SourceProblem, out_dir: Path, copy_blobs: bool = True,
                  taken: Collection[Path] = ()) -> tuple[Path | None, list[ImportIssue]]:
    """Write one problem folder; workloads that do not load are left out and reported."""
    try:
        definition = parse_definition(source.definition, source.file)
        folder = _problem_folder(out_dir, source.tier, definition.name, source.file)
    except ProblemError as exc:
        return None, [ImportIssue.of(exc)]
    if folder in taken:
        return None, [ImportIssue(source.file, "name",
                                  f"{definition.name!r} was already imported into {folder}")]
    workloads, blobs, issues = _placed_workloads(source, definition, folder, copy_blobs)
    if not workloads:
        reason = (f"none of its {len(source.workloads)} workloads loads: not imported"
                  if source.workloads else "its workload file holds no workloads: not imported")
        issues.append(ImportIssue(source.file, "workloads", reason))
        return None, issues
    folder.mkdir(parents=True, exist_ok=True)
    (folder / DEFINITION_FILE).write_text(json.dumps(definition.to_dict(), indent=2) + "\n")
    lines = [json.dumps(w.to_dict()) for w in workloads]
    (folder / WORKLOAD_FILES[0]).write_text("\n".join(lines) + "\n")
    for target, blob in blobs.items():
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.resolve() != blob.resolve():
            shutil.copyfile(blob, target)
    try:
        load_problem(folder)
    except ProblemError as exc:  # a round-trip bug: keep nothing that does not load
        (folder / DEFINITION_FILE).unlink()
        (folder / WORKLOAD_FILES[0]).unlink()
        return None, [*issues, ImportIssue.of(exc)]
    return folder, issues


def _problem_folder(out_dir: Path, tier: str | None, name: str, file: str) -> Path:
    if name in {".", ".."} or "/" in name or "\\" in name:
        raise ProblemError(file, "name", f"{name!r} cannot be a folder name")
    return out_dir / tier / name if tier else out_dir / name


def _placed_workloads(source: SourceProblem, definition: Definition, folder: Path,
                      copy_blobs: bool,
                      ) -> tuple[list[Workload], dict[Path, Path], list[ImportIssue]]:
    """The workloads that load, with safetensors paths rewritten for `folder`, and the blobs
    to copy (target -> source)."""
    workloads: list[Workload] = []
    blobs: dict[Path, Path] = {}
    issues: list[ImportIssue] = []
    seen: set[str] = set()
    for item in source.workloads:
        try:
            workload = parse_workload(item.data, definition, item.file, item.line)
            if workload.uuid in seen:
                raise ProblemError(item.file, f"line {item.line}.uuid",
                                   f"duplicate uuid {workload.uuid!r}")
            workload, copies = _place_blobs(workload, source.blob_roots, folder, copy_blobs,
                                            item.file)
        except ProblemError as exc:
            issues.append(ImportIssue.of(exc))
            continue
        seen.add(workload.uuid)
        workloads.append(workload)
        blobs.update(copies)
    return workloads, blobs, issues


def _place_blobs(workload: Workload, roots: tuple[Path, ...], folder: Path, copy_blobs: bool,
                 file: str) -> tuple[Workload, dict[Path, Path]]:
    inputs = dict(workload.inputs)
    copies: dict[Path, Path] = {}
    for name, source in workload.inputs.items():
        if source.kind != "safetensors":
            continue
        field = f"workload {workload.uuid}.inputs.{name}.path"
        blob = _find_blob(source.path, roots, file, field)
        if copy_blobs:
            relative = Path(source.path)
            if relative.is_absolute() or ".." in relative.parts:
                relative = Path("blob") / blob.name
            copies[folder / relative] = blob
        else:
            relative = Path(os.path.relpath(blob.resolve(), folder.resolve()))
        inputs[name] = replace(source, path=relative.as_posix())
    return replace(workload, inputs=inputs), copies


def _find_blob(path: str, roots: tuple[Path, ...], file: str, field: str) -> Path:
    candidates = [Path(path)] if Path(path).is_absolute() else [r / path for r in roots]
    blob = next((c for c in candidates if c.is_file()), None)
    if blob is None:
        searched = ", ".join(str(r) for r in roots)
        raise ProblemError(file, field, f"safetensors file {path!r} not found (searched "
                                        f"{searched}; pass the dataset with --blob-root)")
    with blob.open("rb") as handle:
        if handle.read(len(_LFS_POINTER)) == _LFS_POINTER:
            raise ProblemError(file, field, f"{blob} is a Git LFS pointer, not the tensor data "
                                            "(fetch it with `git lfs pull`)")
    return blob
