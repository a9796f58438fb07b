"""Open the results store from a command.

`--db` takes a SQLAlchemy URL or a plain file path (a SQLite file). SQLAlchemy is optional for
the rest of solforge, so its absence is one clear line here rather than an import failure. A
command that only reads (report, export, archive show) asks for an existing store and never
creates tables, so a mistyped path is an error instead of a new empty database; and a command
that fails before it stored anything removes the SQLite file it created.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from solforge.errors import SolforgeError

if TYPE_CHECKING:
    from solforge.store import Store


class StoreUnavailable(SolforgeError):
    """No store at that URL, or no SQLAlchemy to open one."""


def store_url(text: str | None) -> str:
    """A SQLAlchemy URL for `--db`: None is ./solforge.db, a URL stays as it is, anything else
    is the path of a SQLite file."""
    if not text:
        return "sqlite:///solforge.db"
    if "://" in text:
        return text
    return f"sqlite:///{Path(text).expanduser()}"


def sqlite_file(url: str) -> Path | None:
    """The file a sqlite URL names (None for other databases and for in-memory SQLite)."""
    if not url.startswith("sqlite"):
        return None
    database = url.split(":///", 1)[1] if ":///" in url else ""
    database = database.split("?", 1)[0]
    return Path(database) if database not in ("", ":memory:") else None


def open_store(url: str | None, must_exist: bool = False) -> Store:
    """The store at `url` (None: solforge.db in the working directory). With `must_exist` (a
    read-only command) the store must already hold solforge's tables; nothing is created."""
    try:
        import sqlalchemy  # noqa: F401

        from solforge.store import Store
    except ModuleNotFoundError as exc:
        raise StoreUnavailable(f"the results store needs SQLAlchemy ({exc}): "
                               "pip install 'solforge[store]'") from None
    url = store_url(url)
    path = sqlite_file(url)
    if path is not None and must_exist and not path.is_file():
        raise StoreUnavailable(f"no results store at {path}: record results with "
                               "`solforge bench` first, or name the store with --db")
    if path is not None and not path.parent.is_dir():
        raise StoreUnavailable(f"cannot create the store {path}: no folder {path.parent}")
    created = path is not None and not path.exists()
    try:
        store = Store(url, create=not must_exist)
    except SolforgeError:
        if created:
            remove_sqlite(path)
        raise
    store.created_file = path if created else None
    return store


@contextmanager
def store_scope(url: str | None) -> Iterator[Store]:
    """The store at `url`, for a command that writes: when the command fails (an exception,
    not a clean exit) and the store is a SQLite file this command created that holds no
    trace, the file is removed, so a failed command leaves nothing behind."""
    store = open_store(url)
    try:
        yield store
    except BaseException:
        discard_if_empty(store)
        raise


def discard_if_empty(store: Store) -> None:
    """Remove the store's SQLite file if this process created it and no trace was saved."""
    from solforge.store.schema import TraceRow

    path = getattr(store, "created_file", None)
    if path is None or store.rows(TraceRow):
        return
    store.engine.dispose()
    remove_sqlite(path)


def remove_sqlite(path: Path) -> None:
    for leftover in (path, *(path.with_name(path.name + s) for s in ("-journal", "-wal", "-shm"))):
        leftover.unlink(missing_ok=True)
