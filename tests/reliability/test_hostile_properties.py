"""Hostile input against the two pure functions at the receiver's door (hypothesis).

`receiver.signature.verify` raises nothing but VerificationError, accepts every correct signature
and refuses every single-bit change; `receiver.envelope.normalise` never raises, and what it
returns can always be stored (checked by storing it in a real SQLite file).
"""

from __future__ import annotations

import json
import sqlite3
from datetime import datetime, timezone
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from partnerkit.config import WebhookToken
from partnerkit.errors import VerificationError
from partnerkit.store import inbox, open_db
from receiver.envelope import normalise
from receiver.signature import DEFAULT_TOLERANCE_S, sign, verify
from tests.receiver.conftest import CIPHER
from tests.reliability.hostile_inputs import (FORMS, READ_DATA_FIELDS, WRONG_VALUES, _Raw, any_text, assert_storable,
                                              dumps, envelope_variants, flip_bit, json_values, mutate)

NOW = 1714557600
# Of WRONG_VALUES, the only ones a read field may accept (None means "absent"; False is not 0).
READABLE_COUNTS = (None, 0)
READABLE_AMOUNTS = (None, 0, Decimal("1.5"), "12.5")
# The Event attribute of each figure (a hint): one that cannot be read is dropped, never a quarantine.
HINT_ATTRIBUTES = {"amount": "amount", "quantity": "quantity", "delivered quantity": "delivered_quantity"}
PROPERTY = settings(max_examples=100, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

tokens_st = any_text(min_size=1, max_size=40)  # any text, lone surrogates included
header_names = st.sampled_from(["X-Timestamp", "x-timestamp", "X-SIGNATURE", "X-Signature", "X-Webhook-ID",
                                "X-SERVICE-WEBHOOK-TOKEN", "x-service-webhook-token", "X-Event-ID", "Other"])
header_values = st.one_of(any_text(max_size=80), st.integers(0, 2 ** 40).map(str),
                          st.binary(min_size=32, max_size=32).map(bytes.hex),
                          st.sampled_from(["", " ", "sha256=", "t=1,v1=" + "a" * 64, str(NOW), "-1", "1e9",
                                           f"t={NOW},v1=" + "a" * 64, "v1=,t=", f" t = {NOW} , v1 = " + "A" * 64]))


# --- the verifier -------------------------------------------------------------------------------

@PROPERTY
@given(headers=st.dictionaries(header_names, header_values, max_size=7), body=st.binary(max_size=512),
       tokens=st.lists(st.builds(WebhookToken, tokens_st, st.none() | st.sampled_from(["1", "7", " 7"])), max_size=3),
       now=st.floats(allow_nan=True, allow_infinity=True) | st.integers(0, 2 ** 40))
def test_verify_raises_only_verification_error(headers, body, tokens, now):
    try:
        token = verify(headers, body, tokens, now=now)
    except VerificationError as exc:
        assert exc.reason and str(exc)
    else:
        assert token in [t.token for t in tokens]


@PROPERTY
@given(token=tokens_st, body=st.binary(max_size=2048), skew=st.integers(-DEFAULT_TOLERANCE_S, DEFAULT_TOLERANCE_S),
       prefix=st.sampled_from(["", "sha256=", "SHA256="]), upper=st.booleans(), pad=st.sampled_from(["", " ", "\t"]))
def test_a_correct_signature_over_any_bytes_verifies(token, body, skew, prefix, upper, pad):
    digest = sign(token, NOW, body)
    headers = {"X-Timestamp": pad + str(NOW) + pad, "X-Signature": pad + prefix + (digest.upper() if upper else digest)}
    assert verify(headers, body, [WebhookToken("other-token-entirely"), WebhookToken(token)], now=NOW + skew) == token


def _refused(headers, body, token=b"whsec_property"):
    with pytest.raises(VerificationError):
        verify(headers, body, [WebhookToken(token.decode())], now=NOW)


@PROPERTY
@given(body=st.binary(min_size=1, max_size=1024), data=st.data())
def test_any_single_bit_of_the_body_flipped_never_verifies(body, data):
    headers = {"X-Timestamp": str(NOW), "X-Signature": sign("whsec_property", NOW, body)}
    mutated = flip_bit(body, data.draw(st.integers(0, len(body) * 8 - 1)))
    with pytest.raises(VerificationError) as info:
        verify(headers, mutated, [WebhookToken("whsec_property")], now=NOW)
    assert info.value.reason == "signature_mismatch"


@PROPERTY
@given(body=st.binary(max_size=256), ts=st.integers(NOW - DEFAULT_TOLERANCE_S, NOW + DEFAULT_TOLERANCE_S),
       data=st.data())
def test_any_single_bit_of_the_timestamp_flipped_never_verifies(body, ts, data):
    raw = str(ts).encode("ascii")
    mutated = flip_bit(raw, data.draw(st.integers(0, len(raw) * 8 - 1))).decode("latin-1")  # as WSGI hands it over
    _refused({"X-Timestamp": mutated, "X-Signature": sign("whsec_property", ts, body)}, body)


@PROPERTY
@given(body=st.binary(max_size=256), bit=st.integers(0, 255))
def test_any_single_bit_of_the_digest_flipped_never_verifies(body, bit):
    digest = bytes.fromhex(sign("whsec_property", NOW, body))
    _refused({"X-Timestamp": str(NOW), "X-Signature": flip_bit(digest, bit).hex()}, body)


@PROPERTY
@given(body=st.binary(max_size=256), prefix=st.sampled_from(["", "sha256="]), data=st.data())
def test_a_bit_flipped_in_the_header_text_verifies_only_if_it_is_the_same_hex(body, prefix, data):
    # Hex is case-insensitive and surrounding whitespace is stripped: flipping bit 5 of "a" gives
    # "A", the same digest. Any other flip must be refused.
    original = prefix + sign("whsec_property", NOW, body)
    raw = original.encode("ascii")
    mutated = flip_bit(raw, data.draw(st.integers(0, len(raw) * 8 - 1))).decode("latin-1")
    same = mutated.strip().lower() == original.lower()
    headers = {"X-Timestamp": str(NOW), "X-Signature": mutated}
    if same:
        assert verify(headers, body, [WebhookToken("whsec_property")], now=NOW)
    else:
        _refused(headers, body)


@PROPERTY
@given(body=st.binary(max_size=256), token=tokens_st)
def test_the_token_header_alone_never_verifies(body, token):
    for headers in ({"X-Timestamp": str(NOW), "X-SERVICE-WEBHOOK-TOKEN": token},
                    {"X-Timestamp": str(NOW), "X-SERVICE-WEBHOOK-TOKEN": token, "X-Signature": "0" * 64}):
        with pytest.raises(VerificationError):
            verify(headers, body, [WebhookToken(token)], now=NOW)


# The request-signing shape (Authentication 4), `t=<ts>,v1=<hex>`, that a provider may send on deliveries too.
scheme_parts = st.one_of(
    st.builds(lambda n, v: f"{n}={v}", st.sampled_from(["t", "v1", "V1", " v1 ", "v0", "x", ""]),
              st.one_of(any_text(max_size=70), st.just(str(NOW)), st.binary(min_size=32, max_size=32).map(bytes.hex),
                        st.binary(min_size=31, max_size=33).map(lambda b: bytes.hex(b)[1:]))),
    any_text(max_size=10))


@PROPERTY
@given(parts=st.lists(scheme_parts, max_size=6), separator=st.sampled_from([",", ", ", " ,", ";"]),
       body=st.binary(max_size=256), now=st.sampled_from([NOW, NOW + DEFAULT_TOLERANCE_S + 1, float("nan")]))
def test_verify_raises_only_verification_error_on_any_scheme_list(parts, separator, body, now):
    headers = {"X-Timestamp": str(NOW), "X-Signature": separator.join(parts)}
    try:
        token = verify(headers, body, [WebhookToken("whsec_property")], now=now)
    except VerificationError as exc:
        assert exc.reason and str(exc)
    else:  # only a real digest of this body gets in, whatever surrounds it
        assert token == "whsec_property" and sign("whsec_property", NOW, body) in headers["X-Signature"].lower()


@PROPERTY
@given(token=tokens_st, body=st.binary(max_size=1024), upper=st.booleans(), with_t=st.booleans(),
       order=st.permutations(["t", "v1", "other", "decoy"]), pad=st.sampled_from(["", " ", "\t"]))
def test_a_correct_signature_in_the_request_shape_verifies(token, body, upper, with_t, order, pad):
    digest = sign(token, NOW, body)
    entries = {"t": f"t={NOW}" if with_t else "", "v1": f"v1={digest.upper() if upper else digest}",
               "other": "v0=" + "f" * 40, "decoy": "v1=" + sign("not-" + token, NOW, body)}
    value = ",".join(pad + entries[name] + pad for name in order)
    headers = {"X-Timestamp": str(NOW), "X-Signature": value}
    assert verify(headers, body, [WebhookToken(token)], now=NOW) == token


@PROPERTY
@given(body=st.binary(max_size=256), in_digest=st.booleans(), data=st.data())
def test_a_bit_flipped_in_the_request_shapes_t_or_v1_never_verifies_unless_the_same_hex(body, in_digest, data):
    # t is not what is signed (X-Timestamp is), so a flip in the names that turns `t` into an unknown scheme drops a
    # claim and changes nothing; its value and the digest are what can be forged, and neither ever gets in changed.
    digest = sign("whsec_property", NOW, body)
    stamp = str(NOW)
    raw = (digest if in_digest else stamp).encode("ascii")
    flipped = flip_bit(raw, data.draw(st.integers(0, len(raw) * 8 - 1))).decode("latin-1")
    headers = {"X-Timestamp": stamp,
               "X-Signature": f"t={stamp},v1={flipped}" if in_digest else f"t={flipped},v1={digest}"}
    if in_digest and flipped.strip().lower() == digest:  # bit 5 of a letter: its other case
        assert verify(headers, body, [WebhookToken("whsec_property")], now=NOW)
    else:
        _refused(headers, body)


# --- the normaliser -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def inbox_db(tmp_path_factory):
    """One real SQLite file for the module: what normalise returns must be insertable."""
    database = open_db(tmp_path_factory.mktemp("hostile") / "pk.db")
    yield database
    database.conn.close()


def _store(db, event, body):
    recorded = inbox.record(db, event, body, cipher=CIPHER, now=datetime(2024, 5, 1, tzinfo=timezone.utc), request_id="r")
    assert recorded.outcome in (inbox.ACCEPTED, inbox.DUPLICATE, inbox.IGNORED)
    if event.quarantine:
        assert recorded.outcome in (inbox.IGNORED, inbox.DUPLICATE)


@PROPERTY
@given(body=st.binary(max_size=2048), headers=st.dictionaries(st.sampled_from(["X-Event-ID", "X-Event-Type", "x-event-id"]),
                                                               any_text(max_size=20), max_size=3))
@example(body=b"\xef\xbb\xbf\xff", headers={})
@example(body=b'{"event_id": "\\ud800", "event_type": "order.delivered", "data": {"id": 1}}', headers={})
def test_normalise_never_raises_on_arbitrary_bytes(inbox_db, body, headers):
    event = normalise(body, headers)
    assert_storable(event)
    _store(inbox_db, event, body)


@PROPERTY
@given(value=json_values, headers=st.dictionaries(st.sampled_from(["X-Event-ID", "X-Event-Type"]),
                                                  st.sampled_from(["order.delivered", "evt-h", "\ud800", ""]), max_size=2))
def test_normalise_never_raises_on_arbitrary_json(inbox_db, value, headers):
    body = dumps(value)
    event = normalise(body, headers)
    assert_storable(event)
    _store(inbox_db, event, body)


@PROPERTY
@given(value=envelope_variants())
def test_wrong_types_in_any_field_of_any_form_are_quarantined_or_ignored(inbox_db, value):
    body = dumps(value)
    event = normalise(body, {})
    assert_storable(event)
    _store(inbox_db, event, body)


@pytest.mark.parametrize("form", sorted(FORMS))
@pytest.mark.parametrize("wrong", WRONG_VALUES, ids=lambda v: repr(getattr(v, "text", v))[:24])
def test_each_read_field_of_each_form_with_each_wrong_value(inbox_db, form, wrong):
    """The table behind the property: every field the normaliser reads, every kind of wrong value."""
    for field, words in READ_DATA_FIELDS.items():
        value = json.loads(dumps(FORMS[form]), parse_float=Decimal)
        if field not in value["data"]:
            continue
        value["data"][field] = wrong
        body = dumps(value)
        event = normalise(body, {"X-Event-ID": f"{form}-{field}"})
        assert_storable(event)
        _store(inbox_db, event, body)
        if isinstance(wrong, _Raw) and wrong.text in ("NaN", "Infinity", "-Infinity"):
            assert event.quarantine == f"body is not JSON: {wrong.text} is not JSON"
        elif isinstance(wrong, _Raw) and wrong.text.startswith(("1111", "[[[[")) and len(wrong.text) > 1000:
            assert event.quarantine in ("body is not JSON", "body is nested too deeply")
        elif event.quarantine is None and field in dict(event.dropped):  # a figure (a hint) dropped, the event kept
            assert words != "order id" and words in dict(event.dropped)[field], (field, wrong, event.dropped)
            assert getattr(event, HINT_ATTRIBUTES[words]) is None and event.order_id == 4242
        elif event.quarantine is None:  # accepted: then the value really was a readable one
            readable = READABLE_AMOUNTS if words == "amount" else READABLE_COUNTS
            assert any(wrong is ok or (type(wrong) is type(ok) and wrong == ok) for ok in readable), (field, wrong)
        else:
            assert words == "order id" and words in event.quarantine, (field, wrong, event.quarantine)


@pytest.mark.parametrize("field", ["event_id", "event_type", "event", "created_at", "timestamp", "data"])
@pytest.mark.parametrize("wrong", WRONG_VALUES, ids=lambda v: repr(getattr(v, "text", v))[:24])
def test_each_top_level_field_with_each_wrong_value(inbox_db, field, wrong):
    for form in FORMS.values():
        value = json.loads(dumps(form), parse_float=Decimal)
        value[field] = wrong
        event = normalise(dumps(value), {})
        assert_storable(event)
        if field in ("created_at", "timestamp") and not isinstance(wrong, _Raw):
            # An unreadable time never makes the event unreadable: it is applied without one.
            assert event.quarantine is None and event.order_id == 4242


@pytest.mark.parametrize("body, reason", [
    (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    (b'{"event_id": "n", "event_type": "order.delivered", "data": {"id": 1, "x": ' + b"[" * 50_000 + b"]" * 50_000
     + b"}}", "nested too deeply"),
    (b'{"event_id": "n", "event_type": "order.delivered", "data": {"id": ' + b"9" * 5000 + b"}}", "not JSON"),
    (b'{"event_id": "n", "event_type": "order.delivered", "data": {"id": 1, "amount": NaN}}', "NaN is not JSON"),
    (b'{"event_id": "n", "event_type": "order.delivered", "data": {"id": 1, "amount": -Infinity}}',
     "-Infinity is not JSON"),
    (b'{"event_id": "n", "event_type": "order.delivered", "data": {"id": 18446744073709551616}}', "out of range"),
    (b'{"event_id": "n", "event_type": "order.\\udc00", "data": {"id": 1}}', "no event type"),
    (b'\xfe\xff\x00{', "not UTF-8"),
    (b'{"event_id": "\xed\xa0\x80", "event_type": "order.delivered", "data": {"id": 1}}', "not UTF-8"),
])
def test_named_hostile_bodies_are_quarantined_with_their_reason(inbox_db, body, reason):
    event = normalise(body, {})
    assert event.quarantine is not None and reason in event.quarantine
    assert_storable(event)
    _store(inbox_db, event, body)


@pytest.mark.parametrize("body, key, why", [
    (b'{"event_id": "n", "event_type": "order.delivered", "data": {"id": 1, "amount": 1e999999999}}', "amount",
     "amount"),
    (b'{"event_id": "n", "event_type": "order.delivered", "data": {"id": 1, "amount": "12.345"}}', "amount",
     "more than 2 decimal places"),
    (b'{"event_id": "n", "event": "order.delivered", "data": {"order_id": 1, "total_amount": 150.123}}', "total_amount",
     "more than 2 decimal places"),
    (b'{"event_id": "n", "event_type": "order.delivered", "data": {"id": 1, "quantity": 1e999999999}}', "quantity",
     "quantity"),
])
def test_named_hostile_figures_are_dropped_with_their_reason(inbox_db, body, key, why):
    # A figure is a hint (orders.apply fills only what the order lacks): dropped, the event kept and applied.
    event = normalise(body, {})
    assert event.quarantine is None and event.order_id == 1
    assert why in dict(event.dropped)[key]
    assert_storable(event)
    _store(inbox_db, event, body)


def test_a_byte_order_mark_is_tolerated():
    body = dumps(FORMS["form1"])
    plain, with_bom = normalise(body, {}), normalise(b"\xef\xbb\xbf" + body, {})
    assert with_bom.quarantine is None and with_bom.order_id == plain.order_id == 4242


def test_a_lone_surrogate_event_id_falls_back_to_the_body_digest(inbox_db):
    body = b'{"event_id": "\\ud800", "event_type": "order.delivered", "data": {"id": 7}}'
    event = normalise(body, {})
    assert event.event_id.startswith("sha256:") and event.quarantine is None and event.order_id == 7
    _store(inbox_db, event, body)


def test_duplicate_keys_read_the_last_value_deterministically():
    # RFC 8259 leaves duplicate names to the reader; Python (and the provider's JavaScript) keep the last.
    body = b'{"event_id": "a", "event_id": "b", "event_type": "order.created", "event_type": "order.delivered",' \
           b' "data": {"id": 1, "id": 2}}'
    event = normalise(body, {})
    assert (event.event_id, event.event_type, event.order_id) == ("b", "order.delivered", 2)


def test_a_huge_quoted_value_is_not_copied_into_the_reason():
    body = dumps({"event_id": "big", "event_type": "order.delivered", "data": {"id": "9" * 100_000}})
    event = normalise(body, {})
    assert event.quarantine.startswith("order id is not an integer") and len(event.quarantine) <= 200


def test_unix_time_out_of_range_is_no_time(inbox_db):
    for stamp in (10 ** 30, -1, "99999999999999999999999", _Raw("1e999999999")):
        event = normalise(dumps({"event": "order.failed", "timestamp": stamp, "data": {"order_id": 3}}), {})
        assert event.occurred_at is None and event.order_id == 3 and event.quarantine is None


def test_storage_sanity_the_inbox_would_have_refused_the_old_outputs(tmp_path):
    """Why assert_storable matters: SQLite refuses a lone surrogate and an int past 64 bits."""
    conn = sqlite3.connect(tmp_path / "x.db")
    conn.execute("CREATE TABLE t (v)")
    with pytest.raises(UnicodeEncodeError):
        conn.execute("INSERT INTO t VALUES (?)", ("\ud800",))
    with pytest.raises(OverflowError):
        conn.execute("INSERT INTO t VALUES (?)", (2 ** 63,))
    conn.close()


def test_a_variant_never_changes_the_shared_wrong_values():
    """The change that made this file flaky: "data" replaced by WRONG_VALUES' {}, then a key set inside data.
    Before the copy, that {} held itself afterwards and every later test that sent it failed to encode."""
    shared = next(v for v in WRONG_VALUES if v == {} and isinstance(v, dict))
    value = mutate(("form1", [("top", "data", shared, False), ("data", "denomination", shared, False)]))
    assert shared == {}
    assert value["data"] == {"denomination": {}}
    json.dumps(value)
