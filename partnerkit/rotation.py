"""Voucher key rotation: which key opens each stored value, moving values to the current key, and
retiring the keys nothing needs any more (the core of `partnerkit keys`).

A stored value is a voucher's card_number, pin_code or claim_url, a saved webhook token, or a
webhook body kept in the inbox (sealed since the security review; `rewrap` also seals a body kept
in clear by an earlier version). A
voucher's fingerprint depends on the key too: after a rotation the dedup statement also matches a
previous key's fingerprint (`store.vouchers.add`), and `rewrap` recomputes it under the current key
from the voucher's identity (code, else reference, else claim URL; `vouchers.voucher_identity`).

A voucher whose identity was the provider's whole record (no code, reference or claim URL) cannot
have its fingerprint recomputed: that record is not stored. `rewrap` leaves such a voucher exactly as
it is when a previous key sealed it, so it keeps counting as "needs a previous key" and `retire`
refuses; re-sealing its PIN alone would hide that its dedup still depends on the old key, and a
re-read of the order would then store it a second time.

Running processes take a rotated key file by themselves (`crypto.KeyFollower`): the receiver at its
token refresh, within KEY_PICKUP_S of the change, and until then it may still seal with the previous
key; the worker's voucher fetches and the commands that seal what the provider answered (`orders
create`, `webhooks register`) or a person typed (`webhooks token set`) when they store it, under the
write lock. `rewrap` and `retire` wait KEY_PICKUP_S out (`wait_for_key_pickup`) before they look at the
database, so that what they check is not followed by values sealed with a key they are about to drop.
"""

from __future__ import annotations

import math
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from partnerkit.config import ConfigError
from partnerkit.crypto import (TOKEN_REFRESH_S, Cipher, cipher_from_keys, new_key_text, read_key_file, token_context,
                               write_key_file)
from partnerkit.store import Database, transaction
from partnerkit.store.db import RECEIVER_BUSY_TIMEOUT_MS
from partnerkit.store import inbox
from partnerkit.store import vouchers as voucher_store
from partnerkit.store import webhook_tokens
from partnerkit.store.vouchers import SEALED_COLUMNS, KeyedSample
from partnerkit.vouchers import voucher_context, voucher_identity

DEFAULT_BATCH = 500
# How long after the key file changed a running process may still store a value sealed with the key it
# read before: a receiver worker follows the file at its token refresh, every TOKEN_REFRESH_S, and a
# delivery verified just before the refresh is stored after waiting up to its busy timeout for the write
# lock; plus SLOW_REQUEST_S for the rest of a request on a loaded machine. The worker and the commands
# look the key up once they hold the write lock they store with, so none of their longer lock waits
# (15 s, 30 s) falls between the look-up and the commit (a webhook token, which its store function seals
# outside that lock, is sealed again under it when the file moved on: `receiver.tokens.save_sealed`).
SLOW_REQUEST_S = 2.0
KEY_PICKUP_S = TOKEN_REFRESH_S + RECEIVER_BUSY_TIMEOUT_MS / 1000 + SLOW_REQUEST_S
PICKUP_ROUNDS = 3  # a key file changed again during the wait is waited out again, this many times at most


@dataclass
class Census:
    """Which key opens each stored value (0 current, n > 0 a previous one), and what cannot be moved."""

    current: int = 0  # sealed values that open with the current key
    previous: int = 0  # sealed values that open only with a previous key
    fingerprints_previous: int = 0  # voucher fingerprints made with a previous key
    clear_bodies: int = 0  # webhook bodies an earlier version kept in clear (`rewrap` seals them)
    unreadable: list[dict] = field(default_factory=list)  # values no key opens: which row, which field
    pinned: list[dict] = field(default_factory=list)  # vouchers under a previous key whose fingerprint cannot be recomputed

    def count(self, opened: tuple[str, int] | None, place: dict) -> None:
        """Count one sealed value by the key that opened it (`Cipher.open`); `place` names it if none did."""
        if opened is None:
            self.unreadable.append(place)
        elif opened[1] == 0:
            self.current += 1
        else:
            self.previous += 1

    @property
    def needs_previous(self) -> int:
        """Stored values and fingerprints that still need a previous key."""
        return self.previous + self.fingerprints_previous

    @property
    def can_retire(self) -> bool:
        """Whether dropping the previous keys now loses nothing (values no key opens stay as unreadable)."""
        return self.needs_previous == 0


