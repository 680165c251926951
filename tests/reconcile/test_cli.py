"""`partnerkit drifts list|resolve|escalate|history` and `partnerkit report` from the command line."""

from __future__ import annotations

import csv
import io
import json
from datetime import timedelta
from types import SimpleNamespace

import getpass

import pytest
from click.testing import CliRunner
from freezegun import freeze_time

from tests.reconcile.reconcile_helpers import DAY, at
from partnerkit.cli import cli
from partnerkit.cli.output import counted
from partnerkit.store import reports as report_store
from partnerkit.store.drifts import audit_trail, get_drift
from partnerkit.store.ledger import record_sync
from partnerkit.timeutil import iso
from reconcile.jobs import report_day
from reconcile.matcher import match_day


@pytest.fixture
def drift_ids(db, ledger):
    ledger.recharge()                      # missing_debit
    ledger.tx("-5.00", type="RECHARGE")    # orphan_transaction
    ledger.read_in_full()                  # by the 15-minute sync: no report stored yet
    match_day(db, DAY, now=at(2, day=DAY + timedelta(days=1)))
    return [r[0] for r in db.execute("SELECT id FROM drifts ORDER BY kind")]


def test_drifts_list_filters_by_kind_and_resolution(invoke, drift_ids):
    result = invoke("drifts", "list", "--format", "json")
    assert result.exit_code == 0 and len(json.loads(result.output)) == 2
    only = json.loads(invoke("drifts", "list", "--kind", "orphan_transaction", "--format", "json").output)
    assert [d["kind"] for d in only] == ["orphan_transaction"] and only[0]["actual"] == "-5.00"
    assert json.loads(invoke("drifts", "list", "--resolution", "resolved", "--format", "json").output) == []


def test_resolve_and_escalate_append_to_the_audit_trail(invoke, db, drift_ids):
    first, second = drift_ids
    assert invoke("drifts", "escalate", first, "--note", "sent to support", "--by", "asha").exit_code == 0
    assert invoke("drifts", "resolve", first, "--note", "credited 16 March", "--by", "ravi").exit_code == 0
    drift = get_drift(db, first)
    assert (drift.resolution, drift.resolution_note, drift.resolution_by) == ("resolved", "credited 16 March", "ravi")
    assert [(a["action"], a["by"]) for a in audit_trail(db, first)] == [
        ("detected", "partnerkit"), ("escalated", "asha"), ("resolved", "ravi")]
    history = invoke("drifts", "history", first, "--format", "csv")
    assert [r["action"] for r in csv.DictReader(io.StringIO(history.output))] == ["detected", "escalated", "resolved"]
    assert invoke("drifts", "resolve", second, "--note", "ok").exit_code == 0  # --by defaults to the OS user
    assert get_drift(db, second).resolution_by


def test_unknown_drift_id_is_a_one_line_error(invoke, drift_ids):
    result = invoke("drifts", "resolve", "d_0000000000000000", "--note", "x")
    assert result.exit_code == 1
    assert result.output.strip().count("\n") == 0 and "no drift with id 'd_0000000000000000'" in result.output


def test_note_is_required(invoke, drift_ids):
    assert invoke("drifts", "escalate", drift_ids[0]).exit_code == 2


@pytest.mark.parametrize("fmt, check", [
    ("json", lambda text: json.loads(text)["date"] == "2025-03-14"),
    ("csv", lambda text: text.startswith("id,kind,subject,reference,expected,actual")),
    ("html", lambda text: "<svg" in text and text.startswith("<!DOCTYPE html>")),
])
def test_report_command_formats_and_output_file(invoke, drift_ids, tmp_path, fmt, check):
    result = invoke("report", "--date", "2025-03-14", "--format", fmt)
    assert result.exit_code == 0 and check(result.stdout)
    target = tmp_path / f"out.{fmt}"
    assert invoke("report", "--date", "2025-03-14", "--format", fmt, "--output", str(target)).exit_code == 0
    written = target.read_bytes()
    assert not written.startswith(b"\xef\xbb\xbf")  # no byte order mark in a file either, as on stdout
    assert check(written.decode("utf-8"))


