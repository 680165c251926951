"""orders.reference_code indexed only where it is known (owned by the store).

`transactions list --reference R` finds the order whose reference_code is R, and `orders create` the
order carrying an intent's ref after "Duplicate reference code" (`partnerkit.store.orders.by_reference`):
both read the whole order table (m0010 left the column unindexed, since every webhook writes an order row).
A webhook never sets reference_code (the receiver stores an order's status, amounts and quantities; the
ref comes from the order list, the order detail or the create answer, all read by the worker or a
command), so a partial index of the known ones is written by the order sync, the voucher fetch and
`orders create` alone, never inside the receiver's transaction: a webhook-created order has none, and a
webhook's update of an order leaves the column, and so the index, untouched. SQLite uses it for
`reference_code = ?`, which implies IS NOT NULL. Built from the rows already stored (one read of `orders`).
"""

VERSION = 14
NAME = "orders_reference"
STATEMENTS: tuple[str, ...] = (
    "CREATE INDEX orders_reference ON orders (reference_code) WHERE reference_code IS NOT NULL",
)
