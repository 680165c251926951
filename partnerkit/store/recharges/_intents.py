"""The submit side: a recharge's intent before its submit is sent, and what its answer settles.

`record_intent` commits an INTENT row (origin 'partner') before the request exists; the answer
links it to the provider's recharge (`record_response`), leaves it UNKNOWN for locate
(`mark_unknown`), or removes it when the provider definitely refused (`discard_refused`).

An answer can name a recharge another row already holds: one the sync stored (origin 'provider')
before this key was sent through partnerkit, its answer replayed. That is one recharge known twice,
and the intent is merged into the row that holds it (`_merge`), when the provider's record agrees
with that row (`disagreements`). Otherwise (another Idempotency-Key, other fields: a sandbox started
again re-uses its ids) nothing is merged: `RechargeHeldElsewhere`, and the intent stays open (UNKNOWN) with
`RechargeHeldElsewhere.reason` in its last_error, which `held_elsewhere` reads back: its key is never sent
again (the provider would answer the same id), and `HELD_ADVICE` says what to do instead.

Before either, the answer is compared with the intent that asked for it (`disagreements` without a holder: the
mobile number, the operator id, the face against the amount asked, and the client_reference when both know one).
An answer that is not the request's is another request's, replayed under the same Idempotency-Key (another program
of the partner used the key first): nothing is linked or merged, `AnswerOfAnotherRequest`, and the intent stays open
(UNKNOWN) with `AnswerOfAnotherRequest.reason` in its last_error, which `key_taken` reads back: its key is never sent
again (the same wrong answer would come back).
"""

from __future__ import annotations

import json
import re
import sqlite3
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from partnerkit.errors import PartnerKitError, StorageError
from partnerkit.money import cents, fmt, from_cents, to_decimal
from partnerkit.store import meta
from partnerkit.store.db import Database, in_transaction, transaction
from partnerkit.store.recharges._provider import (
    OPEN_INTENT_SQL, PERFORMED_BY_REPLAY, _ROW, _write, normalise_status, provider_fields,
)
from partnerkit.store.recharges._queries import _rows, get, merged_key
from partnerkit.timeutil import iso, parse_ts


class RechargeHeldElsewhere(PartnerKitError):
    """The provider's answer names a recharge another local row already holds, and it is not this intent's:
    that row was submitted under another Idempotency-Key, or its fields differ (`differences`, one phrase
    each). Nothing was written and the intent stays open. Not a storage fault: the store took the read
    and refused to make two recharges one."""

    def __init__(self, local_id: int, provider_id: int, holder: int, differences: list[str]) -> None:
        self.local_id, self.provider_id, self.holder, self.differences = local_id, provider_id, holder, differences
        super().__init__(f"provider recharge {provider_id} is already held by local recharge #{holder}, "
                         f"which differs from it ({'; '.join(differences)})")

    def reason(self, status: str, reference_number: str | None) -> str:
        """The intent's last_error: which recharge the answer named, which row holds it, what differs
        (`held_elsewhere` reads it back)."""
        answered = f"{reference_number}, {status}" if reference_number else status
        return (f"the provider answered recharge {self.provider_id} ({answered}), but local recharge #{self.holder} "
                f"{HELD_ELSEWHERE} ({'; '.join(self.differences)}): not merged")


class AnswerOfAnotherRequest(PartnerKitError):
    """The provider's answer to an intent's Idempotency-Key is not the intent's request: its mobile number, operator
    id, face or client_reference differs (`differences`, one phrase each, `disagreements`' words). The key was
    already used for another recharge, whose original answer the provider replayed ("replays the original
    response, including the recharge id"): this intent was not made under it. Nothing was written (the intent stays
    open); `holder` is the local row that holds the answered recharge, if one does."""

    def __init__(self, local_id: int, provider_id: int, reference_number: str | None, differences: list[str],
                 holder: int | None = None) -> None:
        self.local_id, self.provider_id, self.reference_number = local_id, provider_id, reference_number
        self.differences, self.holder = differences, holder
        super().__init__(f"provider recharge {provider_id} is not the request of local recharge #{local_id} "
                         f"({'; '.join(differences)}): its Idempotency-Key {KEY_TAKEN}")

    def reason(self, status: str) -> str:
        """The intent's last_error: which recharge answered its key, and what differs (`key_taken` reads it)."""
        answered = f"{self.reference_number}, {status}" if self.reference_number else status
        return (f"the provider answered recharge {self.provider_id} ({answered}) to its Idempotency-Key, "
                f"{KEY_TAKEN_REASON} ({'; '.join(self.differences)}): not linked, and this recharge was not made "
                "under that key")


