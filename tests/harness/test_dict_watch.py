"""CPython's dict watchers count the changes to the watched namespaces (harness/dict_watch.py),
and the identity check at a return compares the names only when that count moved."""

from __future__ import annotations

import ctypes
import glob
import itertools
import json
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from solforge.harness import dict_watch
from solforge.harness.identities import IdentitySnapshot, identity_changes

MODULE = Path(dict_watch.__file__)


def _gated(snapshot: IdentitySnapshot) -> tuple[tuple, tuple]:
    """The snapshot's state with a gate of our own, as `dict_watch.watch` makes it (no watcher
    counts into it: the test advances its count)."""
    word = (ctypes.c_long * 1)()
    gate = dict_watch.make_gate(itertools.count(), ctypes.addressof(word), (word,))
    return (*snapshot.state[:-2], gate, snapshot.state[-1]), gate


def test_the_names_are_compared_only_once_the_count_moved():
    snapshot = IdentitySnapshot(["time"])
    state, gate = _gated(snapshot)
    original = time.perf_counter
    try:
        time.perf_counter = lambda: 0.0
        assert identity_changes(state) == [], "no change counted: the names are not compared"
        assert "time.perf_counter" in snapshot.changed(), "a full check compares them anyway"
        next(gate[0])  # what the watcher does when a watched name is rebound
        assert identity_changes(state) == ["time.perf_counter"]
        assert dict_watch.compared_of(gate) == 0, "a comparison that found a change moves nothing"
    finally:
        time.perf_counter = original
    assert identity_changes(state) == []
    assert dict_watch.compared_of(gate) == 1, "the count a clean comparison saw, kept"
    time.perf_counter = lambda: 0.0
    try:
        assert identity_changes(state) == [], "nothing counted since: not compared again"
    finally:
        time.perf_counter = original


def test_the_count_last_compared_cannot_be_written_from_python():
    _, gate = _gated(IdentitySnapshot(["time"]))
    with pytest.raises(TypeError):
        gate[1][0] = 5


def test_without_dict_watchers_every_return_compares_every_name():
    snapshot = IdentitySnapshot(["time"])
    if dict_watch.available():
        pytest.skip("this Python has dict watchers")
    assert snapshot.gate() is None
    original = time.perf_counter
    try:
        time.perf_counter = lambda: 0.0
        assert identity_changes(snapshot.state) == ["time.perf_counter"]
    finally:
        time.perf_counter = original


def _python_with_watchers() -> str | None:
    """A CPython 3.12 or later on this machine (the module needs nothing else)."""
    found = [shutil.which(f"python3.{minor}") for minor in range(12, 16)]
    found += sorted(glob.glob(str(Path.home() / ".pyenv/versions/3.1[2-9]*/bin/python3")))
    for python in filter(None, found):
        ran = subprocess.run([python, "-c", "import sys; print(sys.version_info >= (3, 12))"],
                             capture_output=True, text=True)
        if ran.returncode == 0 and ran.stdout.strip() == "True":
            return python
    return None


# Every way of changing a namespace, each with what the count should say after it.
WATCHED = '''
import gc, importlib.util, json, sys, types
spec = importlib.util.spec_from_file_location("dict_watch", sys.argv[1])
dict_watch = importlib.util.module_from_spec(spec)
spec.loader.exec_module(dict_watch)
module = types.ModuleType("watched")
module.f, module.counter = len, 0

class Watched:
    def method(self):
        pass

gate = dict_watch.watch([(vars(module), ["f"]),
                         (gc.get_referents(Watched.__dict__)[0], ["method"])])
seen = []
def note(label):
    seen.append([label, dict_watch.changes_of(gate)])

note("start")
module.counter = 1; note("a name not watched, rebound")
module.f = len; note("a watched name, bound to what it held")
vars(module)["f"] = max; note("a watched name, through __dict__")
setattr(Watched, "method", lambda self: 1); note("a watched method, set on its class")
key = "".join(["coun", "ter"]); vars(module)[key] = 2; note("a name not watched, another str")
module.added = 1; note("a name added")
del module.added; note("a name deleted")
vars(module).update(counter=3); note("update, a name not watched")
vars(module).pop("f"); note("pop, a watched name")
vars(module).clear(); note("clear")
print(json.dumps(seen))
'''


def test_cpython_counts_every_change_to_a_watched_name():
    python = _python_with_watchers()
    if python is None:
        pytest.skip("no CPython 3.12 or later on this machine")
    ran = subprocess.run([python, "-c", WATCHED, str(MODULE)], capture_output=True, text=True,
                         timeout=60)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert json.loads(ran.stdout) == [
        ["start", 0], ["a name not watched, rebound", 0],
        ["a watched name, bound to what it held", 0], ["a watched name, through __dict__", 1],
        ["a watched method, set on its class", 2], ["a name not watched, another str", 3],
        ["a name added", 4], ["a name deleted", 5], ["update, a name not watched", 5],
        ["pop, a watched name", 6], ["clear", 7]]
