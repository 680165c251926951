"""`partnerkit recharges ...` and `partnerkit worker --once` through click, on the sandbox."""

from __future__ import annotations

import csv
import io
import json
import logging
from dataclasses import replace

import pytest
from click.testing import CliRunner

from partnerkit.cli import cli
from partnerkit.config import config_as_env
from tests.worker.worker_helpers import mobile


@pytest.fixture
def run(config, monkeypatch):
    """The CLI in process with the test's settings; the database is not created here: `recharges submit` refuses
    a missing one (exit 2), so a test that submits takes `wdb`, and one that must open none can check it."""
    for name, value in config_as_env(config).items():
        monkeypatch.setenv(name, value)
    runner = CliRunner()

    def invoke(*args: str):
        return runner.invoke(cli, list(args), catch_exceptions=False)

    return invoke


def test_submit_prints_the_document_fields_with_money_as_strings(run, wdb):
    result = run("recharges", "submit", "--mobile", mobile(5), "--operator-id", "1", "--amount", "199",
                 "--client-reference", "shop-42", "--format", "json")
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    assert body["status"] == "PROCESSING" and body["reference_number"].startswith("RCH")
    assert body["face"] == "199.00" and body["payable"] == "194.02" and body["discount"] == "4.98"
    assert body["client_reference"] == "shop-42" and isinstance(body["id"], int) and body["local_id"] == 1
    assert "polls it until it settles" in result.stderr


def test_list_and_show_by_local_id_provider_id_or_reference(run, wdb):
    run("recharges", "submit", "--mobile", mobile(0), "--operator-id", "1", "--amount", "99")
    listed = json.loads(run("recharges", "list", "--format", "json").stdout)
    [row] = listed
    for key in (str(row["local_id"]), str(row["id"]), row["reference_number"]):
        shown = json.loads(run("recharges", "show", key, "--format", "json").stdout)
        assert shown["id"] == row["id"] and shown["payable"] == row["payable"]
    assert json.loads(run("recharges", "list", "--status", "FAILED", "--format", "json").stdout) == []
    table = run("recharges", "list").stdout
    assert table.splitlines()[0].split()[:4] == ["LOCAL_ID", "ID", "REFERENCE_NUMBER", "STATUS"]
    csv = run("recharges", "show", str(row["id"]), "--format", "csv").stdout
    assert csv.splitlines()[0] == "field,value" and f"payable,{row['payable']}" in csv and row["payable"] == "96.52"
    missing = CliRunner().invoke(cli, ["recharges", "show", "nope"])
    assert missing.exit_code == 1 and "no recharge with id" in missing.output


def test_an_unknown_recharge_shows_the_amount_asked_for_apart_from_the_provider_s_face(run, wdb):
    """FACE was blank for an UNKNOWN recharge (its answer never came), though the amount asked for is known: AMOUNT
    shows it, and FACE stays the provider's figure, blank, never filled with a number the provider did not give."""
    from datetime import datetime, timezone
    from decimal import Decimal

    from partnerkit.store import recharges as store

    asked, answered_number = mobile(1), mobile(0)
    lost = store.record_intent(wdb, idempotency_key="key-lost-answer", mobile_number=asked, operator_id=1,
                               amount=Decimal("149"), client_reference=None,
                               submitted_at=datetime(2025, 3, 14, 9, tzinfo=timezone.utc))
    store.mark_unknown(wdb, lost, "timeout", datetime(2025, 3, 14, 9, 1, tzinfo=timezone.utc))
    assert run("recharges", "submit", "--mobile", answered_number, "--operator-id", "1", "--amount", "99").exit_code == 0
    header, answered, unknown = (line.split() for line in run("recharges", "list").stdout.splitlines())
    assert header == ["LOCAL_ID", "ID", "REFERENCE_NUMBER", "STATUS", "MOBILE_NUMBER", "AMOUNT", "FACE", "PAYABLE",
                      "CREATED_AT"]
    assert unknown == [str(lost), "UNKNOWN", asked, "149.00"]  # no id, reference, face, payable or time yet
    assert answered[4:8] == [answered_number, "99.00", "99.00", "96.52"]  # asked for, and the provider's face
    rows = list(csv.DictReader(io.StringIO(run("recharges", "list", "--format", "csv").stdout)))
    assert list(rows[0]) == ["local_id", "id", "reference_number", "status", "mobile_number", "face", "payable",
                             "created_at", "amount"]  # the earlier columns keep their places
    assert [(r["status"], r["amount"], r["face"]) for r in rows] == [(answered[3], "99.00", "99.00"),
                                                                    ("UNKNOWN", "149.00", "")]
    listed = json.loads(run("recharges", "list", "--format", "json").stdout)
    assert [(r["amount"], r["face"]) for r in listed] == [("99.00", "99.00"), ("149.00", None)]