@dataclass
class _Voucher:
    """One stored voucher, examined: each sealed field opened (or not), its fingerprints recomputed."""

    row: dict
    opened: dict[str, tuple[str, int] | None]  # present fields only
    fingerprints: tuple[str, ...] | None  # under every key, current first; None if not recomputable

    @property
    def unreadable(self) -> list[str]:
        return [name for name, got in self.opened.items() if got is None]

    @property
    def on_previous(self) -> bool:
        return any(got is not None and got[1] > 0 for got in self.opened.values())

    @property
    def fingerprint_key(self) -> int | None:
        """Which key made the stored fingerprint (None: not recomputable, or no configured key)."""
        if self.fingerprints is None or self.row["fingerprint"] not in self.fingerprints:
            return None
        return self.fingerprints.index(self.row["fingerprint"])


def _examine(cipher: Cipher, row: dict) -> _Voucher:
    ctx = voucher_context(row["order_id"])
    opened = {name: cipher.open(row[name], context=ctx + name.encode())
              for name in SEALED_COLUMNS if row[name] is not None}
    fingerprints = None
    if all(got is not None for got in opened.values()):
        clear = {name: got[0] for name, got in opened.items() if got is not None}
        identity = voucher_identity(clear.get("card_number"), row["voucher_reference_number"],
                                    clear.get("claim_url"), None)
        if identity is not None:
            fingerprints = cipher.fingerprints(str(row["order_id"]), identity)
    return _Voucher(row, opened, fingerprints)


def opens_any(cipher: Cipher, samples: list[KeyedSample]) -> bool:
    """Whether `cipher` opens at least one of these stored values (`crypto.refuse_a_stranger`)."""
    for sample in samples:
        context = (voucher_context(int(sample.owner)) + sample.field.encode() if sample.kind == "voucher"
                   else token_context(sample.owner))
        if cipher.open(sample.sealed, context=context) is not None:
            return True
    return False


def _where(row: dict, detail: str | None = None) -> dict:
    place = {"kind": "voucher", "order_id": row["order_id"], "voucher_id": row["id"]}
    return {**place, "field": detail} if detail else place


def _vouchers(db: Database, batch_size: int):
    after = 0
    while batch := voucher_store.sealed_batch(db, after_id=after, limit=batch_size):
        yield batch
        after = batch[-1]["id"]


def _tokens(db: Database, batch_size: int):
    after = ""
    while batch := webhook_tokens.sealed_batch(db, after=after, limit=batch_size):
        yield batch
        after = batch[-1][0]


def _bodies(db: Database, batch_size: int):
    after = 0
    while batch := inbox.sealed_batch(db, after_id=after, limit=batch_size):
        yield batch
        after = batch[-1][0]


def census(db: Database, cipher: Cipher, *, batch_size: int = DEFAULT_BATCH) -> Census:
    """Read every stored value and say which key opens it (no writes)."""
    found = Census()
    for batch in _vouchers(db, batch_size):
        for voucher in (_examine(cipher, row) for row in batch):
            for name, got in voucher.opened.items():
                found.count(got, _where(voucher.row, name))
            if (voucher.fingerprint_key or 0) > 0:
                found.fingerprints_previous += 1
            if voucher.fingerprints is None and voucher.on_previous and not voucher.unreadable:
                found.pinned.append(_where(voucher.row))
    for batch in _tokens(db, batch_size):
        for webhook_id, sealed in batch:
            found.count(cipher.open(sealed, context=token_context(webhook_id)),
                        {"kind": "webhook_token", "webhook_id": webhook_id})
    for batch in _bodies(db, batch_size):
        for _, dedup_key, stored in batch:
            if inbox.is_clear(stored):
                found.clear_bodies += 1
            else:
                found.count(cipher.open(stored, context=inbox.body_context(dedup_key)),
                            {"kind": "webhook_body", "event_id": dedup_key})
    return found


