"""Webhook signatures: pure `sign()` and `verify()`, no framework import.

The document ("Events > Signature"): signed_content = X-Timestamp + "." + raw body, and
X-Signature = hex HMAC-SHA256 of signed_content keyed with the webhook token. Verification
works on the raw bytes, never on re-serialised JSON. The header may also come in the shape the document gives
signed requests (Authentication 4), `t=<timestamp>,v1=<hex>`: one signing secret per credential signs both
(Authentication 5), so a provider may reuse that shape for deliveries; its v1 digests are checked by the same
webhook rule, and its t must be X-Timestamp (docs/receiver.md). Each failed check raises
`VerificationError` with its own `reason`, in the order of DESIGN.md's receiver contract.
"""

from __future__ import annotations

import hmac
import re
from typing import Iterable, Mapping

from partnerkit.config import WebhookToken
from partnerkit.errors import VerificationError

DEFAULT_TOLERANCE_S = 300  # "Receivers reject a request whose timestamp is more than 5 minutes old."
_TIMESTAMP = re.compile(r"^[0-9]{1,12}$")
_HEX_SHA256 = re.compile(r"^[0-9a-f]{64}$")
# What a bare digest can start with; anything else is a `sha256=` prefix or the `t=...,v1=...` shape.
_HEX_FIRST = frozenset("0123456789abcdefABCDEF")


def sign(token: str, timestamp: int | str, body: bytes) -> str:
    """Hex HMAC-SHA256 of `timestamp + "." + body` under `token` (the provider's rule)."""
    message = str(timestamp).encode("ascii") + b"." + body
    return hmac.digest(_utf8(token), message, "sha256").hex()  # OpenSSL's one-shot HMAC: no HMAC object


def _utf8(text: str) -> bytes:
    # surrogatepass: a token or header holding a lone surrogate still encodes (and simply does
    # not match) instead of raising UnicodeEncodeError out of the verifier.
    return text.encode("utf-8", "surrogatepass")


def _texts(headers: Mapping[str, str]) -> dict[str, str]:
    """The headers by lower-case name (the first of names that differ only in case), in one pass; a value that is
    not text reads as "" (present, empty)."""
    found: dict[str, str] = {}
    for key, value in headers.items():
        if isinstance(key, str):
            found.setdefault(key.lower(), value if isinstance(value, str) else "")
    return found


def candidate_tokens(tokens: Iterable[WebhookToken], webhook_id: str | None) -> list[str]:
    """Tokens to try: those bound to `webhook_id` if any are, else the unbound ones."""
    tokens = list(tokens)
    webhook_id = webhook_id.strip() if webhook_id is not None else None
    bound = [t.token for t in tokens if webhook_id is not None and t.webhook_id == webhook_id]
    return bound or [t.token for t in tokens if t.webhook_id is None]


def _parse_signature(value: str, timestamp: str) -> tuple[str, ...]:
    """The hex digests X-Signature offers, lower-case: the document's bare digest (a `sha256=` prefix tolerated),
    or its request-signing shape `t=<timestamp>,v1=<hex>` (Authentication 4), which one signing secret per
    credential may carry on deliveries too (Authentication 5). A bare digest costs one look at its first character."""
    text = value.strip()
    if text[:1] in _HEX_FIRST:
        digest = text.lower()
        if _HEX_SHA256.fullmatch(digest):
            return (digest,)
        if "=" not in text:  # not a scheme list that starts with a name such as "alg=" either
            raise VerificationError("malformed_signature", "X-Signature is not 64 hex digits")
    elif text[:7].lower() == "sha256=":
        digest = text[7:].lower()
        if not _HEX_SHA256.fullmatch(digest):
            raise VerificationError("malformed_signature", "X-Signature is not 64 hex digits")
        return (digest,)
    return _parse_schemes(text, timestamp)