def test_a_409_names_the_force_option_and_exits_non_zero(run, wdb):
    number = mobile(0)
    assert run("recharges", "submit", "--mobile", number, "--operator-id", "1", "--amount", "50").exit_code == 0
    again = CliRunner().invoke(cli, ["recharges", "submit", "--mobile", number, "--operator-id", "1", "--amount", "50"])
    assert again.exit_code == 1 and "--force" in again.output
    forced = run("recharges", "submit", "--mobile", number, "--operator-id", "1", "--amount", "50", "--force")
    assert forced.exit_code == 0


def test_failed_exits_1_and_a_bad_number_is_refused_locally(run, wdb):
    failed = CliRunner().invoke(cli, ["recharges", "submit", "--mobile", mobile(4), "--operator-id", "1",
                                      "--amount", "10"])
    assert failed.exit_code == 1 and "credited back" in failed.output
    bad = CliRunner().invoke(cli, ["recharges", "submit", "--mobile", "+91 98765", "--operator-id", "1",
                                   "--amount", "10"])
    # Refused while parsing, as the provider would ("invalid mobile number"): a usage error, nothing sent.
    assert bad.exit_code == 2 and bad.output.splitlines()[0].startswith("Usage: ")
    assert bad.output.splitlines()[-1] == ("Error: Invalid value for '--mobile': '+91 98765' is not a mobile number: "
                                           "10 digits, no +91, spaces or dashes")


def test_locate_by_hand_needs_a_local_id_or_number_and_amount(run, wdb):
    usage = CliRunner().invoke(cli, ["recharges", "locate", "--mobile", "9876543210"])
    assert usage.exit_code == 2 and "--local-id N, or --mobile M --amount A" in usage.output
    run("recharges", "submit", "--mobile", mobile(5), "--operator-id", "1", "--amount", "75")
    known = run("recharges", "locate", "--local-id", "1", "--format", "json")
    assert known.exit_code == 0 and json.loads(known.stdout)["status"] == "PROCESSING"


def test_worker_once_runs_one_pass_and_reports_each_job(run):
    result = CliRunner().invoke(cli, ["worker", "--once", "--format", "json"])
    jobs = {r["job"]: r["outcome"] for r in json.loads(result.stdout)}
    assert set(jobs) == {"poll-recharges", "fetch-vouchers", "catch-up-orders", "sync-recent", "nightly-report",
                         "prune-events"}
    assert jobs["poll-recharges"] == "ok"
    assert result.exit_code == (1 if {"error", "unavailable"} & set(jobs.values()) else 0)


def test_worker_once_shows_each_jobs_result_as_json_in_the_table(run):
    # The table and CSV showed a job's result as a Python repr: {'escalated': [], 'backing_off_until': None}.
    table = CliRunner().invoke(cli, ["worker", "--once"]).stdout.splitlines()
    poll = next(line for line in table if line.startswith("poll-recharges"))
    result = json.loads(poll[poll.index("{"):])
    assert result["escalated"] == [] and result["backing_off_until"] is None
    rows = list(csv.DictReader(io.StringIO(CliRunner().invoke(cli, ["worker", "--once", "--format", "csv"]).stdout)))
    assert json.loads(rows[0]["result"])["budget_exhausted"] is False


