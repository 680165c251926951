"""A drift kind is named in partnerkit.store.drifts (KINDS, COUNT_KINDS) and in the schema's CHECK on
drifts.kind; the two must agree, and the count-or-money rule is COUNT_KINDS alone, for a drift recorded one
at a time (open_drift) and for a day's drifts merged set-based (merge_found)."""

from __future__ import annotations

import re

import pytest

from partnerkit.store import drifts
from partnerkit.store.db import transaction

AT = "2026-11-22T10:00:00Z"


def _checked_kinds(db) -> set[str]:
    [(create,)] = db.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'drifts'")
    allowed = re.search(r"kind IN \(([^)]*)\)", create).group(1)
    return set(re.findall(r"'(\w+)'", allowed))


def test_the_schema_allows_exactly_the_kinds_the_code_names(db):
    checked = _checked_kinds(db)
    assert not set(drifts.KINDS) - checked, (
        f"drift kinds {sorted(set(drifts.KINDS) - checked)} are in drifts.KINDS but not in the CHECK on drifts.kind: "
        "add a migration rebuilding the table with REBUILD = True (docs/internals.md, 'Extending')")
    assert not checked - set(drifts.KINDS), f"the CHECK allows {sorted(checked - set(drifts.KINDS))}, KINDS lacks it"
    assert set(drifts.COUNT_KINDS) <= set(drifts.KINDS)


def _merged(db, kind: str, reference: str) -> str:
    with transaction(db) as conn:
        conn.execute("CREATE TEMP TABLE m_found (id, kind, subject, reference, expected_cents, actual_cents, currency,"
                     " detail)")
        ident = drifts.drift_id(kind, "order", reference)
        conn.execute("INSERT INTO m_found VALUES (?, ?, 'order', ?, 2, 3, NULL, '')", (ident, kind, reference))
        drifts.merge_found(conn, day="2026-11-22", now=AT)
        conn.execute("DROP TABLE temp.m_found")
    return db.execute("SELECT measure FROM drifts WHERE id = ?", (ident,)).fetchone()[0]


def _opened(db, kind: str, reference: str) -> str:
    ident = drifts.open_drift(db, kind=kind, subject="order", reference=reference, expected=2, actual=3,
                              currency=None, detected_at=AT)
    return db.execute("SELECT measure FROM drifts WHERE id = ?", (ident,)).fetchone()[0]


@pytest.mark.parametrize("count_kinds", [drifts.COUNT_KINDS, ("voucher_shortfall", "orphan_transaction")],
                         ids=["as shipped", "a second count kind"])
def test_open_drift_and_merge_found_measure_every_kind_alike(db, monkeypatch, count_kinds):
    monkeypatch.setattr(drifts, "COUNT_KINDS", count_kinds)  # what a fork adding a count kind changes
    for kind in drifts.KINDS:
        expected = "count" if kind in count_kinds else "money"
        assert (_opened(db, kind, "1"), _merged(db, kind, "2")) == (expected, expected), kind
