"""A `partnerkit reconcile --date` of a mistyped old day (1999 for 2026) on a store with real days: its empty
report is kept and said to be empty, and it moves neither `partnerkit status` nor the nightly catch-up back.

It used to: the store's first day was the first day any sync covered or any report was kept for, so every
night since 1999-01-02 was "never reported" (`status --check` exit 1 for good), and the next nightly run
wrote 31 empty reports of days before the account existed."""

from __future__ import annotations

import json
from datetime import datetime, time, timedelta, timezone

import pytest
from click.testing import CliRunner
from freezegun import freeze_time

from partnerkit.cli import cli
from partnerkit.config import config_as_env
from partnerkit.store import reports as report_store

pytest.importorskip("sandbox.testing")

from reconcile.jobs import nightly  # noqa: E402
from reconcile.recharges import submit  # noqa: E402
from tests.reconcile.reconcile_helpers import sandbox_day  # noqa: E402

# The account's first day: the sandbox's clock starts at 10:00 on it, and the kit submits its first recharges.
FIRST = (datetime.now(timezone.utc) - timedelta(days=3)).date()
TYPO = "1999-01-01"


def _at(day, hour: int, minute: int = 0) -> datetime:
    return datetime.combine(day, time(hour, minute), tzinfo=timezone.utc)


def _status(config, when: datetime) -> tuple[int, dict]:
    with freeze_time(when):
        done = CliRunner().invoke(cli, ["status", "--check", "--format", "json"], env=config_as_env(config))
    return done.exit_code, json.loads(done.stdout)


def test_a_mistyped_old_day_moves_neither_status_nor_the_catch_up_back(tmp_path):
    with sandbox_day(tmp_path, _at(FIRST, 10)) as (server, config, db, client):
        for mobile in ("9800000001", "9800000002"):
            assert submit(config, db, client, mobile_number=mobile, operator_id=1, amount=100,
                          force=True).status == "SUCCESS"
        first = nightly(config, db, client, now=_at(FIRST + timedelta(days=1), 1, 5))
        assert [r["date"] for r in first] == [FIRST.isoformat()] and first[0]["summary"]["recharges_total"] == 2

        calm_code, calm = _status(config, _at(FIRST + timedelta(days=1), 2))
        assert calm_code == 0 and calm["attention"] == [] and calm["nights_never_reported"] == []

        typo = CliRunner().invoke(cli, ["reconcile", "--date", TYPO], env=config_as_env(config))
        assert typo.exit_code == 0, typo.output  # an empty day is legitimate: its report is written
        assert (f"nothing was recorded on {TYPO} (no recharge, transaction or order): was the date right? ("
                f"the first day the store holds any is {FIRST})") in typo.stderr.splitlines()
        assert report_store.get_report(db, TYPO)["summary"]["recharges_total"] == 0
        assert report_store.store_first_day(db) == TYPO  # the day was synced and reported: no longer the first night
        assert report_store.first_night(db) == FIRST.isoformat()

        code, after = _status(config, _at(FIRST + timedelta(days=1), 2))
        assert (code, after["attention"], after["nights_never_reported"]) == (0, [], [])
        assert after["last_report_date"] == calm["last_report_date"] == FIRST.isoformat()

        caught_up = nightly(config, db, client, now=_at(FIRST + timedelta(days=2), 1, 5))
        assert [r["date"] for r in caught_up] == [(FIRST + timedelta(days=1)).isoformat()]
        assert report_store.report_dates(db) == [TYPO, FIRST.isoformat(), (FIRST + timedelta(days=1)).isoformat()]


def test_quiet_nights_after_the_first_day_are_still_caught_up(tmp_path):
    """The first night is the first day holding activity, not the last: nights without any after it are
    still due after downtime (a quiet day is legitimate, and its report says so)."""
    with sandbox_day(tmp_path, _at(FIRST, 10)) as (server, config, db, client):
        assert submit(config, db, client, mobile_number="9800000001", operator_id=1, amount=100,
                      force=True).status == "SUCCESS"
        assert report_store.first_activity_day(db) == FIRST.isoformat()
        assert report_store.first_night(db) is None  # nothing synced yet: the nightly run starts at the latest night
        assert [r["date"] for r in nightly(config, db, client, now=_at(FIRST + timedelta(days=1), 1, 5))] == [
            FIRST.isoformat()]
        caught_up = nightly(config, db, client, now=_at(FIRST + timedelta(days=3), 1, 5))  # down for two nights
        assert [r["date"] for r in caught_up] == [(FIRST + timedelta(days=d)).isoformat() for d in (1, 2)]
        assert [r["summary"]["recharges_total"] for r in caught_up] == [0, 0]
