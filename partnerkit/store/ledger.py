"""Ledger store: wallet transactions, quarantined records, wallet snapshots and sync state.

Rows arrive as tuples from `reconcile.ledger_fast.map_page` (integer paise, ISO UTC text); writes are
`executemany` over iterables so a day of a million rows is never held twice in memory.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Iterable, Mapping, NamedTuple

from partnerkit.errors import StorageError
from partnerkit.money import fmt, from_cents
from partnerkit.store.db import BUSY_TIMEOUT_MS, Database, run_in_transaction
from partnerkit.store.matching import linked_transactions

ROW_COLUMNS = ("id", "type", "amount_cents", "order_id", "reference_number", "recharge_id", "currency",
               "created_at", "balance_after_cents")
# A row keeps the latest synced_at of the reads that listed it: the worker's sync and `partnerkit reconcile`
# may read the same day at once, and an older read storing a row after a newer one must not make the newer
# read's withdrawal check (`unlisted_transactions`) take it for unlisted.
_REFRESH = ", ".join([f"{c} = excluded.{c}" for c in ROW_COLUMNS[1:] + ("raw", "shape")]
                     + ["synced_at = max(transactions.synced_at, excluded.synced_at)"])
# A wallet transaction's id is its identity only together with what never changes for a ledger entry: its
# creation time (to the second) and, where both sides show one, its type and currency (optional in DESIGN.md's
# alias table). Not its amount: a provider correcting an entry in place under its id is the same entry (the
# matcher resolves the drift it caused, tests/reconcile/test_matcher.py), and an id given again names an entry
# made at another time anyway (the reason still lists an amount that differs). A listed record under a stored id whose facts differ is another transaction:
# the upsert leaves the row as it was (its DO UPDATE's WHERE), and the record is held in the quarantine as
# `transaction:<id>` with a reason starting ID_GIVEN_TWICE. The links (order, recharge, reference) and the
# balance are not compared: the latest copy of the same entry may fill them in.
ID_GIVEN_TWICE = "transaction id given twice:"
_SAME = ("substr({t}.created_at, 1, 19) = substr({r}.created_at, 1, 19)"
         " AND ifnull({t}.type = {r}.type, 1) AND ifnull({t}.currency = {r}.currency, 1)")
_UPDATE = f"ON CONFLICT(id) DO UPDATE SET {_REFRESH} WHERE {_SAME.format(t='transactions', r='excluded')}"
_COLUMNS = ", ".join(ROW_COLUMNS)


@lru_cache(maxsize=64)
def _upsert(shape: int | None, with_raw: bool, synced_at: str) -> str:
    """The upsert of one run of rows: the run's shape and the sync's time are constants of the statement,
    so each row binds only its own values (a million rows bind 2 million fewer parameters)."""
    stamp = "'" + synced_at.replace("'", "''") + "'"
    values = ", ".join(["?"] * len(ROW_COLUMNS) + ["?" if with_raw else "NULL", stamp,
                                                    "NULL" if shape is None else str(int(shape))])
    return f"INSERT INTO transactions ({_COLUMNS}, raw, synced_at, shape) VALUES ({values}) {_UPDATE}"


@dataclass(frozen=True)
class GivenTwice:
    """A listed record whose id names a stored transaction it is not: `row` its ROW_COLUMNS values, `shape`
    (text) and `raw` as staged (what reconcile.ledger_fast.record_json rebuilds the record from), and
    `stored` the ROW_COLUMNS values of the row holding the id, which keeps them."""

    row: tuple
    shape: str | None
    raw: str | None
    stored: tuple

    @property
    def reason(self) -> str:
        """`transaction id given twice: transaction 700001 is stored for another transaction (ORDER -50.00 INR
        at T1), this record differs: amount -20.00 (stored -50.00), created_at T2 (stored T1)`."""
        (ident, kind, paise, *_, currency, created, _), (_, s_kind, s_paise, *_, s_currency, s_created, _) = \
            self.row, self.stored
        entry = " ".join(p for p in (s_kind, fmt(from_cents(s_paise)), s_currency) if p)
        differs = [f"{name} {mine} (stored {theirs})" for name, mine, theirs, same in (
            ("amount", fmt(from_cents(paise)), fmt(from_cents(s_paise)), paise == s_paise),
            ("created_at", created, s_created, created[:19] == s_created[:19]),
            ("type", kind, s_kind, None in (kind, s_kind) or kind == s_kind),
            ("currency", currency, s_currency, None in (currency, s_currency) or currency == s_currency)) if not same]
        return (f"{ID_GIVEN_TWICE} transaction {ident} is stored for another transaction ({entry} at {s_created}),"
                f" this record differs: {', '.join(differs)}")


class Written(NamedTuple):
    """What a write of transaction rows did: `rows` inserted or refreshed, and the ids (as stored) of the
    records held instead because their id names a stored transaction they are not (GivenTwice), in order."""

    rows: int
    given_twice: list[str]


# The quarantine JSON of a record held as GivenTwice: (row, shape text, raw) -> JSON, the caller's
# (reconcile.ledger_fast.record_json); without one, the row's columns.
RecordJson = Callable[[tuple, "str | None", "str | None"], str]


def _columns_json(row: tuple, shape: str | None, raw: str | None) -> str:
    return json.dumps(dict(zip(ROW_COLUMNS, row)), sort_keys=True)


def _hold_given_twice(conn: sqlite3.Connection, found: list[GivenTwice], record_json: RecordJson | None,
                      seen_at: str, *, schema: str = "main") -> list[str]:
    """Quarantine the records found, in the caller's transaction; their ids. A record held again is one entry."""
    as_json = record_json or _columns_json
    conn.executemany(_QUARANTINE.format(schema=schema),
                     [(f"transaction:{g.row[0]}", g.reason, as_json(g.row, g.shape, g.raw), g.row[7][:10], seen_at,
                       seen_at) for g in found])
    return [g.row[0] for g in found]


