"""`partnerkit status` after the provider's 401 to the key: whether the worker's jobs that call the provider are
paused on it and until when (the worker's own rule, `refusal_pause_until`), and what to check: this host's clock
first when the 401 blames the request's timestamp, else the key, its secret and its IP allowlist. The refusals
are written through the budget's own `refused`, on a clock of the test's."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

from click.testing import CliRunner
from freezegun import freeze_time

from partnerkit.cli import cli
from partnerkit.config import config_as_env
from partnerkit.status import collect
from partnerkit.store.budget import REFUSAL_PAUSE_S, Budget

AT = datetime(2026, 11, 22, 9, 0, tzinfo=timezone.utc)
CLOCK = "invalid request signature: X-Timestamp is outside the 5-minute window"


def _refuse(config, db, message: str) -> None:
    Budget.from_config(config, db, clock=AT.timestamp).refused(
        status=401, message=message, method="POST", path="/api/v1/recharges", purpose="cli")


def _line(status: dict) -> str:
    [line] = [line for line in status["attention"] if "refused partnerkit's credentials" in line]
    return line


def test_status_says_until_when_the_jobs_that_call_the_provider_are_paused(sandbox_config, db):
    _refuse(sandbox_config, db, "invalid API credentials")
    with freeze_time(AT + timedelta(seconds=20)):
        paused = collect(sandbox_config, db)
        printed = CliRunner().invoke(cli, ["status", "--format", "json"], env=config_as_env(sandbox_config))
    assert paused["provider_calls_paused_until"] == AT + timedelta(seconds=REFUSAL_PAUSE_S)
    assert json.loads(printed.stdout)["provider_calls_paused_until"] == "2026-11-22T09:01:00Z"
    line = _line(paused)
    assert "are paused on it until 2026-11-22T09:01:00Z, then one tries again" in line
    assert "every call fails until PARTNERKIT_API_KEY / PARTNERKIT_API_SECRET are right" in line
    assert "clock" not in line, "a 401 that does not name the timestamp keeps the key's advice"

    with freeze_time(AT + timedelta(seconds=REFUSAL_PAUSE_S + 1)):  # the pause is over; the refusal stands
        over = collect(sandbox_config, db)
    assert over["provider_calls_paused_until"] is None and over["provider_refused"] is not None
    assert "paused" not in _line(over)


def test_a_401_that_names_the_timestamp_says_to_check_this_hosts_clock_first(sandbox_config, db):
    _refuse(sandbox_config, db, CLOCK)
    with freeze_time(AT + timedelta(seconds=5)):
        status = collect(sandbox_config, db)
    line = _line(status)
    assert line.index("check this host's clock first (`timedatectl`") < line.index("PARTNERKIT_API_SECRET"), line
    assert "paused on it until 2026-11-22T09:01:00Z" in line
    assert "every call fails" not in line, "the provider's reads carry no signature: they pass"