def test_bad_date_is_refused(invoke):
    result = invoke("report", "--date", "14/03/2025")
    assert result.exit_code == 2 and "YYYY-MM-DD" in result.output


@pytest.mark.parametrize("command", ["reconcile", "report"])
def test_a_future_date_is_refused(invoke, command):
    """A report of a future day has nothing in it, and stored it stopped the nightly reports until then."""
    with freeze_time("2025-03-15T10:00:00Z"):
        result = invoke(command, "--date", "2025-03-16")
    assert result.exit_code == 2 and "2025-03-16 is in the future (today is 2025-03-15 UTC)" in result.output


def test_report_of_today_says_the_day_is_not_over(invoke, drift_ids):
    with freeze_time("2025-03-14T18:00:00Z"):
        result = invoke("report", "--date", "2025-03-14", "--format", "csv")
    assert result.exit_code == 0 and "2025-03-14 is not over yet (UTC)" in result.stderr


def test_report_without_a_stored_one_leaves_the_day_to_the_nightly_run(invoke, db, drift_ids, tmp_path):
    result = invoke("report", "--date", "2025-03-14", "--format", "csv")
    assert result.exit_code == 0 and "matching it from the local store (no sync" in result.stderr
    assert report_store.get_report(db, "2025-03-14") is None  # not synced: the night stays due
    assert (tmp_path / "reports" / "partnerkit-report-2025-03-14.html").exists()


def test_report_by_hand_keeps_files_of_a_night_the_database_has_no_report_of(invoke, db, drift_ids, tmp_path):
    """As the nightly run does (reconcile.jobs.write_report_files): after a restore from a backup older than
    the night, the files finance read are not overwritten by a `partnerkit report` matched from the store."""
    reports = tmp_path / "reports"
    reports.mkdir()
    names = [f"partnerkit-report-2025-03-14.{f}" for f in ("json", "csv", "html")]
    for name in names:  # the night's files, of a report the restored database no longer holds
        (reports / name).write_text(f"the night's {name}, read by finance\n")
    with freeze_time("2025-03-16T09:00:00Z"):
        first = invoke("report", "--date", "2025-03-14", "--format", "csv")
    assert first.exit_code == 0, first.output
    aside = ".replaced-20250316T090000Z-not-in-database"
    assert sorted(p.name for p in reports.iterdir()) == sorted(names + [name + aside for name in names])
    for name in names:
        assert (reports / (name + aside)).read_text() == f"the night's {name}, read by finance\n"
    assert json.loads((reports / names[0]).read_text())["generated_at"] == "2025-03-16T09:00:00Z"
    [warning] = [line for line in first.stderr.splitlines() if line.startswith("warning:")]
    assert warning.startswith("warning: report files of 2025-03-14 replaced although the database has no stored "
                              "report of that night")
    assert str(reports / (names[0] + aside)) in warning and str(reports / names[0]) in warning

    # Run again on the same data: the files there are this report but for its time; replaced, nothing kept.
    with freeze_time("2025-03-16T10:00:00Z"):
        again = invoke("report", "--date", "2025-03-14", "--format", "csv")
    assert again.exit_code == 0 and "warning:" not in again.stderr
    assert len(list(reports.iterdir())) == 6
    assert json.loads((reports / names[0]).read_text())["generated_at"] == "2025-03-16T10:00:00Z"

    # A resolution since: another report, and the one there may have been read: kept too.
    assert invoke("drifts", "resolve", drift_ids[0], "--note", "credited", "--by", "asha").exit_code == 0
    with freeze_time("2025-03-16T11:00:00Z"):
        changed = invoke("report", "--date", "2025-03-14", "--format", "csv")
    assert changed.exit_code == 0 and "warning: report files of 2025-03-14 replaced" in changed.stderr
    kept = json.loads((reports / (names[0] + ".replaced-20250316T110000Z-not-in-database")).read_text())
    assert kept["generated_at"] == "2025-03-16T10:00:00Z"
    assert report_store.get_report(db, "2025-03-14") is None  # still the nightly run's to report


