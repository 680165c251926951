"""`PartnerApi`: what partnerkit's jobs ask of the client they are given.

`reconcile.recharges.submit`, `partnerkit.ordering.place_order`, the poller, the syncs, the order
catch-up, the voucher fetches and the worker's start-up check take a `client`: a `PartnerClient`, or
anything with this interface (a fork's adapter around one). Every member is called unconditionally:

- `check_account()` before a write's intent is recorded (a key of another account records nothing);
- `with_budget(...)`, `leaving(keep_free)` and `once()`: the views through which each job spends its
  share of the hour and leaves the others theirs; `budget.usage()` is how the poller plans its pass;
- the endpoint methods the jobs call, with `PartnerClient`'s signatures.

An adapter's views must be adapters too (wrap what the wrapped client's view returns): a view taken from
the wrapped client directly would bypass the adapter for the rest of that job (docs/client.md, "Wrapping
the client"). tests/client/test_client_interface.py holds these signatures to `PartnerClient`'s.
"""

from __future__ import annotations

from datetime import date
from decimal import Decimal
from typing import Any, Callable, Protocol

from partnerkit.client._pagination import Walk
from partnerkit.client._records import OrderCreated, OrderDetail, OrderSummary, Page, Recharge, SubmitResult
from partnerkit.store.budget import Budget


class PartnerApi(Protocol):
    """The client interface partnerkit's jobs use (`PartnerClient` has it; see the module docstring)."""

    @property
    def budget(self) -> Budget:
        """The shared request budget the client spends (`usage()`)."""
        ...

    def check_account(self) -> None:
        """Raise AccountMismatch unless the API key is the account's the client's database serves."""
        ...

    def with_budget(self, purpose: str, *, wait: bool, keep_free: int = 0, own_cap: int | None = None,
                    max_wait: float | None = None) -> PartnerApi:
        """The same client spending under another purpose, wait mode, reserve and cap."""
        ...

    def leaving(self, keep_free: int) -> PartnerApi:
        """The same client stopping while `keep_free` requests of the hour remain."""
        ...

    def once(self) -> PartnerApi:
        """The same client sending each call once, never waiting for budget."""
        ...

    def submit_recharge(self, *, mobile_number: str, operator_id: int, amount: int | Decimal | str,
                        idempotency_key: str | None = None, circle_id: int | None = None,
                        is_postpaid: bool | None = None, is_special: bool | None = None,
                        country_code: str | None = None, nickname: str | None = None,
                        client_reference: str | None = None, force: bool = False) -> SubmitResult:
        """POST /recharges."""
        ...

    def get_recharge(self, recharge_id: int) -> Recharge:
        """GET /recharges/:id."""
        ...

    def list_recharges(self, *, page: int = 1, limit: int | None = None, page_size: int | None = None,
                       status: str | None = None, search: str | None = None, from_date: date | str | None = None,
                       to_date: date | str | None = None) -> Page[Recharge]:
        """GET /recharges, one page."""
        ...

    def iter_recharges(self, *, limit: int = 1000, on_malformed: Callable[..., Any] | None = None,
                       start_page: int = 1, **filters: Any) -> Walk[Recharge]:
        """Every page of GET /recharges from `start_page`."""
        ...

    def create_order(self, *, product_id: int, denomination: int | Decimal | str, quantity: int,
                     wallet_id: int | None = None, ref: str | None = None, email: str | None = None,
                     idempotency_key: str | None = None) -> OrderCreated:
        """POST /orders."""
        ...

    def list_orders(self, *, page: int = 1, limit: int = 10, status: str | None = None,
                    product_id: int | None = None) -> Page[OrderSummary]:
        """GET /orders, one page."""
        ...

    def get_order(self, order_id: int) -> OrderDetail:
        """GET /orders/{id}."""
        ...

    def iter_transactions(self, *, limit: int = 100, start_page: int = 1, **filters: Any) -> Walk[dict]:
        """Every page of GET /transactions from `start_page`."""
        ...

    def list_wallets(self) -> Any:
        """GET /wallets."""
        ...
