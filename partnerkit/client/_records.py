"""Typed, frozen records for the document's resources (Resources and their fields).

Every record keeps the payload as received in `.raw` (unknown fields included, never a crash).
Money is Decimal (JSON numbers parsed with parse_float=Decimal, or 2-decimal strings), times are
aware UTC datetimes. An optional field the provider omitted is `MISSING`; one it sent as null is
None. A field of the wrong type raises MalformedResponse naming `Record.field`, so callers can
quarantine that one record. `raw` is excluded from repr: it may hold voucher codes and tokens.

Each record's `from_payload(raw)` is where a wire record becomes a typed one, by one set of readers
(`_fields.Reader`): `raw` is the object inside the answer's envelope (`_envelope._unwrap`), parsed with
`money.loads`. An integer is a JSON integer or a string of one, never a boolean; money is a number or a
string with at most 2 decimals, never a float (`money.to_decimal(strict=True)`); a time is an ISO 8601 /
RFC 3339 string (a naive one read as UTC); a recharge's or an order's status is upper-cased. Anything
else, a required field missing, a null where the record allows none, or a payload that is not a JSON
object, raises `MalformedResponse` with `.field` (the field's name; the record's, for a payload that is
not an object), `.body` (the payload) and `status=None`; nothing is guessed or rounded. Unknown fields
are kept in `.raw`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any, Generic, TypeVar

from partnerkit.client._fields import MISSING, Reader, mask
from partnerkit.errors import MalformedResponse
from partnerkit.store.recharges import FINAL, LEGACY_SUCCESS

T = TypeVar("T")


# Recharge, "States and transitions": the final states, legacy DELIVERED / RECHARGED (which mean SUCCESS) included.
RECHARGE_FINAL = FINAL | LEGACY_SUCCESS

__all__ = ["MISSING", "ChargeQuote", "DeliveryStats", "Mobile", "OrderCreated", "OrderDetail", "OrderSummary",
           "Page", "Recharge", "SubmitResult", "Voucher", "Webhook", "WebhookCreated", "WebhookDelivery"]


@dataclass(frozen=True)
class ChargeQuote:
    """Charge quote: what a recharge would cost (nothing placed, no price lock)."""

    face: Decimal
    discount_pct: Decimal
    discount: Decimal
    payable: Decimal
    raw: dict = field(repr=False, compare=False)

    @classmethod
    def from_payload(cls, raw: Any) -> "ChargeQuote":
        """The charge quote: `face`, `discount_pct`, `discount` and `payable` are all required money (the
        document gives each with 2 decimals; a third decimal, even on `discount_pct`, is refused)."""
        r = Reader(raw, cls.__name__)
        return cls(r.money("face"), r.money("discount_pct"), r.money("discount"), r.money("payable"), raw)


@dataclass(frozen=True)
class Recharge:
    """A recharge as read (detail, list item) or as answered by submit (then operator_id is set)."""

    id: int
    reference_number: str
    status: str
    mobile_number: str
    face: Decimal
    discount: Decimal
    payable: Decimal
    created_at: datetime
    sub_status: Any = MISSING
    country_code: Any = MISSING
    operator: Any = MISSING  # display name; never feed it back into submit (use operator_id)
    operator_id: Any = MISSING  # submit response only
    circle: Any = MISSING
    is_prepaid: Any = MISSING
    currency: Any = MISSING
    vendor_recharge_id: Any = MISSING
    operator_txn_id: Any = MISSING
    failure_reason: Any = MISSING
    client_reference: Any = MISSING
    updated_at: Any = MISSING
    raw: dict = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_payload(cls, raw: Any) -> "Recharge":
        """A recharge detail, list item or submit answer. Required: `id`, `reference_number`, `status`,
        `mobile_number`, `face`, `discount`, `payable` (money) and `created_at`. Every other field of the
        three tables is optional, MISSING when omitted (the document omits unset strings) and None when
        null: the strings, `operator_id` (an integer: the submit answer's only), `is_prepaid` (true or false
        only) and `updated_at` (a time). A status the document does not name is read as sent, upper-cased:
        what to do with it is the caller's (`reconcile.recharges.stored_status`)."""
        r = Reader(raw, cls.__name__)
        optional = {name: r.str(name, required=False, nullable=True) for name in (
            "sub_status", "country_code", "operator", "circle", "currency", "vendor_recharge_id",
            "operator_txn_id", "failure_reason", "client_reference")}
        return cls(
            id=r.int("id"),
            reference_number=r.str("reference_number"),
            status=r.upper("status"),
            mobile_number=r.str("mobile_number"),
            face=r.money("face"),
            discount=r.money("discount"),
            payable=r.money("payable"),
            created_at=r.ts("created_at"),
            operator_id=r.int("operator_id", required=False, nullable=True),
            is_prepaid=r.bool("is_prepaid", required=False, nullable=True),
            updated_at=r.ts("updated_at", required=False, nullable=True),
            raw=raw,
            **optional,
        )

    @property
    def normalized_status(self) -> str:
        """status with the legacy DELIVERED / RECHARGED read as SUCCESS."""
        return "SUCCESS" if self.status in LEGACY_SUCCESS else self.status

    @property
    def is_final(self) -> bool:
        """SUCCESS (or legacy), FAILED and REVERSED are final; PROCESSING is not."""
        return self.status in RECHARGE_FINAL


