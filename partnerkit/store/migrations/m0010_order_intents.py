"""Order intents: an order creation recorded before its request is sent (owned by partnerkit.ordering).

`POST /api/v1/orders` debits the wallet, and its answer can be lost (a timeout, a reset, a 500, a
cut body) after the order was placed. The intent keeps what is needed to replay the request under
the same Idempotency-Key ("a retry with the same Idempotency-Key within 24 hours replays the
original response") and the client `ref`, which the provider keeps unique per client ("Duplicate
reference code"): whatever happens to the key, a second order with the same ref is refused. The
order catch-up links an intent whose answer was lost to the listed order carrying its ref.

state: INTENT (recorded; a send may be under way, or the process died while sending), PLACED
(order_id is the order it placed), REFUSED (a definite refusal: nothing placed), UNKNOWN (the
outcome was lost: replay the key, or wait for the catch-up to link it). Money is integer paise,
times ISO 8601 UTC text.
"""

VERSION = 10
NAME = "order_intents"
STATEMENTS: tuple[str, ...] = (
    """CREATE TABLE order_intents (
        id INTEGER PRIMARY KEY,
        idempotency_key TEXT NOT NULL UNIQUE,
        ref TEXT NOT NULL,
        product_id INTEGER NOT NULL,
        denomination_cents INTEGER NOT NULL,
        quantity INTEGER NOT NULL,
        wallet_id INTEGER,
        email TEXT,
        state TEXT NOT NULL CHECK (state IN ('INTENT', 'PLACED', 'REFUSED', 'UNKNOWN')),
        order_id INTEGER UNIQUE,
        error TEXT,
        created_at TEXT NOT NULL,
        sent_at TEXT,
        updated_at TEXT NOT NULL
    )""",
    "CREATE INDEX order_intents_state ON order_intents (state)",
    "CREATE INDEX order_intents_ref ON order_intents (ref)",
    # No index on orders.reference_code: every webhook writes an order row, and one more B-tree per
    # commit is the receiver's cost (docs/receiver.md, "Benchmark"); the one lookup by ref
    # (partnerkit.store.orders.by_reference) is a rare command's, and scans.
)
