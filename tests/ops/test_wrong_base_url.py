"""A wrong PARTNERKIT_API_BASE_URL does not look healthy (a new user's audit).

With a base URL whose path is not the provider's (here the sandbox under /partner: a web server's HTML 404
for every call, as a proxy's 403/407 would be), `worker --once` failed every job that calls the provider and
`status --check` then exited 0: every 4xx counted as the provider answering. Now such an answer counts as the
provider failing (`provider_failing`, after the usual 3 calls over 5 minutes), its attention line says to
check PARTNERKIT_API_BASE_URL, and a command's error names the setting and its value.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from datetime import timedelta

from click.testing import CliRunner
from freezegun import freeze_time
from werkzeug.wrappers import Response

from partnerkit.cli import cli
from partnerkit.config import config_as_env
from partnerkit.status import collect
from partnerkit.store import provider_failures
from partnerkit.timeutil import utcnow

CALLING_JOBS = ("catch-up-orders", "sync-recent", "nightly-report")  # the jobs of `worker --once` that call it


def _provider_lines(status):
    return [line for line in status["attention"] if line.startswith("the provider has failed every call")]


def test_worker_once_against_a_wrong_path_then_status_check_fails(sandbox_server, sandbox_config, db):
    wrong = replace(sandbox_config, api_base_url=sandbox_server.base_url + "/partner")
    env = {**config_as_env(wrong), "PARTNERKIT_LOG_LEVEL": "ERROR"}
    start = utcnow()
    once = CliRunner().invoke(cli, ["worker", "--once", "--format", "json"], env=env)
    outcomes = {row["job"]: row for row in json.loads(once.stdout)}
    assert once.exit_code == 1
    for job in CALLING_JOBS:
        assert outcomes[job]["outcome"] == "error"
        assert "HTTP 404: NOT FOUND" in str(outcomes[job]["result"])
    failing = provider_failures.standing(db)
    assert failing is not None and set(failing.kinds) == {"HTTP 404 without the provider's error body"}
    assert failing.calls >= 3

    with freeze_time(start + timedelta(minutes=4)):  # the rule is kept: 3 calls over 5 minutes, not at once
        assert _provider_lines(collect(wrong, db)) == []

    with freeze_time(start + timedelta(minutes=6)):
        status = collect(wrong, db)
        checked = CliRunner().invoke(cli, ["status", "--check"], env=env)
    assert checked.exit_code == 1
    assert status["provider_failing"].startswith(
        f"{failing.calls} calls (HTTP 404 without the provider's error body x{failing.calls}), the last GET ")
    [line] = _provider_lines(status)
    assert ("those answers are not the provider's (a web server at a wrong scheme, path or host, or a proxy "
            "answering in its place): check PARTNERKIT_API_BASE_URL (`partnerkit config` shows it) and any proxy "
            "towards it") in line
    assert "nothing to fix here" not in line and "no answer at all" not in line
    assert "check PARTNERKIT_API_BASE_URL" in checked.output

    # Fixed: the next call the provider answers clears it.
    fixed = CliRunner().invoke(cli, ["worker", "--once", "--format", "json"],
                               env={**config_as_env(sandbox_config), "PARTNERKIT_LOG_LEVEL": "ERROR"})
    assert {row["job"]: row["outcome"] for row in json.loads(fixed.stdout)}["sync-recent"] == "ok"
    assert provider_failures.standing(db) is None
    with freeze_time(start + timedelta(minutes=6)):
        assert collect(sandbox_config, db)["provider_failing"] is None


def test_a_command_names_the_setting_for_an_answer_that_is_not_the_providers(sandbox_server, sandbox_config, db):
    port_and_host = sandbox_server.base_url.removeprefix("http://")
    # (A user:password in the base URL is refused by the configuration itself; the hint's own masking is
    # tests/ops/test_wrong_base_url_records.py's.)
    wrong = replace(sandbox_config, api_base_url=f"http://{port_and_host}/partner")
    result = CliRunner().invoke(cli, ["webhooks", "list"], env=config_as_env(wrong))
    assert result.exit_code == 1
    assert result.stderr.strip() == (
        "Error: HTTP 404: NOT FOUND on GET /api/v1/wallets: this is not the provider's answer; check "
        f"PARTNERKIT_API_BASE_URL (now http://{port_and_host}/partner) and any proxy towards it")


def test_the_providers_own_404_is_its_answer(sandbox_config, db):
    """The sandbox answers an unknown webhook in the provider's error shape: no hint, nothing counted."""
    env = config_as_env(sandbox_config)
    result = CliRunner().invoke(cli, ["webhooks", "test", "999999"], env=env)
    assert result.exit_code == 1
    assert result.stderr.startswith("Error: HTTP 404 [WEBHOOK_NOT_FOUND]: webhook not found on POST ")
    assert "PARTNERKIT_API_BASE_URL" not in result.output
    assert provider_failures.standing(db) is None


def test_a_redirect_names_the_setting_too(sandbox_config, db, httpserver):
    """PARTNERKIT_API_BASE_URL with http:// where the host answers every call with a redirect to https://."""
    httpserver.expect_request(re.compile("/api/v1/.*")).respond_with_response(
        Response("", status=301, headers={"Location": "https://provider.example/"}))
    base = httpserver.url_for("/").rstrip("/")
    env = config_as_env(replace(sandbox_config, api_base_url=base))
    result = CliRunner().invoke(cli, ["webhooks", "list"], env=env)
    assert result.exit_code == 1
    assert result.stderr.strip() == (
        "Error: HTTP 301: unexpected redirect (HTTP 301) on GET /api/v1/wallets: this is not the provider's answer; "
        f"check PARTNERKIT_API_BASE_URL (now {base}) and any proxy towards it")
    assert set(provider_failures.standing(db).kinds) == {"HTTP 301 without the provider's error body"}
