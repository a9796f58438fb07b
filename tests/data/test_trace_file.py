"""The one trace reader: good lines round-trip, a bad line is named by file and line."""

from __future__ import annotations

import pytest

from solforge.data.trace import (
    Environment,
    Evaluation,
    Status,
    Trace,
    TraceFormatError,
    append_traces,
    read_traces,
)


def _trace(uuid: str) -> Trace:
    evaluation = Evaluation(status=Status.COMPILE_ERROR, environment=Environment("CPU_x86_64", {}),
                            timestamp="2026-12-01T00:00:00Z", log="no kernel")
    return Trace("rmsnorm", "candidate", {"uuid": uuid}, evaluation)


def test_traces_round_trip(tmp_path):
    path = tmp_path / "traces.jsonl"
    append_traces(path, [_trace("a"), _trace("b")])
    assert read_traces(path) == [_trace("a"), _trace("b")]


@pytest.mark.parametrize("line, reason", [("{not json", "invalid JSON"),
                                          ('{"definition": "x"}', "not a trace record")])
def test_a_bad_line_is_named(tmp_path, line, reason):
    path = tmp_path / "traces.jsonl"
    append_traces(path, [_trace("a")])
    with path.open("a") as out:
        out.write(line + "\n")
    with pytest.raises(TraceFormatError, match=rf"traces\.jsonl:2: {reason}"):
        read_traces(path)


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(TraceFormatError, match=r"missing\.jsonl: no such file"):
        read_traces(tmp_path / "missing.jsonl")
