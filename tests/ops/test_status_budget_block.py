"""`partnerkit status` after a 429 with a long Retry-After: when the block ends, in ISO 8601 UTC, and
an attention line while it has more than a few minutes to run (F4, nit 4). The 429 is the sandbox's
`rate_limit` fault, met by the real client; the clock is frozen."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest
import requests
from click.testing import CliRunner
from freezegun import freeze_time

from partnerkit import errors
from partnerkit.cli import cli
from partnerkit.client import PartnerClient
from partnerkit.config import config_as_env
from partnerkit.status import collect

LINE = "the provider answered 429 and no process calls it until 2026-11-22T10:00:00Z (60 min from now)"


def test_a_block_of_the_budget_is_an_iso_time_and_an_attention_line_while_it_lasts(sandbox_server, sandbox_config, db):
    fault = f"{sandbox_server.base_url}/sandbox/faults/rate_limit"
    assert requests.put(fault, json={"scope": "wallet", "seconds": 86_400}, timeout=5).status_code == 200
    with freeze_time("2026-11-22 09:00:00"):
        with PartnerClient(sandbox_config, db, wait_for_budget=False) as client, pytest.raises(errors.RateLimited):
            client.list_wallets()
        status = collect(sandbox_config, db)
        printed = CliRunner().invoke(cli, ["status", "--format", "json"], env=config_as_env(sandbox_config))
    # A day asked for, an hour kept (one window of the general budget), shown as a time, not an epoch float.
    assert status["budget_blocked_until"] == datetime(2026, 11, 22, 10, 0, tzinfo=timezone.utc)
    assert any(line.startswith(LINE) for line in status["attention"]), status["attention"]
    # ... and names the command that lifts it once the provider is back (session 14, finding 7).
    assert any("`partnerkit budget unblock` lifts it now" in line for line in status["attention"])
    body = json.loads(printed.stdout)
    assert body["budget_blocked_until"] == "2026-11-22T10:00:00Z"
    assert any(line.startswith(LINE) for line in body["attention"])
    with freeze_time("2026-11-22 09:56:00"):   # 4 minutes left: a passing rate limit, no person needed
        nearly = collect(sandbox_config, db)
    assert nearly["budget_blocked_until"] is not None
    assert not any("answered 429" in line for line in nearly["attention"])
    with freeze_time("2026-11-22 10:00:01"):
        assert collect(sandbox_config, db)["budget_blocked_until"] is None
