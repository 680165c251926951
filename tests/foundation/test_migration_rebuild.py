"""A migration that rebuilds a table (SQLite's procedure for a change ALTER TABLE cannot make: here the
CHECK on drifts.kind, which drift_audit's rows point at) runs with `REBUILD = True`: foreign keys off around
its transaction, `PRAGMA foreign_key_check` before the commit, foreign keys on again after. The migration
lists are the test's own, the package's migrations plus one; nothing is added to the package."""

from __future__ import annotations

import re

import pytest

from partnerkit.errors import StorageError
from partnerkit.store import drifts, open_db
from partnerkit.store.migrations import Migration, current_version, discover, migrate

AT = "2026-11-22T10:00:00Z"
NEW_KIND = "test_only_kind"  # made up, none of drifts.KINDS


def _rebuild_drifts(db, *, copy: str = "INSERT INTO drifts_new SELECT * FROM drifts") -> tuple[str, ...]:
    """The statements that rebuild `drifts` with NEW_KIND allowed, read from the schema as it stands."""
    [(create,)] = db.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'drifts'")
    # The kind appended to whatever list the CHECK holds: a fork that has added kinds of its own runs this as is.
    kinds = re.search(r"kind IN \(([^)]*)\)", create)
    assert kinds is not None and NEW_KIND not in drifts.KINDS
    create = create[:kinds.end(1)] + f", '{NEW_KIND}'" + create[kinds.end(1):]
    indexes = [sql for (sql,) in db.execute(
        "SELECT sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'drifts' AND sql IS NOT NULL")]
    assert indexes  # drifts_day (m0005) and drifts_open (m0013), as the schema has them: recreated after the rename
    return (re.sub(r"^CREATE TABLE drifts\b", "CREATE TABLE drifts_new", create), copy, "DROP TABLE drifts",
            "ALTER TABLE drifts_new RENAME TO drifts", *indexes)


def _migrations(db, *, rebuild: bool = True, **kwargs) -> list[Migration]:
    package = discover()
    return [*package, Migration(package[-1].version + 1, f"drift_kind_{NEW_KIND}", _rebuild_drifts(db, **kwargs),
                                rebuild=rebuild)]


@pytest.fixture
def held(tmp_path):
    """A migrated database holding drifts, and audit rows pointing at them."""
    db = open_db(tmp_path / "held.db")
    for reference in ("5001", "5002", "5003"):
        drifts.open_drift(db, kind="voucher_shortfall", subject="order", reference=reference, expected=2, actual=1,
                          currency=None, detected_at=AT)
    drifts.set_resolution(db, drifts.drift_id("voucher_shortfall", "order", "5001"), "escalated", note="asked",
                          by="finance", at=AT)
    yield db
    db.conn.close()


def _snapshot(db) -> tuple[list, list]:
    return (db.execute("SELECT * FROM drifts ORDER BY id").fetchall(),
            db.execute("SELECT * FROM drift_audit ORDER BY seq").fetchall())


def test_a_rebuild_keeps_every_row_and_the_foreign_keys_pointing_at_the_new_table(held):
    before = _snapshot(held)
    assert len(before[1]) == 4
    schema = "SELECT type, name, sql FROM sqlite_master WHERE tbl_name = 'drifts' AND name != 'drifts' ORDER BY name"
    indexes = held.execute(schema).fetchall()
    migrations = _migrations(held)
    assert migrate(held, migrations) == migrations[-1].version == current_version(held)
    assert _snapshot(held) == before
    assert held.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert [row[2] for row in held.execute("PRAGMA foreign_key_list(drift_audit)")] == ["drifts"]
    assert held.execute(schema).fetchall() == indexes  # every index again, drifts_open (m0013) too
    assert {name for (_, name, _) in indexes} >= {"drifts_day", "drifts_open"}
    held.execute("INSERT INTO drifts (id, kind, subject, reference, report_date, detected_at, last_detected_at)"
                 f" VALUES ('d_new', '{NEW_KIND}', 'order', '5004', '2026-11-22', '{AT}', '{AT}')")
    with pytest.raises(Exception, match="FOREIGN KEY constraint failed"):  # enforced, against the new table
        held.execute("INSERT INTO drift_audit (drift_id, action, resolution, by, at)"
                     f" VALUES ('d_none', 'detected', 'pending', 'x', '{AT}')")
    assert migrate(held, migrations) == migrations[-1].version  # applied once


def test_without_the_flag_the_same_rebuild_fails_and_changes_nothing(held):
    before, version = _snapshot(held), current_version(held)
    with pytest.raises(StorageError, match=r"migration \d+ \(drift_kind_test_only_kind\) failed: "
                                           "FOREIGN KEY constraint failed"):
        migrate(held, _migrations(held, rebuild=False))
    assert _snapshot(held) == before and current_version(held) == version


def test_a_rebuild_that_leaves_rows_pointing_nowhere_is_rolled_back_naming_the_table(held):
    before, version = _snapshot(held), current_version(held)
    lossy = "INSERT INTO drifts_new SELECT * FROM drifts WHERE reference != '5001'"
    with pytest.raises(StorageError, match=r"failed: the rebuild left 2 row\(s\) pointing at no row "
                                           r"\(drift_audit -> drifts\); nothing was changed"):
        migrate(held, _migrations(held, copy=lossy))
    assert _snapshot(held) == before and current_version(held) == version
    assert held.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert NEW_KIND not in held.execute("SELECT sql FROM sqlite_master WHERE name = 'drifts'").fetchone()[0]