# Whether a listed row is another transaction than the stored row of its id, bound as (row values..., id):
# run only for a write that changed fewer rows than it was handed (a clash is skipped by _UPDATE's WHERE).
_ANOTHER = (f"SELECT {', '.join('t.' + c for c in ROW_COLUMNS)} FROM transactions t,"
            f" (SELECT {', '.join('? AS ' + c for c in ROW_COLUMNS)}) r"
            f" WHERE t.id = r.id AND NOT ({_SAME.format(t='t', r='r')})")


def store_transactions(db: Database, runs: Iterable[tuple[tuple[int | None, bool], list[tuple]]],
                       shapes: Mapping[int, str], synced_at: str, *,
                       record_json: RecordJson | None = None) -> Written:
    """Insert or refresh transactions; return what was written.

    `runs`: ((shape or None, with_raw), rows), each row the ROW_COLUMNS values followed by `raw`
    when with_raw (reconcile.ledger_fast.map_page gives them); `shapes`: shape id -> shape text.
    A row whose id names a stored transaction it is not (see _SAME) leaves the stored row as it was and
    is quarantined (GivenTwice), in the same transaction; `record_json` gives its JSON.
    """
    def work(conn: sqlite3.Connection) -> Written:
        conn.executemany("INSERT OR IGNORE INTO transaction_shapes (id, keys) VALUES (?, ?)", shapes.items())
        written, found = 0, []
        for (shape, with_raw), rows in runs:
            changed = conn.executemany(_upsert(shape, with_raw, synced_at), rows).rowcount
            written += changed
            if changed < len(rows):  # an updated row counts, a clash skipped by _UPDATE's WHERE does not
                for row in rows:
                    if (stored := conn.execute(_ANOTHER, row[:len(ROW_COLUMNS)]).fetchone()) is not None:
                        found.append(GivenTwice(row[:len(ROW_COLUMNS)], shapes.get(shape) if shape is not None
                                                else None, row[-1] if with_raw else None, stored))
        return Written(written, _hold_given_twice(conn, found, record_json, synced_at) if found else [])
    return run_in_transaction(db, work)


class Stage:
    """A batch of transaction rows staged in a private in-memory database, to be copied by `copy_stage`.

    Binding a million rows one by one into `transactions` (five B-trees, an upsert per row) costs
    more than binding them into this bare table and copying it with one INSERT ... SELECT. The copy
    runs on this connection with the store attached, so a stage can be filled in one thread and
    copied in another (reconcile.ledger_writer.TransactionPages): one thread at a time, never both.
    """

    def __init__(self, *, record_json: RecordJson | None = None) -> None:
        self.record_json = record_json  # the JSON of a record held as GivenTwice (see `copy_stage`)
        self.conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        self.conn.execute(f"CREATE TABLE rows ({', '.join(ROW_COLUMNS)}, raw, shape)")
        self.conn.execute("BEGIN")
        self.rows = 0
        self.shapes: dict[int, str] = {}

    def add(self, runs: Iterable[tuple[tuple[int | None, bool], list[tuple]]], shapes: Mapping[int, str]) -> None:
        """Stage runs of rows as `store_transactions` takes them, in order."""
        for (shape, with_raw), rows in runs:
            self.conn.executemany(_staged(shape, with_raw), rows)
            self.rows += len(rows)
        self.shapes.update(shapes)

    def close(self) -> None:
        """Free the stage."""
        self.conn.close()


