"""The recharges table's provider columns are named in three lists of partnerkit/store/recharges/_provider.py
(`_AS_SENT`, `_provider_values`, `_MERGE`); a field named in one and missing from another is refused at
import with a message naming it, and every column a read sets is stored alike on a recharge partnerkit
submitted and on one it did not (docs/internals.md, "Extending")."""

from __future__ import annotations

import importlib.util
import sys
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path

import pytest

from partnerkit.store import recharges
from partnerkit.store.recharges import _provider

SEEN = datetime(2025, 3, 10, 10, 0, tzinfo=timezone.utc)


def _record(provider_id: int, client_reference: str, **extra) -> dict:
    return {"id": provider_id, "reference_number": f"RCH{provider_id}", "status": "SUCCESS", "sub_status": "DONE",
            "mobile_number": "9876543210", "operator_id": 1, "operator": "Airtel", "face": "100.00",
            "discount": "2.50", "payable": "97.50", "currency": "INR", "vendor_recharge_id": "V1",
            "operator_txn_id": "OP1", "failure_reason": None, "client_reference": client_reference,
            "created_at": "2025-03-10T09:59:00Z", "updated_at": "2025-03-10T09:59:30Z", **extra}


def test_the_three_lists_agree():
    assert recharges.check_provider_columns() == []


def test_the_made_up_field_of_these_tests_is_none_the_provider_sends():
    """The field the tests below add is made up: a fork that stores a real one (docs/internals.md's example) must
    not find these tests failing for it."""
    assert "loyalty_points" not in (*_provider._AS_SENT, *_provider._MERGE)


def test_every_provider_column_is_stored_alike_on_a_submitted_and_a_foreign_recharge(db):
    local_id = recharges.record_intent(db, idempotency_key="k1", mobile_number="9876543210", operator_id=1,
                                       amount=Decimal("100"), client_reference="mine", submitted_at=SEEN)
    result = recharges.upsert_from_provider(db, [_record(501, "mine"), _record(502, "theirs")], SEEN)
    assert result.linked == [local_id] and result.inserted == 1
    columns = list(_provider._provider_values(recharges.provider_fields(_record(1, "x")), "SUCCESS", None, "", None))
    mine, theirs = (db.execute(f"SELECT {', '.join(columns)} FROM recharges WHERE provider_id = ?", (pid,)).fetchone()
                    for pid in (501, 502))
    differ = {name for name, a, b in zip(columns, mine, theirs) if a != b}
    assert differ == {"raw"}, differ                       # only the payload itself (its id and client_reference)
    assert dict(zip(columns, mine))["operator"] == "Airtel"


def _values_with_made_up(f, status, legacy, seen_at, http_status):
    return {**_provider._provider_values(f, status, legacy, seen_at, http_status), "loyalty_points": f["loyalty_points"]}


def test_a_column_without_a_merge_rule_is_named():
    [problem] = recharges.check_provider_columns(as_sent=(*_provider._AS_SENT, "loyalty_points"), values=_values_with_made_up)
    assert "_provider_values sets 'loyalty_points' but _MERGE has no entry for it" in problem
    assert '"loyalty_points": "COALESCE(:loyalty_points, loyalty_points)"' in problem
    merge = {**_provider._MERGE, "loyalty_points": "COALESCE(:loyalty_points, loyalty_points)"}
    assert recharges.check_provider_columns(as_sent=(*_provider._AS_SENT, "loyalty_points"), values=_values_with_made_up,
                                            merge=merge) == []


def test_a_field_read_but_stored_nowhere_is_named():
    [problem] = recharges.check_provider_columns(as_sent=(*_provider._AS_SENT, "loyalty_points"))
    assert problem.startswith("recharges: _AS_SENT reads 'loyalty_points' but _provider_values stores it in no column")


def test_an_indexed_column_a_first_read_does_not_store_is_named():
    """An indexed column (its own line in `_write`) must be given on a recharge's first store too (`_insert`), or a
    recharge someone else submitted is stored without it."""
    [problem] = recharges.check_provider_columns(indexed=(*_provider._INDEXED, "loyalty_points"))
    assert problem.startswith("recharges: _INDEXED names 'loyalty_points' but _new_indexed gives it no value")


def test_a_merge_rule_without_a_value_is_named():
    [problem] = recharges.check_provider_columns(merge={**_provider._MERGE, "loyalty_points": "COALESCE(:loyalty_points, loyalty_points)"})
    assert problem == "recharges: _MERGE entry 'loyalty_points' uses :loyalty_points but _provider_values sets no 'loyalty_points'"


def test_the_forks_obvious_edit_fails_at_import_naming_the_missing_entry(tmp_path, monkeypatch):
    """FINDINGS finding 5's edit: the field added to _AS_SENT and _provider_values, not to _MERGE."""
    source = Path(_provider.__file__).read_text()
    edited = source.replace('"failure_reason", "client_reference")', '"failure_reason", "client_reference", "loyalty_points")',
                            1).replace('"updated_at": iso(f["updated_at"]),',
                                       '"updated_at": iso(f["updated_at"]), "loyalty_points": f["loyalty_points"],', 1)
    assert '"client_reference", "loyalty_points")' in edited and '"loyalty_points": f["loyalty_points"]' in edited
    copy = tmp_path / "recharges_fork.py"
    copy.write_text(edited)
    spec = importlib.util.spec_from_file_location("recharges_fork", copy)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "recharges_fork", module)  # dataclasses look their module up there
    with pytest.raises(RuntimeError, match=r"_provider_values sets 'loyalty_points' but _MERGE has no entry for it"):
        spec.loader.exec_module(module)


def test_the_recharge_states_are_written_once():
    """LEGACY_SUCCESS had a second definition in the client's records, and OPEN_INTENT was never used while four
    statements and the CLI spelled ('INTENT', 'UNKNOWN') out by hand: a state added to one would be missed by the
    others. The sandbox keeps its own copy on purpose (it imports no partnerkit) and is not looked at here."""
    from partnerkit.client import _records

    assert _records.LEGACY_SUCCESS is recharges.LEGACY_SUCCESS
    assert _records.RECHARGE_FINAL == recharges.FINAL | recharges.LEGACY_SUCCESS
    assert _provider.OPEN_INTENT_SQL == "status IN ('INTENT', 'UNKNOWN')"
    root = Path(recharges.__file__).resolve().parents[3]
    by_hand = [str(path.relative_to(root)) for path in sorted((root / "partnerkit").rglob("*.py"))
               if "migrations" not in path.parts and "order_intents" not in path.name
               and any(spelled in path.read_text() for spelled in ("('INTENT', 'UNKNOWN')", '("UNKNOWN", "INTENT")',
                                                                   '("INTENT", "UNKNOWN")', "LEGACY_SUCCESS = "))]
    assert by_hand == ["partnerkit/store/recharges/_provider.py"]
