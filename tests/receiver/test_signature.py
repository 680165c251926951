"""receiver.signature: the document's "Signature" rule, one broken thing per test."""

from __future__ import annotations

import pytest

from partnerkit.config import WebhookToken
from partnerkit.errors import VerificationError
from receiver.signature import DEFAULT_TOLERANCE_S, candidate_tokens, sign, verify

TS = 1714557600
BODY = b'{"event_id":"evt_1"}'
TOKENS = (WebhookToken("whsec_test_token_one"),)


def headers(signature: str | None = None, timestamp: str | None = str(TS), **extra: str) -> dict:
    result = {"X-Timestamp": timestamp, "X-Signature": signature or sign("whsec_test_token_one", TS, BODY)}
    result.update(extra)
    return {k: v for k, v in result.items() if v is not None}


def test_signature_pinned_to_the_documents_rule():
    # hmac.new(b"whsec_test_token_one", b"1714557600." + BODY, sha256).hexdigest(), computed by hand
    assert sign("whsec_test_token_one", TS, BODY) == "dbe8946ad067dcba942919d76f46e6a55475d55934178ef315eada131a62490b"


def test_valid_signature_returns_the_token():
    assert verify(headers(), BODY, TOKENS, now=TS) == "whsec_test_token_one"


@pytest.mark.parametrize("prefix, transform", [("sha256=", str), ("", str.upper), ("SHA256=", str.upper)])
def test_prefix_and_case_tolerated(prefix, transform):
    value = prefix + transform(sign("whsec_test_token_one", TS, BODY))
    assert verify(headers(value), BODY, TOKENS, now=TS)


@pytest.mark.parametrize("given, reason", [
    ({"X-Signature": "a" * 64}, "missing_timestamp"),
    ({"X-Timestamp": str(TS)}, "missing_signature"),
    ({"X-Timestamp": "", "X-Signature": "a" * 64}, "missing_timestamp"),
    ({"X-Timestamp": "17145576OO", "X-Signature": "a" * 64}, "malformed_timestamp"),
    ({"X-Timestamp": "-5", "X-Signature": "a" * 64}, "malformed_timestamp"),
    ({"X-Timestamp": "1714557600.5", "X-Signature": "a" * 64}, "malformed_timestamp"),
    ({"X-Timestamp": str(TS), "X-Signature": "z" * 64}, "malformed_signature"),
    ({"X-Timestamp": str(TS), "X-Signature": "a" * 63}, "malformed_signature"),
    ({"X-Timestamp": str(TS), "X-Signature": "a" * 65}, "malformed_signature"),
    ({"X-Timestamp": str(TS), "X-Signature": "t=1,v1=" + "a" * 64}, "signature_timestamp_mismatch"),
    ({"X-Timestamp": str(TS), "X-Signature": f"t={TS},v1=" + "a" * 64}, "signature_mismatch"),
    ({"X-Timestamp": str(TS), "X-Signature": "a" * 64}, "signature_mismatch"),
])
def test_each_rejection_has_its_reason(given, reason):
    with pytest.raises(VerificationError, match=".") as info:
        verify(given, BODY, TOKENS, now=TS)
    assert info.value.reason == reason


def test_wrong_token_rejected():
    with pytest.raises(VerificationError) as info:
        verify(headers(sign("someone-else", TS, BODY)), BODY, TOKENS, now=TS)
    assert info.value.reason == "signature_mismatch"


def test_body_changed_by_one_byte_rejected():
    with pytest.raises(VerificationError, match="does not match"):
        verify(headers(), BODY + b" ", TOKENS, now=TS)


@pytest.mark.parametrize("skew, ok", [(-DEFAULT_TOLERANCE_S, True), (DEFAULT_TOLERANCE_S, True),
                                      (-DEFAULT_TOLERANCE_S - 1, False), (DEFAULT_TOLERANCE_S + 1, False)])
def test_tolerance_edges_both_directions(skew, ok):
    if ok:
        assert verify(headers(), BODY, TOKENS, now=TS + skew)
    else:
        with pytest.raises(VerificationError) as info:
            verify(headers(), BODY, TOKENS, now=TS + skew)
        assert info.value.reason == "timestamp_out_of_tolerance"


