"""Request signing (Authentication 4) and the exact bytes a write sends.

DECISION (the document leaves "path" open): the signed path is the request path exactly as
sent, including the /api/v1 prefix (and any prefix of the base URL), without scheme, host or
query string. Writes never carry a query string, so the two readings of the document ("path"
with or without the query) coincide; `canonical_request` refuses a path with one.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from decimal import Decimal
from typing import Any

SIGNED_METHODS = frozenset({"POST", "PUT", "DELETE"})


def canonical_request(timestamp: int, method: str, path: str, body: bytes) -> bytes:
    """The bytes the signature covers: str(timestamp) + METHOD + path + body, as sent."""
    if "?" in path or "#" in path:
        raise ValueError(f"a signed write never carries a query string or fragment, got path {path!r}")
    if not path.startswith("/"):
        raise ValueError(f"the signed path starts with '/', got {path!r}")
    return str(int(timestamp)).encode("ascii") + method.upper().encode("ascii") + path.encode("utf-8") + body


def sign_request(secret: str, timestamp: int, method: str, path: str, body: bytes) -> str:
    """Hex HMAC-SHA256, keyed with the API secret, over `canonical_request(...)`."""
    message = canonical_request(timestamp, method, path, body)
    return hmac.new(secret.encode("utf-8"), message, hashlib.sha256).hexdigest()


def signature_headers(secret: str, method: str, path: str, body: bytes, *, timestamp: int | None = None) -> dict[str, str]:
    """X-Timestamp and `X-Signature: t=<ts>,v1=<hex>` for one attempt of a write."""
    ts = int(time.time()) if timestamp is None else int(timestamp)
    return {"X-Timestamp": str(ts), "X-Signature": f"t={ts},v1={sign_request(secret, ts, method, path, body)}"}


def encode_body(value: Any) -> bytes:
    """Serialize a request body once, to the exact bytes that are signed and sent.

    Decimal is written as a JSON number with its exact digits (json.dumps cannot do that);
    a float is refused, because money never passes through float.
    """
    return _encode(value, "body").encode("utf-8")


def _encode(value: Any, where: str) -> str:
    if isinstance(value, float):
        raise TypeError(f"{where}: floats are not sent (money is Decimal); got {value!r}")
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise ValueError(f"{where}: {value!r} is not a finite number")
        return format(value, "f")
    if isinstance(value, dict):
        items = (f"{json.dumps(str(k))}:{_encode(v, f'{where}.{k}')}" for k, v in value.items())
        return "{" + ",".join(items) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_encode(v, f"{where}[{i}]") for i, v in enumerate(value)) + "]"
    return json.dumps(value)
