"""What a response carries: the payload inside the document's envelopes, a list's records read one by one.

`_unwrap` takes the payload out of {success, data: {...}} or {data: ...} (or the body as it is);
`_items` reads a list's records, setting aside each one that is malformed instead of losing the page.
"""

from __future__ import annotations

from typing import Any, Callable

from partnerkit.errors import MalformedResponse


def _unwrap(body: Any, *keys: str) -> Any:
    """The payload inside {success, data: {...}} / {data: ...} envelopes, or the body itself."""
    if isinstance(body, dict) and "data" in body and ("success" in body or set(body) == {"data"}):
        body = body["data"]
    for key in keys:
        if isinstance(body, dict) and key in body:
            return body[key]
    return body


def _items(body: Any, record: Callable[[Any], Any] | None, *keys: str) -> tuple[list, tuple[MalformedResponse, ...]]:
    raw_items = _unwrap(body, *keys)
    if not isinstance(raw_items, list):
        raise MalformedResponse(f"expected a JSON array of records, got {type(raw_items).__name__}", body=body)
    if record is None:
        return list(raw_items), ()
    items, bad = [], []
    for raw in raw_items:
        try:
            items.append(record(raw))
        except MalformedResponse as exc:
            bad.append(exc)
    return items, tuple(bad)