@pytest.mark.parametrize("output", [None, "out.html"])
def test_a_report_directory_that_cannot_be_written_still_gives_the_output_asked_for(invoke, drift_ids, tmp_path,
                                                                                      output):
    # Finance asks for one file; the three files in PARTNERKIT_REPORT_DIR are a side effect.
    (tmp_path / "reports").write_text("a file where the report directory belongs")
    args = ["report", "--date", "2025-03-14", "--format", "html"] + (["--output", str(tmp_path / output)]
                                                                    if output else [])
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    page = (tmp_path / output).read_text() if output else result.stdout
    assert page.startswith("<!DOCTYPE html>")
    assert "warning: the report files were not written to PARTNERKIT_REPORT_DIR" in result.stderr
    assert "is a file where a directory is needed" in result.stderr


@pytest.mark.parametrize("output", [None, "out.html"])
@pytest.mark.parametrize("synced", [(), ("recharges",)])
def test_report_of_a_day_no_sync_read_in_full_is_refused_and_writes_nothing(invoke, db, ledger, tmp_path, synced,
                                                                             output):
    """Matched from a store that never read the day, the files said "every recharge, order and transaction
    of the day reconciles" in the report directory, beside the real nightly ones."""
    ledger.tx("-17.00", type="RECHARGE", reference_number="GHOST", day=DAY - timedelta(days=5))  # never synced
    day = (DAY - timedelta(days=5)).isoformat()
    for entity in synced:
        record_sync(db, entity, from_day=day, to_day=day, started_at=iso(at(2)), count=0, days=[day], advance_to=None)
    args = ["report", "--date", day, "--format", "html"] + (["--output", str(tmp_path / output)] if output else [])
    result = invoke(*args)
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr.strip() == (f"Error: no stored report for {day}, and no sync has read that day in full: the "
                                     f"local store cannot vouch for it; `partnerkit reconcile --date {day}` syncs "
                                     "and reports it (nothing written)")
    assert not (tmp_path / "reports").exists() and not (tmp_path / "out.html").exists()
    assert report_store.get_report(db, day) is None and db.execute("SELECT COUNT(*) FROM drifts").fetchone()[0] == 0


def test_a_stored_report_is_shown_whatever_the_days_coverage(invoke, db, ledger, tmp_path):
    ledger.tx("-5.00", type="RECHARGE")  # an orphan
    report_day(SimpleNamespace(report_dir=tmp_path / "kept"), db, DAY, now=at(2, day=DAY + timedelta(days=1)))
    assert report_store.get_report(db, DAY.isoformat()) is not None
    result = invoke("report", "--date", DAY.isoformat(), "--format", "json", "--output", str(tmp_path / "out.json"))
    assert result.exit_code == 0 and json.loads((tmp_path / "out.json").read_text())["summary"]["unmatched"] == 1


@pytest.mark.parametrize("option, value", [("--note", ""), ("--note", "   "), ("--by", ""), ("--by", "\t")])
@pytest.mark.parametrize("action", ["resolve", "escalate"])
def test_an_empty_note_or_name_is_refused_and_nothing_is_recorded(invoke, db, drift_ids, action, option, value):
    args = {"--note": "credited", "--by": "asha", option: value}
    result = invoke("drifts", action, drift_ids[0], *[x for pair in args.items() for x in pair])
    assert result.exit_code == 2 and f"Invalid value for '{option}': must not be empty" in result.output
    assert get_drift(db, drift_ids[0]).resolution == "pending"
    assert [a["action"] for a in audit_trail(db, drift_ids[0])] == ["detected"]


