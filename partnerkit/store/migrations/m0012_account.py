"""The provider account a database serves (owned by partnerkit.account).

`account_wallets` holds the ids of the account's wallets, as `GET /api/v1/wallets` lists them: an API
key is this account's when the wallets it lists share an id with these (a key can be rotated; the
wallets stay). `account_keys` holds the SHA-256 of each API key found to be the account's
(`partnerkit.store.budget.key_hash`, the budget tables' key; the key itself is never stored), so a known
key is never checked again. `how` says how the key was found to be the account's: it `adopted` an
empty database, its `wallets` matched, or someone `trusted` it (`partnerkit account trust-key`: the
wallet list could not tell). `source` says where a wallet id came from: a read with one of those keys
(`wallets`), or the newest wallet snapshot a database held when it was upgraded to this version
(`snapshot`): a snapshot is one read of the list with one key, so an upgraded database serves the
account whose wallets it last synced, and another account's key is refused from its first call.
"""

VERSION = 12
NAME = "account"
STATEMENTS: tuple[str, ...] = (
    """CREATE TABLE account_wallets (
        wallet_id TEXT PRIMARY KEY CHECK (wallet_id != ''),
        currency TEXT,
        first_seen_at TEXT NOT NULL,
        source TEXT NOT NULL CHECK (source IN ('wallets', 'snapshot'))
    ) WITHOUT ROWID""",
    """CREATE TABLE account_keys (
        key_hash TEXT PRIMARY KEY,
        first_used_at TEXT NOT NULL,
        how TEXT NOT NULL CHECK (how IN ('adopted', 'wallets', 'trusted'))
    ) WITHOUT ROWID""",
    # A wallet without an id was stored as '' (or 'None' for an id given as null): no account in it.
    """INSERT OR IGNORE INTO account_wallets (wallet_id, currency, first_seen_at, source)
       SELECT wallet_id, currency, taken_at, 'snapshot' FROM wallet_snapshots
        WHERE wallet_id NOT IN ('', 'None') AND taken_at = (SELECT MAX(taken_at) FROM wallet_snapshots)""",
)
