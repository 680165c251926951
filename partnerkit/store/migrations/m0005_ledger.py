"""Transactions, wallet snapshots, drifts and reports (owned by reconciliation).

Money is INTEGER paise (`*_cents`), signed in the ledger: a wallet debit is negative, a credit
positive. Times are ISO 8601 UTC TEXT ending in Z, so a day is a lexicographic range.
"""

VERSION = 5
NAME = "ledger"
STATEMENTS: tuple[str, ...] = (
    # The provider's wallet transactions, read through reconcile.ledger's one alias mapping.
    """CREATE TABLE transactions (
        id TEXT PRIMARY KEY,
        type TEXT,
        amount_cents INTEGER NOT NULL,
        order_id INTEGER,
        reference_number TEXT,
        recharge_id INTEGER,
        currency TEXT,
        created_at TEXT NOT NULL,
        balance_after_cents INTEGER,
        raw TEXT,
        synced_at TEXT NOT NULL
    )""",
    "CREATE INDEX transactions_created ON transactions(created_at)",
    "CREATE INDEX transactions_recharge ON transactions(recharge_id) WHERE recharge_id IS NOT NULL",
    "CREATE INDEX transactions_reference ON transactions(reference_number) WHERE reference_number IS NOT NULL",
    "CREATE INDEX transactions_order ON transactions(order_id) WHERE order_id IS NOT NULL",
    # Records that fit no alias (or carry bad money): kept with the reason, never dropped.
    """CREATE TABLE transaction_quarantine (
        key TEXT PRIMARY KEY,
        reason TEXT NOT NULL,
        raw TEXT NOT NULL,
        day TEXT,
        first_seen_at TEXT NOT NULL,
        last_seen_at TEXT NOT NULL
    )""",
    """CREATE TABLE wallet_snapshots (
        id INTEGER PRIMARY KEY,
        taken_at TEXT NOT NULL,
        wallet_id TEXT NOT NULL DEFAULT '',
        currency TEXT NOT NULL,
        balance_cents INTEGER NOT NULL,
        raw TEXT,
        UNIQUE (taken_at, wallet_id, currency)
    )""",
    # Incremental syncs: one watermark (last day synced) per entity.
    """CREATE TABLE sync_state (
        entity TEXT PRIMARY KEY,
        watermark TEXT NOT NULL,
        last_run_at TEXT NOT NULL,
        last_count INTEGER NOT NULL DEFAULT 0
    )""",
    # Which days a sync has read completely, and when it started (for unknown_to_provider).
    """CREATE TABLE sync_coverage (
        entity TEXT NOT NULL,
        day TEXT NOT NULL,
        synced_at TEXT NOT NULL,
        PRIMARY KEY (entity, day)
    ) WITHOUT ROWID""",
    # When a sync last saw each provider recharge in the list (absent later = unknown_to_provider).
    """CREATE TABLE recharge_seen (
        provider_id INTEGER PRIMARY KEY,
        seen_at TEXT NOT NULL
    )""",
    """CREATE TABLE drifts (
        id TEXT PRIMARY KEY,
        kind TEXT NOT NULL CHECK (kind IN ('missing_debit', 'amount_mismatch', 'duplicate_debit',
            'missing_refund', 'unexpected_refund', 'orphan_transaction', 'stuck_processing',
            'unknown_to_provider', 'unknown_to_partner', 'voucher_shortfall', 'balance_discontinuity')),
        subject TEXT NOT NULL CHECK (subject IN ('recharge', 'order', 'transaction', 'wallet')),
        reference TEXT NOT NULL,
        report_date TEXT NOT NULL,
        expected_cents INTEGER,
        actual_cents INTEGER,
        measure TEXT NOT NULL DEFAULT 'money' CHECK (measure IN ('money', 'count')),
        currency TEXT,
        detail TEXT,
        detected_at TEXT NOT NULL,
        last_detected_at TEXT NOT NULL,
        resolution TEXT NOT NULL DEFAULT 'pending' CHECK (resolution IN ('pending', 'resolved', 'escalated')),
        resolution_note TEXT,
        resolution_by TEXT,
        resolution_at TEXT
    )""",
    "CREATE INDEX drifts_day ON drifts(report_date, resolution)",
    # Every change of a drift, appended, never overwritten.
    """CREATE TABLE drift_audit (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        drift_id TEXT NOT NULL REFERENCES drifts(id),
        action TEXT NOT NULL,
        resolution TEXT NOT NULL,
        note TEXT,
        by TEXT NOT NULL,
        at TEXT NOT NULL
    )""",
    "CREATE INDEX drift_audit_drift ON drift_audit(drift_id, seq)",
    """CREATE TABLE reports (
        date TEXT PRIMARY KEY,
        generated_at TEXT NOT NULL,
        body TEXT NOT NULL
    )""",
)