def test_kind_and_resolution_are_accepted_in_any_case(invoke, drift_ids):
    found = json.loads(invoke("drifts", "list", "--kind", "ORPHAN_TRANSACTION", "--resolution", "Pending",
                              "--format", "json").output)
    assert [d["kind"] for d in found] == ["orphan_transaction"]


def test_by_defaults_to_the_uid_when_the_os_user_has_no_name(invoke, db, drift_ids, monkeypatch):
    """A container's uid without a passwd entry: getpass.getuser() raises KeyError."""
    def no_name():
        raise KeyError("getpwuid(): uid not found: 54321")

    monkeypatch.setattr(getpass, "getuser", no_name)
    monkeypatch.delenv("SUDO_USER", raising=False)
    result = invoke("drifts", "resolve", drift_ids[0], "--note", "credited")
    assert result.exit_code == 0, result.output
    assert get_drift(db, drift_ids[0]).resolution_by.startswith("uid ")


@pytest.mark.parametrize("sudo_user, by", [("asha", "asha"), (None, "login"), ("", "login")])
def test_by_defaults_to_the_user_who_ran_sudo_else_the_login_name(invoke, db, drift_ids, monkeypatch, sudo_user, by):
    """Finance runs `sudo -u partnerkit partnerkit drifts resolve ...` (the database is the service's): sudo
    sets USER and LOGNAME to partnerkit, the name partnerkit's own audit rows carry."""
    monkeypatch.setenv("USER", "partnerkit")
    monkeypatch.setenv("LOGNAME", "partnerkit")
    monkeypatch.setattr(getpass, "getuser", lambda: "login")
    if sudo_user is None:
        monkeypatch.delenv("SUDO_USER", raising=False)
    else:
        monkeypatch.setenv("SUDO_USER", sudo_user)
    assert invoke("drifts", "escalate", drift_ids[0], "--note", "sent to support").exit_code == 0
    assert get_drift(db, drift_ids[0]).resolution_by == by
    assert audit_trail(db, drift_ids[0])[-1]["by"] == by
    assert invoke("drifts", "resolve", drift_ids[1], "--note", "ok", "--by", "ravi").exit_code == 0  # --by wins
    assert get_drift(db, drift_ids[1]).resolution_by == "ravi"


def test_drifts_list_gives_when_each_drift_was_detected_and_resolved_and_why(invoke, db, drift_ids):
    assert invoke("drifts", "resolve", drift_ids[0], "--note", "checked", "--by", "asha").exit_code == 0
    first_eleven = ["id", "kind", "subject", "reference", "expected", "actual", "currency", "report_date",
                    "resolution", "resolution_by", "resolution_note"]
    listed = json.loads(invoke("drifts", "list", "--format", "json").output)
    added = ["detected_at", "resolution_at", "detail", "unit", "transaction_ids"]  # after the eleven, in this order
    assert [list(d) for d in listed] == [first_eleven + added] * 2
    resolved = next(d for d in listed if d["id"] == drift_ids[0])
    drift = get_drift(db, drift_ids[0])
    assert (resolved["detected_at"], resolved["resolution_at"], resolved["detail"]) == (
        drift.detected_at, drift.resolution_at, drift.detail) and drift.detail and drift.resolution_at
    as_csv = invoke("drifts", "list", "--format", "csv").output
    assert as_csv.splitlines()[0] == ",".join(first_eleven + added)
    assert {r["detail"] for r in csv.DictReader(io.StringIO(as_csv))} == {get_drift(db, i).detail for i in drift_ids}
    table = invoke("drifts", "list").output.splitlines()
    assert table[0].split() == [c.upper() for c in first_eleven + ["detected_at"]]
    assert all(line.rstrip().endswith(get_drift(db, i).detected_at) for line, i in zip(table[1:], drift_ids))


