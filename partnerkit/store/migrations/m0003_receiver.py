"""Webhook inbox, orders, vouchers and the job queue (owned by the receiver)."""

VERSION = 3
NAME = "receiver"
STATEMENTS: tuple[str, ...] = (
    # Every verified delivery, once per dedup key (event_id, X-Event-ID or sha256 of the body).
    # Kept at least 30 days: a manual retry can redeliver an event long after the 5-minute window.
    """CREATE TABLE inbox (
        id INTEGER PRIMARY KEY,
        dedup_key TEXT NOT NULL UNIQUE,
        event_type TEXT,
        order_id INTEGER,
        status TEXT,
        occurred_at TEXT,
        state TEXT NOT NULL CHECK (state IN ('processed', 'quarantined', 'test')),
        reason TEXT,
        webhook_id TEXT,
        request_id TEXT,
        duplicate_count INTEGER NOT NULL DEFAULT 0,
        received_at TEXT NOT NULL,
        last_seen_at TEXT NOT NULL,
        body BLOB NOT NULL
    )""",
    "CREATE INDEX inbox_order_id ON inbox (order_id)",
    # Local order state: monotonic in status rank, fed by webhooks, the order sync and creates.
    """CREATE TABLE orders (
        id INTEGER PRIMARY KEY,
        reference_code TEXT,
        status TEXT NOT NULL,
        product_id INTEGER,
        product_name TEXT,
        currency TEXT,
        denomination_cents INTEGER,
        quantity INTEGER,
        delivered_quantity INTEGER,
        amount_cents INTEGER,
        discount_cents INTEGER,
        transaction_id INTEGER,
        email TEXT,
        placed_at TEXT,
        status_at TEXT,
        source TEXT NOT NULL,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL
    )""",
    "CREATE INDEX orders_placed_at ON orders (placed_at)",
    # Codes, PINs and claim URLs are ciphertext (partnerkit.crypto); the fingerprint is a keyed
    # HMAC of the code, so a re-read after a partial delivery adds only the new vouchers.
    """CREATE TABLE vouchers (
        id INTEGER PRIMARY KEY,
        order_id INTEGER NOT NULL,
        fingerprint TEXT NOT NULL,
        card_number BLOB,
        pin_code BLOB,
        claim_url BLOB,
        voucher_reference_number TEXT,
        expires_at TEXT,
        stored_at TEXT NOT NULL,
        UNIQUE (order_id, fingerprint)
    )""",
    # Jobs: one pending job per (kind, order) by constraint; a lease so two workers never run one.
    """CREATE TABLE jobs (
        id INTEGER PRIMARY KEY,
        kind TEXT NOT NULL,
        order_id INTEGER NOT NULL,
        state TEXT NOT NULL CHECK (state IN ('pending', 'done', 'dead')),
        expected_status TEXT,
        expected_count INTEGER,
        generation INTEGER NOT NULL DEFAULT 0,
        attempts INTEGER NOT NULL DEFAULT 0,
        next_run_at TEXT NOT NULL,
        lease_owner TEXT,
        lease_expires_at TEXT,
        last_error TEXT,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL
    )""",
    "CREATE UNIQUE INDEX jobs_one_pending ON jobs (kind, order_id) WHERE state = 'pending'",
    "CREATE INDEX jobs_due ON jobs (state, next_run_at)",
    "CREATE INDEX jobs_order ON jobs (order_id)",
    # Tokens saved by `partnerkit webhooks register`, encrypted, bound to their webhook id.
    """CREATE TABLE webhook_tokens (
        webhook_id TEXT PRIMARY KEY,
        token BLOB NOT NULL,
        name TEXT,
        url TEXT,
        events TEXT,
        created_at TEXT NOT NULL
    )""",
    # Monotonic counters shared by every process (voucher fetch outcomes for /metrics).
    """CREATE TABLE counters (
        name TEXT PRIMARY KEY,
        value INTEGER NOT NULL DEFAULT 0
    )""",
)
