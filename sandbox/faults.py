"""Provider faults: the sandbox misbehaving on purpose, switched at runtime.

Settings hold ``faults`` as a mapping name -> Fault.  Two families:

    endpoint faults (kept from the first version; always on every matching request)
        pricing        preview and submit answer 500 "pricing could not be resolved"
        order_create   POST /api/v1/orders answers 500 "Failed to create order"
        order_detail   GET /api/v1/orders/{id} answers 500 "Failed to retrieve order"

    general faults (any /api/v1 endpoint in `scope`, on a fraction `rate` of requests)
        http_500        500 in the endpoint's error shape, before the view: nothing is written
        rate_limit      429 with Retry-After = `seconds` and X-RateLimit-* (Remaining 0); `omit`
                        leaves named headers out (a 429 without the Retry-After the document promises)
        slow            the answer is held `seconds` real seconds after the work is committed
        malformed_json  a 2xx answer's body is cut in half (invalid JSON), after the commit
        missing_fields  records in list/detail answers lose required fields
        money_precision money fields of records in list/detail answers get a third decimal

Request-level faults draw from a seeded RNG per request.  Record-level faults
(missing_fields, money_precision) pick records by a stable hash of (seed, kind, id), so a record
stays bad for as long as the fault is on and a page mixes good and bad records; `ids` names the
records explicitly instead.

Scopes are endpoint groups (recharges, orders, transactions, wallet, catalog, webhooks, all)
or a path template such as "GET /api/v1/orders/:id"; a list combines them.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from decimal import Decimal

from .money import Unrounded

ENDPOINT_FAULTS = ("pricing", "order_create", "order_detail")
GENERAL_FAULTS = ("http_500", "rate_limit", "slow", "malformed_json", "missing_fields",
                  "money_precision")
NAMES = ENDPOINT_FAULTS + GENERAL_FAULTS
RECORD_FAULTS = ("missing_fields", "money_precision")

# Scope groups by Flask endpoint name (blueprint.view).
GROUPS = {
    "recharges": lambda ep: ep.startswith("recharges."),
    "orders": lambda ep: ep.startswith("orders."),
    "transactions": lambda ep: ep == "catalog.transactions",
    "wallet": lambda ep: ep == "catalog.list_wallets",
    "catalog": lambda ep: ep in ("catalog.categories", "catalog.products", "catalog.product"),
    "webhooks": lambda ep: ep.startswith("webhooks."),
}
ALIASES = {"all": "all", "*": "all", "wallets": "wallet", "recharge": "recharges",
           "order": "orders", "transaction": "transactions"}

# Default seconds: Retry-After for rate_limit, the hold for slow.
DEFAULT_SECONDS = {"rate_limit": 30.0, "slow": 15.0}
# The rate-limit headers of a 429 (Errors "Other", Limits) that rate_limit's `omit` may leave out.
RATE_LIMIT_HEADERS = ("Retry-After", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset")

# Record kinds of the read endpoints, their required fields dropped by default, their money.
READ_RECORDS = {          # endpoint -> (kind, is_list)
    "recharges.list_recharges": ("recharge", True),
    "recharges.get_recharge": ("recharge", False),
    "recharges.preview": ("quote", False),
    "orders.list_orders": ("order", True),
    "orders.get_order": ("order", False),
    "catalog.transactions": ("transaction", True),
    "catalog.list_wallets": ("wallet", True),
}
REQUIRED = {"recharge": ("status", "reference_number"), "quote": ("payable",),
            "order": ("status",), "voucher": ("card_number",), "transaction": ("amount",),
            "wallet": ("balance",)}
MONEY = {"recharge": ("face", "discount", "payable"), "quote": ("face", "discount", "payable"),
         "order": ("amount", "denomination", "discount"),
         "transaction": ("amount", "balance_after", "original_amount"), "wallet": ("balance",)}
EXTRA_DIGIT = Decimal("0.005")
_ABSENT = object()


@dataclass(frozen=True)
class Fault:
    """One switched-on fault: where it applies, how often, and its parameter."""

    name: str
    scope: tuple[str, ...] = ("all",)
    rate: float = 1.0
    seconds: float | None = None
    fields: tuple[str, ...] = ()
    ids: tuple[int, ...] = ()
    omit: tuple[str, ...] = ()

    def public(self) -> dict:
        """JSON view, as PATCH /sandbox/settings accepts it back."""
        out: dict = {"scope": list(self.scope), "rate": self.rate}
        if self.seconds is not None:
            out["seconds"] = self.seconds
        if self.fields:
            out["fields"] = list(self.fields)
        if self.ids:
            out["ids"] = list(self.ids)
        if self.omit:
            out["omit"] = list(self.omit)
        return out

    def applies_to(self, endpoint: str | None, template: str) -> bool:
        """True when this request (Flask endpoint, 'METHOD /path/:id') is in scope."""
        for item in self.scope:
            if item == "all" or item == template:
                return True
            test = GROUPS.get(item)
            if test is not None and endpoint is not None and test(endpoint):
                return True
        return False

    def picks(self, seed: int, kind: str, record_id) -> bool:
        """Record-level choice: named ids, else a stable hash of (seed, kind, id) under rate."""
        if self.ids:
            return isinstance(record_id, int) and record_id in self.ids
        if self.rate >= 1:
            return True
        digest = hashlib.sha256(f"{seed}:{self.name}:{kind}:{record_id}".encode()).digest()
        return int.from_bytes(digest[:8], "big") / 2 ** 64 < self.rate


def _scope(raw) -> tuple[str, ...]:
    items = [raw] if isinstance(raw, str) else list(raw or ["all"])
    out = []
    for item in items:
        if not isinstance(item, str):
            raise ValueError(f"fault scope must be a string or a list of strings, got {item!r}")
        text = item.strip()
        name = ALIASES.get(text.lower(), text.lower())
        if name == "all" or name in GROUPS:
            out.append(name)
        elif " /api/v1" in text:                 # a path template, e.g. "GET /api/v1/orders/:id"
            method, _, path = text.partition(" ")
            out.append(f"{method.upper()} {path}")
        else:
            raise ValueError(f"unknown fault scope {item!r} (groups: all, "
                             f"{', '.join(GROUPS)}; or 'METHOD /api/v1/...')")
    return tuple(out) or ("all",)


def make(name: str, spec) -> Fault:
    """One Fault from its name and spec (None/True for defaults, or a dict)."""
    if name not in NAMES:
        raise ValueError(f"unknown fault {name!r} (known: {', '.join(NAMES)})")
    if spec is None or spec is True:
        spec = {}
    if not isinstance(spec, dict):
        raise ValueError(f"fault {name}: the spec must be an object")
    unknown = set(spec) - {"scope", "rate", "seconds", "fields", "ids", "omit"}
    if unknown:
        raise ValueError(f"fault {name}: unknown keys {', '.join(sorted(unknown))}")
    try:
        rate = float(spec.get("rate", 1.0))
    except (TypeError, ValueError):
        raise ValueError(f"fault {name}: rate must be a number from 0 to 1") from None
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"fault {name}: rate must be a number from 0 to 1")
    seconds = spec.get("seconds", DEFAULT_SECONDS.get(name))
    if seconds is not None:
        try:
            seconds = float(seconds)
        except (TypeError, ValueError):
            raise ValueError(f"fault {name}: seconds must be a number >= 0") from None
        if seconds < 0:
            raise ValueError(f"fault {name}: seconds must be a number >= 0")
    fields = spec.get("fields") or ()
    ids = spec.get("ids") or ()
    if isinstance(fields, str) or not all(isinstance(f, str) for f in fields):
        raise ValueError(f"fault {name}: fields must be a list of field names")
    if isinstance(ids, (str, int)) or not all(isinstance(i, int) and not isinstance(i, bool)
                                              for i in ids):
        raise ValueError(f"fault {name}: ids must be a list of record ids")
    return Fault(name, _scope(spec.get("scope")), rate, seconds, tuple(fields), tuple(ids),
                 _omit(name, spec.get("omit")))


def _omit(name: str, raw) -> tuple[str, ...]:
    """rate_limit's headers to leave out, in their canonical spelling (matched case-insensitively)."""
    if not raw:
        return ()
    if name != "rate_limit":
        raise ValueError(f"fault {name}: omit applies to rate_limit only")
    known = {h.lower(): h for h in RATE_LIMIT_HEADERS}
    items = [raw] if isinstance(raw, str) else raw
    if not isinstance(items, (list, tuple)) or not all(isinstance(h, str) and h.strip().lower() in known
                                                       for h in items):
        raise ValueError(f"fault {name}: omit must list headers among {', '.join(RATE_LIMIT_HEADERS)}")
    return tuple(dict.fromkeys(known[h.strip().lower()] for h in items))


