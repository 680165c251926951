"""PartnerClient: one method per endpoint of the Partner API document (Endpoints).

Its arguments are checked in `_arguments` before anything is sent, its answers taken out of their
envelopes in `_envelope`, and every request goes through `_http.Transport` (budget, signing, retries).
"""

from __future__ import annotations

import copy
from contextlib import contextmanager
from dataclasses import replace
from datetime import date
from decimal import Decimal
from typing import Any, Callable, Iterator, Mapping

import requests

from partnerkit.client._arguments import (
    DELIVERY_STATUSES, ORDER_STATUSES, RECHARGE_STATUSES, _amount, _day, _id, _limit, _number, _optional_id, _status,
    _walk_filters, check_idempotency_key,
)
from partnerkit.client._envelope import _items, _unwrap
from partnerkit.client._http import RetryPolicy, Spend, Transport
from partnerkit.client._pagination import Walk, iterate, page_from_headers
from partnerkit.client._records import (
    ChargeQuote, DeliveryStats, OrderCreated, OrderDetail, OrderSummary, Page, Recharge, SubmitResult,
    Webhook, WebhookCreated, WebhookDelivery,
)
from partnerkit.account import AccountGuard
from partnerkit.errors import AccountCheckFailed, ApiError, MalformedResponse, NotFound
from partnerkit.store.budget import ORDER_CREATE, Budget

API = "/api/v1"


@contextmanager
def _keyed(key: str) -> Iterator[None]:
    """Attach the Idempotency-Key to any ApiError raised inside, so the caller can replay or locate."""
    try:
        yield
    except ApiError as exc:
        exc.idempotency_key = key
        raise


