"""The persistent request budget shared by every process using one database and API key.

Limits (the document's Limits table): class "general", 1000 requests per hour per key, shared
by every endpoint (recharges, order reads, catalog, webhooks, and order creation: `ALSO_SPENDS`);
class "order_create", 100 per minute for POST /api/v1/orders, which also spends one of "general".

The window is SLIDING (a log of send times): in any window-long interval we send at most the
limit, which stays inside the provider's limit whether the provider counts fixed or sliding
windows. Every acquisition runs inside BEGIN IMMEDIATE, so two processes can never both take
the last request. The provider's X-RateLimit-* headers can only tighten the local view, and a
429 blocks the class for everybody until Retry-After has passed (without one, until
X-RateLimit-Reset; see `seconds_until_reset`), never longer than one window of the class
(`within_window`: an hour for general, a minute for order_create).

A caller may also cap its own purpose (`acquire(own_cap=N)`: at most N of the window's requests
under its purpose label), checked in the same transaction, so two processes can never both take
the purpose's last one either. The recharge poller's share of the hour is such a cap.

The provider's last 401 to the key is kept too (`refused`, `refusal`), until a call with the key is
answered 2xx (`accepted`): `partnerkit status` and /metrics show it, and the worker pauses its jobs
that call the provider for a minute after it (`refusal_pause_until`; not on one dated ahead of its clock,
met while the clock ran ahead: `refusal_dated_ahead`). A 401 that blames the request's timestamp
(`refusal_names_the_clock`) points at this host's clock before the key.

What a person needs to judge a block is kept beside it, in the shared `meta` table (one row per key,
class and note): why the class was blocked (the 429's call and Retry-After), and who lifted a block
by hand (`unblock`: `partnerkit budget unblock`, once the provider confirms it is back; the next 429
blocks again). So are the signs of another consumer of the key (`others`): the provider's
X-RateLimit-Remaining persistently lower than this database's own count of requests leaves.

The budget is one module a concern, all re-exported here (import from `partnerkit.store.budget`):
`_window` (the classes, their limits and the pure rules of the window: how long to wait, how long a
429 blocks), `_shares` (what the long walks leave to the voucher fetches and the poller),
`_budget` (the `Budget` class: taking requests, recording the provider's answers), `_notes` (its notes
in `meta`), `_others` (the signs of another consumer of the key) and `_refusals` (the provider's 401s).
"""

from partnerkit.store.budget._budget import Budget
from partnerkit.store.budget._others import OTHERS_ANSWERS, OTHERS_SPAN_S, others_tolerance, signs_after
from partnerkit.store.budget._refusals import AHEAD_TOLERANCE_S as REFUSAL_AHEAD_TOLERANCE_S
from partnerkit.store.budget._refusals import REFUSAL_PAUSE_S
from partnerkit.store.budget._refusals import dated_ahead as refusal_dated_ahead
from partnerkit.store.budget._refusals import names_the_clock as refusal_names_the_clock
from partnerkit.store.budget._refusals import pause_until as refusal_pause_until
from partnerkit.store.budget._shares import background_reserve, poller_cap, poller_reserve, walk_reserve
from partnerkit.store.budget._window import (ALSO_SPENDS, DEFAULT_BLOCK_S, GENERAL, ORDER_CREATE, Limit, ProviderView,
                                             Ticket, after_429, block_seconds, duration, key_hash,
                                             seconds_until_reset, wait_needed, within_window)

__all__ = [
    "ALSO_SPENDS",
    "DEFAULT_BLOCK_S",
    "GENERAL",
    "ORDER_CREATE",
    "OTHERS_ANSWERS",
    "OTHERS_SPAN_S",
    "REFUSAL_AHEAD_TOLERANCE_S",
    "REFUSAL_PAUSE_S",
    "Budget",
    "Limit",
    "ProviderView",
    "Ticket",
    "after_429",
    "background_reserve",
    "block_seconds",
    "duration",
    "key_hash",
    "others_tolerance",
    "poller_cap",
    "poller_reserve",
    "refusal_dated_ahead",
    "refusal_names_the_clock",
    "refusal_pause_until",
    "seconds_until_reset",
    "signs_after",
    "wait_needed",
    "walk_reserve",
    "within_window",
]