@dataclass(frozen=True)
class SubmitResult:
    """A recharge submit's answer: 200 (final) or 202 (PROCESSING, poll it), and the key used."""

    http_status: int
    recharge: Recharge
    idempotency_key: str

    @property
    def accepted(self) -> bool:
        """202: accepted but not settled; resolve it by reading, never by resubmitting."""
        return self.http_status == 202


@dataclass(frozen=True)
class Voucher:
    """One voucher; repr masks card_number and pin_code so a code never reaches a log."""

    card_number: Any
    expires_at: datetime | None
    pin_code: Any = MISSING
    claim_url: Any = MISSING
    voucher_reference_number: Any = MISSING
    raw: dict = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_payload(cls, raw: Any) -> "Voucher":
        """One voucher of an order. `card_number` and `expires_at` must be present (the document: "Always"),
        either may be null; `pin_code` (code_with_pin only), `claim_url` and `voucher_reference_number` may
        be omitted (MISSING) or null. The strings are taken as sent: a code is never trimmed."""
        r = Reader(raw, cls.__name__)
        return cls(
            card_number=r.str("card_number", nullable=True),
            expires_at=r.ts("expires_at", nullable=True),
            pin_code=r.str("pin_code", required=False, nullable=True),
            claim_url=r.str("claim_url", required=False, nullable=True),
            voucher_reference_number=r.str("voucher_reference_number", required=False, nullable=True),
            raw=raw,
        )

    def __repr__(self) -> str:
        return (f"Voucher(card_number={mask(self.card_number)}, pin_code={mask(self.pin_code)}, "
                f"voucher_reference_number={self.voucher_reference_number!r}, expires_at={self.expires_at!r})")

    __str__ = __repr__


@dataclass(frozen=True)
class OrderCreated:
    """Order (create response): money as JSON numbers; vouchers only when fulfilled at once."""

    id: int
    ref: str
    transaction_id: int
    amount: Decimal
    product_id: int
    denomination: Decimal
    quantity: int
    discount: Decimal
    status: str
    placed_at: datetime
    vouchers: tuple[Voucher, ...] = ()
    idempotency_key: str | None = None
    raw: dict = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_payload(cls, raw: Any, idempotency_key: str | None = None) -> "OrderCreated":
        """The order create answer (money as JSON numbers or strings alike). Required: `id`, `ref`,
        `transaction_id`, `amount`, `product_id`, `denomination`, `quantity`, `discount`, `status`,
        `placed_at`. `vouchers` may be omitted or null (a PENDING order: none); otherwise it must be an
        array of vouchers, each of which must be readable: one that is not refuses the whole answer
        (OrderDetail keeps them apart instead). `idempotency_key` is the key the request was sent with,
        kept on the record."""
        r = Reader(raw, cls.__name__)
        return cls(
            id=r.int("id"), ref=r.str("ref"), transaction_id=r.int("transaction_id"), amount=r.money("amount"),
            product_id=r.int("product_id"), denomination=r.money("denomination"), quantity=r.int("quantity"),
            discount=r.money("discount"), status=r.upper("status"), placed_at=r.ts("placed_at"),
            vouchers=r.records("vouchers", Voucher.from_payload), idempotency_key=idempotency_key, raw=raw,
        )


@dataclass(frozen=True)
class Mobile:
    """Order list item's mobile object."""

    mobile_country_code: Any
    mobile_number: Any


