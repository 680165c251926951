"""This host's clock hours from the provider's: reads pass (they carry no timestamp), so only the `Date` header of
the provider's answers tells (partnerkit.store.provider_clock). `partnerkit status` and /metrics name it until an
answer comes within the provider's 5 minutes.

The sandbox runs as its own process here, on the real clock: freezegun moves this process's clock alone, as a
wrong clock on the partner's host would be moved against the provider's."""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime, timedelta, timezone

import pytest
from click.testing import CliRunner
from freezegun import freeze_time

from partnerkit.cli import cli
from partnerkit.config import config_as_env, load_config
from partnerkit.status import collect, gauges
from partnerkit.store import open_db, provider_clock

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=timezone.utc)
HEADER = "Mon, 23 Nov 2026 12:00:00 GMT"


@pytest.fixture
def provider(tmp_path):
    """A sandbox process on a free loopback port, and a partnerkit configuration of its first client."""
    process = subprocess.Popen([sys.executable, "-m", "sandbox", "--port", "0"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        first, alpha = process.stdout.readline(), process.stdout.readline()
        assert first.startswith("sandbox listening on "), process.stderr.read()
        words = alpha.split()
        key, secret = words[words.index("X-API-Key") + 1], words[words.index("X-API-Secret") + 1]
        yield load_config(environ={"PARTNERKIT_DB": str(tmp_path / "pk.db"), "PARTNERKIT_API_KEY": key,
                                   "PARTNERKIT_API_BASE_URL": first.split()[3], "PARTNERKIT_API_SECRET": secret,
                                   "PARTNERKIT_REPORT_DIR": str(tmp_path / "reports")})
    finally:
        process.terminate()
        process.wait(timeout=10)


def _read(config) -> None:
    """One read of the provider's (it carries no timestamp: accepted whatever this clock says)."""
    result = CliRunner().invoke(cli, ["catalog", "operators", "--format", "json"], env=config_as_env(config))
    assert result.exit_code == 0, result.output


def _clock_lines(status: dict) -> list[str]:
    return [line for line in status["attention"] if line.startswith("this host's clock is ")]


@pytest.mark.parametrize("off, words", [(timedelta(hours=2), "is 2 h 0 min ahead of the provider's"),
                                        (-timedelta(minutes=40), "behind the provider's")])
def test_a_clock_hours_off_is_named_from_the_answers_of_reads_and_cleared_once_right(provider, off, words):
    with freeze_time(datetime.now(timezone.utc) + off, tick=True):
        _read(provider)
        db = open_db(provider.db_path)
        status, scraped = collect(provider, db), gauges(provider, db)
    assert abs(status["clock_off_by_s"] - off.total_seconds()) <= 5, status["clock_off_by_s"]
    [line] = _clock_lines(status)
    assert words in line and "put it right (`timedatectl`" in line, line
    assert ("`partnerkit reconcile --date D` reads and reports again" in line) is (off > timedelta(0))
    assert scraped["clock_off"] == 1

    _read(provider)  # the clock put right: the next answer is within the provider's 5 minutes
    status = collect(provider, db)
    assert (status["clock_off_by_s"], status["clock_off_seen_at"], _clock_lines(status)) == (None, None, [])
    assert gauges(provider, db)["clock_off"] == 0


def test_within_five_minutes_nothing_is_kept_and_a_header_that_does_not_parse_is_no_answer(db):
    provider_clock.observe(db, HEADER, NOW + timedelta(seconds=290))
    assert provider_clock.standing(db) is None
    provider_clock.observe(db, HEADER, NOW + timedelta(minutes=10))
    assert provider_clock.standing(db) == provider_clock.Skew(600, NOW + timedelta(minutes=10))
    for header in (None, "", "yesterday", "Mon, 32 Nov 2026 99:00:00 GMT"):
        provider_clock.observe(db, header, NOW)  # no Date to go by: the record stands
    assert provider_clock.standing(db).seconds == 600
    provider_clock.observe(db, HEADER, NOW + timedelta(minutes=10, seconds=20))  # moved less than REWRITE_S
    assert provider_clock.standing(db).seen_at == NOW + timedelta(minutes=10)
    provider_clock.observe(db, HEADER, NOW - timedelta(seconds=3))
    assert provider_clock.standing(db) is None