@dataclass
class Rewrapped:
    """What one `rewrap` run changed, and what it left as it was (and why)."""

    vouchers: int = 0  # voucher rows re-sealed and/or re-fingerprinted
    tokens: int = 0
    bodies: int = 0  # webhook bodies re-sealed, or sealed for the first time
    changed_meanwhile: int = 0  # rows another process changed between read and write: the next run takes them
    duplicates: list[dict] = field(default_factory=list)  # a voucher stored twice: the current fingerprint is taken


def _reseal_voucher(cipher: Cipher, voucher: _Voucher) -> tuple[str, dict[str, bytes | None]] | None:
    """The new fingerprint and sealed fields of a voucher that needs them, else None."""
    if voucher.unreadable or voucher.fingerprints is None:
        return None  # reported by the census; a pinned voucher stays whole (module docstring)
    current = voucher.fingerprints[0]
    if not voucher.on_previous and voucher.row["fingerprint"] == current:
        return None
    ctx = voucher_context(voucher.row["order_id"])
    sealed = {name: voucher.row[name] for name in SEALED_COLUMNS}
    for name, got in voucher.opened.items():
        if got is not None and got[1] > 0:
            sealed[name] = cipher.encrypt(got[0], context=ctx + name.encode())
    return current, sealed


def _moved(cipher: Cipher, stored: bytes, context: bytes, *, clear: bool = False) -> bytes | None:
    """`stored` sealed with the current key when it needs it (only a previous key opens it, or it is
    kept in clear), else None."""
    if clear:
        return cipher.encrypt(inbox.body_text(stored), context=context)
    got = cipher.open(stored, context=context)
    return cipher.encrypt(got[0], context=context) if got is not None and got[1] > 0 else None


def _apply(db: Database, batches, reseal: Callable[[sqlite3.Connection, Any, bytes, bytes], bool],
           progress: Callable[[int], None], done: Rewrapped) -> int:
    """Write each batch of (row key, stored, new or None) in its own transaction, a row only if it is
    still as read; return how many were changed."""
    changed_total = read = 0
    for batch in batches:
        with transaction(db) as conn:
            for key, old, new in batch:
                if new is not None:
                    changed = reseal(conn, key, old, new)
                    changed_total += changed
                    done.changed_meanwhile += not changed
        read += len(batch)
        progress(read)
    return changed_total


def rewrap(db: Database, cipher: Cipher, *, batch_size: int = DEFAULT_BATCH,
           progress: Callable[[str, int], None] = lambda entity, done: None) -> Rewrapped:
    """Re-seal every value only a previous key opens with the current key (and recompute its voucher's
    fingerprint), one committed transaction per batch: killed mid-way, a second run goes on from there."""
    done = Rewrapped()
    read = 0
    for batch in _vouchers(db, batch_size):
        work = [(row, new) for row in batch if (new := _reseal_voucher(cipher, _examine(cipher, row)))]
        with transaction(db) as conn:
            for row, (fingerprint, sealed) in work:
                try:
                    changed = voucher_store.reseal(conn, row, fingerprint=fingerprint, sealed=sealed)
                except sqlite3.IntegrityError:  # the statement alone is rolled back, not the batch
                    done.duplicates.append(_where(row))
                    continue
                done.vouchers += changed
                done.changed_meanwhile += not changed
        read += len(batch)
        progress("vouchers", read)
    done.tokens = _apply(db, ([(webhook_id, sealed, _moved(cipher, sealed, token_context(webhook_id)))
                               for webhook_id, sealed in batch] for batch in _tokens(db, batch_size)),
                         webhook_tokens.reseal, lambda read: progress("webhook tokens", read), done)
    done.bodies = _apply(db, ([(row_id, stored, _moved(cipher, stored, inbox.body_context(dedup_key),
                                                       clear=inbox.is_clear(stored)))
                               for row_id, dedup_key, stored in batch] for batch in _bodies(db, batch_size)),
                         inbox.reseal, lambda read: progress("webhook bodies", read), done)
    return done


