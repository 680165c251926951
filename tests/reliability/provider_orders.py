"""Traffic for the provider-fault tests: orders delivered by the sandbox and announced to the kit the way
the receiver records a DELIVERED event (a queued voucher fetch), and recharges submitted through the kit."""

from __future__ import annotations

import itertools

from partnerkit.crypto import load_cipher
from partnerkit.store import jobs, orders, vouchers
from partnerkit.store.db import transaction
from partnerkit.vouchers import unseal
from reconcile.recharges import submit

_numbers = itertools.count(1)


def mobile(last_digit: int) -> str:
    """A fresh 10-digit number ending in `last_digit` (the sandbox scripts a recharge's outcome by it)."""
    return f"97{next(_numbers):07d}{last_digit}"


def delivered_orders(world, *, count: int, quantity: int, product_id: int = 1, start: int = 0) -> list[int]:
    """`count` asynchronous orders, each DELIVERED at the provider with a fetch job queued locally."""
    client = world.client("setup", timeout=10)   # the test's own traffic: never cut short
    ids = []
    for n in range(start, start + count):
        # "stuck-": the sandbox holds the order PENDING until the test delivers it.
        created = client.create_order(product_id=product_id, denomination=100, quantity=quantity,
                                      ref=f"stuck-fault-{n}")
        world.control("POST", f"/orders/{created.id}/state", {"status": "DELIVERED"})
        with transaction(world.db) as conn:
            orders.apply(conn, created.id, "DELIVERED", now=world.now(), source="webhook")
            jobs.queue(conn, created.id, now=world.now(), expected_status="DELIVERED", expected_count=quantity)
        ids.append(created.id)
    return ids


def codes_stored(world, order_id: int) -> list[str]:
    """The voucher codes partnerkit holds for an order, decrypted, sorted."""
    cipher = load_cipher(world.config)
    return sorted(unseal(cipher, row)["card_number"] for row in vouchers.for_order(world.db, order_id))


def processing_recharges(world, *, digits: list[int]) -> list[int]:
    """Recharges submitted through the kit (outcome scripted by the last digit); their local ids."""
    client = world.client("setup", timeout=10)
    return [submit(world.config, world.db, client, mobile_number=mobile(d), operator_id=1, amount=199).local_id
            for d in digits]
