"""The SQLite store: every line of SQL in partnerkit lives in this package.

`open_db(path)` gives a sqlite-utils Database with WAL, a busy timeout and foreign keys on,
migrated to the newest schema. Each concern keeps its queries in its own module here
(`budget`, `inbox`, `orders`, `recharges`, ...), so a PostgreSQL backend stays possible.
"""

from partnerkit.store.db import Database, open_db, transaction

__all__ = ["Database", "open_db", "transaction"]
