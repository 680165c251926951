"""The receiver's accepted tokens while they change under it: /readyz while they cannot be read and the
recovery without a restart (finding 3), the two-token rotation with a saved token ending with the old one
refused (findings 2 and 6), the start-up warning for an unbound token never tried, and the sender behind
a proxy in a rejection's log line (N5).

Real SQLite files in tmp_path, the real app through Flask's test client, the real CLI in process,
freezegun for the receiver's token refresh.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner
from freezegun import freeze_time

from partnerkit.cli import cli
from partnerkit.config import WebhookToken
from partnerkit.rotation import KEY_PICKUP_S
from receiver.app import create_app
from receiver.state import TOKEN_REFRESH_S
from tests.ops.test_keys import SAVED_TOKEN, Keys, environment
from tests.receiver.conftest import TOKEN, envelope, post, with_tokens

NEW_TOKEN = "whsec_after_the_portal_rotation_7"


def deliver(app, event_id: str, token: str, webhook_id: str = "77") -> int:
    return post(app.test_client(), envelope(event_id), token=token, X_Webhook_ID=webhook_id).status_code


def test_readyz_is_503_while_the_tokens_cannot_be_read_and_recovers_once_the_key_file_can_be(tmp_path, caplog):
    """The reviewer's receiver stayed at 503 after the key file's owner was put back: a chown changes
    neither the file's inode, its mtime nor its size, and the failed read had been recorded as read."""
    run = Keys(environment(tmp_path, PARTNERKIT_LOG_LEVEL="WARNING"))
    run.save_token()
    key_file = run.config().key_file
    caplog.set_level(logging.INFO, logger="receiver")
    caplog.set_level(logging.INFO, logger="partnerkit.crypto")  # the key file is followed there (KeyFollower)
    # Frozen at the real time: `keys rewrap` compares the clock with the key file's change, which is real.
    with freeze_time(datetime.now(timezone.utc)) as clock:
        app = create_app(run.config())
        client = app.test_client()
        try:
            assert deliver(app, "evt_1", SAVED_TOKEN) == 200
            assert client.get("/readyz").get_json() == {"status": "ready"}
            run("keys", "rotate")  # the saved token is sealed with the new key by the rewrap ...
            clock.tick(KEY_PICKUP_S)  # ... once running receivers took the rotated file
            run("keys", "rewrap")
            run("keys", "retire")
            good = key_file.read_bytes()
            with open(key_file, "r+b") as handle:  # ... and the receiver cannot read the key file now
                handle.write(b"\xff" * len(good))
            unreadable_at = key_file.stat().st_mtime_ns
            clock.tick(TOKEN_REFRESH_S + 1)
            for event_id in ("evt_2", "evt_3"):
                assert deliver(app, event_id, SAVED_TOKEN) == 503
            assert client.get("/readyz").status_code == 503
            assert client.get("/readyz").get_json() == {"status": "unavailable",
                                                        "reason": "cannot read accepted webhook tokens"}
            # Readable again, as a chown makes it: same inode, size and mtime as the unreadable file.
            with open(key_file, "r+b") as handle:
                handle.write(good)
            os.utime(key_file, ns=(unreadable_at, unreadable_at))
            clock.tick(TOKEN_REFRESH_S + 1)
            assert client.get("/readyz").get_json() == {"status": "ready"}
            assert deliver(app, "evt_4", SAVED_TOKEN) == 200
        finally:
            app.extensions["partnerkit_receiver"].close()
    said = [r.getMessage() for r in caplog.records if r.name.startswith(("receiver", "partnerkit.crypto"))]
    # Once when it began and once when it cleared, not once per delivery or probe.
    assert sum(m.startswith("cannot read accepted tokens") for m in said) == 1
    assert said.count("accepted tokens can be read again") == 1
    assert sum(m.startswith("the voucher key file changed and cannot be read") for m in said) == 1