class PartnerClient:
    """The Partner API client. Build one per process from the Config; pass the shared DB."""

    def __init__(
        self,
        config,
        db=None,
        *,
        session: requests.Session | None = None,
        purpose: str = "default",
        wait_for_budget: bool = True,
        keep_free: int = 0,
        own_cap: int | None = None,
        max_wait: float = 60.0,
        retry: RetryPolicy | None = None,
        timeout: float | None = None,
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        config.require("api_base_url", "api_key", "api_secret")
        budget = Budget.from_config(config, db)
        self._transport = Transport(
            base_url=config.api_base_url, api_key=config.api_key, api_secret=config.api_secret, budget=budget,
            session=session, timeout=config.http_timeout_s if timeout is None else timeout, retry=retry, sleep=sleep,
            # With the shared database, the key must be the account's it serves (partnerkit.account);
            # without one (an in-memory budget) nothing is stored that another account could mix into.
            account=AccountGuard(db, config.api_key) if db is not None else None,
            db=db,
        )
        self._spend = Spend(purpose, wait_for_budget, max_wait, keep_free, own_cap)

    def __repr__(self) -> str:
        return f"PartnerClient(base_url={self._transport.base_url!r}, purpose={self._spend.purpose!r})"

    @property
    def budget(self) -> Budget:
        """The shared request budget this client spends (usage() for metrics)."""
        return self._transport.budget

    def with_budget(self, purpose: str, *, wait: bool, keep_free: int = 0, own_cap: int | None = None,
                    max_wait: float | None = None) -> "PartnerClient":
        """A client sharing session and budget that spends under another purpose, wait mode, reserve
        and cap (`own_cap`: at most that many of a window's requests under this purpose)."""
        return self._view(Spend(purpose, wait, self._spend.max_wait if max_wait is None else max_wait, keep_free,
                                own_cap))

    def leaving(self, keep_free: int) -> "PartnerClient":
        """This client, spending and waiting as it does, but stopping while `keep_free` requests of the hour
        remain (for other callers: see partnerkit.store.budget.background_reserve)."""
        return self._view(replace(self._spend, keep_free=keep_free))

    def once(self) -> "PartnerClient":
        """This client, spending as it does, but sending each call once (no retries) and never waiting
        for budget: for a caller that bounds its own time (the locate inside `recharges submit`)."""
        return self._view(replace(self._spend, wait=False, attempts=1))

    def _view(self, spend: Spend) -> "PartnerClient":
        """A shallow copy spending as `spend`: the transport (session, budget) is shared, and a subclass's
        view is of that subclass, its own attributes kept (a fork's overrides apply to every job's view)."""
        view = copy.copy(self)
        view._spend = spend
        return view

    def close(self) -> None:
        """Close the HTTP session."""
        self._transport.session.close()

    def __enter__(self) -> "PartnerClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def check_account(self) -> None:
        """Make sure the API key is the provider account's this client's database serves (partnerkit.account):
        nothing for a key the database knows; for a new key one `GET /wallets` (under the purpose `account`),
        then its wallets are recorded, or AccountMismatch is raised and nothing else is sent or stored.

        Every call runs it first; a caller that records something before its first call (an intent) runs it
        before that, so that an error of the wallet read comes before anything is recorded."""
        guard = self._transport.account
        if guard is None or guard.checked:
            return
        guard.check(self._account_wallets)

    def trust_account(self) -> str:
        """Take the API key as its database's account's even when the provider's wallet list cannot tell
        (`partnerkit account trust-key`): one `GET /wallets`; AccountMismatch all the same for a key whose
        wallets are another account's. Returns partnerkit.account's verdict (`known`, `adopt`, `same`,
        `cannot_tell`)."""
        if self._transport.account is None:
            raise ValueError("trust_account needs the client's database (PartnerClient(config, db))")
        return self._transport.account.trust(self._account_wallets)

    def _account_wallets(self) -> Any:
        """GET /wallets for the account check, outside it, under the purpose `account` (no purpose cap)."""
        spend = replace(self._spend, purpose="account", own_cap=None)
        return self._transport.request("GET", API + "/wallets", spend=spend).body

    def _call(self, method: str, path: str, **kwargs: Any):
        guard = self._transport.account
        if guard is not None and not guard.checked:
            try:
                self.check_account()
            except ApiError as exc:
                if kwargs.get("repeatable") or method.upper() == "GET":
                    raise
                # A write's caller reads an error as the write's own: a timeout of the wallet read must not
                # look like a submit whose outcome is unknown (errors.is_ambiguous). It was never sent.
                raise AccountCheckFailed(
                    f"{method} {path} was not sent: the wallet read that tells which account PARTNERKIT_API_KEY "
                    f"is failed first ({exc})", retryable=exc.retryable, retry_after=exc.retry_after) from exc
        return self._transport.request(method, API + path, spend=self._spend, **kwargs)

    def _page(self, path: str, record, params: dict, *keys: str) -> Page:
        resp = self._call("GET", path, params=params)
        items, bad = _items(resp.body, record, *keys)
        return page_from_headers(items, resp.headers, page=params.get("page") or 1, limit=params.get("limit"), malformed=bad)

    # --- Recharges -------------------------------------------------------------------------

    def preview_recharge(self, operator_id: int, amount: int | Decimal | str) -> ChargeQuote:
        """POST /recharge/charges: quote face, discount and payable; nothing is placed."""
        # "Nothing is placed ... no duplicate guard", and a 500 is "retry with backoff" (Errors,
        # "Recharge charge preview"): repeating it is harmless, so it is retried like a read.
        body = {"operator_id": _id(operator_id, "operator_id"), "amount": _amount(amount)}
        resp = self._call("POST", "/recharge/charges", body=body, repeatable=True)
        return ChargeQuote.from_payload(_unwrap(resp.body))

    def submit_recharge(
        self,
        *,
        mobile_number: str,
        operator_id: int,
        amount: int | Decimal | str,
        idempotency_key: str | None = None,
        circle_id: int | None = None,
        is_postpaid: bool | None = None,
        is_special: bool | None = None,
        country_code: str | None = None,
        nickname: str | None = None,
        client_reference: str | None = None,
        force: bool = False,
    ) -> SubmitResult:
        """POST /recharges: 200 final or 202 PROCESSING; never re-sent after an ambiguous failure."""
        key = check_idempotency_key(idempotency_key)
        # operator_id is the number from the operators endpoint; the recharge's `operator` is a
        # display name that "must not be fed back into submit" (Resources, Recharge).
        body: dict[str, Any] = {"mobile_number": mobile_number, "operator_id": _id(operator_id, "operator_id"),
                                "amount": _amount(amount)}
        if circle_id is not None:
            _id(circle_id, "circle_id")
        optional = {"circle_id": circle_id, "is_postpaid": is_postpaid, "is_special": is_special,
                    "country_code": country_code, "nickname": nickname, "client_reference": client_reference}
        body.update({k: v for k, v in optional.items() if v is not None})
        if force:
            body["force"] = True  # bypasses the duplicate guard: only for a deliberate repeat
        with _keyed(key):
            resp = self._call("POST", "/recharges", body=body, idempotency_key=key)
            return SubmitResult(resp.status, Recharge.from_payload(_unwrap(resp.body)), key)

    def get_recharge(self, recharge_id: int) -> Recharge:
        """GET /recharges/:id (another client's recharge is 404 as well)."""
        resp = self._call("GET", f"/recharges/{_id(recharge_id, 'recharge id')}")
        return Recharge.from_payload(_unwrap(resp.body))

    def list_recharges(
        self,
        *,
        page: int = 1,
        limit: int | None = None,
        page_size: int | None = None,
        status: str | None = None,
        search: str | None = None,
        from_date: date | str | None = None,
        to_date: date | str | None = None,
    ) -> Page[Recharge]:
        """GET /recharges, newest first; page_size is the document's alias of limit (sent as limit)."""
        if limit is not None and page_size is not None and limit != page_size:
            raise ValueError("give limit or its alias page_size, not two different values")
        size = _limit(limit if limit is not None else page_size if page_size is not None else 50, 10000, "limit")
        params = {"page": _id(page, "page"), "limit": size,
                  "status": _status(status, RECHARGE_STATUSES, "recharge", send=str.upper), "search": search,
                  "from_date": _day(from_date, "from_date"), "to_date": _day(to_date, "to_date")}
        return self._page("/recharges", Recharge.from_payload, params, "recharges")

    def iter_recharges(self, *, limit: int = 1000, on_malformed=None, start_page: int = 1,
                       **filters: Any) -> Walk[Recharge]:
        """Every recharge matching the filters (no status filter: see _walk_filters), walking all pages from
        `start_page`; the walk's `next_page` says where it stopped."""
        _walk_filters(filters, "iter_recharges")
        return iterate(lambda n: self.list_recharges(page=n, limit=limit, **filters), start=start_page,
                       on_malformed=on_malformed)

    def list_operators(self, **params: Any) -> Any:
        """GET /recharge/operators: the source of operator_id values (shape not shown; raw JSON)."""
        return self._call("GET", "/recharge/operators", params=params).body

    # --- Orders ----------------------------------------------------------------------------

    def create_order(
        self,
        *,
        product_id: int,
        denomination: int | Decimal | str,
        quantity: int,
        wallet_id: int | None = None,
        ref: str | None = None,
        email: str | None = None,
        idempotency_key: str | None = None,
    ) -> OrderCreated:
        """POST /orders (own budget: 100 per minute); vouchers come back only when fulfilled at once."""
        key = check_idempotency_key(idempotency_key)
        # denomination is a number on the wire (Endpoints, POST /api/v1/orders), unlike a recharge
        # amount ("number or string"): a string given here is sent as the number it spells.
        value = _number(denomination, "denomination")
        if value <= 0:  # "Greater than 0.00"; product_id "greater than 0", quantity "minimum 1"
            raise ValueError(f"denomination must be greater than 0, got {denomination!r}")
        body: dict[str, Any] = {"product_id": _id(product_id, "product_id"), "denomination": value,
                                "quantity": _id(quantity, "quantity")}
        optional = {"wallet_id": _optional_id(wallet_id, "wallet_id"), "ref": ref, "email": email}
        body.update({k: v for k, v in optional.items() if v is not None})
        with _keyed(key):
            resp = self._call("POST", "/orders", body=body, idempotency_key=key, budget_class=ORDER_CREATE)
            return OrderCreated.from_payload(_unwrap(resp.body), idempotency_key=key)

    def list_orders(self, *, page: int = 1, limit: int = 10, status: str | None = None, product_id: int | None = None) -> Page[OrderSummary]:
        """GET /orders (status filter is case-insensitive); the document's 404 for it is an empty page."""
        params = {"page": _id(page, "page"), "limit": _limit(limit, 100, "limit"),
                  "status": _status(status, ORDER_STATUSES, "order", send=str),
                  "product_id": _optional_id(product_id, "product_id")}
        try:
            return self._page("/orders", OrderSummary.from_payload, params, "orders")
        except NotFound as exc:
            # Errors, "Order list and order detail": `404 not_found No Matching Result Found!` is not
            # marked "(detail)" as the 500 row is, so the list may answer it; for a list it means that
            # nothing matched. Only that error, in the table's shape: a bare 404 (a wrong base URL, a
            # proxy's page) stays an error, or a misconfiguration would read as "no orders" forever.
            if (exc.code or "").lower() != "not_found":
                raise
            return page_from_headers([], {}, page=params["page"], limit=params["limit"])

    def iter_orders(self, *, limit: int = 100, on_malformed=None, **filters: Any) -> Walk[OrderSummary]:
        """Every order matching the filters (no status filter: see _walk_filters), walking all pages."""
        _walk_filters(filters, "iter_orders")
        return iterate(lambda n: self.list_orders(page=n, limit=limit, **filters), on_malformed=on_malformed)

    def get_order(self, order_id: int) -> OrderDetail:
        """GET /orders/{id}: vouchers decrypted only for DELIVERED / PARTIALLY_DELIVERED."""
        resp = self._call("GET", f"/orders/{_id(order_id, 'order id')}")
        return OrderDetail.from_payload(_unwrap(resp.body))

    # --- Catalog, wallets, transactions (shapes not shown: raw JSON) -------------------------

    def list_categories(self) -> Any:
        """GET /categories."""
        return self._call("GET", "/categories").body

    def list_products(self, currency: str | None = None, country: str | None = None, **params: Any) -> Any:
        """GET /products, filterable by currency and country."""
        return self._call("GET", "/products", params={"currency": currency, "country": country, **params}).body

    def get_product(self, product_id: int) -> Any:
        """GET /products/{product_id}."""
        return self._call("GET", f"/products/{_id(product_id, 'product id')}").body

    def list_wallets(self) -> Any:
        """GET /wallets: balances across settlement currencies (a wallet new to the database is recorded as
        its account's: partnerkit.account)."""
        body = self._call("GET", "/wallets").body
        if self._transport.account is not None:
            self._transport.account.note(body)
        return body

    def list_transactions(
        self,
        *,
        page: int = 1,
        limit: int = 50,
        from_date: date | str | None = None,
        to_date: date | str | None = None,
        order_id: int | None = None,
        type: str | None = None,
        **params: Any,
    ) -> Page[dict]:
        """GET /transactions as raw dicts (shape not shown; reconciliation maps them)."""
        query = {"page": _id(page, "page"), "limit": _limit(limit, 10000, "limit"), "from_date": _day(from_date, "from_date"),
                 "to_date": _day(to_date, "to_date"), "order_id": _optional_id(order_id, "order_id"), "type": type,
                 **params}
        return self._page("/transactions", None, query, "transactions", "items")

    def iter_transactions(self, *, limit: int = 100, start_page: int = 1, **filters: Any) -> Walk[dict]:
        """Every transaction matching the filters, walking all pages from `start_page`; the walk's
        `next_page` says where it stopped."""
        return iterate(lambda n: self.list_transactions(page=n, limit=limit, **filters), start=start_page)

    # --- Webhooks ----------------------------------------------------------------------------

    def list_webhooks(self) -> list[Webhook]:
        """GET /webhooks."""
        items, bad = _items(self._call("GET", "/webhooks").body, Webhook.from_payload, "webhooks")
        if bad:
            raise bad[0]
        return items

    def create_webhook(self, *, name: str, url: str, events: list[str], credential_id: int | None = None, **extra: Any) -> WebhookCreated:
        """POST /webhooks: the signing token is returned only here, once."""
        body = {"name": name, "url": url, "events": list(events), **extra}
        if credential_id is not None:
            body["credential_id"] = credential_id
        answer = _unwrap(self._call("POST", "/webhooks", body=body).body, "webhook")
        if isinstance(answer, Mapping) and not answer.get("token"):
            # The document calls this POST "create a webhook (also described as register or update)", and a
            # token is "returned only at creation": an answer without one may be an existing webhook updated.
            # Its deliveries are refused here until the receiver has its token; say how to get it.
            named = f" (webhook {answer['id']})" if isinstance(answer.get("id"), (int, str)) else ""
            raise MalformedResponse(
                f"POST {API}/webhooks answered without a token{named}: a token comes back only when a webhook is "
                "created, so the provider may have updated an existing one for this URL; the receiver refuses its "
                "deliveries until it has the token: rotate the signing secret in the client portal and save it "
                "with `partnerkit webhooks token set ID`, or delete that webhook and register again",
                body=answer, field="token", method="POST", path=f"{API}/webhooks")
        return WebhookCreated.from_payload(answer)

    def get_webhook(self, webhook_id: int) -> Webhook:
        """GET /webhooks/:id."""
        return Webhook.from_payload(_unwrap(self._call("GET", f"/webhooks/{_id(webhook_id, 'webhook id')}").body, "webhook"))

    def update_webhook(self, webhook_id: int, **fields: Any) -> Any:
        """PUT /webhooks/:id with any of name, url, events, is_active (response shape not shown: raw)."""
        if not fields:
            raise ValueError("update_webhook needs at least one of name, url, events, is_active")
        return self._call("PUT", f"/webhooks/{_id(webhook_id, 'webhook id')}", body=fields).body

    def delete_webhook(self, webhook_id: int) -> Any:
        """DELETE /webhooks/:id (response shape not shown: raw, None if empty)."""
        return self._call("DELETE", f"/webhooks/{_id(webhook_id, 'webhook id')}").body

    def test_webhook(self, webhook_id: int) -> Any:
        """POST /webhooks/:id/test: trigger a test delivery (response shape not shown: raw)."""
        return self._call("POST", f"/webhooks/{_id(webhook_id, 'webhook id')}/test").body

    def list_deliveries(
        self,
        *,
        page: int = 1,
        limit: int = 20,
        status: str | None = None,
        event_type: str | None = None,
        order_id: int | None = None,
        webhook_url_id: int | None = None,
    ) -> Page[WebhookDelivery]:
        """GET /webhooks/deliveries: body {success, data: {deliveries}}, header X-Page-Size."""
        params = {"page": _id(page, "page"), "limit": _limit(limit, 100, "limit"),
                  "status": _status(status, DELIVERY_STATUSES, "delivery", send=str.lower), "event_type": event_type,
                  "order_id": _optional_id(order_id, "order_id"),
                  "webhook_url_id": _optional_id(webhook_url_id, "webhook_url_id")}
        return self._page("/webhooks/deliveries", WebhookDelivery.from_payload, params, "deliveries")

    def iter_deliveries(self, *, limit: int = 100, on_malformed=None, **filters: Any) -> Walk[WebhookDelivery]:
        """Every delivery matching the filters (no status filter: see _walk_filters), walking all pages."""
        _walk_filters(filters, "iter_deliveries")
        return iterate(lambda n: self.list_deliveries(page=n, limit=limit, **filters), on_malformed=on_malformed)

    def delivery_stats(self) -> DeliveryStats:
        """GET /webhooks/deliveries/stats."""
        return DeliveryStats.from_payload(_unwrap(self._call("GET", "/webhooks/deliveries/stats").body, "stats"))

    def get_delivery(self, delivery_id: int) -> WebhookDelivery:
        """GET /webhooks/deliveries/:id: one delivery with payload and response body (in .raw)."""
        body = self._call("GET", f"/webhooks/deliveries/{_id(delivery_id, 'delivery id')}").body
        return WebhookDelivery.from_payload(_unwrap(body, "delivery"))

    def retry_delivery(self, delivery_id: int) -> Mapping[str, Any]:
        """POST /webhooks/deliveries/:id/retry: re-queue a failed delivery; returns {message, delivery_id}."""
        return _unwrap(self._call("POST", f"/webhooks/deliveries/{_id(delivery_id, 'delivery id')}/retry").body)