@dataclass(frozen=True)
class OrderSummary:
    """Order (list item); status upper-cased for comparison, raw keeps the lower-case value."""

    id: int
    reference_code: str
    transaction_id: int
    product_id: int
    denomination: Decimal
    quantity: int
    amount: Decimal
    status: str
    placed_at: datetime
    product_name: Any = MISSING
    currency: Any = MISSING
    email: Any = MISSING
    mobile: Any = MISSING
    raw: dict = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_payload(cls, raw: Any) -> "OrderSummary":
        """An order list item. Required: `id`, `reference_code`, `transaction_id`, `product_id`,
        `denomination` and `amount` (2-decimal strings on the wire; numbers pass too), `quantity`, `status`
        (the list's lower-case value, upper-cased here; `.raw` keeps it) and `placed_at`. Optional, MISSING
        or None: `product_name`, `currency`, `email` (the document: "may be null"), and `mobile`, which must
        be an object when present and becomes a `Mobile` whose two strings are each optional."""
        r = Reader(raw, cls.__name__)
        mobile = r.obj("mobile", required=False, nullable=True)
        if isinstance(mobile, dict):
            m = Reader(mobile, f"{cls.__name__}.mobile")
            mobile = Mobile(m.str("mobile_country_code", required=False, nullable=True),
                            m.str("mobile_number", required=False, nullable=True))
        return cls(
            id=r.int("id"), reference_code=r.str("reference_code"), transaction_id=r.int("transaction_id"),
            product_id=r.int("product_id"), denomination=r.money("denomination"), quantity=r.int("quantity"),
            amount=r.money("amount"), status=r.upper("status"), placed_at=r.ts("placed_at"),
            product_name=r.str("product_name", required=False, nullable=True),
            currency=r.str("currency", required=False, nullable=True),
            email=r.str("email", required=False, nullable=True), mobile=mobile, raw=raw,
        )


@dataclass(frozen=True)
class OrderDetail:
    """Order (detail): vouchers are populated only for DELIVERED and PARTIALLY_DELIVERED.

    A voucher that cannot be read does not hide the others: it is kept apart in `malformed`
    (MalformedResponse naming `OrderDetail.vouchers[i]` and the field), so the readable vouchers
    can be stored and the order fetched again for the rest.
    """

    id: int
    reference_code: str
    transaction_id: int
    amount: Decimal
    product_id: int
    denomination: Decimal
    quantity: int
    discount: Any
    status: str
    placed_at: datetime
    vouchers: tuple[Voucher, ...] = ()
    raw: dict = field(default_factory=dict, repr=False, compare=False)
    malformed: tuple = field(default=(), repr=False, compare=False)

    @classmethod
    def from_payload(cls, raw: Any) -> "OrderDetail":
        """An order detail. Required: `id`, `reference_code`, `transaction_id`, `amount`, `product_id`,
        `denomination`, `quantity`, `status` (upper-cased) and `placed_at`; `discount` may be omitted or
        null. `vouchers` may be omitted or null (none yet) and must otherwise be an array; a voucher in it
        that cannot be read is not raised but kept in `.malformed` (its error names
        `OrderDetail.vouchers[i]`), and the readable ones are returned: a voucher fetch stores those and
        reads the order again for the rest."""
        r = Reader(raw, cls.__name__)
        vouchers, bad = r.records_apart("vouchers", Voucher.from_payload)
        return cls(
            id=r.int("id"), reference_code=r.str("reference_code"), transaction_id=r.int("transaction_id"),
            amount=r.money("amount"), product_id=r.int("product_id"), denomination=r.money("denomination"),
            quantity=r.int("quantity"), discount=r.money("discount", required=False, nullable=True),
            status=r.upper("status"), placed_at=r.ts("placed_at"), vouchers=vouchers, raw=raw, malformed=bad,
        )


@dataclass(frozen=True)
class Webhook:
    """A webhook configuration as listed, read or updated (shape beyond create: not shown)."""

    id: int
    name: Any = MISSING
    url: Any = MISSING
    events: Any = MISSING
    is_active: Any = MISSING
    created_at: Any = MISSING
    raw: dict = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_payload(cls, raw: Any) -> "Webhook":
        """A webhook as listed, read or updated (the document shows no fields for these beyond the create
        answer's): only `id` is required. `name`, `url`, `is_active` (true or false) and `created_at` may
        be omitted or null; `events`, when present, must be an array of strings. No token: only the create
        answer carries one."""
        r = Reader(raw, cls.__name__)
        return cls(
            id=r.int("id"), name=r.str("name", required=False, nullable=True),
            url=r.str("url", required=False, nullable=True), events=r.strings("events", required=False),
            is_active=r.bool("is_active", required=False, nullable=True),
            created_at=r.ts("created_at", required=False, nullable=True), raw=raw,
        )


