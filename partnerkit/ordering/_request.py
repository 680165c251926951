"""An order's request and what placing it answers: validation, the hold window, the outcome and its errors.

`validate_order` checks the document's body rules (`OrderInputError`, nothing recorded or sent);
`OrderRequest` is a validated body, `OrderOutcome` what placing it established, `UnresolvedOrder`
(with its `HeldIntent`s) the refusal of a new order while an earlier one is unresolved;
`replay_command` is the line that resumes an intent under its own key and ref.
"""

from __future__ import annotations

import shlex
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from partnerkit import errors, senders
from partnerkit.money import MoneyError, fmt, from_cents, to_decimal
from partnerkit.timeutil import parse_ts

# How long an unresolved intent holds back a new order of the same fields, from its last send. The
# provider replays a key for 24 hours ("Idempotency record lifetime"): within them the replay command
# answers what happened, and the worker's order catch-up (every 5 minutes) links a placed order long
# before. One still open past them was most likely never placed; `partnerkit status` keeps naming it.
HOLD_HOURS = 24
HOLD_WINDOW = timedelta(hours=HOLD_HOURS)


class OrderInputError(errors.PartnerKitError, ValueError):
    """An order refused locally, before anything is recorded or sent."""


@dataclass(frozen=True)
class HeldIntent:
    """An unresolved intent that holds back a new order of the same fields."""

    intent_id: int
    idempotency_key: str
    ref: str
    state: str  # UNKNOWN (its answer was lost) or INTENT (being sent, or its process died while sending)
    age: timedelta  # since its last send (or its recording, if never sent)
    replay_command: str
    # An INTENT's sender (partnerkit.senders): still running (True), gone (False: killed while sending), or not
    # known (None: a row of an older release, another host's lock not visible, an UNKNOWN intent); and who it was.
    sender_running: bool | None = None
    sender: str | None = None
    # False for an INTENT never marked sending (`sent_at` NULL) whose sender may still send it: `age` is then since
    # its recording. One whose sender is gone was never sent and holds nothing back (`never_sent`).
    sent: bool = True

    def describe(self) -> str:
        wait = "once that command has ended, if it is still open, " if self.sender_running else ""
        if self.sent:
            how = ("its answer was lost" if self.state == "UNKNOWN" else
                   senders.sending("orders create", self.sender_running, self.sender))
            said = f"sent {_age(self.age)} ago and {how}"
        else:
            named = f" ({self.sender})" if self.sender else ""
            how = (f"its `orders create`{named} is still running and may send it any moment" if self.sender_running
                   else "another `orders create` may be about to send it, or its process stopped before sending it")
            said = f"recorded {_age(self.age)} ago and not sent yet: {how}"
        return (f"order intent #{self.intent_id} is {self.state}, {said} (Idempotency-Key {self.idempotency_key}, "
                f"ref {self.ref}); {wait}replay it with `{self.replay_command}`")


def never_sent(intent: dict, running: bool | None, now: datetime) -> bool:
    """Whether an open intent was never sent, and never will be unless a person replays its key.

    Every send is marked (`sent_at`) in a commit before it (`order_intents.mark_sending`), so an INTENT whose
    `sent_at` is NULL was never sent: a release that committed the intent and that mark apart left one when the
    mark failed (a full disk) or its process died between the two. Never to be sent once the process that recorded
    it is gone: its sender's lock is free (`running` False, partnerkit.senders: the lock is held from before the
    intent is recorded until the send is over), or, for a row with no lock to ask (`running` None), it was recorded
    longer ago than a send can wait (INTENT_ABANDONED_AFTER, `partnerkit status`'s rule for such rows). Its
    replay (`--idempotency-key`) marks it and sends it then: once."""
    from partnerkit.status._facts import INTENT_ABANDONED_AFTER  # status reads this package

    if intent["state"] != "INTENT" or intent["sent_at"] is not None or running is True:
        return False
    if running is False:
        return True
    recorded = parse_ts(intent["created_at"])
    return recorded is not None and now - recorded >= INTENT_ABANDONED_AFTER


class UnresolvedOrder(errors.PartnerKitError):
    """A new order refused before anything is recorded or sent: an earlier order of the same product,
    denomination, quantity and wallet has an unresolved outcome from the last `HOLD_WINDOW`, and may
    already be placed.

    `held` names each such intent (oldest first: key, ref, state, age, the command that replays it).
    Replay it (`place_order(..., idempotency_key=exc.held[0].idempotency_key)`: never a second order),
    let the order sync link it, or pass `force=True` (`--force`) when this is deliberately another order."""

    SHOWN = 3  # intents named in the message; `held` has them all

    def __init__(self, request: "OrderRequest", held: list[HeldIntent]) -> None:
        self.request, self.held = request, held
        more = f"; and {len(held) - self.SHOWN} more (`partnerkit status`)" if len(held) > self.SHOWN else ""
        super().__init__(
            f"not sent: an order of {request.describe()} may already be placed: "
            f"{'; '.join(h.describe() for h in held[:self.SHOWN])}{more}. The same key never orders twice, and "
            "`partnerkit orders sync` links the order if it was placed. If this is deliberately another order, "
            "add --force (force=True)")


