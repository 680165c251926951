"""Watching the local database while the receiver and the worker do their work.

The demo never stores orders or vouchers itself: everything it reports as "stored" was written by
the receiver (webhook events, order state) or the worker (vouchers, settled recharges), and is
read back here from the same SQLite file.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

from partnerkit.demo.output import Progress
from partnerkit.demo.signals import pause
from partnerkit.demo.stack import DemoError, Stack
from partnerkit.store import Database, inbox
from partnerkit.store import orders as order_store
from partnerkit.store import recharges as recharge_store
from partnerkit.store import vouchers as voucher_store

FINAL_RECHARGE = frozenset({"SUCCESS", "FAILED", "REVERSED"})


@dataclass
class WatchedOrder:
    """An order the demo placed, and what it expects the pipeline to end with."""

    id: int
    quantity: int
    label: str
    expect: str  # DELIVERED or FAILED
    seen: list[str] = field(default_factory=list)
    vouchers: int = 0
    done: bool = False


@dataclass
class WatchedRecharge:
    """A PROCESSING recharge the worker's poller must settle."""

    local_id: int
    provider_id: int
    reference: str
    expect: str
    submitted: float = field(default_factory=time.monotonic)
    done: bool = False


def wait_until(stack: Stack, condition: Callable[[], Any], timeout_s: float, what: str, *,
               every_s: float = 0.25) -> Any:
    """Poll `condition` until truthy; DemoError naming `what` (and the logs) after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        stack.check_children()
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise DemoError(f"{what} did not happen within {timeout_s:.0f} s "
                            f"(see the logs in {stack.paths.logs})")
        pause(every_s)


def event_path(db: Database, order_id: int) -> list[str]:
    """The order statuses the receiver's stored webhook events went through, in order."""
    events = inbox.listing(db, order_id=order_id, limit=100)
    events.sort(key=lambda e: (e["occurred_at"] or "", e["received_at"] or ""))
    path: list[str] = []
    for event in events:
        status = (event["status"] or "").upper()
        if event["state"] == "processed" and status and (not path or path[-1] != status):
            path.append(status)
    return path


class Watcher:
    """Prints what the receiver and worker do to the watched orders and recharges, as it happens."""

    def __init__(self, stack: Stack, db: Database, progress: Progress) -> None:
        self.stack = stack
        self.db = db
        self.progress = progress
        self.orders: dict[int, WatchedOrder] = {}
        self.recharges: dict[int, WatchedRecharge] = {}

    def order(self, order: WatchedOrder) -> None:
        self.orders[order.id] = order

    def recharge(self, recharge: WatchedRecharge) -> None:
        self.recharges[recharge.local_id] = recharge

    def pending(self) -> list[str]:
        """What is not finished yet, for a timeout message."""
        left = [f"order {o.id} ({o.seen[-1] if o.seen else 'no webhook yet'}, {o.vouchers}/{o.quantity} vouchers)"
                for o in self.orders.values() if not o.done]
        left += [f"recharge {r.provider_id} still PROCESSING" for r in self.recharges.values() if not r.done]
        return left

    def tick(self) -> bool:
        """Look once; print changes; True when every watched item is finished."""
        for order in self.orders.values():
            if not order.done:
                self._look_at_order(order)
        for recharge in self.recharges.values():
            if not recharge.done:
                self._look_at_recharge(recharge)
        return all(o.done for o in self.orders.values()) and all(r.done for r in self.recharges.values())

    def wait(self, timeout_s: float, what: str) -> None:
        """Tick until everything watched is finished, or DemoError listing what is not."""
        try:
            wait_until(self.stack, self.tick, timeout_s, what)
        except DemoError as exc:
            raise DemoError(f"{exc}; still waiting for: {', '.join(self.pending())}") from None

    def _look_at_order(self, order: WatchedOrder) -> None:
        row = order_store.get(self.db, order.id)
        status = row["status"] if row else None
        vouchers = voucher_store.count(self.db, order.id)
        if status and (not order.seen or order.seen[-1] != status):
            order.seen.append(status)
            if status == "PARTIALLY_DELIVERED":
                self.progress.step(f"order {order.id}: PARTIALLY_DELIVERED webhook received "
                                   f"({row.get('delivered_quantity') or '?'} of {order.quantity} delivered so far)")
        if vouchers != order.vouchers and 0 < vouchers < order.quantity:
            self.progress.step(f"order {order.id}: worker fetched {vouchers} of {order.quantity} vouchers "
                               "(partial delivery); the rest follow when the order completes")
        order.vouchers = vouchers
        complete = status == order.expect and (order.expect != "DELIVERED" or vouchers >= order.quantity)
        if complete:
            order.done = True
            path = " -> ".join(event_path(self.db, order.id) or order.seen)
            stored = (f"{vouchers} of {order.quantity} vouchers stored encrypted" if order.expect == "DELIVERED"
                      else "nothing to fetch")
            self.progress.step(f"order {order.id}: webhooks received ({path}); {stored}")

    def _look_at_recharge(self, recharge: WatchedRecharge) -> None:
        row = recharge_store.get(self.db, recharge.local_id)
        if row and row["status"] in FINAL_RECHARGE:
            recharge.done = True
            took = time.monotonic() - recharge.submitted
            verdict = "as scripted" if row["status"] == recharge.expect else f"expected {recharge.expect}"
            self.progress.step(f"recharge {recharge.provider_id} ({recharge.reference}): PROCESSING -> "
                               f"{row['status']}, settled by the worker's poller {took:.0f} s after submit "
                               f"({verdict})")
