"""A write the provider answers 429 (the sandbox's `rate_limit` fault, met by the real client) says that nothing was
made and when to retry, in the words the next attempt's refusal uses; before, the first one printed only the 429."""

from __future__ import annotations

import pytest
import requests
from click.testing import CliRunner

from partnerkit import errors
from partnerkit.cli import cli
from partnerkit.client import PartnerClient
from partnerkit.config import config_as_env
from partnerkit.ordering import place_order
from partnerkit.store import order_intents
from tests.conftest import account_of

SUBMIT = ["recharges", "submit", "--mobile", "9876543210", "--operator-id", "1", "--amount", "10"]
NOT_READ = "(a 429 is the provider's refusal, given before it reads the request)"
ENDS = "retry in {}: until then partnerkit sends no such request (`partnerkit budget show` names the block)"


def _rate_limited(server, scope: str) -> None:
    fault = f"{server.base_url}/sandbox/faults/rate_limit"
    assert requests.put(fault, json={"scope": scope, "seconds": 420}, timeout=5).status_code == 200


def _made(server) -> tuple[int, int]:
    with server.sandbox.lock:
        return len(server.sandbox.recharges), len(server.sandbox.orders)


def test_a_429_to_a_submit_says_no_recharge_was_made_and_when_to_retry(sandbox_server, sandbox_config, db):
    account_of(db, sandbox_config.api_key)  # no wallet read first: the submit is the first call
    _rate_limited(sandbox_server, "POST /api/v1/recharges")
    before = _made(sandbox_server)
    first = CliRunner().invoke(cli, SUBMIT, env=config_as_env(sandbox_config))
    again = CliRunner().invoke(cli, SUBMIT, env=config_as_env(sandbox_config))
    [said] = [line for line in first.stderr.splitlines() if line.startswith("Error:")]
    assert first.exit_code == 1 and said.startswith("Error: HTTP 429") and " on POST /api/v1/recharges " in said
    assert said.endswith(f": no recharge was made {NOT_READ}; " + ENDS.format("7 min"))
    # The next attempt is refused here, nothing sent, in the same words.
    assert again.exit_code == 1 and "has no room for 'cli'; retry in 7 min" in again.stderr
    assert _made(sandbox_server) == before and sandbox_server.sandbox.calls["POST /api/v1/recharges"] == 1
    assert db.execute("SELECT count(*) FROM recharges").fetchone() == (0,)  # its intent removed: nothing made


def test_a_429_to_an_order_says_no_order_was_placed_and_when_to_retry(sandbox_server, sandbox_config, db):
    """Order creation's own budget class is a minute long, so a 429 blocks it a minute at most: a caller that waits
    for its budget (the command) sleeps that out and sends again; one that does not hears the 429 at once."""
    account_of(db, sandbox_config.api_key)
    _rate_limited(sandbox_server, "POST /api/v1/orders")
    before = _made(sandbox_server)
    with PartnerClient(sandbox_config, db, wait_for_budget=False) as client, \
            pytest.raises(errors.RateLimited) as raised:
        place_order(sandbox_config, db, client, product_id=8, denomination=100, quantity=1)
    assert str(raised.value).endswith(f": no order was placed {NOT_READ}; " + ENDS.format("60.0s"))
    assert _made(sandbox_server) == before and sandbox_server.sandbox.calls["POST /api/v1/orders"] == 1
    [intent] = db.execute("SELECT state FROM order_intents").fetchall()
    assert intent == ("REFUSED",) and order_intents.open_ones(db) == []
