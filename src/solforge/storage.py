"""Open the results store from a command.

SQLAlchemy is optional for the rest of solforge, so its absence is a clear error here rather
than an import failure; and a command that only reads (the report) asks for an existing store,
so a mistyped path is an error instead of a new empty database.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from solforge.errors import SolforgeError

if TYPE_CHECKING:
    from solforge.store import Store


class StoreUnavailable(SolforgeError):
    """No store at that URL, or no SQLAlchemy to open one."""


def open_store(url: str | None, must_exist: bool = False) -> Store:
    """The store at `url` (None: solforge.db in the working directory)."""
    try:
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import ArgumentError

        from solforge.store import DEFAULT_URL, Store
    except ModuleNotFoundError as exc:
        raise StoreUnavailable(f"the results store needs SQLAlchemy ({exc}): "
                               "pip install 'solforge[store]'") from None
    url = url or DEFAULT_URL
    if must_exist:
        try:
            parsed = make_url(url)
        except ArgumentError as exc:
            raise StoreUnavailable(f"cannot read the store {url!r}: {exc}") from None
        database = parsed.database
        if (parsed.get_backend_name() == "sqlite" and database not in (None, "", ":memory:")
                and not Path(database).is_file()):
            raise StoreUnavailable(f"no results store at {database}: record results with "
                                   "`solforge bench` first, or name the store with --db URL")
    return Store(url)