@lru_cache(maxsize=64)
def _staged(shape: int | None, with_raw: bool) -> str:
    values = ", ".join(["?"] * len(ROW_COLUMNS) + ["?" if with_raw else "NULL", "NULL" if shape is None else str(int(shape))])
    return f"INSERT INTO rows VALUES ({values})"


def copy_stage(stage: Stage, path: str, synced_at: str) -> Written:
    """Insert or refresh the staged rows in the store at `path` (in staging order), in one transaction;
    return what was written. The stage stays open (the caller closes it). Rows whose id names a stored
    transaction they are not are quarantined instead, as `store_transactions` does (the JSON by the stage's
    `record_json`)."""
    conn = stage.conn
    if conn.in_transaction:
        conn.execute("COMMIT")
    columns = f"{', '.join(ROW_COLUMNS)}, raw, shape"
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    conn.execute("ATTACH DATABASE ? AS store", (path,))
    try:
        conn.execute("PRAGMA store.synchronous = NORMAL")  # as every store connection (WAL is the file's own)
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.executemany("INSERT OR IGNORE INTO store.transaction_shapes (id, keys) VALUES (?, ?)",
                             stage.shapes.items())
            written = conn.execute(f"INSERT INTO store.transactions ({columns}, synced_at) SELECT {columns}, ?"
                                   f" FROM main.rows WHERE true ORDER BY rowid {_UPDATE}", (synced_at,)).rowcount
            given_twice: list[str] = []
            if written < stage.rows:  # an updated row counts, a clash skipped by _UPDATE's WHERE does not
                width = len(ROW_COLUMNS)
                found = [GivenTwice(tuple(r[:width]), None if r[width + 1] is None else stage.shapes.get(r[width + 1]),
                                    r[width], tuple(r[width + 2:]))
                         for r in conn.execute(_STAGED_ANOTHER).fetchall()]
                if found:
                    given_twice = _hold_given_twice(conn, found, stage.record_json, synced_at, schema="store")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    except sqlite3.Error as exc:
        raise StorageError(f"storing transactions failed: {exc}") from exc
    finally:
        conn.execute("DETACH DATABASE store")
    return Written(written, given_twice)


# The staged rows that are another transaction than the stored row of their id (after the copy: a row the
# copy inserted is its own), each as its ROW_COLUMNS values, raw and shape id, then the stored row's values.
_STAGED_ANOTHER = (f"SELECT {', '.join('r.' + c for c in ROW_COLUMNS)}, r.raw, r.shape,"
                   f" {', '.join('t.' + c for c in ROW_COLUMNS)} FROM main.rows r"
                   f" JOIN store.transactions t ON t.id = r.id WHERE NOT ({_SAME.format(t='t', r='r')})"
                   " ORDER BY r.rowid")


# What `partnerkit transactions` shows of a stored transaction: its columns, and when the read that last
# listed it began (each read stamps the rows it stores; see _REFRESH).
LISTED_COLUMNS = ROW_COLUMNS + ("synced_at",)
# The ledger's reading order, the balance chain's (partnerkit.store.matching_ledger): by time, a whole
# second before its fractions, then by id (numeric ids by value).
_CHAIN_ORDER = "rtrim(t.created_at, 'Z'), length(t.id), t.id"


def get_transaction(db: Database, ident: str) -> dict | None:
    """A stored transaction: LISTED_COLUMNS, and `shape` (its text) and `raw` to rebuild the provider's record
    (reconcile.ledger_fast.record_json); None when no transaction has that id."""
    cursor = db.execute(f"SELECT {', '.join('t.' + c for c in LISTED_COLUMNS)}, s.keys AS shape, t.raw"
                        " FROM transactions t LEFT JOIN transaction_shapes s ON s.id = t.shape WHERE t.id = ?", (ident,))
    row = cursor.fetchone()
    return None if row is None else dict(zip([c[0] for c in cursor.description], row))