def rotate_key_file(path: Path) -> int:
    """Put a new random key first in the key file, the old ones below; return how many are previous now."""
    keys = read_key_file(path)
    write_key_file(path, [new_key_text(), *keys])
    return len(keys)


def retire_key_file(path: Path, db: Database, *, settled: int | None = None) -> tuple[Census, int]:
    """Keep only the key file's first line if, checked now, no stored value needs the others.

    `settled`: the change time `wait_for_key_pickup` waited out; the file must still be that version
    (else a process may still seal with a key this would drop). Returns the census made with the file's
    keys and how many keys were dropped (0 when refused)."""
    keys = read_key_file(path)
    changed = ConfigError(f"the voucher key file {str(path)!r} changed while it was being checked; run the command again")
    if settled is not None and key_file_changed_at(path) != settled:
        raise changed
    found = census(db, cipher_from_keys(keys))
    if not found.can_retire or len(keys) == 1:
        return found, 0
    # A rotation meanwhile: what was checked is not what would be written.
    if read_key_file(path) != keys or (settled is not None and key_file_changed_at(path) != settled):
        raise changed
    write_key_file(path, keys[:1])
    return found, len(keys) - 1


def key_file_changed_at(path: Path) -> int | None:
    """When the key file last changed (its ctime, in ns), or None when there is none.

    `keys rotate` and `keys retire` replace it by a rename, which sets it, as does a restore of the file
    (even one that keeps the old mtime) and a chmod or chown; running processes follow the file when its
    inode, mtime or size changed, so they have the new keys within KEY_PICKUP_S of this time."""
    try:
        return path.stat().st_ctime_ns
    except OSError:
        return None


def pickup_wait(changed_at_s: float, now_s: float, window_s: float = KEY_PICKUP_S) -> float:
    """Seconds left until `window_s` passed since `changed_at_s`; a change dated in the future (clocks
    that disagree) waits the whole window."""
    elapsed = now_s - changed_at_s
    return window_s if elapsed < 0 else max(0.0, window_s - elapsed)


def wait_for_key_pickup(path: Path, *, announce: Callable[[float], None] = lambda seconds: None,
                        clock: Callable[[], float] | None = None,
                        sleep: Callable[[float], None] = time.sleep) -> int | None:
    """Sleep until running processes may no longer seal with a key the file held before its last change,
    calling `announce(seconds)` before each wait; return the change time waited out (for
    `retire_key_file`: the file must still be that one), None when there is no key file.

    Only a file holding previous keys is waited for: with one key, every process seals with it, whichever
    version of the file it read. The clock is read once per change of the file, so a wait always ends."""
    for _ in range(PICKUP_ROUNDS):
        changed = key_file_changed_at(path)
        try:
            if changed is None or len(read_key_file(path)) < 2:
                return changed
        except FileNotFoundError:  # removed since: the caller says what that means
            return None
        seconds = pickup_wait(changed / 1e9, (clock or time.time)())
        if seconds <= 0:
            return changed
        announce(seconds)
        sleep(seconds)
        if key_file_changed_at(path) == changed:
            return changed
    raise ConfigError(f"the voucher key file {str(path)!r} changed again at every wait for running processes to "
                      "take it (another `keys rotate`?); run the command again once it is left alone")


def whole_seconds(seconds: float) -> int:
    """A wait as said to the operator: whole seconds, rounded up."""
    return math.ceil(seconds)
