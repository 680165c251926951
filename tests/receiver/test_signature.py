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
    ({"X-Timestamp": str(TS), "X-Signature": "t=1,v1=" + "a" * 64}, "malformed_signature"),
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