def list_transactions(db: Database, *, start: str | None = None, end: str | None = None, kind: str | None = None,
                      reference: str | None = None, order_id: int | None = None,
                      limit: int) -> tuple[list[dict], int]:
    """Stored transactions in the ledger's order (LISTED_COLUMNS each), at most `limit`, and how many match in all.

    Filters, all optional: created in [start, end); of type `kind` (as stored: upper-cased); paying for the
    recharge whose reference_number, or the order whose reference_code, is `reference`, or for the order
    `order_id`, by the matcher's links (partnerkit.store.matching.linked_transactions), on any day.
    """
    where, params = [], {"limit": limit + 1}
    if start is not None:
        where.append("t.created_at >= :start AND t.created_at < :end")
        params.update(start=start, end=end)
    if kind is not None:
        where.append("t.type = :kind")
        params["kind"] = kind
    if reference is not None:
        recharge = linked_transactions("'recharge'", ":reference")
        order = linked_transactions("'order'", "(SELECT o.id FROM orders o WHERE o.reference_code = :reference LIMIT 1)")
        where.append(f"t.id IN ({recharge} UNION {order})")
        params["reference"] = reference
    if order_id is not None:
        order = linked_transactions("'order'", ":order_id")
        where.append(f"t.id IN ({order})")
        params["order_id"] = order_id
    clause = f" WHERE {' AND '.join(where)}" if where else ""
    cursor = db.execute(f"SELECT {', '.join('t.' + c for c in LISTED_COLUMNS)} FROM transactions t{clause}"
                        f" ORDER BY {_CHAIN_ORDER} LIMIT :limit", params)
    names = [c[0] for c in cursor.description]
    rows = [dict(zip(names, row)) for row in cursor.fetchall()]
    if len(rows) <= limit:
        return rows, len(rows)
    total = db.execute(f"SELECT count(*) FROM transactions t{clause}",
                       {k: v for k, v in params.items() if k != "limit"}).fetchone()[0]
    return rows[:limit], total


def transaction_rowid_mark(db: Database) -> int:
    """The highest rowid in `transactions` now (0 when empty): rows a read inserts come after it."""
    return db.execute("SELECT ifnull(max(rowid), 0) FROM transactions").fetchone()[0]


def count_transactions(db: Database, start: str, end: str) -> int:
    """How many stored transactions were created in [start, end) (the created_at index alone)."""
    return db.execute("SELECT count(*) FROM transactions WHERE created_at >= ? AND created_at < ?",
                      (start, end)).fetchone()[0]


def stamped_span(db: Database, start: str, end: str, *, synced_at: str) -> tuple[str, str] | None:
    """The earliest and the latest `created_at` in [start, end) of the rows whose `synced_at` is exactly
    `synced_at` (those the read begun then listed and no later read has listed since), or None.

    Two probes of `transactions_created`, one from each end, each stopping at its first such row: a row
    passed over costs its `synced_at`. Give the narrowest range that can hold what is sought.
    """
    found = []
    for way in ("ASC", "DESC"):
        row = db.execute("SELECT created_at FROM transactions WHERE created_at >= ? AND created_at < ?"
                         f" AND synced_at = ? ORDER BY created_at {way} LIMIT 1", (start, end, synced_at)).fetchone()
        if row is None:
            return None
        found.append(row[0])
    return found[0], found[1]


def unlisted_transactions(db: Database, start: str, end: str, *, listed_since: str, stored_upto: int,
                          limit: int = -1) -> list[tuple[tuple, str | None, str | None]]:
    """Stored transactions created in [start, end) that no read listed since `listed_since`, each as
    (ROW_COLUMNS values, shape text or None, raw), what `reconcile.ledger_fast.record_json` takes: what a
    complete read of those days begun then did not list.

    One range of `transactions_created` per read. Rows inserted after the read began (rowid above
    `stored_upto`, read from the index entry itself) are passed over without reading the row, so a
    day loaded fresh costs an index scan; a day stored before costs each row's synced_at. A record
    the read listed but could not map is held under `transaction:<id>` since then: not unlisted. Nor is
    one whose id the provider lists for another transaction, while that record is held (ID_GIVEN_TWICE),
    whenever it was listed: taken out, it would leave the quarantine under that same key, and the next read
    would store the other transaction under its id and release the entry, the overwrite in two steps.
    """
    # `+t.rowid`: the rowid bound filters index entries; it must not become the plan's range instead.
    rows = db.execute(
        f"SELECT {', '.join('t.' + c for c in ROW_COLUMNS)}, s.keys, t.raw FROM transactions t"
        " LEFT JOIN transaction_shapes s ON s.id = t.shape"
        " WHERE t.created_at >= ? AND t.created_at < ? AND +t.rowid <= ? AND t.synced_at < ?"
        " AND NOT EXISTS (SELECT 1 FROM transaction_quarantine q WHERE q.key = 'transaction:' || t.id"
        " AND (q.last_seen_at >= ? OR substr(q.reason, 1, ?) = ?)) ORDER BY t.created_at, t.id LIMIT ?",
        (start, end, stored_upto, listed_since, listed_since, len(ID_GIVEN_TWICE), ID_GIVEN_TWICE,
         limit)).fetchall()
    return [(tuple(r[:len(ROW_COLUMNS)]), r[-2], r[-1]) for r in rows]


