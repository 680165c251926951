"""Recharges: intents, provider copies, polling state (owned by the worker).

Columns named in docs/internals.md are fixed (reconciliation reads them). `updated_at` is the
provider's updated_at (when the recharge last changed there); `row_updated_at` is when partnerkit
last wrote the row. The submit fields (circle_id ... force) are kept so that locate can replay the
exact request under the same Idempotency-Key. The `locks` table used by the worker's lease lives in
migration 1.
"""

VERSION = 4
NAME = "recharges"
STATEMENTS: tuple[str, ...] = (
    """CREATE TABLE recharges (
        local_id INTEGER PRIMARY KEY,
        idempotency_key TEXT UNIQUE,
        provider_id INTEGER UNIQUE,
        reference_number TEXT UNIQUE,
        origin TEXT NOT NULL CHECK (origin IN ('partner', 'provider')),
        mobile_number TEXT NOT NULL,
        operator_id INTEGER,
        operator TEXT,
        amount_cents INTEGER,
        client_reference TEXT,
        circle_id INTEGER,
        is_postpaid INTEGER,
        is_special INTEGER,
        nickname TEXT,
        force INTEGER NOT NULL DEFAULT 0,
        status TEXT NOT NULL CHECK (status IN ('INTENT', 'UNKNOWN', 'PROCESSING', 'SUCCESS', 'FAILED', 'REVERSED')),
        sub_status TEXT,
        face_cents INTEGER,
        discount_cents INTEGER,
        payable_cents INTEGER,
        currency TEXT,
        failure_reason TEXT,
        operator_txn_id TEXT,
        vendor_recharge_id TEXT,
        http_status INTEGER,
        last_error TEXT,
        submitted_at TEXT,
        provider_created_at TEXT,
        updated_at TEXT,
        settled_at TEXT,
        last_polled_at TEXT,
        next_poll_at TEXT,
        escalated_at TEXT,
        row_updated_at TEXT,
        raw TEXT
    )""",
    "CREATE INDEX recharges_status_next_poll ON recharges (status, next_poll_at)",
    "CREATE INDEX recharges_provider_created ON recharges (provider_created_at)",
    "CREATE INDEX recharges_client_reference ON recharges (client_reference)",
    "CREATE INDEX recharges_mobile ON recharges (mobile_number, amount_cents)",
)