def test_a_report_by_hand_of_a_day_last_read_before_midnight_is_not_final(invoke, drift_ids, tmp_path):
    """The worker stopped at 23:50 (its 15-minute sync's last read); the morning after, finance runs `report`:
    the day's last minutes are not in the store, and the report must not read as final."""
    with freeze_time("2025-03-15T09:00:00Z"):
        report = json.loads(invoke("report", "--date", "2025-03-14", "--format", "json").stdout)
        page = invoke("report", "--date", "2025-03-14", "--format", "html").stdout
    assert (report["partial"], report["read_in_full"], report["complete"]) == (False, False, False)
    assert report["day_read_at"] == {"recharges": "2025-03-14T23:50:00Z", "transactions": "2025-03-14T23:50:00Z"}
    assert "Not read in full since the day ended" in page and "began at 2025-03-14T23:50:00Z" in page


def test_drifts_list_shows_a_voucher_count_as_a_count(invoke, db, ledger):
    short = ledger.order(quantity=3, vouchers=2)  # voucher_shortfall: expected 3, actual 2 vouchers
    ledger.debit_order(short, "500.00")
    match_day(db, DAY, now=at(2, day=DAY + timedelta(days=1)))
    table = invoke("drifts", "list").output
    assert "3 vouchers  2 vouchers  INR" in table
    [row] = csv.DictReader(io.StringIO(invoke("drifts", "list", "--format", "csv").output))
    assert (row["expected"], row["actual"], row["currency"], row["unit"]) == ("3", "2", "INR", "vouchers")


def test_report_help_says_what_each_format_holds(invoke):
    text = " ".join(invoke("report", "--help").output.split())
    assert "csv (the drift table)" in text and "html (one self-contained page)" in text


@pytest.mark.parametrize("args", [
    ["drifts", "list"], ["drifts", "history", "d_1a2b3c4d5e6f7a8b"], ["drifts", "show", "d_1a2b3c4d5e6f7a8b"],
    ["drifts", "resolve", "d_1a2b3c4d5e6f7a8b", "--note", "n"], ["drifts", "escalate", "d_1a2b3c4d5e6f7a8b", "--note", "n"],
    ["report", "--date", "2025-03-14", "--format", "html"],
])
def test_a_database_that_does_not_exist_is_named_not_created(args, tmp_path, monkeypatch):
    # A mistyped PARTNERKIT_DB answered "no drifts match", or an all-zero report whose files replaced the
    # real ones in the report directory, from a new empty database created on the spot.
    missing = tmp_path / "typo" / "partnerkit.db"
    monkeypatch.setenv("PARTNERKIT_DB", str(missing))
    monkeypatch.setenv("PARTNERKIT_REPORT_DIR", str(tmp_path / "reports"))
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr.strip() == (f"Error: cannot open database {str(missing)!r}: it does not exist "
                                     "(check PARTNERKIT_DB or --config; the worker creates it)")
    assert not missing.parent.exists() and not (tmp_path / "reports").exists()