def withdraw_transactions(db: Database, items: Iterable[tuple[str, str, str, str]], *, listed_since: str,
                          seen_at: str) -> list[tuple[str, str]]:
    """Take transactions the provider no longer lists out of `transactions` into the quarantine, in
    one transaction: (id, reason, the record's JSON, day) each, held as `transaction:<id>`. A row a
    read listed meanwhile (synced_at from `listed_since` on) stays. Returns (id, reason) of those taken.

    The quarantine keeps the record as received; a later read that lists the id stores it again and
    releases the entry (reconcile.ledger_writer.TransactionPages), as it does an unreadable record's.
    """
    def work(conn: sqlite3.Connection) -> list[tuple[str, str]]:
        taken = [(ident, reason, raw, day) for ident, reason, raw, day in items
                 if conn.execute("DELETE FROM transactions WHERE id = ? AND synced_at < ?",
                                 (ident, listed_since)).rowcount]
        quarantine(db, [(f"transaction:{ident}", reason, raw, day) for ident, reason, raw, day in taken], seen_at)
        return [(ident, reason) for ident, reason, _, _ in taken]
    return run_in_transaction(db, work)


_QUARANTINE = ("INSERT INTO {schema}.transaction_quarantine (key, reason, raw, day, first_seen_at, last_seen_at)"
               " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(key) DO UPDATE SET reason = excluded.reason, raw = excluded.raw,"
               " last_seen_at = excluded.last_seen_at, day = COALESCE(excluded.day, transaction_quarantine.day)")


def quarantine(db: Database, items: Iterable[tuple[str, str, str, str | None]], seen_at: str) -> int:
    """Keep unreadable records: (key, reason, raw JSON, day or None); re-seen ones are refreshed
    (a record keyed by its id may come back with other content: the latest copy is the one kept)."""
    def work(conn: sqlite3.Connection) -> int:
        before = conn.total_changes
        conn.executemany(_QUARANTINE.format(schema="main"),
                         ((k, reason, raw, day, seen_at, seen_at) for k, reason, raw, day in items))
        return conn.total_changes - before
    return run_in_transaction(db, work)


def given_twice(db: Database) -> list[str]:
    """The ids (as stored) of the stored transactions a listed record of another transaction is held for
    (ID_GIVEN_TWICE), in the ledger's id order; released when the stored transaction's own record is listed
    again. One range of the quarantine's primary key (its `transaction:` entries, usually none)."""
    rows = db.execute("SELECT substr(key, 13) FROM transaction_quarantine WHERE key >= 'transaction:'"
                      " AND key < 'transaction;' AND substr(reason, 1, ?) = ? ORDER BY length(key), key",
                      (len(ID_GIVEN_TWICE), ID_GIVEN_TWICE)).fetchall()
    return [ident for (ident,) in rows]


def quarantined(db: Database, day: str | None = None) -> list[dict]:
    """Quarantined records (of one day, when given, counting those whose day is unknown)."""
    sql = "SELECT key, reason, raw, day, first_seen_at, last_seen_at FROM transaction_quarantine"
    params: tuple = ()
    if day is not None:
        sql += " WHERE day = ? OR day IS NULL"
        params = (day,)
    cols = ("key", "reason", "raw", "day", "first_seen_at", "last_seen_at")
    return [dict(zip(cols, r)) for r in db.execute(sql + " ORDER BY first_seen_at, key", params).fetchall()]


