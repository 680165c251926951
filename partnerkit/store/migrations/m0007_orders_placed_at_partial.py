"""orders.placed_at indexed only where it is known (owned by the receiver).

An order created by a webhook has no placed_at until the order sync reads it; every such row
went into the index under NULL, one more page written by each webhook's commit. The queries that
use the index (the day's orders of the matcher, the order sync's low-water mark) compare
placed_at with a value or ask IS NOT NULL, so SQLite still uses the partial index for them.
"""

VERSION = 7
NAME = "orders_placed_at_partial"
STATEMENTS: tuple[str, ...] = (
    "DROP INDEX orders_placed_at",
    "CREATE INDEX orders_placed_at ON orders (placed_at) WHERE placed_at IS NOT NULL",
)
