"""reconcile.sync's page functions: the unchanged-record shortcut stores exactly what the worker's upsert stores."""

from __future__ import annotations

from datetime import datetime, timezone
from decimal import Decimal

from partnerkit.client._records import Recharge
from partnerkit.store import open_db
from partnerkit.store.recharges import upsert_from_provider
from reconcile.sync import store_recharge_page

NOW = datetime(2025, 1, 16, 1, 0, tzinfo=timezone.utc)
LATER = datetime(2025, 1, 16, 2, 0, tzinfo=timezone.utc)


def _record(rid: int, status: str, updated_at: str | None = "2025-01-15T10:00:05Z") -> Recharge:
    raw = {"id": rid, "reference_number": f"RCH{rid:06d}", "status": status, "mobile_number": "9800000000",
           "face": Decimal("100.00"), "discount": Decimal("2.00"), "payable": Decimal("98.00"), "currency": "INR",
           "created_at": "2025-01-15T10:00:00Z"}
    if updated_at is not None:
        raw["updated_at"] = updated_at
    return Recharge.from_payload(raw)


def _table(db) -> list[tuple]:
    return db.execute("SELECT * FROM recharges ORDER BY local_id").fetchall()


def test_page_stores_what_the_worker_upsert_stores(tmp_path):
    first = [_record(1, "SUCCESS"), _record(2, "PROCESSING"), _record(3, "SUCCESS"), _record(4, "FAILED", None)]
    second = [_record(1, "SUCCESS"),  # unchanged: skipped
              _record(2, "SUCCESS", "2025-01-15T10:09:00Z"),  # settled since: updated
              _record(3, "PROCESSING"),  # stale read of a final recharge: skipped
              _record(4, "FAILED", None),  # unchanged, no updated_at
              _record(5, "DELIVERED"),  # new (legacy status): inserted by the worker's upsert
              _record(5, "DELIVERED")]
    plain, paged = open_db(tmp_path / "plain.db"), open_db(tmp_path / "paged.db")
    for db in (plain, paged):
        upsert_from_provider(db, first, NOW)
    expected = upsert_from_provider(plain, second, LATER)
    seen, inserted = store_recharge_page(paged, second, LATER)
    assert seen == expected.seen_provider_ids == {1, 2, 3, 4, 5}
    assert inserted == expected.inserted == 1
    assert _table(paged) == _table(plain)
