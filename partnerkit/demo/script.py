"""The scripted day: recharges, small and bulk orders, a receiver outage, and one planted drift.

Outcomes are chosen the sandbox's way (docs/sandbox.md): a recharge's by the last digit of the
mobile number, an order's by the prefix of its `ref`. Recharges go through partnerkit's own submit
path (`reconcile.recharges.submit`: intent recorded first), orders through the client; the receiver
and the worker, running as their own processes, do the rest.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any, Callable, TypeVar

from partnerkit.demo.output import Progress
from partnerkit.demo.signals import checkpoint
from partnerkit.demo.stack import DemoError, Stack
from partnerkit.demo.watch import WatchedOrder, WatchedRecharge, Watcher, wait_until
from partnerkit.money import fmt
from partnerkit.store import Database
from reconcile.recharges import DuplicateSubmit, submit

# (mobile number, operator id, operator, face, what the sandbox does with that last digit)
RECHARGES = (
    ("9800000010", 1, "Airtel", 199, "SUCCESS"),
    ("9800000024", 2, "Jio", 149, "FAILED"),
    ("9800000035", 1, "Airtel", 239, "PROCESSING then SUCCESS"),
    ("9800000047", 2, "Jio", 299, "PROCESSING then REVERSED"),
)
# (product id, denomination, quantity, ref, label)
SMALL_ORDERS = ((7, 50, 2, None, "Sandbox Test Voucher"), (8, 100, 3, None, "Sandbox Test Voucher + PIN"))
BULK_ORDERS = ((1, 100, 25, None, "Amazon Pay Gift Card"),
               (2, 500, 12, "partial-demo-1", "Flipkart Gift Card"),
               (6, 250, 4, "fail-demo-1", "Zomato Gift Card"))
OUTAGE_ORDER = (3, 100, 20, None, "Google Play Recharge Code")
PLANTED_ORDER = (1, 250, 2, "fail-demo-2", "Amazon Pay Gift Card")
PIPELINE_TIMEOUT_S = 90.0
ORDER_POLL_S = 10.0  # Limits: "Order polling: no faster than every 10 seconds"

T = TypeVar("T")


def paced(read: Callable[[], T], clock: Callable[[], datetime],
          every_s: float = ORDER_POLL_S) -> Callable[[], T | None]:
    """`read`, called at most once per `every_s` of `clock`; None when asked again sooner.

    The demo reads an order's detail this way, on the provider's clock (the sandbox's, `--speed` times
    faster than ours): a partner's code does the same on the real clock."""
    last: list[datetime] = []

    def call() -> T | None:
        now = clock()
        if last and (now - last[0]).total_seconds() < every_s:
            return None
        last[:] = [now]
        return read()

    return call


@dataclass
class DayOutcome:
    """What the day did, for the summary."""

    first_day: date
    delivered_order: int | None = None
    planted_kind: str = "missing_refund"
    planted_order: int | None = None


