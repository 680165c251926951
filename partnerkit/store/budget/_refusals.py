"""The provider's last 401 to the key (`provider_refusals`, one row per key hash), until a call with the
key is answered 2xx: `partnerkit status` and /metrics show it, and the worker pauses its jobs that call
the provider for REFUSAL_PAUSE_S after it (`pause_until`).

A refusal is dated on the clock of the process that met it. One dated ahead of the clock reading it
(`dated_ahead`) was met while that host's clock ran ahead, since put right: the provider refuses a signed
request whose X-Timestamp is over 5 minutes from its own time, so a clock off is itself a cause of 401s
(`names_the_clock`). Such a refusal stands until a call is accepted, as any other, but pauses nothing:
paused on, it would stop every job for as long as the clock was off, and the jobs' calls are what clear it.

A refusal that names the clock was of a signed request (a write: only those carry X-Timestamp), and a read
the provider accepts says nothing of the clock: reads pass while every write is refused. So only a signed
request accepted clears it (`forget(signed=...)`), or any call once it is dated ahead, the clock put right.
Cleared by the worker's next read, `partnerkit status` showed nothing while recharge submits and order
creation still failed.
"""

from __future__ import annotations

import re
import sqlite3

from partnerkit.errors import StorageError
from partnerkit.store.db import Database, transaction

# After the provider refused the API key (a 401: a rotated or revoked secret, a host off the key's
# allowlist), what calls it waits this long from the refusal: the worker's jobs and a voucher fetch.
REFUSAL_PAUSE_S = 60.0
# A refusal dated further ahead of the reading clock than this says nothing of when to try again (see the
# module docstring); a step of NTP's or two processes' readings a moment apart stay well under it.
AHEAD_TOLERANCE_S = 5.0
# A 401 whose message names the request's timestamp or the time window it must fall in: the document says
# "Signatures outside the 5-minute window are rejected" without the message; the sandbox's is "invalid
# request signature: X-Timestamp is outside the 5-minute window". This host's clock is then the first
# suspect, not the key. A missing or garbled X-Timestamp (a header a proxy dropped) is not the clock's.
_CLOCK_WORDS = re.compile(r"\bwindow\b|\bskew|\btolerance\b|\bclock\b"
                          r"|time\s*stamp\b.*\b(outside|expired|too old|stale|in the future|ahead|behind|too late"
                          r"|too early|out of range|drift)", re.IGNORECASE)


def record(db: Database, key: str, *, status: int, message: str | None, method: str, path: str, purpose: str,
           at: float) -> None:
    """Keep the provider's refusal of the key (`key`: the budget's key hash), replacing an earlier one."""
    with transaction(db) as conn:
        conn.execute(
            "INSERT INTO provider_refusals (key_hash, status, message, method, path, purpose, at)"
            " VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (key_hash) DO UPDATE SET status = excluded.status,"
            " message = excluded.message, method = excluded.method, path = excluded.path,"
            " purpose = excluded.purpose, at = excluded.at",
            (key, status, (message or "")[:200], method, path, purpose, at))


def forget(db: Database, key: str, *, signed: bool = True, now: float | None = None) -> None:
    """A call with the key was answered 2xx: forget an earlier refusal (by any process).

    `signed`: the call was a signed request (a write). An unsigned one (a read) leaves a refusal that names the
    clock standing, unless it is `dated_ahead` of `now` (unix seconds: the clock was put right since): the read
    carried no timestamp (the module docstring). Called after every answered call, so it reads first: a write only
    when there is one to forget. (Threads sharing the database handle take turns in `transaction()`, which holds
    the handle's lock.)"""
    try:
        standing = db.execute("SELECT message, at FROM provider_refusals WHERE key_hash = ?", (key,)).fetchone()
    except sqlite3.Error as exc:
        raise StorageError(f"cannot read the provider's refusals: {exc}") from exc
    if standing is None:
        return
    if not signed and names_the_clock(standing[0]) and not (now is not None and dated_ahead({"at": standing[1]}, now)):
        return
    with transaction(db) as conn:
        conn.execute("DELETE FROM provider_refusals WHERE key_hash = ?", (key,))


def standing(db: Database, key: str) -> dict | None:
    """The provider's latest refusal of the key still standing (status, message, method, path, purpose,
    at), or None."""
    row = db.execute("SELECT status, message, method, path, purpose, at FROM provider_refusals"
                     " WHERE key_hash = ?", (key,)).fetchone()
    return None if row is None else dict(zip(("status", "message", "method", "path", "purpose", "at"), row))


def names_the_clock(message: str | None) -> bool:
    """Whether a 401's message blames the request's timestamp (outside the provider's window): a clock off."""
    return bool(message and _CLOCK_WORDS.search(message))


def dated_ahead(refusal: dict | None, now: float) -> bool:
    """Whether a standing refusal is dated more than AHEAD_TOLERANCE_S after `now` (unix seconds): it was met
    under a clock that ran ahead and has been put right since."""
    return refusal is not None and refusal["at"] - now > AHEAD_TOLERANCE_S


def pause_until(refusal: dict | None, now: float) -> float | None:
    """Until when (unix seconds) the calls that wait after the refusal (the worker's jobs) wait at `now`:
    REFUSAL_PAUSE_S after it; None without a refusal, once that is past, and for one `dated_ahead`."""
    if refusal is None or dated_ahead(refusal, now):
        return None
    until = refusal["at"] + REFUSAL_PAUSE_S
    return until if now < until else None
