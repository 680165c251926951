"""Store helpers for reconciliation tests (a uniquely named module, safe beside other conftests): a day of recharges, orders and transactions, inserted
through the owners' store functions (never raw SQL)."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal
from itertools import count

from partnerkit.store import orders as order_store
from partnerkit.store import recharges as recharge_store
from partnerkit.store import transaction
from partnerkit.store import vouchers as voucher_store
from partnerkit.store.ledger import ROW_COLUMNS, quarantine, record_sync, store_transactions
from partnerkit.store.ledger import get_transaction as ledger_get_transaction
from partnerkit.timeutil import iso
from reconcile.ledger_fast import map_page

DAY = date(2025, 3, 14)


def stored_record(db, ident: str) -> tuple[tuple, str | None, str | None]:
    """(ROW_COLUMNS values, shape, raw) of a stored transaction, from the store's one reader of it
    (partnerkit.store.ledger.get_transaction): what reconcile.ledger_fast.record_json takes."""
    stored = ledger_get_transaction(db, ident)
    assert stored is not None, f"transaction {ident} is not stored"
    return tuple(stored[c] for c in ROW_COLUMNS), stored["shape"], stored["raw"]


def at(hour: int, minute: int = 0, day: date = DAY) -> datetime:
    """A UTC moment on the test day."""
    return datetime(day.year, day.month, day.day, hour, minute, tzinfo=timezone.utc)


@dataclass
class Ledger:
    """Builds a day in the store: recharges (partner or provider origin), orders, vouchers, transactions."""

    db: object
    ids: count = field(default_factory=lambda: count(1000))
    balance: dict = field(default_factory=dict)

    def recharge(self, status: str = "SUCCESS", *, payable: str = "98.00", face: str = "100.00",
                 origin: str = "partner", hour: int = 10, ref: str | None = None, day: date = DAY,
                 currency: str = "INR", client_reference: str | None = None) -> dict:
        """A recharge as partnerkit knows it; returns the provider record (`client_reference` as the provider
        lists it, for origin "provider")."""
        rid = next(self.ids)
        record = {"id": rid, "reference_number": ref or f"RCH{rid}", "status": status, "mobile_number": "9800000000",
                  "face": Decimal(face), "discount": Decimal(face) - Decimal(payable), "payable": Decimal(payable),
                  "currency": currency, "created_at": at(hour, day=day).isoformat(), "client_reference": client_reference}
        if origin == "partner":
            local = recharge_store.record_intent(
                self.db, idempotency_key=f"key-{rid}-abcdef", mobile_number="9800000000", operator_id=1,
                amount=Decimal(face), client_reference=f"cr-{rid}", submitted_at=at(hour, day=day))
            recharge_store.record_response(self.db, local, record, status=status, seen_at=at(hour, day=day))
        else:
            recharge_store.upsert_from_provider(self.db, [record], at(hour, day=day))
        return record

    def intent(self, *, hour: int = 10, face: str = "50.00") -> str:
        """A submit that never got an answer; returns its idempotency key."""
        key = f"key-intent-{next(self.ids)}"
        recharge_store.record_intent(self.db, idempotency_key=key, mobile_number="9811111111", operator_id=1,
                                     amount=Decimal(face), client_reference="cr-intent", submitted_at=at(hour))
        return key

    def order(self, status: str = "DELIVERED", *, amount: str = "500.00", quantity: int = 1, currency: str = "INR",
              vouchers: int | None = None, delivered_quantity: int | None = None, hour: int = 11,
              transaction_id: int | None = None) -> int:
        """An order with its stored vouchers (default: all of them when DELIVERED)."""
        oid = next(self.ids)
        with transaction(self.db) as conn:
            order_store.apply(conn, oid, status, now=at(hour), source="test", delivered_quantity=delivered_quantity,
                              currency=currency, quantity=quantity, amount_cents=int(Decimal(amount) * 100),
                              transaction_id=transaction_id if transaction_id is not None else oid + 500_000,
                              placed_at=at(hour).isoformat().replace("+00:00", "Z"))
            n = (quantity if status == "DELIVERED" else 0) if vouchers is None else vouchers
            voucher_store.add(conn, oid, [voucher_store.SealedVoucher(f"fp{oid}-{i}", b"x", None, None, None, None)
                                          for i in range(n)], now=at(hour))
        return oid

    def tx(self, amount: str, *, hour: int = 10, minute: int = 1, day: date = DAY, **fields) -> str:
        """A provider transaction record (signed amount), mapped and stored; returns its id."""
        tid = str(fields.pop("id", next(self.ids) + 500_000))
        currency = fields.get("currency", "INR")
        record = {"id": tid, "amount": amount, "created_at": at(hour, minute, day).isoformat(), "currency": currency,
                  **fields}
        page = map_page([record])
        assert not page.bad, page.bad
        store_transactions(self.db, page.runs, page.shapes, iso(at(23)))
        return tid

    def debit_recharge(self, rc: dict, amount: str | None = None, **kw) -> str:
        """The wallet debit of a recharge (by recharge_id and reference_number)."""
        return self.tx(f"-{amount or rc['payable']}", type="RECHARGE", recharge_id=rc["id"],
                       reference_number=rc["reference_number"], **kw)

    def credit_recharge(self, rc: dict, amount: str | None = None, **kw) -> str:
        """The credit back of a recharge."""
        return self.tx(str(amount or rc["payable"]), type="REFUND", recharge_id=rc["id"],
                       reference_number=rc["reference_number"], **kw)

    def debit_order(self, oid: int, amount: str, currency: str = "INR", **kw) -> str:
        """The ORDER transaction an order names by its transaction_id."""
        return self.tx(f"-{amount}", id=str(oid + 500_000), type="ORDER", order_id=oid, currency=currency, **kw)

    def synced(self, seen: list[dict], *, day: date = DAY, when: datetime | None = None) -> None:
        """Record a complete recharge sync of `day` that listed `seen`."""
        when = when or datetime(day.year, day.month, day.day + 1, 1, tzinfo=timezone.utc)
        stamp = when.isoformat().replace("+00:00", "Z")
        recharge_store.mark_recharges_seen(self.db, [r["id"] for r in seen], stamp)
        record_sync(self.db, "recharges", from_day=day.isoformat(), to_day=day.isoformat(), started_at=stamp,
                    count=len(seen), days=[day.isoformat()], advance_to=day.isoformat())

    def read_in_full(self, *, day: date = DAY, when: datetime | None = None) -> None:
        """Record that a sync read the day's recharges and transactions in full, by default as the 15-minute sync
        does before the day ends (so no unknown_to_provider), which `partnerkit report` needs for a day it
        matches; `when` the read began (after the day ended: the store vouches for the whole day)."""
        stamp = iso(when or at(23, 50, day))
        for entity in ("recharges", "transactions"):
            record_sync(self.db, entity, from_day=day.isoformat(), to_day=day.isoformat(), started_at=stamp, count=0,
                        days=[day.isoformat()], advance_to=None)

    def nightly_read(self, *seen: dict, day: date = DAY, when: datetime | None = None) -> None:
        """Record the nightly run's read of `day`, begun after it ended (01:05 the next day unless `when`): its
        recharges, which listed `seen` (any other is unknown_to_provider), and its transactions, in full."""
        when = when or datetime.combine(day + timedelta(days=1), time(1, 5), tzinfo=timezone.utc)
        self.synced(list(seen), day=day, when=when)
        self.read_in_full(day=day, when=when)

    def quarantine(self, reason: str = "no amount") -> None:
        """A record that fit no alias."""
        quarantine(self.db, [("k" + str(next(self.ids)), reason, "{}", DAY.isoformat())], at(23).isoformat())


@contextmanager
def sandbox_day(tmp_path, start: datetime, **client_options):
    """The sandbox (real HTTP, no background thread) with its clock at `start`, and partnerkit pointed at
    it: yields (server, config, db, client); `client_options` go to PartnerClient (e.g. `retry`)."""
    from partnerkit.client import PartnerClient
    from partnerkit.config import load_config
    from partnerkit.store import open_db
    from sandbox.settings import SandboxSettings
    from tests.sandbox_serving import serve_sandbox

    with serve_sandbox(SandboxSettings(start=start, speed=1.0), background=False) as server:
        alpha = server.clients[0]
        config = load_config(environ={
            "PARTNERKIT_DB": str(tmp_path / "pk.db"), "PARTNERKIT_API_BASE_URL": server.base_url,
            "PARTNERKIT_API_KEY": alpha.key, "PARTNERKIT_API_SECRET": alpha.secret,
            "PARTNERKIT_REPORT_DIR": str(tmp_path / "reports")})
        db = open_db(config.db_path)
        try:
            yield server, config, db, PartnerClient(config, db, **client_options)
        finally:
            db.conn.close()