@dataclass(frozen=True)
class WebhookCreated:
    """Webhook configuration (create response); `token` is returned only once and masked in repr."""

    id: int
    name: str
    url: str
    token: str = field(repr=False)
    events: tuple[str, ...]
    is_active: Any = MISSING
    created_at: Any = MISSING
    raw: dict = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_payload(cls, raw: Any) -> "WebhookCreated":
        """The webhook create answer. Required: `id`, `name`, `url`, `token` (the signing secret, returned
        only here: kept out of repr) and `events` (an array of strings); `is_active` and `created_at` may
        be omitted or null."""
        r = Reader(raw, cls.__name__)
        return cls(
            id=r.int("id"), name=r.str("name"), url=r.str("url"), token=r.str("token"),
            events=r.strings("events"), is_active=r.bool("is_active", required=False, nullable=True),
            created_at=r.ts("created_at", required=False, nullable=True), raw=raw,
        )

    def __repr__(self) -> str:
        return (f"WebhookCreated(id={self.id!r}, name={self.name!r}, url={self.url!r}, token='***', "
                f"events={self.events!r}, is_active={self.is_active!r})")

    __str__ = __repr__


@dataclass(frozen=True)
class WebhookDelivery:
    """Webhook delivery record (as listed); the detail keeps more in `.raw`."""

    id: int
    status: str
    webhook_url_id: Any = MISSING
    order_id: Any = MISSING
    event_type: Any = MISSING
    event_id: Any = MISSING
    payload: Any = MISSING
    attempt_count: Any = MISSING
    max_attempts: Any = MISSING
    response_status: Any = MISSING
    response_time_ms: Any = MISSING
    delivered_at: Any = MISSING
    created_at: Any = MISSING
    raw: dict = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_payload(cls, raw: Any) -> "WebhookDelivery":
        """A webhook delivery record, from the list or the detail. Required: `id` and `status` (kept as sent:
        the document's values are lower-case). Optional, MISSING or None: the integers `webhook_url_id`,
        `order_id`, `attempt_count`, `max_attempts`, `response_status` and `response_time_ms`; `event_type`
        and `event_id` (strings); `payload` (an object); `delivered_at` and `created_at` (times). The
        detail's further fields (its response body) stay in `.raw`."""
        r = Reader(raw, cls.__name__)
        ints = {n: r.int(n, required=False, nullable=True) for n in (
            "webhook_url_id", "order_id", "attempt_count", "max_attempts", "response_status", "response_time_ms")}
        return cls(
            id=r.int("id"), status=r.str("status"), event_type=r.str("event_type", required=False, nullable=True),
            event_id=r.str("event_id", required=False, nullable=True),
            payload=r.obj("payload", required=False, nullable=True),
            delivered_at=r.ts("delivered_at", required=False, nullable=True),
            created_at=r.ts("created_at", required=False, nullable=True), raw=raw, **ints,
        )


@dataclass(frozen=True)
class DeliveryStats:
    """Aggregate delivery statistics (the `data` object of the stats response)."""

    total_count: int
    pending_count: int
    delivered_count: int
    failed_count: int
    last_24h_total: int
    last_24h_delivered: int
    last_24h_failed: int
    raw: dict = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_payload(cls, raw: Any) -> "DeliveryStats":
        """The stats answer's `data` object: the seven counts (`total_count`, `pending_count`,
        `delivered_count`, `failed_count`, `last_24h_total`, `last_24h_delivered`, `last_24h_failed`) are all
        required integers."""
        r = Reader(raw, cls.__name__)
        names = ("total_count", "pending_count", "delivered_count", "failed_count",
                 "last_24h_total", "last_24h_delivered", "last_24h_failed")
        return cls(**{n: r.int(n) for n in names}, raw=raw)


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of a list: items plus what the pagination headers said (None when absent)."""

    items: list[T]
    page: int
    per_page: int | None
    total_count: int | None
    total_pages: int | None
    has_more: bool
    # Items that failed to parse (MalformedResponse with .field and .body = the raw item),
    # kept apart so one bad record never hides the rest of the page: callers quarantine them.
    malformed: tuple[MalformedResponse, ...] = ()

    def __iter__(self):
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)