def test_reconcile_on_a_database_that_does_not_exist_creates_it_with_a_warning(sandbox_server, tmp_path,
                                                                                 monkeypatch):
    # A first run on a new database is legitimate (the sync fills it from the provider), but a mistyped
    # PARTNERKIT_DB used to create one silently and report every provider recharge as unknown_to_partner.
    missing = tmp_path / "typo" / "partnerkit.db"
    client = sandbox_server.clients[0]
    for name, value in {"PARTNERKIT_DB": str(missing), "PARTNERKIT_REPORT_DIR": str(tmp_path / "reports"),
                        "PARTNERKIT_API_BASE_URL": sandbox_server.base_url, "PARTNERKIT_API_KEY": client.key,
                        "PARTNERKIT_API_SECRET": client.secret}.items():
        monkeypatch.setenv(name, value)
    today = sandbox_server.clock.now().date()
    day = (today - timedelta(days=1)).isoformat()
    first = CliRunner().invoke(cli, ["reconcile", "--date", day])
    assert first.exit_code == 0, first.output
    warning, reading, summary, nothing = first.stderr.splitlines()
    assert warning == (f"warning: database {str(missing)!r} (PARTNERKIT_DB, from the environment) did not exist and "
                       f"was created (a first start; created directory {str(missing.parent)!r} for it, mode 0700); "
                       "if partnerkit already keeps its database elsewhere, check "
                       "PARTNERKIT_DB or --config: the receiver, the worker and the commands must all use the same one")
    assert reading == (f"{day}: syncing {day}..{today} from the provider ({today} so far): the day after too, for a "
                       "credit back or a debit dated after midnight")
    assert summary.startswith(f"{day}: 0 recharges, 0 orders, 0 transactions; 0 matched") and missing.exists()
    # The sandbox's day so far (synced too) holds its seeded records: the first day the store holds any.
    assert nothing == (f"nothing was recorded on {day} (no recharge, transaction or order): was the date right? ("
                       f"the first day the store holds any is {today})")
    assert (tmp_path / "reports" / f"partnerkit-report-{day}.json").exists()
    again = CliRunner().invoke(cli, ["reconcile", "--date", day])
    assert again.exit_code == 0 and again.stderr.startswith(f"{day}: ") and "warning" not in again.stderr


def test_a_note_with_a_line_break_stays_on_its_row_in_tables(invoke, db, drift_ids):
    # A pasted note spilled onto a line of its own that read like the next row; CSV and JSON keep it as is.
    assert invoke("drifts", "resolve", drift_ids[0], "--note", "credited\nticket 9\x1b[31m", "--by", "asha").exit_code == 0
    listed = invoke("drifts", "list", "--resolution", "resolved").output.splitlines()
    assert len(listed) == 2 and "credited\\nticket 9\\x1b[31m" in listed[1]
    history = invoke("drifts", "history", drift_ids[0]).output.splitlines()
    assert len(history) == 3 and "credited\\nticket 9\\x1b[31m" in history[2]
    assert get_drift(db, drift_ids[0]).resolution_note == "credited\nticket 9\x1b[31m"  # stored as typed
    as_csv = list(csv.DictReader(io.StringIO(invoke("drifts", "list", "--format", "csv").output)))
    assert "credited\nticket 9" in {row["resolution_note"] for row in as_csv}  # CSV quotes the line break


def test_help_gives_the_date_format_and_what_report_writes(invoke):
    assert "--date TEXT" in invoke("drifts", "list", "--help").output
    assert "YYYY-MM-DD" in " ".join(invoke("drifts", "list", "--help").output.split())
    # report of a day without a stored report also writes the day's three files (docs/reconcile.md).
    text = " ".join(invoke("report", "--help").output.split())
    assert "writes its three files to PARTNERKIT_REPORT_DIR" in text


def test_reconcile_progress_is_printed_at_most_every_few_seconds(capsys):
    from datetime import date

    from partnerkit.cli.output import Progress

    with freeze_time("2025-03-14T01:00:00Z") as clock:
        progress = Progress(date(2025, 3, 13), every=5.0)
        progress("recharges", 5000)  # at once: nothing yet
        clock.tick(6)
        progress("recharges", 150000)
        clock.tick(1)
        progress("transactions", 500)  # a second later: nothing
    assert capsys.readouterr().err == "2025-03-13: recharges, 150,000 read so far\n"


@pytest.mark.parametrize("n, text", [(0, "0 drifts"), (1, "1 drift"), (2, "2 drifts"), (100100, "100,100 drifts")])
def test_a_count_is_said_with_its_noun(n, text):
    assert counted(n, "drift") == text
    assert counted(n, "delivery", "deliveries") == text.replace("drifts", "deliveries").replace("drift", "delivery")