def record_wallet_snapshots(db: Database, snapshots: Iterable[tuple[str, str, str, int, str | None]]) -> int:
    """Store wallet balances: (taken_at, wallet_id, currency, balance_cents, raw JSON)."""
    def work(conn: sqlite3.Connection) -> int:
        before = conn.total_changes
        conn.executemany("INSERT OR IGNORE INTO wallet_snapshots (taken_at, wallet_id, currency, balance_cents, raw)"
                         " VALUES (?, ?, ?, ?, ?)", snapshots)
        return conn.total_changes - before
    return run_in_transaction(db, work)


def wallet_snapshots(db: Database) -> list[dict]:
    """Every wallet snapshot, oldest first."""
    cols = ("taken_at", "wallet_id", "currency", "balance_cents")
    rows = db.execute(f"SELECT {', '.join(cols)} FROM wallet_snapshots ORDER BY taken_at, wallet_id, currency")
    return [dict(zip(cols, r)) for r in rows.fetchall()]


# Balances in the matcher's chain order (partnerkit.store.matching_ledger): stored times are ISO text ending
# in Z, so text order is time order across seconds; within one second the whole second comes before its
# fractions once the Z is trimmed, then by id. The second is found through the created_at index, then
# only its rows are sorted.
_SECOND = ("SELECT substr(created_at, 1, 19) FROM transactions WHERE created_at >= :lo AND created_at < :hi"
           " AND COALESCE(currency, '') = :currency ORDER BY created_at {way} LIMIT 1")
_IN_SECOND = ("SELECT balance_after_cents, amount_cents FROM transactions WHERE created_at >= :second"
              " AND created_at <= :second || 'Z' AND COALESCE(currency, '') = :currency"
              " ORDER BY rtrim(created_at, 'Z') {way}, length(id) {way}, id {way} LIMIT 1")


def edge_entry(db: Database | sqlite3.Connection, currency: str, lo: str, hi: str, *,
               last: bool) -> tuple[int | None, int] | None:
    """(balance_after_cents or None, amount_cents) of the first (or last) entry of a currency ('' for none)
    in [lo, hi), in chain order; None when the range has no entry in that currency.

    The index walk stops at the first row of the currency: give the narrowest range known to hold it
    (the report passes the hour of the currency's first or last entry)."""
    way = "DESC" if last else "ASC"
    params = {"lo": lo, "hi": hi, "currency": currency}
    row = db.execute(_SECOND.format(way=way), params).fetchone()
    if row is None:
        return None
    found = db.execute(_IN_SECOND.format(way=way), {"second": row[0], "currency": currency}).fetchone()
    return None if found is None else (found[0], found[1])


# The ledger's balance at a moment, on any day: the last entry of the currency up to it in chain order. The
# walk along `transactions_created` goes back from the moment and stops at the currency's first row: one probe
# for the account's busy currency; for a quiet second currency it passes the index entries of the others since
# that currency's last entry (as the balance chain's link to an earlier day does: matching_ledger._BREAKS).
_LAST_UPTO = ("SELECT substr(created_at, 1, 19) FROM transactions WHERE created_at < :through"
              " AND COALESCE(currency, '') = :currency ORDER BY created_at DESC LIMIT 1")
_LAST_IN_SECOND = ("SELECT id, created_at, balance_after_cents FROM transactions WHERE created_at >= :second"
                   " AND created_at <= :second || 'Z' AND COALESCE(currency, '') = :currency"
                   " ORDER BY rtrim(created_at, 'Z') DESC, length(id) DESC, id DESC LIMIT 1")


class Entry(NamedTuple):
    """A wallet entry as the balance comparisons read it (`synced_at`, when the latest read that listed it began:
    read only for the entries around a read, `around`)."""

    id: str
    created_at: str
    balance_after_cents: int | None
    amount_cents: int = 0
    synced_at: str | None = None


def through_second(moment: str) -> str:
    """The text bound just above every entry of `moment`'s second ("...T00:05:10Z" -> "...T00:05:10~"): stored
    times are ISO text, and "~" sorts after the Z and the fractions of that second."""
    return moment[:19] + "~"


def entry_at(db: Database | sqlite3.Connection, currency: str, moment: str) -> Entry | None:
    """The ledger's last entry of a currency ('' for none) at or before `moment` (its whole second), on any
    day, in chain order; None when the store holds none. Its balance_after is the ledger's balance then."""
    row = db.execute(_LAST_UPTO, {"through": through_second(moment), "currency": currency}).fetchone()
    if row is None:
        return None
    found = db.execute(_LAST_IN_SECOND, {"second": row[0], "currency": currency}).fetchone()
    return None if found is None else Entry(found[0], found[1], found[2])


