"""Sealing vouchers: what the partner paid for, encrypted and bound to its order, fingerprinted once.

`seal` encrypts a client Voucher's code, PIN and claim URL (AES-GCM, bound to the order and field)
and fingerprints it (`voucher_identity`); `unseal` opens a stored row. Never log what it opens.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from partnerkit.crypto import Cipher
from partnerkit.store.vouchers import SealedVoucher
from partnerkit.timeutil import iso


def _text(value: Any) -> str | None:
    """A voucher field as text; the client's MISSING sentinel and None are both "absent"."""
    return None if value is None or not isinstance(value, (str, int)) else str(value)


def voucher_identity(code: str | None, reference: str | None, url: str | None, raw: dict | None) -> str | None:
    """What a voucher's fingerprint is made of: its code, else its reference, else its claim URL, else
    the provider's whole record; None when only the record would do and it is not at hand (it is not
    stored, so `partnerkit keys rewrap` cannot recompute such a fingerprint)."""
    return code or reference or url or (repr(sorted(raw.items())) if raw is not None else None)


def seal(cipher: Cipher, order_id: int, voucher: Any) -> SealedVoucher:
    """Encrypt a client Voucher's secrets, bound to its order and field; fingerprint its code.

    The fingerprint under each previous key goes along, so a voucher stored before a key rotation
    is not stored again (`vouchers.add`)."""
    code, pin, url = _text(voucher.card_number), _text(getattr(voucher, "pin_code", None)), _text(getattr(voucher, "claim_url", None))
    reference = _text(getattr(voucher, "voucher_reference_number", None))
    expires = getattr(voucher, "expires_at", None)
    identity = voucher_identity(code, reference, url, getattr(voucher, "raw", None) or {})
    fingerprint, *previous = cipher.fingerprints(str(order_id), identity)
    ctx = voucher_context(order_id)
    return SealedVoucher(
        fingerprint=fingerprint,
        card_number=cipher.encrypt(code, context=ctx + b"card_number"),
        pin_code=cipher.encrypt(pin, context=ctx + b"pin_code"),
        claim_url=cipher.encrypt(url, context=ctx + b"claim_url"),
        voucher_reference_number=reference,
        expires_at=iso(expires) if isinstance(expires, datetime) else _text(expires),
        previous_fingerprints=tuple(previous))


def voucher_context(order_id: int) -> bytes:
    """The prefix binding a voucher's sealed fields to its order (the field name follows)."""
    return f"voucher:{order_id}:".encode()


def unseal(cipher: Cipher, row: dict) -> dict:
    """A stored voucher row (`partnerkit.store.vouchers.for_order`) with card_number, pin_code and claim_url
    decrypted: what `partnerkit vouchers --reveal` shows and a fork hands its customer. Never log them."""
    ctx = voucher_context(row["order_id"])
    return {**row, **{name: cipher.decrypt(row[name], context=ctx + name.encode())
                      for name in ("card_number", "pin_code", "claim_url")}}