def normalise(value) -> dict[str, Fault]:
    """Settings' faults from any accepted form: names (list/set/frozenset) or name -> spec."""
    if value is None:
        return {}
    if isinstance(value, str):
        value = [value]
    if isinstance(value, dict):
        out = {}
        for name, spec in value.items():
            if spec is False:          # {"slow": false} switches one off explicitly
                continue
            out[name] = spec if isinstance(spec, Fault) else make(name, spec)
        return out
    return {name: make(name, None) for name in value}


# ---- record-level rewriting ---------------------------------------------------------------
def _money(value):
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, str):
        try:
            return f"{Decimal(value) + EXTRA_DIGIT:f}"
        except ArithmeticError:
            return value
    if isinstance(value, (int, Decimal)):
        return Unrounded(Decimal(value) + EXTRA_DIGIT)
    return value


def damage(record: dict, kind: str, faults: list[Fault], seed: int) -> set[str]:
    """Apply the record-level faults that pick this record; the names of those that changed it."""
    changed: set[str] = set()
    for fault in faults:
        if not fault.picks(seed, kind, record.get("id")):
            continue
        if fault.name == "missing_fields":
            for name in fault.fields or REQUIRED.get(kind, ()):
                if record.pop(name, _ABSENT) is not _ABSENT:
                    changed.add(fault.name)
            if kind == "order" and isinstance(record.get("vouchers"), list):
                for voucher in record["vouchers"]:
                    for name in fault.fields or REQUIRED["voucher"]:
                        if isinstance(voucher, dict) and voucher.pop(name, _ABSENT) is not _ABSENT:
                            changed.add(fault.name)
        elif fault.name == "money_precision":
            for name in fault.fields or MONEY.get(kind, ()):
                if record.get(name) is not None:
                    record[name] = _money(record[name])
                    changed.add(fault.name)
    return changed


def damage_body(body, endpoint: str, faults: list[Fault], seed: int) -> set[str]:
    """Apply record-level faults to a read endpoint's parsed body, in place; names applied."""
    kind, is_list = READ_RECORDS[endpoint]
    records = body if is_list else [body]
    changed: set[str] = set()
    if isinstance(records, list):
        for record in records:
            if isinstance(record, dict):
                changed |= damage(record, kind, faults, seed)
    return changed
