"""A signed body is kept in the inbox encrypted, like the voucher codes it may carry.

The document says webhook payloads never carry voucher codes, but one of its envelope forms carries
`vouchers`, and an event type partnerkit does not know is kept quarantined as it came: whatever a
signed body holds must not sit in the database file in clear ("Voucher codes and PINs are encrypted
at rest"). The body is sealed with the voucher key, bound to its dedup key, and still recoverable
byte for byte for diagnosis (`inbox.body_of`).
"""

from __future__ import annotations

import json

import pytest

from partnerkit.crypto import load_cipher
from partnerkit.store import inbox
from tests.receiver.conftest import envelope, post

CODE, PIN, CLAIM = "GIFT-7Q4Z-KX2M-PL9D", "482913", "https://claim.example/r/7Q4ZKX2MPL9D"


def _file_bytes(config) -> bytes:
    """Every byte SQLite keeps for the database: the file, its WAL and shared memory."""
    return b"".join(p.read_bytes() for p in config.db_path.parent.glob(config.db_path.name + "*"))


@pytest.mark.parametrize("event_type, state", [
    ("order.delivered", "processed"),
    ("order.vouchers_ready", "quarantined"),  # unknown type: kept as it came
])
def test_a_signed_body_with_voucher_codes_is_not_kept_in_clear(client, db, config, event_type, state):
    payload = json.loads(envelope(event_type=event_type))
    payload["data"]["vouchers"] = [{"card_number": CODE, "pin_code": PIN, "claim_url": CLAIM}]
    body = json.dumps(payload).encode()
    assert post(client, body).status_code == 200
    assert db.execute("SELECT state FROM inbox").fetchone()[0] == state
    on_disk = _file_bytes(config)
    for secret in (CODE, PIN, CLAIM):
        assert secret.encode() not in on_disk
    assert inbox.body_of(db, load_cipher(config), "evt_1") == body


def test_a_body_that_is_not_utf8_comes_back_byte_for_byte(client, db, config):
    body = b'{"event_id": "evt_bin", "event_type": "order.delivered", "x": "\xff\xfe"}'
    assert post(client, body).get_json() == {"status": "ignored"}
    key, = db.execute("SELECT dedup_key FROM inbox").fetchone()
    assert inbox.body_of(db, load_cipher(config), key) == body


def test_a_sealed_body_does_not_open_under_another_rows_key(client, db, config):
    post(client, envelope(event_id="evt_a"))
    post(client, envelope(event_id="evt_b", order_id=102))
    db.execute("UPDATE inbox SET body = (SELECT body FROM inbox WHERE dedup_key = 'evt_a') WHERE dedup_key = 'evt_b'")
    with pytest.raises(Exception, match="cannot be decrypted"):
        inbox.body_of(db, load_cipher(config), "evt_b")


def test_the_inbox_tells_a_sealed_body_by_the_ciphers_own_version_tag(client, db, config):
    from partnerkit import crypto

    assert inbox.SEALED_PREFIX == crypto.VERSION  # the store cannot import crypto; the two must agree
    post(client, envelope(event_id="evt_tag"))
    stored = db.execute("SELECT body FROM inbox WHERE dedup_key = 'evt_tag'").fetchone()[0]
    assert not inbox.is_clear(stored)
    assert inbox.is_clear(envelope(event_id="evt_old"))  # how versions before sealing kept it