def _parse_schemes(text: str, timestamp: str) -> tuple[str, ...]:
    """`t=<ts>,v1=<hex>[,v1=<hex>...]`: every v1 entry (two during a rotation) is a candidate digest, other schemes
    (v0, ...) are ignored, whitespace around the parts is tolerated. Each v1 must be 64 hex digits and each t must be
    X-Timestamp itself, the text the digests are computed over (the webhook rule: X-Timestamp + "." + raw body)."""
    digests, stamps = [], []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue  # "t=1, v1=...," : an empty part says nothing
        scheme, equals, given = part.partition("=")
        scheme, given = scheme.strip().lower(), given.strip()
        if not equals or not scheme:
            raise VerificationError("malformed_signature", "X-Signature is neither 64 hex digits nor t=...,v1=...")
        if scheme == "v1":
            given = given.lower()
            if not _HEX_SHA256.fullmatch(given):
                raise VerificationError("malformed_signature", "an X-Signature v1= entry is not 64 hex digits")
            digests.append(given)
        elif scheme == "t":
            if not _TIMESTAMP.fullmatch(given):
                raise VerificationError("malformed_signature", "the X-Signature t= entry is not Unix seconds")
            stamps.append(given)
    if not digests:
        raise VerificationError("malformed_signature", "X-Signature has no v1= entry")
    # Compared as text: the digests are computed over X-Timestamp's text, so "t=0017..." is not "17...". There is no
    # stand-in for a missing X-Timestamp (DESIGN.md's contract requires the header; every shape the document shows
    # sends it): that request was refused as missing_timestamp before this.
    if any(stamp != timestamp for stamp in stamps):
        raise VerificationError("signature_timestamp_mismatch", "the X-Signature t= entry is not the X-Timestamp header")
    return tuple(digests)


def verify(headers: Mapping[str, str], body: bytes, tokens: Iterable[WebhookToken], *,
           now: float, tolerance_s: int = DEFAULT_TOLERANCE_S) -> str:
    """Check one delivery; return the token that signed it or raise VerificationError(reason)."""
    texts = _texts(headers)
    timestamp = texts.get("x-timestamp")
    signature = texts.get("x-signature")
    if not timestamp:
        raise VerificationError("missing_timestamp", "X-Timestamp header is missing")
    if not signature:
        raise VerificationError("missing_signature", "X-Signature header is missing")
    timestamp = timestamp.strip()
    if not _TIMESTAMP.fullmatch(timestamp):
        raise VerificationError("malformed_timestamp", "X-Timestamp is not Unix seconds")
    # Old and future timestamps alike; exactly `tolerance_s` away still passes. Written as
    # "not within" so that a NaN clock fails closed.
    if not abs(now - int(timestamp)) <= tolerance_s:
        raise VerificationError("timestamp_out_of_tolerance", "X-Timestamp is outside the tolerance")
    expected = _parse_signature(signature, timestamp)
    candidates = candidate_tokens(tokens, texts.get("x-webhook-id"))
    if not candidates:
        raise VerificationError("no_token", "no accepted token for this X-Webhook-ID")
    matched = None
    for token in candidates:  # try every candidate: rotation keeps two tokens live
        digest = sign(token, timestamp, body)
        for offered in expected:  # every v1= entry too, none skipped
            if hmac.compare_digest(digest, offered):
                matched = token
    if matched is None:
        raise VerificationError("signature_mismatch", "X-Signature does not match any accepted token")
    # X-SERVICE-WEBHOOK-TOKEN is a quick check the document offers; it is checked only after
    # the signature, so the header alone never authenticates anything.
    service_token = texts.get("x-service-webhook-token")
    if service_token is not None:
        given = _utf8(service_token.strip())
        if not any([hmac.compare_digest(given, _utf8(t)) for t in candidates]):
            raise VerificationError("service_token_mismatch", "X-SERVICE-WEBHOOK-TOKEN is not an accepted token")
    return matched
