"""This host's clock off by more than the provider's 5 minutes: every signed request (a write) is refused for
its X-Timestamp, while reads, which carry no timestamp, pass. `partnerkit status` keeps the refusal and its
"check this host's clock first" advice while the clock is still off, whatever reads pass meanwhile (the
worker's, a command's); an accepted write clears it.

Against the real sandbox on loopback: our clock is moved with freezegun, the sandbox's (`ignore=["sandbox"]`)
stays the real one, as the provider's would, and checks each signed request's X-Timestamp against it."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest
from click.testing import CliRunner
from freezegun import freeze_time

from partnerkit.cli import cli
from partnerkit.config import config_as_env
from partnerkit.status import collect
from partnerkit.store.budget import REFUSAL_AHEAD_TOLERANCE_S, Budget

SKEW = timedelta(minutes=30)
AT = datetime(2026, 11, 22, 9, 0, tzinfo=timezone.utc)
CLOCK = "invalid request signature: X-Timestamp is outside the 5-minute window"
KEY = "invalid API credentials"
SUBMIT = ["recharges", "submit", "--operator-id", "1", "--amount", "100", "--mobile"]


def _clock_line(status: dict) -> str | None:
    lines = [line for line in status["attention"] if "refused partnerkit's credentials" in line]
    return lines[0] if lines else None


def test_a_read_accepted_while_the_clock_is_off_keeps_the_clock_refusal_until_a_write_passes(sandbox_config, db):
    env = config_as_env(sandbox_config)
    runner = CliRunner()
    with freeze_time(datetime.now(timezone.utc) + SKEW, tick=True, ignore=["sandbox"]):
        refused = runner.invoke(cli, [*SUBMIT, "9876500015"], env=env)
        assert refused.exit_code == 1, refused.output
        assert "X-Timestamp is outside the 5-minute window" in refused.output

        read = runner.invoke(cli, ["catalog", "operators", "--format", "json"], env=env)  # a read: accepted
        assert read.exit_code == 0, read.output
        status = collect(sandbox_config, db)
        assert "X-Timestamp is outside the 5-minute window" in (status["provider_refused"] or ""), status
        line = _clock_line(status)
        assert line is not None and "check this host's clock first (`timedatectl`" in line, status["attention"]
        assert "the next accepted write clears this" in line, line
        printed = runner.invoke(cli, ["status", "--format", "json"], env=env)
        assert "outside the 5-minute window" in json.loads(printed.stdout)["provider_refused"]

        again = runner.invoke(cli, [*SUBMIT, "9876500025"], env=env)  # the refusal is current: writes still fail
        assert again.exit_code == 1 and "outside the 5-minute window" in again.output, again.output

    # The clock put right: the next write is accepted, and that clears the refusal.
    accepted = runner.invoke(cli, [*SUBMIT, "9876500035"], env=env)
    assert accepted.exit_code == 0, accepted.output
    status = collect(sandbox_config, db)
    assert status["provider_refused"] is None and _clock_line(status) is None


def test_a_quote_checks_the_clock_for_writes_and_places_nothing(sandbox_config, db):
    """`recharges quote` (the charge preview) is signed as a submit is, and places nothing: while the clock is off it
    is refused for its X-Timestamp as a submit would be; once the clock is right, one quote clears the refusal,
    with no recharge made to learn it."""
    env = config_as_env(sandbox_config)
    runner = CliRunner()
    quote = ["recharges", "quote", "--operator-id", "1", "--amount", "199"]
    with freeze_time(datetime.now(timezone.utc) + SKEW, tick=True, ignore=["sandbox"]):
        refused = runner.invoke(cli, quote, env=env)
        assert refused.exit_code == 1 and "X-Timestamp is outside the 5-minute window" in refused.output
        line = _clock_line(collect(sandbox_config, db))
        assert line is not None and "`partnerkit recharges quote" in line, line

    quoted = runner.invoke(cli, [*quote, "--format", "json"], env=env)
    assert quoted.exit_code == 0, quoted.output
    assert json.loads(quoted.stdout) == {"operator_id": 1, "face": "199.00", "discount_pct": "2.50",
                                         "discount": "4.98", "payable": "194.02"}
    status = collect(sandbox_config, db)
    assert status["provider_refused"] is None and _clock_line(status) is None
    listed = runner.invoke(cli, ["recharges", "list", "--format", "json"], env=env)
    assert listed.exit_code == 0 and json.loads(listed.stdout) == [], "a quote records and places nothing"


@pytest.mark.parametrize("message, signed, later_s, stands", [
    (CLOCK, False, 10, True),    # a read, the clock still as it was: it says nothing of the clock
    (CLOCK, True, 10, False),    # a write accepted: the clock is right again
    (CLOCK, False, -(REFUSAL_AHEAD_TOLERANCE_S + 60), False),  # dated ahead: the clock was put right since
    (KEY, False, 10, False),     # the key's refusal: any accepted call proves the key again
    (KEY, True, 10, False),
])
def test_which_accepted_call_clears_a_refusal(sandbox_config, db, message, signed, later_s, stands):
    Budget.from_config(sandbox_config, db, clock=AT.timestamp).refused(
        status=401, message=message, method="POST", path="/api/v1/recharges", purpose="cli")
    budget = Budget.from_config(sandbox_config, db, clock=(AT + timedelta(seconds=later_s)).timestamp)
    budget.accepted(signed=signed)
    assert (budget.refusal() is not None) is stands