def test_readyz_says_when_no_token_is_accepted_any_more(tmp_path):
    run = Keys(environment(tmp_path, PARTNERKIT_LOG_LEVEL="WARNING"))
    run.save_token()
    with freeze_time("2026-11-22 10:00:00") as clock:
        app = create_app(run.config())
        try:
            forgotten = run("webhooks", "token", "forget", "77")
            assert "no webhook token is accepted any more" in forgotten.stderr
            clock.tick(TOKEN_REFRESH_S + 1)
            answer = app.test_client().get("/readyz")
            assert (answer.status_code, answer.get_json()) == (
                503, {"status": "unavailable", "reason": "no webhook token accepted"})
            assert deliver(app, "evt_1", SAVED_TOKEN) == 401
        finally:
            app.extensions["partnerkit_receiver"].close()


def test_the_readme_rotation_with_a_saved_token_ends_with_the_old_token_refused(tmp_path):
    """README "Rotate the webhook token with two tokens live", for a token `webhooks register` saved."""
    run = Keys(environment(tmp_path, PARTNERKIT_LOG_LEVEL="ERROR"))
    run.save_token()  # webhook 77's token, as `webhooks register` saved it

    # Finding 6: the new token unbound (`old,new`) is never tried for webhook 77, which has a bound one.
    unbound = with_tokens(run.config(), WebhookToken(NEW_TOKEN))
    app = create_app(unbound)
    try:
        assert deliver(app, "evt_unbound", NEW_TOKEN) == 401
    finally:
        app.extensions["partnerkit_receiver"].close()

    # Step 1: the new token bound to the webhook, beside the saved one; both verify.
    app = create_app(with_tokens(run.config(), WebhookToken(NEW_TOKEN, "77")))
    try:
        assert deliver(app, "evt_old", SAVED_TOKEN) == 200
        assert deliver(app, "evt_new", NEW_TOKEN) == 200
    finally:
        app.extensions["partnerkit_receiver"].close()

    # Step 4: the saved token replaced by the new one (on stdin, never in argv), the entry removed.
    replaced = run("webhooks", "token", "set", "77", input=NEW_TOKEN + "\n")
    assert "its saved token is replaced" in replaced.stderr and NEW_TOKEN not in replaced.output
    app = create_app(run.config())
    try:
        assert deliver(app, "evt_new_2", NEW_TOKEN) == 200
        assert deliver(app, "evt_old_2", SAVED_TOKEN) == 401
    finally:
        app.extensions["partnerkit_receiver"].close()
    listed = run("keys", "status", "--format", "json").stdout
    assert '"values_unreadable": 0' in listed  # the new token is sealed like the old one was


def test_a_running_receiver_follows_token_set_and_forget_within_seconds(tmp_path):
    run = Keys(environment(tmp_path, PARTNERKIT_LOG_LEVEL="ERROR", PARTNERKIT_WEBHOOK_TOKENS=TOKEN))
    run.save_token()
    with freeze_time("2026-11-22 10:00:00") as clock:
        app = create_app(run.config())
        try:
            assert deliver(app, "evt_1", SAVED_TOKEN) == 200
            run("webhooks", "token", "set", "77", input=NEW_TOKEN)
            clock.tick(TOKEN_REFRESH_S + 1)
            assert deliver(app, "evt_2", SAVED_TOKEN) == 401
            assert deliver(app, "evt_3", NEW_TOKEN) == 200
            forgotten = run("webhooks", "token", "forget", "77")
            assert "checked against the unbound tokens of PARTNERKIT_WEBHOOK_TOKENS" in forgotten.stderr
            clock.tick(TOKEN_REFRESH_S + 1)
            assert deliver(app, "evt_4", NEW_TOKEN) == 401
            assert deliver(app, "evt_5", TOKEN) == 200  # the unbound one, now that 77 has no bound token
        finally:
            app.extensions["partnerkit_receiver"].close()
    again = run("webhooks", "token", "forget", "77", code=1)
    assert again.stderr.strip() == "Error: no token of webhook 77 is saved (`partnerkit webhooks list` shows TOKEN_SAVED)"


