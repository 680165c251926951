"""Provider records partnerkit could not read, kept with the reason, released once read correctly.

A list page with one bad record must not stop the good ones, nor be skipped in silence: the bad
record is held here under a stable key (`recharge:<id>`, `order:<id>`, `wallet:<id>`,
`transaction:<id>`) with the reason (the client's MalformedResponse, or the transaction mapping,
names the field) and the record as received, then released when the same record is read correctly
again. It is reconciliation's table, `transaction_quarantine` (see m0005_ledger), so the day's
report lists every quarantined provider record in one place; the key's prefix tells the kinds apart.
A record that shows no integer id is held by the sha256 of its JSON: `kind:sha256:<hex>`, or for a
wallet transaction the bare hex digest, the key every transaction had before ids were keyed (so the
same record is still one entry). Nothing can tell when such a record is read correctly: it stays.
Order list records carry no voucher codes; order details (which do) are never held here.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from datetime import datetime
from typing import Any, Iterable, Mapping

from partnerkit.money import DecimalEncoder
from partnerkit.store.db import Database, transaction
from partnerkit.timeutil import iso

KINDS = ("recharge", "order", "wallet", "transaction")
# The reason's start of a stored transaction the provider stopped listing (partnerkit.store.ledger
# `withdraw_transactions`): held as `transaction:<id as stored>` with the record, released when listed again.
WITHDRAWN = "withdrawn: "
# Where a record shows its id. The document's records name it `id`; a wallet transaction's shape is
# not in the document, and DESIGN.md's alias table reads its id from `id` or `transaction_id`, keys
# in any case (reconcile.ledger.ALIASES["id"]; tests/reconcile/test_transaction_quarantine.py pins both).
TRANSACTION_ID_FIELDS = ("id", "transaction_id")


def shown_id(kind: str, raw: Any) -> int | None:
    """The integer id a record shows, or None (no id, not an integer, or two aliases that disagree)."""
    if not isinstance(raw, Mapping):
        return None
    if kind == "transaction":
        values = [v for k, v in raw.items()
                  if str(k).strip().lower() in TRANSACTION_ID_FIELDS and v not in (None, "")]
        if len({str(v) for v in values}) != 1:  # none, or disagreeing: the mapping reads no id either
            return None
        value = next((v for v in values if isinstance(v, int)), None)
    else:
        value = raw.get("id")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def key_for(kind: str, raw: Any, *, text: str | None = None) -> str:
    """`kind:<id>` when the record shows an integer id, else the sha256 of its JSON (see the module doc).

    `text`: the record's JSON as the caller keeps it (a transaction's is reconcile.ledger.canonical_json,
    which its id-less key has always been the digest of); by default partnerkit's own JSON of it.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown quarantine kind {kind!r}")
    record_id = shown_id(kind, raw)
    if record_id is not None:
        return f"{kind}:{record_id}"
    if text is None:
        text = json.dumps(raw, cls=DecimalEncoder, sort_keys=True, default=str)
    digest = hashlib.sha256(text.encode()).hexdigest()
    return digest if kind == "transaction" else f"{kind}:sha256:{digest}"


def id_in_key(kind: str, key: str) -> str | None:
    """The id (as stored) in a `kind:<id>` key, or None for a key of another kind or an id-less one."""
    prefix = f"{kind}:"
    return key[len(prefix):] if key.startswith(prefix) and not key.startswith(f"{prefix}sha256:") else None


def _day(raw: Any) -> str | None:
    if isinstance(raw, dict):
        for name in ("created_at", "placed_at"):
            value = raw.get(name)
            if isinstance(value, str) and len(value) >= 10:
                return value[:10]
    return None


def hold(db: Database, kind: str, bad: Iterable[tuple[str, Any]], *, now: datetime,
         day: str | None = None) -> list[str]:
    """Keep (reason, raw record) pairs of one kind; a record held again is refreshed. Their keys.

    `day`: the report day of a record that shows none of its own (a wallet balance: the snapshot's
    day); a record without either is listed in every day's report until released."""
    bad = list(bad)
    if not bad:
        return []
    with transaction(db) as conn:
        return hold_in(conn, kind, bad, now=now, day=day)


def hold_in(conn: sqlite3.Connection, kind: str, bad: Iterable[tuple[str, Any]], *, now: datetime,
            day: str | None = None) -> list[str]:
    """`hold` inside the caller's transaction."""
    rows = [(key_for(kind, raw), reason, json.dumps(raw, cls=DecimalEncoder, sort_keys=True, default=str),
             _day(raw) or day) for reason, raw in bad]
    at = iso(now)
    conn.executemany(
        "INSERT INTO transaction_quarantine (key, reason, raw, day, first_seen_at, last_seen_at)"
        " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(key) DO UPDATE SET reason = excluded.reason,"
        " raw = excluded.raw, last_seen_at = excluded.last_seen_at,"
        " day = COALESCE(excluded.day, transaction_quarantine.day)",
        [(key, reason, raw, day, at, at) for key, reason, raw, day in rows])
    return [row[0] for row in rows]


def release(db: Database, kind: str, ids: Iterable[int | str]) -> int:
    """Forget the held records of these ids (read correctly since); how many were held.

    A text id is a transaction's id as stored (a withdrawn transaction is held under it, whatever it is)."""
    keys = [f"{kind}:{i}" if isinstance(i, str) else f"{kind}:{int(i)}" for i in ids]
    if not keys:
        return 0
    with transaction(db) as conn:
        return release_in(conn, kind, keys)


