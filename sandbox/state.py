"""Sandbox: the whole in-memory state of the simulated provider, and its background work."""
from __future__ import annotations

import heapq
import logging
import random
import secrets
import threading
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from . import ids, orders, recharges, seed, wallets, webhooks
from .clock import SandboxClock
from .models import (Client, Delivery, Operator, Order, Product, Recharge, Transaction, Wallet,
                     Webhook)
from .settings import SandboxSettings

log = logging.getLogger("sandbox")


@dataclass(slots=True)
class IdempotencyRecord:
    """The original answer to a request, replayed for the same key within 24 hours."""

    status: int
    body: str
    headers: dict
    expires_at: datetime


class Sandbox:
    """State of the simulated provider: clients, ledger, recharges, orders, webhooks, stats."""

    def __init__(self, settings: SandboxSettings | None = None, clock: SandboxClock | None = None):
        self.settings = settings or SandboxSettings()
        self.clock = clock or SandboxClock(self.settings.speed, self.settings.start)
        self.lock = threading.RLock()
        block = self.settings.id_block
        # Another start's draws too (event ids, order refs, voucher codes), not only its numbers: a receiver
        # deduplicates on event_id, and would take a restarted sandbox's first event for the previous one's.
        self.rng = random.Random(f"{self.settings.seed}:{block}" if block else self.settings.seed)
        # The seeded wallets keep their ids at every start (the account's own, docs/sandbox.md "Credentials");
        # every other record, and a wallet opened later, is numbered in this start's block (sandbox/ids.py).
        self._ids = {**ids.first_ids(block), "wallet": ids.FIRST_IDS["wallet"]}
        self.clients: dict[str, Client] = {}
        # Every live API key -> (its client, its secret). A client's seeded `key` stays its id in every
        # record; a rotation (`add_key`, then `revoke_key` of the old one) changes only what authenticates.
        self.credentials: dict[str, tuple[Client, str]] = {}
        self.operators: dict[int, Operator] = {op.id: op for op in seed.operators()}
        self.circles: dict[int, str] = dict(seed.CIRCLES)
        self.categories: list[dict] = [dict(c) for c in seed.CATEGORIES]
        self.products: dict[int, Product] = {p.id: p for p in seed.products()}
        self.wallets: dict[int, Wallet] = {}
        self.transactions: dict[int, Transaction] = {}
        self.recharges: dict[int, Recharge] = {}
        self.recharge_ids: dict[str, list[int]] = {}
        self.orders: dict[int, Order] = {}
        self.webhooks: dict[int, Webhook] = {}
        self.deliveries: dict[int, Delivery] = {}
        self.pending_deliveries: set[int] = set()
        self.idempotency: dict[tuple[str, str, str], IdempotencyRecord] = {}
        self.recharge_timers: list[tuple[datetime, int]] = []
        self.order_timers: list[tuple[datetime, int]] = []
        self.calls: Counter[str] = Counter()
        self.rate_limited = 0
        self.faults_injected: Counter[str] = Counter()
        self.fault_rng = random.Random(f"faults:{self.settings.seed}")
        self.rate_windows: dict[tuple[str, str], tuple[float, int]] = {}
        self.webhook_listeners: list = []      # called as f(webhook, token) on creation
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        # One pass at a time, its sends included: a pass asked for (a test's advance(), POST /sandbox/run-due)
        # while the background thread is sending the batch it took returns after that batch is sent, so "run
        # everything then due" holds when it returns (the API's own lock is not held while sending).
        self._pass_lock = threading.Lock()
        now = self.clock.now()
        for client, balances in seed.clients():
            self.clients[client.key] = client
            self.credentials[client.key] = (client, client.secret)
            self.recharge_ids[client.key] = []
            for currency, amount in balances.items():
                wallet = self.open_wallet(client.key, currency)
                wallets.post(self, wallet, "TOPUP", "CREDIT", amount,
                             description="opening balance", created_at=now)
        self._ids["wallet"] += block * ids.BLOCK_SIZE

    # ---- ids and lookups -------------------------------------------------------------
    def next_id(self, kind: str) -> int:
        """The next id of a record kind (monotonic, never reused)."""
        with self.lock:
            value = self._ids[kind]
            self._ids[kind] = value + 1
            return value

    def open_wallet(self, client_key: str, currency: str) -> Wallet:
        """Create an empty wallet for a client in a currency."""
        wallet = Wallet(self.next_id("wallet"), client_key, currency, Decimal("0.00"),
                        self.clock.now())
        self.wallets[wallet.id] = wallet
        return wallet

    def client(self, ref: str | None) -> Client | None:
        """A client by API key (seeded or rotated) or short name ("alpha"); the first client when ref is None."""
        if not ref:
            return next(iter(self.clients.values()))
        if ref in self.clients:
            return self.clients[ref]
        if ref in self.credentials:
            return self.credentials[ref][0]
        return next((c for c in self.clients.values() if c.name == ref), None)

    def keys_of(self, client: Client) -> list[str]:
        """The client's live API keys, in the order they were issued."""
        return [key for key, (owner, _) in self.credentials.items() if owner is client]

    def add_key(self, client: Client, key: str | None = None, secret: str | None = None) -> tuple[str, str]:
        """Issue the client another API key and secret (Authentication 2: keys are "rotatable on request");
        the old ones stay valid until `revoke_key`. ValueError for a key already issued."""
        with self.lock:
            key = key or f"{client.key}_r{len(self.keys_of(client))}"
            secret = secret or f"sk_sandbox_{client.name}_{secrets.token_hex(8)}"
            if key in self.credentials:
                raise ValueError(f"API key {key!r} is already issued")
            self.credentials[key] = (client, secret)
            return key, secret

    def revoke_key(self, client: Client, key: str) -> None:
        """Revoke one of the client's API keys (401 from then on). KeyError for a key that is not the client's;
        ValueError for its last one."""
        with self.lock:
            if key not in self.keys_of(client):
                raise KeyError(key)
            if len(self.keys_of(client)) == 1:
                raise ValueError("a client keeps at least one API key")
            del self.credentials[key]

    def schedule_recharge(self, at: datetime, recharge_id: int) -> None:
        """Settle a PROCESSING recharge at sandbox time `at`."""
        heapq.heappush(self.recharge_timers, (at, recharge_id))

    def schedule_order(self, at: datetime, order_id: int) -> None:
        """Advance an order's fulfilment at sandbox time `at`."""
        heapq.heappush(self.order_timers, (at, order_id))

    # ---- background work -------------------------------------------------------------
    def run_due(self) -> dict:
        """Do everything due at clock.now(): settle, fulfil, then send due webhooks."""
        with self._pass_lock:
            with self.lock:
                now = self.clock.now()
                settled = recharges.settle_due(self, now)
                advanced = orders.advance_due(self, now)
                batch = webhooks.take_due(self, now)
            sent = webhooks.send_batch(self, batch)   # HTTP outside the API's lock
        return {"settled": settled, "orders_advanced": advanced, "deliveries_attempted": sent}

    def start_background(self, interval_s: float = 0.2) -> None:
        """Start the daemon thread calling run_due() every `interval_s` real seconds."""
        if self._thread and self._thread.is_alive():
            return
        self._stop.clear()

        def loop():
            while not self._stop.wait(interval_s):
                try:
                    self.run_due()
                except Exception:  # keep the simulator alive; the failure is logged
                    log.exception("sandbox background pass failed")

        self._thread = threading.Thread(target=loop, name="sandbox-background", daemon=True)
        self._thread.start()

    def stop_background(self) -> None:
        """Stop the background thread (waits for the current pass)."""
        self._stop.set()
        if self._thread:
            if self._thread.ident is not None:  # an interrupt may land between creating and starting it
                self._thread.join(timeout=5)
            self._thread = None