def test_locate_without_a_local_intent_prints_the_providers_matches_as_one_object(run, client):
    number = mobile(0)
    client.submit_recharge(mobile_number=number, operator_id=1, amount=99, client_reference="elsewhere")
    result = run("recharges", "locate", "--mobile", number, "--amount", "99", "--format", "json")
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout)
    assert body["status"] == "NOT_RECORDED" and body["local_id"] is None and body["mobile_number"] == number
    [match] = body["matches"]
    assert match["face"] == "99.00" and match["client_reference"] == "elsewhere" and match["created_at"].endswith("Z")
    assert "1 matching recharge" in result.stderr
    rows = list(csv.DictReader(io.StringIO(run("recharges", "locate", "--mobile", number, "--amount", "99",
                                               "--format", "csv").stdout)))
    assert [r["client_reference"] for r in rows] == ["elsewhere"]


@pytest.mark.parametrize("command", ["submit", "locate"])
def test_submit_and_locate_help_give_their_exit_codes(run, command):
    """A script must tell UNKNOWN (3: locate later, never resubmit) from FAILED (1); only the module
    docstring and docs/worker.md said so."""
    text = " ".join(run("recharges", command, "--help").output.split())
    assert ("Exit code 0 when the recharge is SUCCESS, PROCESSING or REVERSED, 1 when it FAILED or on an error, "
            "3 when its outcome is UNKNOWN") in text


def test_list_help_says_what_intent_and_unknown_mean(run):
    text = " ".join(run("recharges", "list", "--help").output.split())
    assert "INTENT: recorded, no answer yet" in text and "UNKNOWN: the answer was lost" in text


def test_submit_with_the_key_of_a_local_recharge_answers_as_locate_and_sends_nothing_new(run, server, wdb):
    """`--idempotency-key K` of a recharge partnerkit recorded: the same request is that recharge's locate
    (its step 1 replays K); another request under K is one line naming it. Never "database write failed"."""
    number = mobile(0)
    args = ["recharges", "submit", "--mobile", number, "--operator-id", "1", "--amount", "21",
            "--idempotency-key", "samekey-h12-0001"]
    first = run(*args, "--format", "json")
    assert first.exit_code == 0, first.output
    again = run(*args, "--format", "json")
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["local_id"] == json.loads(first.stdout)["local_id"] == 1
    assert "is local recharge #1's: ran its locate instead of submitting again" in again.stderr
    other = run("recharges", "submit", "--mobile", number, "--operator-id", "1", "--amount", "22",
                "--idempotency-key", "samekey-h12-0001")
    assert other.exit_code == 1 and len(other.output.strip().splitlines()) == 1
    assert "Idempotency-Key samekey-h12-0001 is local recharge #1's" in other.output
    assert "amount differ" in other.output and "database" not in other.output
    assert server.sandbox.calls["POST /api/v1/recharges"] == 1
    assert sum(1 for rc in server.sandbox.recharges.values() if rc.mobile_number == number) == 1


def test_locate_without_a_local_intent_exits_1_when_the_provider_could_not_be_read_in_full(run, client, server):
    """"0 matching recharges" from records the client could not read would be a guess (nit 1)."""
    number = mobile(0)
    client.submit_recharge(mobile_number=number, operator_id=1, amount=99, client_reference="elsewhere")
    server.sandbox.settings.faults = {"missing_fields": {"scope": "GET /api/v1/recharges", "fields": ["status"]}}
    result = run("recharges", "locate", "--mobile", number, "--amount", "99")
    assert result.exit_code == 1
    assert (f"No local intent for {number} / 99; the provider could not be checked in full (search by number: "
            "1 record(s) could not be read); it shows 0 matching recharge(s) so far") in result.stderr


