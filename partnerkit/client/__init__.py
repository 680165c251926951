"""The Partner API client: one method per endpoint of the provider's document.

    from partnerkit.client import PartnerClient, new_idempotency_key
    client = PartnerClient(config, db)              # db: the shared partnerkit database
    quote = client.preview_recharge(operator_id=1, amount=100)
    key = new_idempotency_key()                     # yours: persist it before the call
    result = client.submit_recharge(mobile_number="9876543210", operator_id=1, amount=100,
                                    idempotency_key=key)

`submit_recharge` and `create_order` are the raw calls: they record nothing. Recharges that should
reconcile go through `reconcile.recharges.submit(config, db, client, ...)`, orders through
`partnerkit.ordering.place_order(config, db, client, ...)`: both record an intent first and
resolve a lost answer with the same key. See docs/client.md for the budget, retries, idempotency
and signing decisions. `PartnerApi` names the interface those jobs use, for a fork that wraps the client.
"""

from partnerkit.client._arguments import check_idempotency_key, new_idempotency_key
from partnerkit.client._client import PartnerClient
from partnerkit.client._errors import error_from_response, parse_error_body, parse_retry_after
from partnerkit.client._http import RetryPolicy, Spend
from partnerkit.client._interface import PartnerApi
from partnerkit.client._pagination import Walk, iterate, page_from_headers
from partnerkit.client._records import (
    MISSING,
    ChargeQuote,
    DeliveryStats,
    Mobile,
    OrderCreated,
    OrderDetail,
    OrderSummary,
    Page,
    Recharge,
    SubmitResult,
    Voucher,
    Webhook,
    WebhookCreated,
    WebhookDelivery,
)
from partnerkit.client._signing import canonical_request, encode_body, sign_request, signature_headers

__all__ = [
    "MISSING",
    "ChargeQuote",
    "DeliveryStats",
    "Mobile",
    "OrderCreated",
    "OrderDetail",
    "OrderSummary",
    "Page",
    "PartnerApi",
    "PartnerClient",
    "Recharge",
    "RetryPolicy",
    "Spend",
    "SubmitResult",
    "Voucher",
    "Webhook",
    "WebhookCreated",
    "WebhookDelivery",
    "canonical_request",
    "check_idempotency_key",
    "encode_body",
    "error_from_response",
    "iterate",
    "Walk",
    "new_idempotency_key",
    "page_from_headers",
    "parse_error_body",
    "parse_retry_after",
    "sign_request",
    "signature_headers",
]