@dataclass(frozen=True)
class OrderRequest:
    """A validated order body (the document's field names; `ref` is chosen with the intent)."""

    product_id: int
    denomination: Decimal
    quantity: int
    wallet_id: int | None = None
    email: str | None = None

    def describe(self) -> str:
        return f"product {self.product_id}, {self.quantity} x {fmt(self.denomination)}"


@dataclass
class OrderOutcome:
    """What placing (or resuming) one order established.

    `state` is the intent's: PLACED (`order_id`, `status`, `amount` are the order's) or UNKNOWN (the
    answer was lost: replay `idempotency_key`, as `replay_command` says; or it came but could not be
    stored: `order_id`, `amount` and `created` are the answer's). A refusal is raised."""

    intent_id: int
    state: str
    idempotency_key: str
    ref: str
    request: OrderRequest
    order_id: int | None = None
    status: str | None = None
    amount: Decimal | None = None
    vouchers_stored: int = 0  # stored for the order in all, this call's and earlier ones
    resumed: bool = False  # the key was a known intent's: a replay, never a second order
    message: str = ""
    created: Any = None  # the client's OrderCreated, when the provider answered
    replay_command: str = ""


def _positive_int(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise OrderInputError(f"{name} must be a whole number greater than zero, got {value!r}")
    return value


def validate_order(*, product_id: Any, denomination: Any, quantity: Any, wallet_id: Any = None,
                   email: str | None = None) -> OrderRequest:
    """Check an order against the document's body rules; raise OrderInputError naming the field."""
    try:
        amount = to_decimal(denomination, field="denomination", strict=True, typed=True)
    except MoneyError as exc:
        raise OrderInputError(f"denomination: {exc}") from None
    if amount <= 0:  # "Greater than 0.00"
        raise OrderInputError(f"denomination must be greater than 0, got {denomination}")
    if email is not None and (not isinstance(email, str) or not email.strip()):
        raise OrderInputError("email must be an e-mail address")
    return OrderRequest(_positive_int("product_id", product_id), amount, _positive_int("quantity", quantity),
                        None if wallet_id is None else _positive_int("wallet_id", wallet_id), email)


def new_ref() -> str:
    """A client ref for an order: a UUID, as the provider generates one when none is sent."""
    return str(uuid.uuid4())


def replay_command(intent: dict) -> str:
    """The `partnerkit orders create` line that resumes an intent under its own key and ref."""
    parts = ["partnerkit", "orders", "create", "--product-id", str(intent["product_id"]),
             "--denomination", fmt(from_cents(intent["denomination_cents"])) or "",
             "--quantity", str(intent["quantity"]), "--ref", intent["ref"]]
    if intent["email"]:
        parts += ["--email", intent["email"]]
    return shlex.join(parts + ["--idempotency-key", intent["idempotency_key"]])


def _age(age: timedelta) -> str:
    seconds = max(0, int(age.total_seconds()))
    if seconds < 120:
        return f"{seconds} s"
    return f"{seconds // 60} min" if seconds < 7200 else f"{seconds // 3600} h {seconds % 3600 // 60} min"


def _key(idempotency_key: str | None) -> str:
    from partnerkit.client import check_idempotency_key

    try:
        return check_idempotency_key(idempotency_key)
    except ValueError as exc:
        raise OrderInputError(str(exc)) from None


def _intent_request(intent: dict) -> OrderRequest:
    return OrderRequest(intent["product_id"], from_cents(intent["denomination_cents"]), intent["quantity"],  # type: ignore[arg-type]
                        intent["wallet_id"], intent["email"])


def _name(intent: dict) -> str:
    placed = f", order {intent['order_id']}" if intent["order_id"] else ""
    return f"order intent #{intent['id']} ({_intent_request(intent).describe()}, ref {intent['ref']}, " \
           f"{intent['state']}{placed})"


def _resume_check(intent: dict, request: OrderRequest, ref: str | None) -> None:
    """The key of a known intent carries its request: another one under it is refused (nothing sent)."""
    stored = _intent_request(intent)
    differ = [name for name in ("product_id", "denomination", "quantity") if getattr(request, name) != getattr(stored, name)]
    differ += [name for name, given, kept in (("wallet_id", request.wallet_id, stored.wallet_id),
                                              ("email", request.email, stored.email), ("ref", ref, intent["ref"]))
               if given is not None and given != kept]
    if differ:
        raise OrderInputError(f"Idempotency-Key {intent['idempotency_key']} is {_name(intent)}, not this request "
                              f"({', '.join(differ)} differ): nothing was sent; to place another order, run it "
                              "without --idempotency-key (idempotency_key)")
