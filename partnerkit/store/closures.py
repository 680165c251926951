"""Open intents an operator closed by hand (`partnerkit recharges close`, `partnerkit orders close`): the one shape of
their closure record, kept in `meta` under the owner's key (`recharge_closed:N`, `order_intent_closed:N`).

A closed intent keeps its row and its state; the record says who closed it, when, why and what the search saw, with
the fields that name the intent (its Idempotency-Key and client_reference or ref), so that a later row given the same
id is never taken for the closed one (`read`). The owners (partnerkit.store.recharges._closed,
partnerkit.store.order_intents) re-read their row in the closing transaction and call `write`.
"""

from __future__ import annotations

import json
import sqlite3
from datetime import datetime
from typing import Any, Mapping

from partnerkit.store import meta
from partnerkit.store.db import Database
from partnerkit.timeutil import iso

# What `recharges show` and `orders close` print of a closure, after the row's own fields (null when never closed).
FIELDS = ["closed_at", "closed_by", "closed_note", "closed_search", "closed_state"]


def read(db: Database | sqlite3.Connection, key: str, identity: Mapping[str, Any]) -> dict | None:
    """The closure kept under `key`, or None: none, or one whose naming fields are not `identity`'s (another
    intent that had the id)."""
    value = meta.get(db, key)
    if value is None:
        return None
    record = json.loads(value)
    if any(record.get(name) != wanted for name, wanted in identity.items()):
        return None
    return record


def write(conn: sqlite3.Connection, key: str, record: Mapping[str, Any], *, by: str, note: str, at: datetime,
          searched: str) -> dict:
    """Keep the closure of an intent (`record`: the fields naming it and its request) with who, when, why and what
    the search saw, in the caller's transaction; return it."""
    kept = {**record, "by": by, "at": iso(at), "note": note, "searched": searched}
    meta.put(conn, key, json.dumps(kept, sort_keys=True), now=at)
    return kept


def described(closed: Mapping[str, Any]) -> str:
    """A closure, as a message names it: "was closed by ana at ... (note)"."""
    return f"was closed by {closed['by']} at {closed['at']} ({closed['note']})"


def view(closed: Mapping[str, Any] | None, *, still_open: bool) -> dict[str, Any]:
    """The FIELDS of a closure: `closed_state` "closed", or "overtaken" once the provider listed the intent after all
    and its record was linked (`still_open` False: the provider's record wins); all null when never closed."""
    if closed is None:
        return dict.fromkeys(FIELDS)
    return {"closed_at": closed["at"], "closed_by": closed["by"], "closed_note": closed["note"],
            "closed_search": closed["searched"], "closed_state": "closed" if still_open else "overtaken"}
