"""The hold on a new recharge while an earlier one of the same mobile number and amount is unresolved.

A submit killed while its request was in flight leaves its intent INTENT (UNKNOWN when its answer was
lost): the provider may have made the recharge. Whoever ran it saw no answer and runs the same command
again. A new Idempotency-Key is a new request: inside the provider's duplicate-guard window it meets a
409, and once the window has passed (its length is "not shown") it goes through, and the customer is
charged twice, each recharge matched to its own debit, so no report shows it. The document: "Resubmit
only after confirming that no matching recharge exists".

So `reconcile.recharges.submit` refuses a new recharge of the same mobile number and amount (the
scope of the provider's own guard, whatever the operator) while an intent of this store is INTENT or
UNKNOWN and was submitted within HOLD_WINDOW: `UnresolvedRecharge`, before anything is recorded or
sent, naming each such intent and the command that settles it, as `orders create` refuses a second
order (`partnerkit.ordering.UnresolvedOrder`). `force=True` (`--force`) submits another recharge
deliberately: one flag for both guards, the local one and the provider's (force=true), since a
deliberate second recharge of the number and amount has to pass both.

An open intent whose Idempotency-Key answered another request's recharge (`store.key_taken`: the key was used
first elsewhere, and the provider replayed that recharge's answer) holds nothing back: its request was answered,
and the answer says it was not made under that key. What is left to do is a new key, after checking
(`store.key_taken_advice`), which the hold would otherwise refuse; the provider's own duplicate guard still applies.
Nor does one an operator closed (`partnerkit recharges close`: searched for at the provider, not found, and said
never made): `store.held` and `open_ones_named` leave it out.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from partnerkit import errors, senders
from partnerkit.money import fmt
from partnerkit.ordering import HOLD_WINDOW as ORDER_HOLD_WINDOW
from partnerkit.store import Database
from partnerkit.store import recharges as store
from partnerkit.store.db import database_file
from partnerkit.timeutil import iso, parse_ts

# How long an open intent holds back a new submit of its number and amount, from its submit: the hold of an
# order intent, for the same reason. The provider replays a key for 24 hours: within them `recharges locate`
# settles the intent for sure (its search, or its key sent again), and the worker's recharge sync (every 15
# minutes) links a recharge it made long before. One still open past them was most likely never made;
# `partnerkit status` keeps naming it.
HOLD_WINDOW = ORDER_HOLD_WINDOW


@dataclass(frozen=True)
class HeldRecharge:
    """An open intent that holds back a new submit of the same mobile number and amount."""

    local_id: int
    idempotency_key: str | None
    client_reference: str | None
    state: str  # UNKNOWN (its answer was lost) or INTENT (being sent, or its process died while sending)
    age: timedelta  # since its submit
    # Until when `recharges locate` sends its key again by itself if the provider shows no such recharge
    # (reconcile.locate.REPLAY_WINDOW after the submit); None once that is over.
    replays_until: datetime | None
    # An INTENT's submit (partnerkit.senders): still running (True), gone (False: killed while sending), or not
    # known (None: a row of an older release, another host's lock not visible, an UNKNOWN row); and who it was.
    sender_running: bool | None = None
    sender: str | None = None
    # Its answer named a recharge id another local row holds (`store.held_elsewhere`): locate only searches it.
    held_by: store.HeldId | None = None

    @property
    def locate_command(self) -> str:
        """The command that settles it."""
        return f"partnerkit recharges locate --local-id {self.local_id}"

    def describe(self) -> str:
        how = ("its answer was lost" if self.state == "UNKNOWN" else
               senders.sending("recharges submit", self.sender_running, self.sender))
        if self.held_by is not None:
            how = (f"its answer named {self.held_by.answered}, which local recharge #{self.held_by.holder} already "
                   "holds")
            return (f"local recharge #{self.local_id} is {self.state}, submitted {_age(self.age)} ago and {how} "
                    f"(Idempotency-Key {self.idempotency_key}, client_reference {self.client_reference}); "
                    f"{self.held_by.compare}: {store.HELD_ADVICE}; `recharges locate` only searches for it (its key "
                    "would be answered with the same id)")
        if self.replays_until is not None:
            then = (f"if the provider shows none, until {iso(self.replays_until)} it also sends it again under its "
                    "own key, which completes that request and never makes a second recharge")
        else:
            then = ("if the provider shows none, sending it again under its own key is a decision (`--replay`: the "
                    "same key never makes a second recharge)")
        wait = "once that command has ended, if it is still open, " if self.sender_running else ""
        return (f"local recharge #{self.local_id} is {self.state}, submitted {_age(self.age)} ago and {how} "
                f"(Idempotency-Key {self.idempotency_key}, client_reference {self.client_reference}); {wait}settle "
                f"it with `{self.locate_command}`: it searches the provider and links what it finds; {then}")


class UnresolvedRecharge(errors.PartnerKitError):
    """A new recharge refused before anything is recorded or sent: an earlier one of the same mobile
    number and amount has an unresolved outcome (INTENT or UNKNOWN) from the last `HOLD_WINDOW`, and
    may already have been made.

    `held` names each such intent (oldest first: local id, key, client_reference, state, age). Settle it
    (`reconcile.locate.locate(..., local_id=exc.held[0].local_id)`, `partnerkit recharges locate --local-id
    N`), let the recharge sync link it, or pass `force=True` (`--force`) when this is deliberately another
    recharge of the number and amount."""

    SHOWN = 3  # intents named in the message; `held` has them all

    def __init__(self, mobile_number: str, amount: Decimal, held: list[HeldRecharge]) -> None:
        self.mobile_number, self.amount, self.held = mobile_number, amount, held
        more = f"; and {len(held) - self.SHOWN} more (`partnerkit status`)" if len(held) > self.SHOWN else ""
        super().__init__(
            f"not sent: a recharge of {fmt(amount)} to {mobile_number} may already have been made: "
            f"{'; '.join(h.describe() for h in held[:self.SHOWN])}{more}. If this is deliberately another "
            "recharge of the number and amount, add --force (force=True), which also passes the provider's "
            "duplicate guard")


def refuse_if_held(db: Database | sqlite3.Connection, *, mobile_number: str, amount: Decimal,
                   now: datetime) -> None:
    """Raise UnresolvedRecharge when an open intent of `mobile_number` and `amount` was submitted within
    HOLD_WINDOW of `now` (not one whose key answered another recharge: module docstring). Asked inside the
    transaction that records the new intent."""
    held = [row for row in store.held(db, mobile_number=mobile_number, amount=amount, since=now - HOLD_WINDOW)
            if store.key_taken(row["last_error"]) is None]  # answered: not made under its key (module docstring)
    if held:
        # Asked inside the transaction that holds the write lock: no held row changes meanwhile, so a sender
        # whose lock is free has not stored its answer and never will.
        database = database_file(db)
        raise UnresolvedRecharge(mobile_number, amount, [held_recharge(row, now, database) for row in held])


def held_recharge(row: dict, now: datetime, database: str | None = None) -> HeldRecharge:
    """An open intent's row as a HeldRecharge, its age and replay window as of `now`, and whether its submit
    still runs (the lock it holds on `database`'s senders file: partnerkit.senders)."""
    from reconcile.locate import REPLAY_WINDOW  # locate builds on reconcile.recharges, which builds on this

    submitted = parse_ts(row["submitted_at"]) or now
    until = submitted + REPLAY_WINDOW
    held_by = store.held_elsewhere(row.get("last_error"))
    return HeldRecharge(row["local_id"], row["idempotency_key"], row["client_reference"], row["status"],
                        now - submitted, until if now < until and held_by is None else None,
                        senders.row_running(database, row), row.get("sender"), held_by)


def open_ones_named(db: Database, *, mobile_number: str, amount: Decimal, besides: int, now: datetime) -> str:
    """For a 409 of the provider's duplicate guard: the open intents of the number and amount (any age, newest
    first; not `besides`, the refused submit's own) as a sentence ending in '. ', or '' (none, or the store
    could not be read: the 409 is what the caller must hear)."""
    try:
        rows = [r for r in store.open_intents(db, mobile_number=mobile_number, amount=amount)
                if r["local_id"] != besides and store.key_taken(r["last_error"]) is None
                and store.closure(db, r) is None]  # closed by hand: checked with the provider, never made
        database = database_file(db)
        held = [held_recharge(row, now, database) for row in rows]
        # Read outside a transaction: a submit whose lock is free now may have stored its answer since the rows
        # were read (it frees its lock after): such a row is asked again, and left out once it is answered.
        held = [h for h in held if h.sender_running is not False
                or (store.get(db, h.local_id) or {}).get("status") == "INTENT"]
    except (errors.StorageError, sqlite3.Error):
        return ""
    if not held:
        return ""
    shown = "; ".join(h.describe() for h in held[:UnresolvedRecharge.SHOWN])
    more = f"; and {len(held) - UnresolvedRecharge.SHOWN} more" if len(held) > UnresolvedRecharge.SHOWN else ""
    return (f"It may be one of this store's whose outcome is not known: {shown}{more}. Settle "
            f"{'it' if len(held) == 1 else 'them'} first. ")


def _age(age: timedelta) -> str:
    seconds = max(0, int(age.total_seconds()))
    if seconds < 120:
        return f"{seconds} s"
    return f"{seconds // 60} min" if seconds < 7200 else f"{seconds // 3600} h {seconds % 3600 // 60} min"
