"""The provider's last refusal of partnerkit's credentials, per API key (owned by the client).

A 401 ("Missing or invalid credentials": a key or secret that was rotated, revoked, or sent from an
address outside the key's allowlist) stops every job at once, and each job only logs it. One row
per key hash keeps the latest refusal until a call with the same key is accepted again, so
`partnerkit status` and /metrics can say so. Times are unix seconds, as in the budget's tables.
"""

VERSION = 9
NAME = "provider_refusals"
STATEMENTS: tuple[str, ...] = (
    """CREATE TABLE provider_refusals (
        key_hash TEXT PRIMARY KEY,
        status INTEGER NOT NULL,
        message TEXT,
        method TEXT NOT NULL,
        path TEXT NOT NULL,
        purpose TEXT,
        at REAL NOT NULL
    )""",
)
