"""Match one UTC day: recharges and orders against the wallet's transactions, drifts recorded.

The rules (DESIGN.md "Worker and reconciliation"; the document's sections in brackets):

- A recharge is matched against **payable**, never face ["Reconcile against payable, not face"].
  SUCCESS (legacy DELIVERED / RECHARGED) and PROCESSING are spend: exactly one debit of payable,
  no credit. FAILED and REVERSED show the debit and its credit back, net zero ["FAILED and
  REVERSED recharges are credited back and are not spend"].
- An order matches the ORDER transaction named by its transaction_id, for its amount; FAILED and
  CANCELLED must be refunded ["Order > States": Refunded]. A wallet in another currency than the
  order is a conversion ["wallet auto-selection ... applies forex conversion"]: matched by the
  link and listed as a conversion, never an amount_mismatch.
- Every transaction of the day is linked to a recharge or order, or is a wallet movement
  (top-up, conversion); anything else is an orphan. balance_after must chain by the amounts.

The SQL lives in partnerkit.store.matching; this module only wires a day to it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any

from partnerkit.money import from_cents
from partnerkit.store import Database, transaction
from partnerkit.store import matching
from partnerkit.timeutil import iso, utcnow

# Transaction types that move the wallet without a recharge or order behind them; never orphans.
WALLET_TYPES = ("TOPUP", "TOP_UP", "DEPOSIT", "FUNDING", "CREDIT_TOPUP", "CONVERSION", "FX", "FOREX",
                "FX_CONVERSION", "FX_FEE", "CONVERSION_FEE", "OPENING_BALANCE")
# Recommended polling: "Beyond 30 min: ... escalate to support with reference_number".
STUCK_AFTER = timedelta(minutes=30)


@dataclass(frozen=True)
class MatchResult:
    """What matching one day found: totals for the report and the drift ids detected."""

    day: date
    matched_at: datetime
    recharges_total: int
    orders_total: int
    transactions_total: int
    drifted: int
    unmatched: int
    recharge_status: dict[str, int]
    order_status: dict[str, int]
    spend: dict[str, Decimal]
    refunds: dict[str, Decimal]
    spend_by_hour: dict[str, list[Decimal]]
    conversions: list[dict[str, Any]]
    detected_ids: list[str]
    changes: dict[str, int] = field(default_factory=dict)

    @property
    def matched(self) -> int:
        """Recharges and orders of the day with no drift."""
        return self.recharges_total + self.orders_total - self.drifted


def day_bounds(day: date) -> tuple[str, str]:
    """The day as a half-open ISO range [start, end) comparable with stored UTC timestamps."""
    return f"{day.isoformat()}T00:00:00", f"{(day + timedelta(days=1)).isoformat()}T00:00:00"


def _result(day: date, now: datetime, raw: dict[str, Any], changes: dict[str, int]) -> MatchResult:
    spend: dict[str, Decimal] = {}
    refunds: dict[str, Decimal] = {}
    hours: dict[str, list[Decimal]] = {}
    cents: dict[str, list[int]] = {}
    for t in raw["transactions"]:  # one row per (currency, hour): at most 24 per currency
        if t["counted"]:
            totals = cents.setdefault(t["currency"], [0, 0])
            totals[0] -= t["debit_cents"]
            totals[1] += t["credit_cents"]
            hourly = hours.setdefault(t["currency"], [Decimal("0.00")] * 24)
            if t["debit_cents"]:
                hourly[t["hour"]] = from_cents(-t["debit_cents"])
    for currency, (debits, credits) in cents.items():
        spend[currency], refunds[currency] = from_cents(debits), from_cents(credits)
    conversions = [{"order_id": c["order_id"], "transaction_id": c["transaction_id"],
                    "order_currency": c["order_currency"], "order_amount": from_cents(c["order_amount_cents"]),
                    "wallet_currency": c["wallet_currency"], "debited": from_cents(c["debited_cents"])}
                   for c in raw["conversions"]]
    return MatchResult(
        day=day, matched_at=now, recharges_total=raw["recharges_total"], orders_total=raw["orders_total"],
        transactions_total=sum(t["n"] for t in raw["transactions"]), drifted=raw["drifted"],
        unmatched=raw["unmatched"], recharge_status=raw["recharge_status"], order_status=raw["order_status"],
        spend=spend, refunds=refunds, spend_by_hour=hours, conversions=conversions,
        detected_ids=raw["detected_ids"], changes=changes,
    )


def match_day(db: Database, day: date, *, now: datetime | None = None,
              wallet_types: tuple[str, ...] = WALLET_TYPES) -> MatchResult:
    """Run every rule over one UTC day in one transaction; record drifts; return the totals."""
    now = (now or utcnow()).replace(microsecond=0)
    start, end = day_bounds(day)
    params = {"start": start, "end": end, "day": day.isoformat(), "now": iso(now),
              "stuck_before": iso(now - STUCK_AFTER)}
    with transaction(db) as conn:
        try:
            matching.build(conn, params, wallet_types)
            changes = matching.apply_candidates(conn, day=day.isoformat(), now=iso(now))
            raw = matching.day_summary(conn, params, wallet_types)
        finally:
            matching.drop(conn)
    return _result(day, now, raw, changes)