def newest_by_id(db: Database | sqlite3.Connection, currency: str, lo: str, moment: str) -> Entry | None:
    """The entry of a currency dated from `lo` up to `moment` (its whole second) that the provider made last by its
    id (numeric ids compared as numbers: the shorter is older), or None. Read only when a wallet difference would
    be called money (reconcile.matcher.compare_wallet): a provider that dated an entry before one whose balance it
    follows (a sandbox's past planted under an opening balance stamped at its start) ends its chain there, not at
    the entry dated last. One range of `transactions_created`, sorted: not on the nightly path of a store that
    agrees."""
    row = db.execute("SELECT id, created_at, balance_after_cents, amount_cents FROM transactions"
                     " WHERE created_at >= :lo AND created_at < :through AND COALESCE(currency, '') = :currency"
                     " ORDER BY length(id) DESC, id DESC LIMIT 1",
                     {"lo": lo, "through": through_second(moment), "currency": currency}).fetchone()
    return None if row is None else Entry(*row)


# The entries just after a moment (`:through`, from through_second) and just before it, in chain order, at most
# :n rows of the index each way (any currency: the currency is filtered after the bounded walk); the entries
# before it only back to `:since`, each with when the latest read that listed it began (`synced_at`). What a
# difference between the provider's balance and the ledger's may be timing: see `around`.
_AROUND = "id, created_at, balance_after_cents, amount_cents, synced_at"
_AFTER = (f"SELECT {_AROUND} FROM (SELECT {_AROUND}, currency FROM transactions WHERE created_at >= :through"
          " ORDER BY created_at LIMIT :n) WHERE COALESCE(currency, '') = :currency"
          " ORDER BY rtrim(created_at, 'Z'), length(id), id")
_BEFORE = (f"SELECT {_AROUND} FROM (SELECT {_AROUND}, currency FROM transactions WHERE created_at < :through"
           " AND created_at >= :since ORDER BY created_at DESC LIMIT :n) WHERE COALESCE(currency, '') = :currency"
           " ORDER BY rtrim(created_at, 'Z') DESC, length(id) DESC, id DESC")


def around(db: Database | sqlite3.Connection, currency: str, moment: str, *, since: str,
           n: int) -> tuple[list[Entry], list[Entry]]:
    """The entries of a currency right after `moment` (its whole second excluded), oldest first, and right
    before it (back to `since`), newest first: each from at most `n` rows of `transactions_created`, with its
    `synced_at`."""
    params = {"through": through_second(moment), "currency": currency, "since": since, "n": n}
    return ([Entry(*row) for row in db.execute(_AFTER, params)],
            [Entry(*row) for row in db.execute(_BEFORE, params)])


def read_since(db: Database | sqlite3.Connection, first_day: str, moment: str) -> bool:
    """Whether the store holds every wallet entry the provider lists from `first_day` up to `moment`: each day
    from `first_day` through `moment`'s day read in full (`sync_coverage`) by a read that began after the day
    ended or after `moment` (an entry made before a read began is in what it listed; a read stamped with
    `moment`'s own second may be the walk of the sync that read the balance then, and does not count). One
    range of sync_coverage's primary key."""
    last_day = moment[:10]
    if first_day > last_day:
        return True
    row = db.execute(
        "SELECT COUNT(*) = CAST(julianday(:last) - julianday(:first) AS INTEGER) + 1 FROM sync_coverage"
        " WHERE entity = 'transactions' AND day >= :first AND day <= :last"
        " AND (synced_at > :moment OR synced_at >= date(day, '+1 day') || 'T00:00:00Z')",
        {"first": first_day, "last": last_day, "moment": moment}).fetchone()
    return bool(row[0])


def snapshot_near(db: Database | sqlite3.Connection, start: str, end: str,
                  now: str) -> tuple[str, dict[str, int]] | None:
    """The provider's wallet balances to hold against a day's ledger: (taken_at, {currency: balance_cents},
    summed over the currency's wallets) of the first snapshot taken after the day ended (up to `now`), else
    the latest taken during the day up to `now`; None when there is neither."""
    taken = db.execute(
        "SELECT COALESCE((SELECT MIN(taken_at) FROM wallet_snapshots WHERE taken_at >= :end AND taken_at <= :now),"
        " (SELECT MAX(taken_at) FROM wallet_snapshots WHERE taken_at >= :start AND taken_at < :end"
        " AND taken_at <= :now))", {"start": start, "end": end, "now": now}).fetchone()[0]
    if taken is None:
        return None
    rows = db.execute("SELECT currency, SUM(balance_cents) FROM wallet_snapshots WHERE taken_at = ? GROUP BY currency",
                      (taken,)).fetchall()
    return taken, {currency: balance for currency, balance in rows}