def release_in(conn: sqlite3.Connection, kind: str, keys_or_ids: Iterable[Any]) -> int:
    """`release` inside the caller's transaction (ids, or keys already prefixed)."""
    if conn.execute(f"SELECT 1 FROM transaction_quarantine WHERE {_PREFIXED} LIMIT 1", _prefix(kind)).fetchone() is None:
        return 0  # the common case: nothing of this kind is held
    keys = [k if isinstance(k, str) else f"{kind}:{int(k)}" for k in keys_or_ids]
    released = 0
    for start in range(0, len(keys), 500):
        chunk = keys[start:start + 500]
        released += conn.execute(f"DELETE FROM transaction_quarantine WHERE key IN ({','.join('?' * len(chunk))})",
                                 chunk).rowcount
    return released


# One kind's keys, `kind:...`, as a range of the primary key (bound with `_prefix`): a LIKE reads every entry,
# since SQLite's LIKE is case-insensitive and the key's collation is not.
_PREFIXED = "key >= ? AND key < ?"
# The bare sha256 keys (a transaction's id-less key, and every transaction's before ids were keyed): hex
# digits, so all below 'g', where no prefixed key is (`order:`, `recharge:`, `transaction:`, `wallet:`).
_BARE = "key < 'g' AND instr(key, ':') = 0"


def _prefix(kind: str) -> tuple[str, str]:
    """The bounds of `_PREFIXED` for one kind: from `kind:` up to `kind;` (';' follows ':')."""
    return f"{kind}:", f"{kind};"


def _of_kind(kind: str) -> tuple[str, tuple]:
    """The WHERE clause of one kind's keys and its parameters (a transaction's id-less key has no prefix)."""
    if kind == "transaction":
        return f"(({_PREFIXED}) OR ({_BARE}))", _prefix(kind)
    return _PREFIXED, _prefix(kind)


_HELD_COLUMNS = "key, reason, raw, day, first_seen_at, last_seen_at"  # a held entry, as `held` and `held_entry` give it


def held(db: Database, kind: str, *, day: str | None = None) -> list[dict]:
    """The records of one kind held now: key, reason, raw (JSON text), day, first and last seen; with `day`,
    those of that day and those whose day is unknown (listed in every day's report, as there)."""
    of_kind, params = _of_kind(kind)
    on_day = ""
    if day is not None:
        on_day, params = " AND (day = ? OR day IS NULL)", params + (day,)
    cursor = db.execute(f"SELECT {_HELD_COLUMNS} FROM transaction_quarantine WHERE {of_kind}{on_day} ORDER BY key",
                        params)
    names = [c[0] for c in cursor.description]
    return [dict(zip(names, row)) for row in cursor.fetchall()]


def held_entry(db: Database, kind: str, ident: str) -> dict | None:
    """The record of one kind held under its id (`kind:<id>`), as `held` gives it, or None."""
    cursor = db.execute(f"SELECT {_HELD_COLUMNS} FROM transaction_quarantine WHERE key = ?", (f"{kind}:{ident}",))
    row = cursor.fetchone()
    return None if row is None else dict(zip([c[0] for c in cursor.description], row))


def unreadable_transactions(db: Database | sqlite3.Connection, first_day: str, last_day: str) -> int:
    """How many wallet transactions of the days [first_day, last_day] (or of no known day) are held because they
    could not be read, not withdrawn: entries the provider lists that the ledger lacks (usually none)."""
    of_kind, params = _of_kind("transaction")
    return db.execute(f"SELECT COUNT(*) FROM transaction_quarantine WHERE {of_kind}"
                      " AND (day IS NULL OR (day >= ? AND day <= ?)) AND substr(reason, 1, ?) != ?",
                      (*params, first_day, last_day, len(WITHDRAWN), WITHDRAWN)).fetchone()[0]


def held_transaction_ids(db: Database) -> dict[str, bool]:
    """The ids (as stored) of the transactions held under `transaction:<id>` now (usually none), each
    with whether it was withdrawn (listed no more) rather than unreadable."""
    rows = db.execute(f"SELECT key, substr(reason, 1, ?) = ? FROM transaction_quarantine WHERE {_PREFIXED}",
                      (len(WITHDRAWN), WITHDRAWN, *_prefix("transaction")))
    return {id_in_key("transaction", key): bool(withdrawn) for key, withdrawn in rows}


def rekey_transactions(db: Database) -> int:
    """Key `transaction:<id>` the transactions held before ids were keyed whose JSON shows one; how many.

    Until then a transaction was held under the bare sha256 of its JSON, whatever it showed. No
    migration rewrites those entries: the sync calls this first (one read of the table's id-less
    keys, usually none), so an old entry is listed once and released like a new one. An entry of an
    id already held under its new key is the same transaction: the old one is dropped.
    """
    moves = []
    for key, raw in db.execute(f"SELECT key, raw FROM transaction_quarantine WHERE {_BARE}").fetchall():
        try:
            record = json.loads(raw)
        except ValueError:
            continue
        record_id = shown_id("transaction", record)
        if record_id is not None:
            moves.append((f"transaction:{record_id}", key))
    if not moves:
        return 0
    with transaction(db) as conn:
        conn.executemany("UPDATE OR IGNORE transaction_quarantine SET key = ? WHERE key = ?", moves)
        conn.executemany("DELETE FROM transaction_quarantine WHERE key = ?", [(old,) for _, old in moves])
    return len(moves)