def test_recharges_list_shows_the_newest_100_unless_told_and_says_when_it_cut(db, db_path):
    """A store holds every recharge since its first day: `recharges list` printed (and sorted) them all."""
    from datetime import datetime, timedelta, timezone
    from decimal import Decimal

    from partnerkit.store import recharges as store

    first = datetime(2025, 3, 14, tzinfo=timezone.utc)
    for n in range(102):
        store.record_intent(db, idempotency_key=f"key-list-{n:04d}", mobile_number=mobile(n % 7), operator_id=1,
                            amount=Decimal("10"), client_reference=None, submitted_at=first + timedelta(minutes=n))
    env = {"PARTNERKIT_DB": str(db_path)}
    listed = CliRunner().invoke(cli, ["recharges", "list", "--format", "json"], env=env)
    rows = json.loads(listed.stdout)
    assert len(rows) == 100 and rows[0]["local_id"] == 102 and rows[-1]["local_id"] == 3
    assert listed.stderr.strip() == "the newest 100 recharges are shown; --limit N shows more"  # a cut JSON says so
    table = CliRunner().invoke(cli, ["recharges", "list"], env=env)
    assert len(table.stdout.splitlines()) == 101  # header and 100 rows
    assert table.stderr.strip() == "the newest 100 recharges are shown; --limit N shows more"
    whole = CliRunner().invoke(cli, ["recharges", "list", "--limit", "102"], env=env)
    assert len(whole.stdout.splitlines()) == 103 and whole.stderr == ""
    none = CliRunner().invoke(cli, ["recharges", "list", "--status", "FAILED"], env=env)
    assert none.exit_code == 0 and "no recharges in status FAILED" in none.output


def test_a_worker_on_a_database_that_does_not_exist_creates_it_and_says_so_once(config, tmp_path, caplog):
    """A first start creates the database; a mistyped PARTNERKIT_DB does too, and the log line naming it is
    what tells the two apart (the worker would report days from an empty store the receiver never writes)."""
    fresh = tmp_path / "fresh" / "pk.db"
    env = config_as_env(replace(config, db_path=fresh))
    said = []
    for _ in range(2):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="partnerkit.worker"):
            result = CliRunner().invoke(cli, ["worker", "--once", "--format", "json"], env=env)
        assert {r["job"] for r in json.loads(result.stdout)} >= {"poll-recharges", "sync-recent"}, result.output
        said.append([r.getMessage() for r in caplog.records if r.name == "partnerkit.worker"])
    assert fresh.exists()
    assert said == [[f"database {str(fresh)!r} (PARTNERKIT_DB, from the environment) does not exist: the worker "
                     f"creates it (a first start; it creates directory {str(fresh.parent)!r} for it, mode 0700); if partnerkit already keeps its database elsewhere, check PARTNERKIT_DB or --config: the receiver, the worker "
                     "and the commands must all use the same one"], []]


@pytest.mark.parametrize("key", ["my key 0001", "ключ-0001-abc"])
def test_a_key_the_client_would_refuse_is_one_line_with_nothing_recorded_or_sent(run, server, config, key):
    """The client refuses such a key when sending it; submit recorded the intent first, so it printed a
    traceback and left an UNKNOWN recharge that was never sent (findings-dev F1)."""
    result = CliRunner().invoke(cli, ["recharges", "submit", "--mobile", mobile(0), "--operator-id", "1",
                                      "--amount", "10", "--idempotency-key", key])
    assert result.exit_code == 2 and result.output.splitlines()[0].startswith("Usage: ")  # a usage error
    assert result.output.splitlines()[-1] == ("Error: Invalid value for '--idempotency-key': Idempotency-Key must be "
                                              "visible ASCII without spaces (it is sent as a header)")
    assert not config.db_path.exists()  # refused while parsing: not even a database opened
    assert server.sandbox.calls["POST /api/v1/recharges"] == 0


def test_submit_help_states_the_key_rule_the_client_checks(run):
    text = " ".join(run("recharges", "submit", "--help").output.split())
    assert "8-256 visible ASCII characters, no spaces" in text