def get_watermark(db: Database, entity: str) -> str | None:
    """The last day (YYYY-MM-DD) an entity was synced through, or None before the first run."""
    row = db.execute("SELECT watermark FROM sync_state WHERE entity = ?", (entity,)).fetchone()
    return row[0] if row else None


def record_sync(db: Database, entity: str, *, from_day: str, to_day: str, started_at: str, count: int,
                days: Iterable[str], advance_to: str | None) -> None:
    """After a complete sync: mark the days covered and move the watermark forward (never back).

    A day keeps the latest start of the complete reads that covered it: a walk read on from where one stopped
    counts from when its first part began, and it may end after a read that began later has covered the day."""
    def work(conn: sqlite3.Connection) -> int:
        conn.executemany("INSERT INTO sync_coverage (entity, day, synced_at) VALUES (?, ?, ?)"
                         " ON CONFLICT(entity, day) DO UPDATE"
                         " SET synced_at = max(sync_coverage.synced_at, excluded.synced_at)",
                         ((entity, d, started_at) for d in days))
        if advance_to is not None:
            conn.execute("INSERT INTO sync_state (entity, watermark, last_run_at, last_count) VALUES (?, ?, ?, ?)"
                         " ON CONFLICT(entity) DO UPDATE SET watermark = max(sync_state.watermark, excluded.watermark),"
                         " last_run_at = excluded.last_run_at, last_count = excluded.last_count",
                         (entity, advance_to, started_at, count))
        return 0
    run_in_transaction(db, work)


def coverage(db: Database, entity: str, day: str) -> str | None:
    """When the latest complete sync of `entity` for `day` started, or None."""
    row = db.execute("SELECT synced_at FROM sync_coverage WHERE entity = ? AND day = ?", (entity, day)).fetchone()
    return row[0] if row else None


def walk_position(db: Database, entity: str, from_day: str, to_day: str) -> tuple[int, str, str] | None:
    """(next page, started_at, stopped_at) of an interrupted walk of this entity and range, or None."""
    row = db.execute("SELECT next_page, started_at, stopped_at FROM sync_walks WHERE entity = ? AND from_day = ?"
                     " AND to_day = ?", (entity, from_day, to_day)).fetchone()
    return None if row is None else (int(row[0]), row[1], row[2])


def walk_positions(db: Database) -> list[dict]:
    """Every interrupted walk waiting to read on, oldest first (for `partnerkit status`)."""
    cols = ("entity", "from_day", "to_day", "next_page", "started_at", "stopped_at", "reason")
    rows = db.execute(f"SELECT {', '.join(cols)} FROM sync_walks ORDER BY started_at, entity").fetchall()
    return [dict(zip(cols, row)) for row in rows]


def keep_walk_position(db: Database, entity: str, from_day: str, to_day: str, *, next_page: int, started_at: str,
                       stopped_at: str, reason: str) -> None:
    """Note where a walk stopped (after what it read was stored), for its next run to read on."""
    def work(conn: sqlite3.Connection) -> int:
        conn.execute("INSERT INTO sync_walks (entity, from_day, to_day, next_page, started_at, stopped_at, reason)"
                     " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT(entity, from_day, to_day) DO UPDATE SET"
                     " next_page = excluded.next_page, started_at = excluded.started_at,"
                     " stopped_at = excluded.stopped_at, reason = excluded.reason",
                     (entity, from_day, to_day, next_page, started_at, stopped_at, reason[:300]))
        return 0
    run_in_transaction(db, work)


def forget_walk(db: Database, entity: str, from_day: str, to_day: str, *, older_than: str) -> None:
    """The walk of this entity and range reached its end: nothing to read on from. Positions of this
    entity left by walks of other ranges that stopped before `older_than` go too (nothing resumes them)."""
    def work(conn: sqlite3.Connection) -> int:
        conn.execute("DELETE FROM sync_walks WHERE entity = ? AND ((from_day = ? AND to_day = ?) OR stopped_at < ?)",
                     (entity, from_day, to_day, older_than))
        return 0
    run_in_transaction(db, work)