def test_token_set_takes_one_token_from_stdin_and_never_echoes_it(tmp_path):
    run = Keys(environment(tmp_path, PARTNERKIT_LOG_LEVEL="ERROR"))
    run.save_token()
    before = run.sealed_bytes()
    for given, says in [("", "no token given"), ("short-token\n", "shorter than 16 characters"),
                        ("whsec_one_token_here whsec_and_another\n", "holds a space"),
                        ("whsec_first_line_of_two\nwhsec_second_line\n", "a line break"),
                        ("x" * 5000, "more than 4096 characters"),
                        # a captured delivery's header, pasted whole: the value is the token, the name is not
                        (f"X-SERVICE-WEBHOOK-TOKEN: {NEW_TOKEN}\n",
                         "that is a header line (X-SERVICE-WEBHOOK-TOKEN: ...)"),
                        (f"x-service-webhook-token:{NEW_TOKEN}\n",
                         "that is a header line (x-service-webhook-token: ...)"),
                        (f"X-Signature: sha256={'ab' * 32}\n", "give only the value after the colon")]:
        result = CliRunner().invoke(cli, ["webhooks", "token", "set", "77"], env=run.env, input=given)
        # exit 2: what was given cannot be a token (bad input), as for PARTNERKIT_WEBHOOK_TOKENS
        assert result.exit_code == 2 and says in result.stderr, (given[:40], result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.output
        for part in given.replace(":", " ").split():  # a header's name is said, never what came with it
            assert part not in result.output or len(part) < 6 or part.lower().startswith("x-")
    # A token on the command line is not an option at all: it would show in `ps`.
    assert CliRunner().invoke(cli, ["webhooks", "token", "set", "77", NEW_TOKEN], env=run.env).exit_code == 2
    assert run.sealed_bytes() == before
    saved = run("webhooks", "token", "set", "78", input=f"  {NEW_TOKEN}  \n")
    assert saved.stderr.strip() == "webhook 78: token saved; running receivers accept it within seconds"


@pytest.mark.parametrize("given, warned", [
    (f'"{NEW_TOKEN}"', "the token begins and ends with a quote; if the quotes came with a copy (JSON, a shell line), "
                       "they are not part of it"),
    (f"77:{NEW_TOKEN}", "the token begins with '77:', as a PARTNERKIT_WEBHOOK_TOKENS entry binding a token to this "
                        "webhook does; that prefix is not part of the token"),
    (f"sha256={'ab' * 32}", "the token begins with 'sha256=', as an X-Signature value may: a signature is not the "
                            "token (it changes with every delivery)"),
])
def test_a_token_that_may_carry_something_of_its_copy_is_saved_with_a_warning(tmp_path, given, warned):
    """The document gives a token no format: what a secret could be is saved as given (and then verifies
    deliveries signed with exactly that), and the warning says what looks copied along with it."""
    run = Keys(environment(tmp_path, PARTNERKIT_LOG_LEVEL="ERROR"))
    run.save_token()
    result = run("webhooks", "token", "set", "77", input=given + "\n")
    assert result.stderr.splitlines() == [f"warning: {warned}", "webhook 77: its saved token is replaced; running "
                                          "receivers accept the new one and refuse the old within seconds"]
    assert given not in result.output
    app = create_app(run.config())
    try:
        assert deliver(app, "evt_as_given", given) == 200
    finally:
        app.extensions["partnerkit_receiver"].close()


def test_token_set_on_a_database_that_does_not_exist_creates_it_only_for_a_token_and_says_so(tmp_path):
    run = Keys(environment(tmp_path / "var", PARTNERKIT_LOG_LEVEL="ERROR"))
    refused = CliRunner().invoke(cli, ["webhooks", "token", "set", "77"], env=run.env, input="too-short\n")
    assert refused.exit_code == 2 and "shorter than 16 characters" in refused.stderr
    assert not (tmp_path / "var").exists()  # neither the database nor a voucher key file (nor their directory)
    saved = run("webhooks", "token", "set", "77", input=NEW_TOKEN + "\n")
    path = tmp_path / "var" / "pk.db"
    assert saved.stderr.splitlines()[0] == (
        f"warning: database {str(path)!r} (PARTNERKIT_DB, from the environment) did not exist and was created (a "
        f"first start; created directory {str(path.parent)!r} for it, mode 0700); if partnerkit already keeps its database elsewhere, check PARTNERKIT_DB or --config: the receiver, the worker and the commands must "
        "all use the same one")
    assert saved.stderr.splitlines()[-1] == "webhook 77: token saved; running receivers accept it within seconds"
    app = create_app(run.config())
    try:
        assert deliver(app, "evt_first", NEW_TOKEN) == 200
    finally:
        app.extensions["partnerkit_receiver"].close()


def test_token_set_names_the_new_database_before_the_voucher_key_file_it_generates(tmp_path):
    """The voucher key line came first, then the database's: every other command names the database first.
    A real process, as an operator runs it: the key's line is a log warning, printed on stderr when no logging is
    configured (pytest's own log capture would take it from an in-process run)."""
    path = tmp_path / "var" / "pk.db"
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("PARTNERKIT_")}, "PARTNERKIT_DB": str(path)}
    result = subprocess.run([str(Path(sys.executable).with_name("partnerkit")), "webhooks", "token", "set", "77"],
                            input=NEW_TOKEN + "\n", env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert lines[0].startswith(f"warning: database {str(path)!r} (PARTNERKIT_DB, from the environment) did not exist "
                               f"and was created (a first start; created directory {str(path.parent)!r} for it"), lines
    assert lines[1].startswith("PARTNERKIT_VOUCHER_KEY is not set: generated a voucher key in "), lines
    assert lines[-1] == "webhook 77: token saved; running receivers accept it within seconds"


def test_an_unbound_token_never_tried_is_warned_about_once_at_start(tmp_path, caplog):
    run = Keys(environment(tmp_path, PARTNERKIT_LOG_LEVEL="WARNING"))
    caplog.set_level(logging.WARNING, logger="receiver")

    def warnings(config, **kwargs) -> list[str]:
        caplog.clear()
        app = create_app(config, **kwargs)
        app.extensions["partnerkit_receiver"].close()
        return [r.getMessage() for r in caplog.records if "never tried" in r.getMessage()]

    config = with_tokens(run.config(), WebhookToken(TOKEN))
    assert warnings(config) == []  # only unbound tokens: each is tried for every delivery
    run.save_token("12")
    [said] = warnings(config)
    assert said.startswith("PARTNERKIT_WEBHOOK_TOKENS holds 1 unbound token(s), which are never tried for webhook 12")
    assert "bind it: ID:TOKEN, e.g. 12:<new token>" in said and TOKEN not in said
    assert warnings(config, warn=False) == []  # the gunicorn workers: the master said it once
    assert warnings(with_tokens(run.config(), WebhookToken(TOKEN, "12"))) == []  # bound: the README's form


def test_a_rejection_names_the_x_forwarded_for_it_came_with(client, caplog):
    caplog.set_level(logging.WARNING, logger="receiver")
    body = envelope("evt_forged")
    headers = {"X-Timestamp": "1700000000", "X-Signature": "0" * 64, "X-Forwarded-For": "203.0.113.7, 10.0.0.2"}
    assert client.post("/webhooks/partner", data=body, headers=headers).status_code == 401
    assert client.post("/webhooks/partner", data=body, headers={**headers, "X-Forwarded-For": "x" * 5000}
                       ).status_code == 401
    assert client.post("/webhooks/partner", data=body, headers={"X-Timestamp": "1"}).status_code == 401
    rejected = [r for r in caplog.records if r.getMessage() == "webhook rejected"]
    assert [r.forwarded_for for r in rejected] == ["203.0.113.7, 10.0.0.2", "x" * 200, None]
    assert {r.remote for r in rejected} == {"127.0.0.1"}