class ScriptedDay:
    """Plays the day against the running stack, one progress line per step."""

    def __init__(self, stack: Stack, db: Database, client: Any, progress: Progress) -> None:
        self.stack = stack
        self.config = stack.config
        self.db = db
        self.client = client
        self.p = progress
        self.watch = Watcher(stack, db, progress)

    def run(self) -> DayOutcome:
        outcome = DayOutcome(first_day=self.stack.sandbox_now().date())
        self.p.section("Recharges (the sandbox decides by the mobile number's last digit)")
        self.recharges()
        self.stack.set_speed(self.stack.speed)
        self.p.section("Voucher orders (bulk ones are scripted by their ref prefix)")
        self.p.step(f"sandbox clock now runs {self.stack.speed:g}x: fulfilment and webhook retries take seconds, "
                    "not minutes")
        small = [self.order(*spec, kind="small") for spec in SMALL_ORDERS]
        for spec in BULK_ORDERS:
            self.order(*spec, kind="bulk")
        self.watch.wait(PIPELINE_TIMEOUT_S, "webhooks, voucher fetches and recharge polling")
        outcome.delivered_order = small[0]
        self.p.section("Receiver outage (the provider retries on its 0/1/2/4/8-minute schedule)")
        self.outage()
        self.watch.wait(PIPELINE_TIMEOUT_S, "the vouchers of the order placed during the outage")
        self.p.section("A drift, planted in the provider's ledger")
        outcome.planted_order = self.planted_drift()
        self.watch.wait(PIPELINE_TIMEOUT_S, "the last webhooks")
        return outcome

    # ---- recharges ------------------------------------------------------------------------------

    def recharges(self) -> None:
        for mobile, operator_id, operator, face, script in RECHARGES:
            checkpoint()  # a Ctrl-C noted during the last one: no further recharge (the loop never pauses)
            done = submit(self.config, self.db, self.client, mobile_number=mobile, operator_id=operator_id,
                          amount=face)
            r = done.recharge
            if r is None:  # the answer was lost and locate could not find it: nothing to show
                raise DemoError(f"recharge to {mobile}: {done.message}")
            line = (f"recharge {r.id} ({r.reference_number}): {face}.00 to {mobile} ({operator}, last digit "
                    f"{mobile[-1]}) -> {done.status}, payable {fmt(r.payable)}")
            if done.status == "PROCESSING":
                self.watch.recharge(WatchedRecharge(done.local_id, r.id, r.reference_number, script.split()[-1]))
                line += "; the worker's poller will settle it"
            elif done.status == "FAILED":
                line += f" ({r.failure_reason or 'declined'}; credited back)"
            self.p.step(line)
        mobile, operator_id, _, face, _ = RECHARGES[0]
        checkpoint()
        try:
            submit(self.config, self.db, self.client, mobile_number=mobile, operator_id=operator_id, amount=face)
        except DuplicateSubmit as exc:
            self.p.step(f"recharge {face}.00 to {mobile} again -> HTTP {exc.status}, refused by the provider's "
                        "duplicate guard; nothing recorded")
            self.p.detail(f"partnerkit says: {exc.message}")
        else:
            raise DemoError("the provider's duplicate guard did not block a repeated recharge")

    # ---- orders ---------------------------------------------------------------------------------

    def order(self, product_id: int, denomination: int, quantity: int, ref: str | None, label: str, *,
              kind: str) -> int:
        """Place an order with `partnerkit orders create` (it records the order and any vouchers in the answer)."""
        args = ["orders", "create", "--product-id", str(product_id), "--denomination", str(denomination),
                "--quantity", str(quantity), "--format", "json"] + (["--ref", ref] if ref else [])
        created = self.stack.run_command(*args)
        order_id, status = int(created["id"]), str(created["status"]).upper()
        how = kind
        if ref and ref.startswith("partial-"):
            how = "bulk, ref partial-: delivered in two parts"
        elif ref and ref.startswith("fail-"):
            how = "bulk, ref fail-: the provider fails it"
        tail = (f"{created['vouchers_stored']} vouchers from the answer stored encrypted" if status == "DELIVERED"
                else "the rest comes by webhook")
        self.p.step(f"order {order_id}: {quantity} x {label} {denomination}.00 ({how}), wallet debited "
                    f"{created['amount']} -> {status}; {tail}")
        expect = "FAILED" if ref and ref.startswith("fail-") else "DELIVERED"
        self.watch.order(WatchedOrder(order_id, quantity, f"{quantity} x {label}", expect))
        return order_id

    # ---- receiver outage ------------------------------------------------------------------------

    def _deliveries(self, order_id: int) -> list[Any]:
        return list(self.client.list_deliveries(order_id=order_id, limit=100).items)

    def outage(self) -> int:
        self.stack.stop_receiver()
        self.p.step("receiver stopped (a simulated outage): the provider's deliveries now fail, and it retries "
                    "each after 1, 2, 4 and 8 minutes of its clock")
        order_id = self.order(*OUTAGE_ORDER, kind="bulk")
        detail = paced(lambda: self.client.get_order(order_id), self.stack.sandbox_now)
        delivered = False

        def retried() -> list[Any] | None:
            nonlocal delivered
            if not delivered:  # read first: once DELIVERED, its order.delivered delivery exists
                order = detail()  # None between reads: at most one every 10 s of the provider's clock
                delivered = order is not None and order.status.upper() == "DELIVERED"
                if not delivered:
                    return None
            deliveries = self._deliveries(order_id)
            ok = (any(d.event_type == "order.delivered" for d in deliveries)
                  and all((d.attempt_count or 0) >= 2 for d in deliveries))
            return deliveries if ok else None

        failing = wait_until(self.stack, retried, 60, f"failed deliveries for order {order_id}", every_s=0.5)
        counts = ", ".join(f"{d.event_type} x{d.attempt_count}" for d in sorted(failing, key=lambda d: d.id))
        self.p.step(f"provider: order {order_id} DELIVERED, its webhooks failing (attempts so far: {counts})")
        started = time.monotonic()
        self.stack.start_receiver()
        self.p.step(f"receiver restarted (ready in {time.monotonic() - started:.1f} s); waiting for the provider's "
                    "next retries")
        requeued: set[int] = set()

        def landed() -> list[Any] | None:
            deliveries = self._deliveries(order_id)
            for d in deliveries:
                if d.status == "failed" and d.id not in requeued:
                    self.client.retry_delivery(d.id)
                    requeued.add(d.id)
                    self.p.step(f"delivery {d.id} used all its attempts during the outage: re-queued "
                                f"(as `partnerkit webhooks retry {d.id}` does)")
            return deliveries if deliveries and all(d.status == "delivered" for d in deliveries) else None

        deliveries = wait_until(self.stack, landed, 60, f"the retried deliveries of order {order_id}", every_s=0.5)
        for d in sorted(deliveries, key=lambda d: d.id):
            self.p.step(f"delivery {d.id} {d.event_type} for order {order_id}: delivered on attempt "
                        f"{d.attempt_count} (HTTP {d.response_status})")
        return order_id

    # ---- the planted drift ----------------------------------------------------------------------

    def planted_drift(self) -> int:
        order_id = self.order(*PLANTED_ORDER, kind="bulk")

        def refund() -> dict | None:
            found = self.client.list_transactions(order_id=order_id, type="ORDER_REFUND").items
            return found[0] if found else None

        txn = wait_until(self.stack, refund, 60, f"the refund of failed order {order_id}", every_s=0.5)
        self.stack.control("DELETE", f"transactions/{txn['id']}")
        self.p.step(f"planted a drift: deleted refund transaction {txn['id']} ({txn['amount']} {txn['currency']}) of "
                    f"order {order_id} with DELETE /sandbox/transactions/{txn['id']}: the provider keeps the money")
        return order_id

    def sandbox_days(self, first: date) -> list[date]:
        """Every UTC day of the sandbox clock from `first` to now (usually one)."""
        last: datetime = self.stack.sandbox_now()
        days = [first]
        while days[-1] < last.date():
            days.append(date.fromordinal(days[-1].toordinal() + 1))
        return days

