"""The results store (SQLAlchemy: SQLite by default, PostgreSQL by URL).

Import it only where it is used: SQLAlchemy is an optional dependency (`pip install .[store]`).
"""

from solforge.store.store import DEFAULT_URL, Store, StoreError, solution_hash

__all__ = ["DEFAULT_URL", "Store", "StoreError", "solution_hash"]
