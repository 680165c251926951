"""Placing a voucher order: intent first, one Idempotency-Key for every send, never a second order.

`place_order` is what `partnerkit orders create` runs, and what a fork calls instead of the raw
`PartnerClient.create_order` (which records nothing). The order debits the wallet when it is
created, and its answer can be lost after that: so, as a recharge submit does
(`reconcile.recharges.submit`), it

1. validates locally (`OrderInputError`, nothing recorded or sent), checks that the API key is the
   account's the database serves (`PartnerClient.check_account`: `AccountMismatch`, nothing recorded or
   sent) and opens the voucher key (vouchers delivered with the answer must be storable);
2. commits an intent (`partnerkit.store.order_intents`, migration 10) with the Idempotency-Key and
   a client `ref` (a UUID unless given) before the request exists, marked sending in the same commit
   (a resumed intent is marked in the commit that checks it). The provider keeps a client's
   refs unique ("Duplicate reference code"): once an order carries the ref, no second one can. A
   commit the database refuses (a full disk) sends nothing and says so;
3. sends once and stores the answer (the order, its vouchers encrypted with the key file as it is
   then, not as it was before the send: `partnerkit.crypto.KeyFollower`; a voucher fetch for any
   still missing) with the intent PLACED, in one transaction. A definite refusal (a 4xx, no budget,
   a connection never made, nothing sent) leaves it REFUSED: nothing was placed. An answer the store
   cannot take (the database locked past its busy timeout) leaves the intent open (UNKNOWN), never
   REFUSED: the order exists, and its replay or the catch-up stores it;
4. on an ambiguous failure (`partnerkit.errors.is_ambiguous`: a timeout or reset after sending, a
   5xx, a 2xx that cannot be read, a local error once the request left) replays the same key once:
   "a retry with the same Idempotency-Key within 24 hours replays the original response". Still no
   answer: the intent is UNKNOWN, and the outcome names the key, the ref and the command that
   replays it. The order catch-up (`partnerkit.vouchers.catch_up_orders`) links it to the listed
   order carrying its ref.

A new order (no key, a key never recorded, or a REFUSED intent's) is refused before anything is sent
(`UnresolvedOrder`) while an earlier order of the same product, denomination, quantity and wallet
is unresolved, UNKNOWN or INTENT (being sent, or its process died while sending), from the last
`HOLD_WINDOW`: it may be placed already, and a second one debits the wallet twice. Not an INTENT
that was never sent (`never_sent`: never marked sending, its process gone; an older release that
committed the mark apart left one when a full disk failed it): nothing was placed for it. Its replay
command resolves it; `force=True` (`--force`) places another order deliberately. One an operator
closed (`close_intent`, `partnerkit orders close`: searched for, never placed) holds nothing back,
and its key is never sent again.

Given the key of a known intent, the same request is resumed with the intent's own ref; other
fields under that key are refused before anything is sent. A 2xx whose order is not the request's
(product, denomination or quantity differ: a key used for another order) raises `ReplayMismatch`.

The package is one module a concern, re-exported here (import from `partnerkit.ordering`):
`_request` (validation, the request, the outcome and the refusals), `_place` (the placing
procedure), `_answer` (what an answer, or its absence, settles) and `_close` (an open intent
closed by hand).
"""

from partnerkit.ordering._answer import held_elsewhere
from partnerkit.ordering._close import CloseOutcome, close_intent
from partnerkit.ordering._place import place_order
from partnerkit.ordering._request import (
    HOLD_HOURS, HOLD_WINDOW, HeldIntent, OrderInputError, OrderOutcome, OrderRequest, UnresolvedOrder, never_sent,
    new_ref, replay_command, validate_order,
)

__all__ = [
    "HOLD_HOURS",
    "HOLD_WINDOW",
    "CloseOutcome",
    "HeldIntent",
    "OrderInputError",
    "OrderOutcome",
    "OrderRequest",
    "UnresolvedOrder",
    "close_intent",
    "held_elsewhere",
    "never_sent",
    "new_ref",
    "place_order",
    "replay_command",
    "validate_order",
]