def test_timestamp_checked_before_signature():
    with pytest.raises(VerificationError) as info:
        verify(headers("a" * 64), BODY, TOKENS, now=TS + 10_000)
    assert info.value.reason == "timestamp_out_of_tolerance"


def test_rotation_two_tokens_live():
    tokens = (WebhookToken("old-token"), WebhookToken("new-token"))
    for token in ("old-token", "new-token"):
        assert verify(headers(sign(token, TS, BODY)), BODY, tokens, now=TS) == token


def test_bound_token_is_the_only_one_tried_for_its_webhook():
    tokens = (WebhookToken("shared"), WebhookToken("bound-7", "7"))
    assert verify(headers(sign("bound-7", TS, BODY), **{"X-Webhook-ID": "7"}), BODY, tokens, now=TS) == "bound-7"
    with pytest.raises(VerificationError, match="does not match"):
        verify(headers(sign("shared", TS, BODY), **{"X-Webhook-ID": "7"}), BODY, tokens, now=TS)
    with pytest.raises(VerificationError, match="does not match"):  # bound to 7, not to 8 or to no id
        verify(headers(sign("bound-7", TS, BODY), **{"X-Webhook-ID": "8"}), BODY, tokens, now=TS)
    assert candidate_tokens(tokens, None) == ["shared"]


def test_no_candidate_token():
    with pytest.raises(VerificationError) as info:
        verify(headers(), BODY, (WebhookToken("x", "1"),), now=TS)
    assert info.value.reason == "no_token"


def test_service_token_header_checked_but_never_enough():
    good = headers(**{"X-SERVICE-WEBHOOK-TOKEN": "whsec_test_token_one"})
    assert verify(good, BODY, TOKENS, now=TS)
    with pytest.raises(VerificationError) as info:
        verify(headers(**{"X-SERVICE-WEBHOOK-TOKEN": "wrong"}), BODY, TOKENS, now=TS)
    assert info.value.reason == "service_token_mismatch"
    alone = {"X-Timestamp": str(TS), "X-SERVICE-WEBHOOK-TOKEN": "whsec_test_token_one"}
    with pytest.raises(VerificationError, match="X-Signature header is missing"):
        verify(alone, BODY, TOKENS, now=TS)
    forged = headers("b" * 64, **{"X-SERVICE-WEBHOOK-TOKEN": "whsec_test_token_one"})
    with pytest.raises(VerificationError, match="does not match"):
        verify(forged, BODY, TOKENS, now=TS)


def test_headers_are_case_insensitive():
    lowered = {k.lower(): v for k, v in headers().items()}
    assert verify(lowered, BODY, TOKENS, now=TS)


def test_module_imports_no_framework():
    import receiver.envelope
    import receiver.signature

    for module in (receiver.signature, receiver.envelope):
        assert "flask" not in module.__dict__ and "werkzeug" not in module.__dict__


# --- the request-signing shape, `t=<timestamp>,v1=<hex>` (Authentication 4 and 5) -------------------

GOOD = sign("whsec_test_token_one", TS, BODY)


@pytest.mark.parametrize("value", [
    f"t={TS},v1={GOOD}",
    f"v1={GOOD},t={TS}",                                      # either order
    f"  t = {TS} ,  v1 = {GOOD.upper()} ",                     # whitespace and case
    f"t={TS},v1={'0' * 64},v1={GOOD}",                         # several v1 entries, as during a rotation
    f"t={TS},v0=legacy,v1={GOOD},x-unknown=1",                 # unknown schemes ignored
    f"v1={GOOD}",                                              # no t: the digest is over X-Timestamp anyway
    f"alg=sha256,t={TS},v1={GOOD}",                            # a scheme first whose name starts like hex
    f"t={TS},v1={GOOD},",                                      # an empty trailing part
])
def test_the_request_signing_shape_is_accepted(value):
    assert verify(headers(value), BODY, TOKENS, now=TS) == "whsec_test_token_one"