# The words that say an intent's Idempotency-Key answered another recharge (`AnswerOfAnotherRequest`), in the
# messages and in its last_error; `key_taken` is the one reader of that last_error: `partnerkit status`, `recharges
# locate` and the submit hold never send such an intent's key again (the same answer would come back).
KEY_TAKEN = "was already used for another recharge"
KEY_TAKEN_REASON = f"which {KEY_TAKEN}"
_TAKEN_REASON = re.compile(r"the provider answered recharge (\d+) \((?:(.*), )?([^,()]*)\) to its Idempotency-Key, "
                           rf"{re.escape(KEY_TAKEN_REASON)} \((.*)\): not linked")


@dataclass(frozen=True)
class KeyTaken:
    """An open intent whose Idempotency-Key answered another recharge, as its last_error says."""

    recharge_id: int  # the recharge the answer named: another request's
    reference_number: str | None
    status: str  # the answer's
    differences: str  # what differs from this intent's request, as one text

    @property
    def answered(self) -> str:
        """The answer, as an intent's entry names it: "recharge 100004 (RCH..., SUCCESS)"."""
        shown = f"{self.reference_number}, {self.status}" if self.reference_number else self.status
        return f"recharge {self.recharge_id} ({shown})"


def key_taken(error: str | None) -> KeyTaken | None:
    """What an open intent's last_error says of an answer to its key that was another recharge's; None when it
    says nothing of the kind."""
    found = _TAKEN_REASON.match(error or "")
    if found is None:
        return None
    recharge_id, reference_number, status, differences = found.groups()
    return KeyTaken(int(recharge_id), reference_number, status, differences)


def key_taken_advice(local_id: int | str) -> str:
    """What to do about such an intent: the words of the submit's message, `recharges locate`'s and `partnerkit
    status`'s (`local_id`: "N" for a line naming several)."""
    return (f"if the customer still needs it, check first that no recharge of it exists (`partnerkit recharges "
            f"locate --local-id {local_id}` searches the provider for it by number and client_reference, and never "
            "sends this key again), then submit it again without --idempotency-key: a new key")


# The words of an intent's last_error that say its answer named a recharge id another local row holds
# (`RechargeHeldElsewhere.reason`; one kept by an earlier release names no reference_number). `held_elsewhere` is
# the one reader: `partnerkit status`, `recharges locate` and the submit hold never send such an intent's key
# again, or advise it, since the provider answers the same id.
HELD_ELSEWHERE = "already holds that id and differs from it"
_HELD_REASON = re.compile(r"the provider answered recharge (\d+) \((?:(.*), )?([^,()]*)\), but local recharge "
                          rf"#(\d+) {re.escape(HELD_ELSEWHERE)}")


@dataclass(frozen=True)
class HeldId:
    """An open intent whose answer named a recharge id another local row holds, as its last_error says."""

    recharge_id: int  # the id the provider's answer named
    reference_number: str | None  # the answer's (None in a reason an earlier release kept)
    status: str  # the answer's
    holder: int  # the local row that holds the id

    @property
    def answered(self) -> str:
        """The answer, as an intent's entry names it: "recharge 100001 (RCH..., PROCESSING)"."""
        shown = f"{self.reference_number}, {self.status}" if self.reference_number else self.status
        return f"recharge {self.recharge_id} ({shown})"

    @property
    def compare(self) -> str:
        """The first thing to do, with what shows both recharges (HELD_ADVICE follows it)."""
        known = f"; support knows the answered one as {self.reference_number}" if self.reference_number else ""
        return f"compare both with the provider (`partnerkit recharges show {self.holder}`{known})"


