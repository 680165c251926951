"""Transactions keep the provider's record without writing it twice (owned by reconciliation).

A transaction whose alias values are exactly its columns stores its *shape* (the record's alias
keys and value types, once per shape in `transaction_shapes`) instead of the whole record in `raw`;
`raw` then holds only the keys outside the alias table, if any (reconcile.ledger_fast.record_json
rebuilds the record). Rows written before this migration keep their full `raw` and no shape.
"""

VERSION = 6
NAME = "ledger_shapes"
STATEMENTS: tuple[str, ...] = (
    """CREATE TABLE transaction_shapes (
        id INTEGER PRIMARY KEY,
        keys TEXT NOT NULL
    )""",
    # No REFERENCES clause: a foreign key would be checked on every one of a day's million inserts,
    # and shapes are never deleted.
    "ALTER TABLE transactions ADD COLUMN shape INTEGER",
)
