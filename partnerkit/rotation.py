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
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from partnerkit.config import ConfigError
from partnerkit.crypto import Cipher, cipher_from_keys, new_key_text, read_key_file, token_context, write_key_file
from partnerkit.store import Database, transaction
from partnerkit.store import inbox
from partnerkit.store import vouchers as voucher_store
from partnerkit.store import webhook_tokens
from partnerkit.store.vouchers import SEALED_COLUMNS, KeyedSample
from partnerkit.vouchers import voucher_context, voucher_identity

DEFAULT_BATCH = 500


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


def retire_key_file(path: Path, db: Database) -> tuple[Census, int]:
    """Keep only the key file's first line if, checked now, no stored value needs the others.

    Returns the census made with the file's keys and how many keys were dropped (0 when refused)."""
    keys = read_key_file(path)
    found = census(db, cipher_from_keys(keys))
    if not found.can_retire or len(keys) == 1:
        return found, 0
    if read_key_file(path) != keys:  # a rotation meanwhile: what was checked is not what would be written
        raise ConfigError(f"the voucher key file {str(path)!r} changed while it was being checked; run the command again")
    write_key_file(path, keys[:1])
    return found, len(keys) - 1