def held_elsewhere(error: str | None) -> HeldId | None:
    """What an open intent's last_error says of an answer naming a recharge id another local row holds; None
    when it says nothing of the kind."""
    found = _HELD_REASON.match(error or "")
    if found is None:
        return None
    recharge_id, reference_number, status, holder = found.groups()
    return HeldId(int(recharge_id), reference_number, status, int(holder))


# What to do about such an intent, after `HeldId.compare`: the words of the submit's message, `recharges locate`'s,
# the submit hold's and `partnerkit status`'s. Each says beside it that its key is not sent again.
HELD_ADVICE = ("from a real provider an id given twice is its fault, to report to support with both reference numbers. "
               "A sandbox run with --fixed-ids gives the same ids at every start: with one kept across its restarts, "
               "start a fresh database (a new PARTNERKIT_DB) or run it without --fixed-ids")


def record_intent(db: Database, *, idempotency_key: str, mobile_number: str, operator_id: int, amount: Decimal,
                  client_reference: str, submitted_at: datetime, circle_id: int | None = None,
                  is_postpaid: bool | None = None, is_special: bool | None = None, nickname: str | None = None,
                  force: bool = False, sender_lock: int | None = None, sender: str | None = None) -> int:
    """Commit an INTENT row before the submit is sent; return its local id. Inside this thread's own
    transaction (the submit guard's, which looks for an open intent of the same recharge first) the row is
    written in it, and committed with it. `sender_lock` and `sender`: the lock the submit holds while it sends,
    and who it is (`partnerkit.senders`; None: not known)."""
    def insert(conn: sqlite3.Connection) -> int:
        cursor = conn.execute(
            """INSERT INTO recharges (idempotency_key, origin, mobile_number, operator_id, amount_cents,
                   client_reference, circle_id, is_postpaid, is_special, nickname, force, status,
                   submitted_at, row_updated_at, sender_lock, sender)
               VALUES (?, 'partner', ?, ?, ?, ?, ?, ?, ?, ?, ?, 'INTENT', ?, ?, ?, ?)""",
            (idempotency_key, mobile_number, operator_id, cents(to_decimal(amount)), client_reference, circle_id,
             None if is_postpaid is None else int(is_postpaid), None if is_special is None else int(is_special),
             nickname, int(force), iso(submitted_at), iso(submitted_at), sender_lock, sender),
        )
        return int(cursor.lastrowid)

    if in_transaction(db):  # this thread's own transaction (not another thread's on a shared handle)
        return insert(db.conn)
    with transaction(db) as conn:
        return insert(conn)


def record_response(db: Database, local_id: int, recharge: Any, *, status: str, seen_at: datetime,
                    http_status: int | None = None, how: str = "the submit's answer") -> dict:
    """Link a local row to the provider's recharge and store its fields; return the row.

    An answer that is not the intent's request (`disagreements` without a holder) is another request's:
    AnswerOfAnotherRequest, with nothing written. When another row already holds the recharge, the intent is
    merged into it if it is the same recharge (module docstring), in one transaction, and that row is returned:
    its `local_id` is not `local_id` then. `how` says what named the recharge (kept with the merge). Otherwise
    RechargeHeldElsewhere, with nothing written."""
    fields = provider_fields(recharge)
    stored, legacy = normalise_status(status)
    into = local_id
    with transaction(db) as conn:
        holder = _rows(conn.execute("SELECT * FROM recharges WHERE provider_id = ? AND local_id != ?",
                                    (fields["id"], local_id)))
        # First the request itself: an answer that is not it is another request's, whoever holds its id.
        intent = _rows(conn.execute("SELECT * FROM recharges WHERE local_id = ?", (local_id,)))
        if intent and (differences := disagreements(intent[0], None, fields)):
            raise AnswerOfAnotherRequest(local_id, fields["id"], fields["reference_number"], differences,
                                         holder[0]["local_id"] if holder else None)
        if holder:
            into = _merge_or_refuse(conn, local_id, holder[0], fields, http_status=http_status, seen_at=seen_at,
                                    how=how)
        else:
            rows = _rows(conn.execute(f"SELECT {_ROW} FROM recharges WHERE local_id = ?", (local_id,)))
            if rows:
                _write(conn, rows[0], fields, stored, legacy, seen_at, http_status=http_status)
    return get(db, into) or {}


