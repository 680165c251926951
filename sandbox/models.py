"""In-memory records of the simulated provider (plain dataclasses, Decimal money)."""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal


@dataclass(slots=True)
class Client:
    """A partner organisation: one credential, its enablement flags and discounts."""

    name: str
    key: str
    secret: str
    signing_secret: str
    credential_id: int
    recharge_enabled: bool = True       # 403 recharge is not enabled for this client
    api_enabled: bool = True            # 403 recharge over the API is not enabled
    prepaid_enabled: bool = True        # 403 this recharge type is not enabled
    postpaid_enabled: bool = True
    blocked_operators: set[int] = field(default_factory=set)
    paused: bool = False                # 503 recharge is temporarily paused for this client
    recharge_discounts: dict[int, Decimal] = field(default_factory=dict)  # operator -> pct


@dataclass(slots=True)
class Operator:
    """A recharge operator (GET /api/v1/recharge/operators)."""

    id: int
    name: str
    is_active: bool = True
    supports_prepaid: bool = True
    supports_postpaid: bool = False
    supports_special: bool = False
    requires_circle: bool = False
    vendor_mapped: bool = True


@dataclass(slots=True)
class Product:
    """A catalog product (SKU)."""

    id: int
    name: str
    category_id: int
    vendor: str
    currency: str
    country: str
    delivery_type: str                  # "code" or "code_with_pin"
    denominations: list[Decimal]
    discount_pct: Decimal = Decimal("0")
    max_quantity: int = 1000
    realtime: bool = True
    always_realtime: bool = False       # products 7 and 8
    is_active: bool = True
    validity_days: int = 365
    claim_url_base: str | None = None


@dataclass(slots=True)
class Wallet:
    """A prepaid wallet of one client in one currency."""

    id: int
    client_key: str
    currency: str
    balance: Decimal
    updated_at: datetime


@dataclass(slots=True)
class Transaction:
    """One wallet movement; every debit, refund, conversion and top-up is one."""

    id: int
    client_key: str
    wallet_id: int
    type: str
    direction: str                      # DEBIT or CREDIT
    amount: Decimal                     # positive, in the wallet currency
    currency: str
    balance_after: Decimal
    created_at: datetime
    description: str = ""
    order_id: int | None = None
    recharge_id: int | None = None
    reference_number: str | None = None
    original_amount: Decimal | None = None
    original_currency: str | None = None
    fx_rate: Decimal | None = None


@dataclass(slots=True)
class Recharge:
    """A mobile recharge; `outcome` is the scripted final status, if any."""

    id: int
    client_key: str
    reference_number: str
    status: str
    sub_status: str
    mobile_number: str
    operator_id: int
    operator_name: str | None
    circle: str | None
    is_prepaid: bool
    face: Decimal
    discount: Decimal
    payable: Decimal
    created_at: datetime
    country_code: str = "IN"
    currency: str = "INR"
    is_special: bool = False
    nickname: str | None = None
    vendor_recharge_id: str | None = None
    operator_txn_id: str | None = None
    failure_reason: str | None = None
    client_reference: str | None = None
    updated_at: datetime | None = None
    outcome: str | None = None
    settle_at: datetime | None = None
    wallet_id: int | None = None


@dataclass(slots=True)
class Voucher:
    """One delivered voucher."""

    card_number: str
    pin_code: str | None
    claim_url: str | None
    voucher_reference_number: str
    expires_at: datetime


@dataclass(slots=True)
class Order:
    """A voucher order; `script` drives its asynchronous fulfilment."""

    id: int
    client_key: str
    ref: str
    transaction_id: int
    product_id: int
    quantity: int
    denomination: Decimal
    amount: Decimal
    discount: Decimal
    currency: str
    status: str
    placed_at: datetime
    wallet_id: int
    email: str | None = None
    mobile: dict | None = None
    vouchers: list[Voucher] = field(default_factory=list)
    delivered_on: datetime | None = None
    updated_at: datetime | None = None
    sub_status: str = ""
    script: str = "deliver"
    steps: list[tuple[datetime, str]] = field(default_factory=list)


@dataclass(slots=True)
class Webhook:
    """A webhook configuration; `envelope` and `chaos` are sandbox-only fields."""

    id: int
    client_key: str
    name: str
    url: str
    token: str
    events: list[str]
    created_at: datetime
    is_active: bool = True
    credential_id: int | None = None
    envelope: str = "standard"
    chaos: bool = False
    updated_at: datetime | None = None


@dataclass(slots=True)
class Delivery:
    """One event to one webhook, with its attempts."""

    id: int
    client_key: str
    webhook_id: int
    order_id: int | None
    event_type: str
    event_id: str
    payload: dict
    body: bytes
    created_at: datetime
    next_attempt_at: datetime | None
    status: str = "pending"
    attempt_count: int = 0
    max_attempts: int = 5
    response_status: int | None = None
    response_time_ms: int | None = None
    response_body: str | None = None
    delivered_at: datetime | None = None
    last_error: str | None = None
    in_flight: bool = False
    attempts: list[dict] = field(default_factory=list)
