"""`StandIn`: the part of `partnerkit.client.PartnerApi` that is not an endpoint, for test stand-in clients.

A stand-in answers the endpoints a test needs itself (records in memory, a page of its own); the jobs
also call `check_account()`, `with_budget()`, `leaving()`, `once()` and `budget.usage()` on every client,
unconditionally. A stand-in has them as a `PartnerClient(config)` without a database has them: no account
to check, its views are itself, and its budget is a real in-memory `Budget` that no stand-in call spends.
"""

from __future__ import annotations

from typing import Any

from partnerkit.store import open_db
from partnerkit.store.budget import Budget


# Made once, at import: a budget opened (and migrated) in the middle of a test would show its own statements
# to tests that record every statement a job runs (tests/reconcile/test_query_plans.py).
_BUDGET = Budget(open_db(":memory:"), "stand-in")


class StandIn:
    """Mix into a stand-in client: the non-endpoint interface every job relies on (see the module docstring)."""

    @property
    def budget(self) -> Budget:
        return _BUDGET

    def check_account(self) -> None:
        """Nothing to check: a stand-in serves no provider account."""

    def with_budget(self, purpose: str, *, wait: bool, keep_free: int = 0, own_cap: int | None = None,
                    max_wait: float | None = None) -> Any:
        return self

    def leaving(self, keep_free: int) -> Any:
        return self

    def once(self) -> Any:
        return self