def disagreements(intent: dict, holder: dict | None, fields: dict) -> list[str]:
    """Why the provider's record `fields`, the intent that asked for it and the row that holds its id are not
    one recharge, one phrase each (none: they are). A field is compared where more than one of them knows it:
    the mobile number, the operator (id; display name), the face (the intent's amount asked), the
    client_reference, the reference_number and the creation time. A row holds one Idempotency-Key: a holder
    with its own is always another submit.

    Without a holder, the record against the request alone (`record_response`, before any holder): the mobile
    number, the operator id, the face against the amount asked, and the client_reference the request carried
    when the record has one (the document omits it when none was sent). An answer to the intent's own
    request, first or replayed, agrees with it on all four."""
    found = []
    if holder is not None and holder["idempotency_key"] is not None:
        found.append(f"local #{holder['local_id']} was submitted under another Idempotency-Key")
    if holder is not None and intent["provider_id"] is not None:
        found.append(f"local #{intent['local_id']} is already linked to recharge {intent['provider_id']}")
    empty = dict.fromkeys(("mobile_number", "operator_id", "operator", "face_cents", "amount_cents",
                           "client_reference", "reference_number", "provider_created_at"))
    held_row = empty if holder is None else holder
    mine = f"local #{intent['local_id']}"
    theirs = "" if holder is None else f"local #{holder['local_id']}"
    compared = (
        ("mobile_number", intent["mobile_number"], fields["mobile_number"], held_row["mobile_number"] or None),
        ("operator_id", intent["operator_id"], fields["operator_id"], held_row["operator_id"]),
        ("operator", None, fields["operator"], held_row["operator"]),
        ("face", from_cents(intent["amount_cents"]), fields["face"],
         from_cents(held_row["face_cents"] if held_row["face_cents"] is not None else held_row["amount_cents"])),
        # The request's own client_reference only against the record's: a row the sync stored keeps the provider's.
        ("client_reference", intent["client_reference"] if holder is None else None, fields["client_reference"],
         held_row["client_reference"]),
        ("reference_number", None, fields["reference_number"], held_row["reference_number"]),
        ("created_at", None, fields["created_at"], parse_ts(held_row["provider_created_at"])),
    )
    for name, asked, answered, held in compared:
        if holder is None and answered is None:
            continue  # the request alone: compared only with what the record says
        known = [(who, value) for who, value in ((mine, asked), ("the provider's answer", answered), (theirs, held))
                 if value is not None]
        if len({_shown(value) for _, value in known}) > 1:
            found.append(f"{name} differs ({', '.join(f'{who} {_shown(value)}' for who, value in known)})")
    return found


def request_disagreements(intent: dict, recharge: Any) -> list[str]:
    """Why a provider record `recharge` (a client record or a raw dict) is not the request intent `intent` made,
    one phrase each (none: it may be): `disagreements` without a holder, as `record_response` checks an answer.
    `recharges locate` asks it of what its search matched, before linking."""
    return disagreements(intent, None, provider_fields(recharge))


def _shown(value: Any) -> str:
    if isinstance(value, Decimal):
        return fmt(value) or ""
    if isinstance(value, datetime):
        return iso(value) or ""
    return str(value)


def _merge_or_refuse(conn: sqlite3.Connection, local_id: int, holder: dict, fields: dict, *,
                     http_status: int | None, seen_at: datetime, how: str) -> int:
    """Merge intent `local_id` into `holder` (the row that holds the provider's id) if they are one recharge;
    return the holder's local id. Raise RechargeHeldElsewhere if they are not."""
    rows = _rows(conn.execute("SELECT * FROM recharges WHERE local_id = ?", (local_id,)))
    if not rows:
        done = meta.get(conn, merged_key(local_id))  # merged a moment ago, by another process
        if done is not None and json.loads(done)[-1]["into"] == holder["local_id"]:
            return holder["local_id"]
        raise StorageError(f"local recharge #{local_id} no longer exists; provider recharge {fields['id']} is "
                           f"local recharge #{holder['local_id']}")
    intent = rows[0]
    differences = disagreements(intent, holder, fields)
    if differences:
        raise RechargeHeldElsewhere(local_id, fields["id"], holder["local_id"], differences)
    _merge(conn, intent, holder, fields, http_status=http_status, seen_at=seen_at, how=how)
    return holder["local_id"]