def test_the_request_shape_verifies_by_the_webhook_rule_over_x_timestamp():
    # v1 is the webhook rule's digest (X-Timestamp + "." + body), never the request rule's (no "."): a digest of
    # anything else is a mismatch, whatever t says.
    request_rule = sign("whsec_test_token_one", "", f"{TS}POST/webhooks/partner".encode() + BODY)
    with pytest.raises(VerificationError) as info:
        verify(headers(f"t={TS},v1={request_rule}"), BODY, TOKENS, now=TS)
    assert info.value.reason == "signature_mismatch"


def test_rotation_in_the_request_shape_takes_either_token_and_either_entry():
    tokens = (WebhookToken("old-token"), WebhookToken("new-token"))
    value = f"t={TS},v1={sign('old-token', TS, BODY)},v1={sign('new-token', TS, BODY)}"
    assert verify(headers(value), BODY, tokens, now=TS) in ("old-token", "new-token")
    assert verify(headers(value), BODY, (WebhookToken("new-token"),), now=TS) == "new-token"


@pytest.mark.parametrize("value, reason", [
    (f"t={TS + 1},v1={GOOD}", "signature_timestamp_mismatch"),  # signed for another moment than the header's
    (f"v1={GOOD},t={TS - 1}", "signature_timestamp_mismatch"),
    (f"t=0{TS},v1={GOOD}", "signature_timestamp_mismatch"),     # the digest covers the header's text
    (f"t={TS},t={TS + 1},v1={GOOD}", "signature_timestamp_mismatch"),
    (f"t={TS},v1={'b' * 64}", "signature_mismatch"),
    (f"t={TS},v1={GOOD[:-1]}0", "signature_mismatch"),
    (f"t={TS},v1=", "malformed_signature"),                       # empty v1
    (f"t={TS},v1={GOOD[:63]}", "malformed_signature"),          # 63 digits
    (f"t={TS},v1={GOOD}0", "malformed_signature"),              # 65 digits, an odd count
    (f"t={TS},v1={'g' * 64}", "malformed_signature"),
    (f"t={TS},v1={GOOD},v1=abc", "malformed_signature"),        # one bad entry spoils the header
    (f"t={TS}", "malformed_signature"),                          # no v1 at all
    (f"t={TS},v0={GOOD}", "malformed_signature"),                # only an unknown scheme
    (f"t=,v1={GOOD}", "malformed_signature"),
    (f"t=soon,v1={GOOD}", "malformed_signature"),
    (f"t=-{TS},v1={GOOD}", "malformed_signature"),
    (f"t={TS};v1={GOOD}", "malformed_signature"),                # ";" is no separator: v1 is "<hex>" after "TS;"
    (f"t={TS},{GOOD}", "malformed_signature"),                   # a part without "="
    (f"t={TS},=v1,v1={GOOD}", "malformed_signature"),            # a part without a name
    (f"sha256=t={TS},v1={GOOD}", "malformed_signature"),
    (",,,", "malformed_signature"),
    ("=", "malformed_signature"),
    (f"t={TS},v1={GOOD}\x00", "malformed_signature"),
    (f"t={TS},v1=\ud800{GOOD[1:]}", "malformed_signature"),
])
def test_the_request_shape_refused_with_its_reason(value, reason):
    with pytest.raises(VerificationError, match=".") as info:
        verify(headers(value), BODY, TOKENS, now=TS)
    assert info.value.reason == reason


def test_t_never_stands_in_for_a_missing_x_timestamp():
    with pytest.raises(VerificationError) as info:
        verify({"X-Signature": f"t={TS},v1={GOOD}"}, BODY, TOKENS, now=TS)
    assert info.value.reason == "missing_timestamp"


def test_the_window_is_x_timestamps_in_the_request_shape_too():
    with pytest.raises(VerificationError) as info:
        verify(headers(f"t={TS},v1={GOOD}"), BODY, TOKENS, now=TS + DEFAULT_TOLERANCE_S + 1)
    assert info.value.reason == "timestamp_out_of_tolerance"


def test_the_service_token_is_still_checked_after_a_request_shape_signature():
    with pytest.raises(VerificationError) as info:
        verify(headers(f"t={TS},v1={GOOD}", **{"X-SERVICE-WEBHOOK-TOKEN": "wrong"}), BODY, TOKENS, now=TS)
    assert info.value.reason == "service_token_mismatch"
