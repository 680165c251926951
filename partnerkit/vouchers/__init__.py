"""Voucher fetches and the order sync, run by the worker (never inside a webhook request).

`run_voucher_fetches` claims due fetch jobs under a lease, reads GET /api/v1/orders/{id} through
the shared budget, stores each voucher once (encrypted, keyed by a fingerprint) and retries with
backoff until the detail shows what the event announced. `catch_up_orders` walks the order list
and repairs orders whose status changed without a webhook reaching us, and links an order intent
whose answer was lost (`partnerkit.ordering`) to the order carrying its ref.

The package is one module a concern, re-exported here (import from `partnerkit.vouchers`):
`_sealing` (seal, unseal, fingerprints), `_fetches` (the fetch jobs) and `_order_sync` (the order
sync). Both jobs log as `partnerkit.vouchers`.
"""

from partnerkit.vouchers._fetches import (FetchPolicy, FetchSummary, rearm_parked_fetches, revive_parked_fetches,
                                         run_voucher_fetches)
from partnerkit.vouchers._order_sync import SYNC_WATERMARK, SyncSummary, catch_up_orders, orders_read
from partnerkit.vouchers._sealing import seal, unseal, voucher_context, voucher_identity

__all__ = [
    "SYNC_WATERMARK",
    "FetchPolicy",
    "FetchSummary",
    "SyncSummary",
    "catch_up_orders",
    "orders_read",
    "rearm_parked_fetches",
    "revive_parked_fetches",
    "run_voucher_fetches",
    "seal",
    "unseal",
    "voucher_context",
    "voucher_identity",
]