def _merge(conn: sqlite3.Connection, intent: dict, holder: dict, fields: dict, *, http_status: int | None,
           seen_at: datetime, how: str) -> None:
    """One recharge known twice: the holder keeps its provider fields and gains the intent's key, origin and
    what it alone knew; the intent row goes, and is kept whole under `merged_key` (meta) with when and why."""
    conn.execute("DELETE FROM recharges WHERE local_id = ?", (intent["local_id"],))  # its key is unique
    conn.execute(
        """UPDATE recharges SET idempotency_key = :key, origin = 'partner',
               client_reference = COALESCE(client_reference, :client_reference),
               operator_id = COALESCE(operator_id, :operator_id), amount_cents = COALESCE(amount_cents, :amount),
               circle_id = COALESCE(circle_id, :circle_id), is_postpaid = COALESCE(is_postpaid, :is_postpaid),
               is_special = COALESCE(is_special, :is_special), nickname = COALESCE(nickname, :nickname),
               force = :force, http_status = COALESCE(http_status, :http_status), row_updated_at = :at
           WHERE local_id = :holder""",
        {"key": intent["idempotency_key"], "client_reference": intent["client_reference"],
         "operator_id": fields["operator_id"] if fields["operator_id"] is not None else intent["operator_id"],
         "amount": intent["amount_cents"], "circle_id": intent["circle_id"], "is_postpaid": intent["is_postpaid"],
         "is_special": intent["is_special"], "nickname": intent["nickname"], "force": intent["force"],
         "http_status": http_status, "at": iso(seen_at), "holder": holder["local_id"]})
    record = {"into": holder["local_id"], "provider_id": fields["id"], "how": how, "merged_at": iso(seen_at),
              "holder_origin": holder["origin"], "intent": intent}
    # A list, newest last: SQLite gives the highest local id again once its row is gone (INTEGER PRIMARY KEY
    # without AUTOINCREMENT), so a later intent may carry this id, and be merged in turn.
    earlier = meta.get(conn, merged_key(intent["local_id"]))
    records = (json.loads(earlier) if earlier is not None else []) + [record]
    meta.put(conn, merged_key(intent["local_id"]), json.dumps(records, sort_keys=True), now=seen_at)


def mark_unknown(db: Database, local_id: int, error: str, at: datetime) -> None:
    """The submit's outcome is ambiguous (timeout, 500): the row waits for locate."""
    with transaction(db) as conn:
        conn.execute("UPDATE recharges SET status = 'UNKNOWN', last_error = ?, row_updated_at = ? "
                     f"WHERE local_id = ? AND {OPEN_INTENT_SQL}", (error, iso(at), local_id))


def discard_refused(db: Database, local_id: int) -> None:
    """Remove an intent the provider definitely refused (4xx, 503): no recharge exists for it."""
    with transaction(db) as conn:
        conn.execute(f"DELETE FROM recharges WHERE local_id = ? AND {OPEN_INTENT_SQL}", (local_id,))


def note_error(db: Database, local_id: int, error: str, at: datetime) -> None:
    """Keep the last error seen while working on a row (locate attempts)."""
    with transaction(db) as conn:
        conn.execute("UPDATE recharges SET last_error = ?, row_updated_at = ? WHERE local_id = ?",
                     (error, iso(at), local_id))


def note_performed_by_replay(db: Database, local_id: int, how: str, at: datetime) -> None:
    """Keep on the row, for good, that a later replay of its key made the recharge (`recharges show`)."""
    with transaction(db) as conn:
        conn.execute("UPDATE recharges SET last_error = ?, row_updated_at = ? WHERE local_id = ?",
                     (f"{PERFORMED_BY_REPLAY} {how}", iso(at), local_id))
