"""The report: JSON contract fields and money strings, CSV columns, HTML self-contained with an SVG chart."""

from __future__ import annotations

import csv
import errno
import io
import json
import logging
import os
import re
from pathlib import Path
from datetime import timedelta

import pytest
from freezegun import freeze_time

from tests.reconcile.reconcile_helpers import DAY, at
from partnerkit.config import load_config
from partnerkit.store.drifts import set_resolution
from reconcile.jobs import REPORT_FORMATS, current_report, report_day, report_filename, write_report_files
from partnerkit.store.drifts import KINDS
from reconcile.drift_guide import KIND_GUIDE, KIND_ORDER
from reconcile.report import (CSV_FIELDS, DRIFT_FIELDS, _stored_amount, chart_bars, grouped, render_csv, render_html,
                              render_json, shown_drifts)

MONEY = re.compile(r"^-?\d+\.\d{2}$")
RUN = at(2, day=DAY + timedelta(days=1))


@pytest.fixture
def config(db_path, tmp_path):
    return load_config(environ={"PARTNERKIT_DB": str(db_path), "PARTNERKIT_REPORT_DIR": str(tmp_path / "reports")})


@pytest.fixture
def report(db, ledger, config):
    good = ledger.recharge(payable="98.50")
    ledger.debit_recharge(good, hour=9)
    failed = ledger.recharge("FAILED")
    ledger.debit_recharge(failed, hour=14)
    ledger.recharge()  # missing_debit
    ledger.tx("-12.00", id="<img src=http://evil.example/x>", type="RECHARGE", hour=14)  # orphan, hostile id
    oid = ledger.order(amount="6.00", currency="USD")
    ledger.debit_order(oid, "510.00")
    ledger.tx("-7.65", type="FX_FEE", order_id=oid, hour=11)  # the conversion's charge: spend, not a duplicate
    ledger.quarantine("no amount")
    return report_day(config, db, DAY, now=RUN)


def test_json_has_the_contract_fields(report):
    assert {"date", "generated_at", "summary", "drifts", "counts_by_status"} <= set(report)
    assert report["date"] == "2025-03-14" and report["generated_at"] == "2025-03-15T02:00:00Z"
    summary = report["summary"]
    for key in ("recharges_total", "orders_total", "transactions_total", "matched", "drifted", "unmatched"):
        assert isinstance(summary[key], int), key
    assert (summary["recharges_total"], summary["orders_total"], summary["transactions_total"]) == (3, 1, 5)
    assert (summary["matched"], summary["drifted"], summary["unmatched"]) == (2, 2, 1)
    assert summary["spend"] == {"INR": "726.15"} and summary["refunds"] == {"INR": "0.00"}
    assert summary["quarantined"] == 1 and summary["conversions"] == 1
    [conversion] = report["conversions"]
    assert (conversion["debited"], conversion["charges"], conversion["wallet_currency"]) == ("510.00", "7.65", "INR")
    assert report["counts_by_status"]["recharges"] == {"FAILED": 1, "SUCCESS": 2}
    assert report["counts_by_status"]["drifts"] == {"pending": 3, "resolved": 0, "escalated": 0}


def test_drifts_carry_every_field_with_money_as_two_decimal_strings(report):
    kinds = {d["kind"] for d in report["drifts"]}
    assert kinds == {"missing_debit", "missing_refund", "orphan_transaction"}
    for drift in report["drifts"]:
        assert set(DRIFT_FIELDS) <= set(drift)
        assert drift["resolution"] == "pending" and drift["id"].startswith("d_")
        for key in ("expected", "actual"):
            assert drift[key] is None or MONEY.match(drift[key]), drift
    assert all(MONEY.match(v) for hours in report["spend_by_hour"].values() for v in hours)
    assert report["spend_by_hour"]["INR"][14] == "110.00"


def test_json_round_trips_and_is_written_as_files(report, config):
    assert json.loads(render_json(report)) == report
    names = sorted(p.name for p in config.report_dir.iterdir())
    assert names == [report_filename("2025-03-14", f) for f in ("csv", "html", "json")]
    assert json.loads((config.report_dir / report_filename("2025-03-14", "json")).read_text()) == report


def _files(directory: Path) -> dict[str, bytes]:
    """Every entry of the report directory (hidden temp files included), a file's bytes or b"<dir>"."""
    return {p.name: b"<dir>" if p.is_dir() else p.read_bytes() for p in directory.iterdir()}


@pytest.fixture
def later(db, config, report):
    """A second run's report of the same day (another generated_at), its files not written yet."""
    return report_day(config, db, DAY, now=RUN + timedelta(hours=1), save=False, files=False)


def test_the_three_files_are_renamed_into_place_json_last_each_with_the_run_s_generated_at(config, report, later):
    assert [p.name for p in write_report_files(config.report_dir, later)] == [
        report_filename("2025-03-14", f) for f in ("json", "csv", "html")]
    assert REPORT_FORMATS == ("html", "csv", "json")  # the CSV, without a generated_at, between the two with one
    files = _files(config.report_dir)
    assert set(files) == {report_filename("2025-03-14", f) for f in ("json", "csv", "html")}
    assert json.loads(files[report_filename("2025-03-14", "json")])["generated_at"] == "2025-03-15T03:00:00Z"
    assert b"Generated 2025-03-15T03:00:00Z by partnerkit" in files[report_filename("2025-03-14", "html")]


def test_a_second_file_that_cannot_be_put_in_place_leaves_the_previous_set_untouched(config, report, later):
    """The CSV's name is taken by a directory (a real OS refusal: rename onto a directory fails): nothing
    is renamed, not even the JSON and HTML written before it, and no temp file is left behind."""
    csv_path = config.report_dir / report_filename("2025-03-14", "csv")
    csv_path.unlink()
    csv_path.mkdir()
    before = _files(config.report_dir)
    with pytest.raises(IsADirectoryError) as info:
        write_report_files(config.report_dir, later)
    assert info.value.filename == str(csv_path)
    assert _files(config.report_dir) == before
    assert json.loads(before[report_filename("2025-03-14", "json")])["generated_at"] == report["generated_at"]


def test_a_disk_full_while_writing_the_second_file_leaves_the_previous_set_untouched(db, ledger, tmp_path):
    """A real full filesystem (a tmpfs, root only): the HTML's temp file fits, the CSV's does not."""
    from tests.reliability.storage_faults import fill, tiny_filesystem

    reports = tmp_path / "reports"
    config = load_config(environ={"PARTNERKIT_DB": str(tmp_path / "partnerkit.db"), "PARTNERKIT_REPORT_DIR": str(reports)})
    ledger.recharge()  # missing_debit: the CSV has a row
    with tiny_filesystem(reports, "1m"):
        report_day(config, db, DAY, now=RUN)
        before = _files(reports)
        later = report_day(config, db, DAY, now=RUN + timedelta(hours=1), save=False, files=False)
        filler = fill(reports)
        pages = -(-len(render_html(later).encode()) // 4096)  # what the HTML's temp file takes, no more
        os.truncate(filler, filler.stat().st_size - pages * 4096)
        with pytest.raises(OSError) as info:
            write_report_files(reports, later)
        after = _files(reports)
    assert info.value.errno == errno.ENOSPC
    # write() carries no file name: the error names the file and the setting, not just "No space left on device".
    assert info.value.filename == str(reports / report_filename("2025-03-14", "csv"))
    assert f"(writing the report of 2025-03-14 into PARTNERKIT_REPORT_DIR {reports})" in str(info.value)
    assert {k: v for k, v in after.items() if k != filler.name} == before


def test_files_of_a_night_the_database_has_no_report_of_are_kept_aside_not_overwritten(db, ledger, config, tmp_path,
                                                                                      caplog):
    """After a restore from a backup older than the night (here: the backup itself, opened as the database),
    the nightly run reports the night again; the files finance already read are kept, and a WARNING says so.
    A report the database knows is re-written in place, as always."""
    from partnerkit.store import open_db
    from partnerkit.store.backup import backup

    ledger.recharge()  # missing_debit
    backup(db, tmp_path / "backup.db")  # made before the night was reported
    with caplog.at_level(logging.WARNING, logger="reconcile.jobs"):
        report_day(config, db, DAY, now=RUN)  # the first report of the night: nothing to keep
    read_by_finance = _files(config.report_dir)
    names = {report_filename("2025-03-14", f) for f in REPORT_FORMATS}
    assert set(read_by_finance) == names and caplog.records == []

    restored = open_db(tmp_path / "backup.db")
    try:
        with caplog.at_level(logging.WARNING, logger="reconcile.jobs"):
            report_day(config, restored, DAY, now=RUN + timedelta(days=1))
        after_restore = _files(config.report_dir)
        with caplog.at_level(logging.WARNING, logger="reconcile.jobs"):
            report_day(config, restored, DAY, now=RUN + timedelta(days=1, hours=1))  # a night it knows now
        rewritten = _files(config.report_dir)
    finally:
        restored.conn.close()

    suffix = ".replaced-20250316T020000Z-not-in-database"  # when (the new report's time) and why
    assert set(after_restore) == names | {name + suffix for name in names}
    assert all(after_restore[name + suffix] == read_by_finance[name] for name in names)
    assert json.loads(after_restore[report_filename("2025-03-14", "json")])["generated_at"] == "2025-03-16T02:00:00Z"
    [warning] = caplog.records
    assert warning.levelname == "WARNING"
    message = warning.getMessage()
    assert message.startswith("report files of 2025-03-14 replaced although the database has no stored report of "
                              "that night")
    for name in names:
        assert str(config.report_dir / (name + suffix)) in message and str(config.report_dir / name) in message
    assert set(rewritten) == set(after_restore)  # no second set aside
    assert json.loads(rewritten[report_filename("2025-03-14", "json")])["generated_at"] == "2025-03-16T03:00:00Z"


def test_csv_is_the_drift_table(report):
    rows = list(csv.reader(io.StringIO(render_csv(report))))
    # A column is added at the end, never moved: a spreadsheet's column letters and a script's indexes stay.
    assert tuple(rows[0]) == CSV_FIELDS == (
        "id", "kind", "subject", "reference", "expected", "actual", "currency", "detected_at", "resolution",
        "resolution_note", "resolution_by", "resolution_at", "detail", "unit", "transaction_ids")
    assert CSV_FIELDS[:len(DRIFT_FIELDS)] == DRIFT_FIELDS
    assert len(rows) == 1 + len(report["drifts"])
    assert {r[1] for r in rows[1:]} == {"missing_debit", "missing_refund", "orphan_transaction"}
    assert [r[13] for r in rows[1:]] == [d["currency"] for d in report["drifts"]] == ["INR"] * 3


def test_the_csv_file_is_plain_utf_8_and_says_the_unit_of_a_count(db, ledger, config):
    """The file is the text stdout gets (render_csv), UTF-8 without a byte order mark: a reader that does not
    skip one (csv.DictReader over utf-8) reads `id` as the first column, and a note outside ASCII survives."""
    short = ledger.order(quantity=3, vouchers=2)      # voucher_shortfall: counts
    ledger.debit_order(short, "500.00")
    failed = ledger.recharge("FAILED")
    ledger.debit_recharge(failed)                      # missing_refund: money
    report = report_day(config, db, DAY, now=RUN)
    refund = next(d["id"] for d in report["drifts"] if d["kind"] == "missing_refund")
    set_resolution(db, refund, "escalated", note="crédit dû — ₹98, ticket 812", by="Asha Ñ", at=RUN)
    report = report_day(config, db, DAY, now=RUN + timedelta(hours=1))
    written = (config.report_dir / report_filename("2025-03-14", "csv")).read_bytes()
    assert written == render_csv(report).encode("utf-8") and not written.startswith(b"\xef\xbb\xbf")
    rows = {r["kind"]: r for r in csv.DictReader(io.StringIO(written.decode("utf-8")))}
    assert list(rows["missing_refund"])[0] == "id"
    assert rows["missing_refund"]["resolution_note"] == "crédit dû — ₹98, ticket 812"
    assert (rows["missing_refund"]["expected"], rows["missing_refund"]["unit"]) == ("98.00", "INR")
    assert (rows["voucher_shortfall"]["expected"], rows["voucher_shortfall"]["actual"],
            rows["voucher_shortfall"]["unit"]) == ("3", "2", "vouchers")


def test_html_is_self_contained_with_an_svg_chart(report):
    page = render_html(report)
    assert "<svg" in page and "<rect" in page and "@media print" in page
    assert not re.search(r"""<[^>]*\s(src|href)\s*=\s*["']?(https?:)?//""", page, re.I)
    assert "<script" not in page.lower() and "<link" not in page.lower()
    assert "&lt;img src=http://evil.example/x&gt;" in page  # escaped, never markup
    for drift in report["drifts"]:
        assert drift["id"] in page
    assert "726.15" in page and "7.65 INR" in page  # the spend, and the conversion's charge in its table


def test_html_carries_a_policy_that_loads_and_runs_nothing(report):
    """Provider text in the page is escaped; the Content-Security-Policy is the second wall: nothing is fetched
    or run, whatever got in. The page needs nothing it forbids: inline CSS and an inline SVG chart only."""
    page = render_html(report)
    policy = ('<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; style-src \'unsafe-inline\'; '
              'img-src data:">')
    head = page[:page.index("</head>")]
    assert head.count(policy) == 1 and head.index(policy) < head.index("<style>")  # in force before any style
    assert not re.search(r"url\(|@import|@font-face|<img|<iframe|<object|<embed|<form|\son\w+=", page, re.I)


def test_stored_report_shows_finance_resolutions_later(db, report):
    ident = report["drifts"][0]["id"]
    set_resolution(db, ident, "escalated", note="ticket 7", by="asha", at=RUN)
    again = current_report(db, DAY)
    entry = next(d for d in again["drifts"] if d["id"] == ident)
    assert (entry["resolution"], entry["resolution_note"], entry["resolution_by"]) == ("escalated", "ticket 7", "asha")
    assert again["counts_by_status"]["drifts"]["escalated"] == 1


def test_chart_bars_scale_to_the_largest_hour():
    hours = ["0.00"] * 24
    hours[3], hours[4] = "50.00", "100.00"
    bars, top = chart_bars(hours)
    assert top == "100.00" and len(bars) == 24
    assert bars[4].height == 2 * bars[3].height and bars[0].height == 0


@pytest.mark.parametrize("note", ['said "no" \\ twice', "crédit reçu — ₹98", "line\nbreak\ttab\x01", None, 42])
def test_each_drift_line_is_exactly_json_dumps(report, note):
    drifts = [{**d, "resolution_note": note} for d in report["drifts"]]
    lines = render_json({**report, "drifts": drifts}).split("\n")
    assert [line.strip().rstrip(",") for line in lines if line.startswith('    {"id"')] == [json.dumps(d) for d in drifts]


def test_html_shows_voucher_counts_as_counts_and_no_currency_beside_a_dash(db, ledger, config):
    short = ledger.order(quantity=3, vouchers=2)  # voucher_shortfall: expected 3, actual 2 (counts)
    ledger.debit_order(short, "500.00")
    ledger.tx("-12.00", type="RECHARGE", hour=14)  # orphan_transaction: no expected amount
    page = render_html(report_day(config, db, DAY, now=RUN))
    cells = re.findall(r'<td class="num">([^<]*)</td>', page)
    assert "3 vouchers" in cells and "2 vouchers" in cells
    assert not any(re.fullmatch(r"\d+ INR", c) for c in cells), cells  # a count is never shown as money
    assert "—" in cells and "— INR" not in cells and "-12.00 INR" in cells


@pytest.mark.parametrize("value, shown", [
    ("1234567.89", "1,234,567.89"), ("-1234.00", "-1,234.00"), ("999.99", "999.99"), (1234567, "1,234,567"),
    ("0.00", "0.00"), ("GHOST1", "GHOST1"), ("12345", "12345"), ("1234.5", "1234.5"), (None, None), (True, True),
])
def test_grouped_separates_thousands_of_counts_and_two_decimal_amounts_only(value, shown):
    assert grouped(value) == shown


def test_html_groups_thousands_and_json_and_csv_keep_the_plain_amount(db, ledger, config):
    big = ledger.recharge(payable="12345.67", face="12400.00")
    ledger.debit_recharge(big, "12400.00")  # amount_mismatch: the amounts are in the drift table too
    report = report_day(config, db, DAY, now=RUN)
    page = render_html(report)
    assert "12,345.67 INR" in page and "12,400.00 INR" in page and "12,400.00</td>" in page
    for text in (render_json(report), render_csv(report)):
        assert "12400.00" in text and "12,400" not in text and "12,345" not in text


def test_html_says_what_each_figure_counts(report):
    page = render_html(report)
    for words in ("Debits (gross)</dt>", "Credits</dt>", "Net</dt>", "Spend</dt>", "FAILED and REVERSED recharges are not spend",
                  "top-ups and conversions included", "recharges and orders without a drift", "Wallet balance per currency"):
        assert words in page, words
    assert '<td class="num">616.15</td>' in page  # spend as the document means it, beside the gross 726.15


def test_references_and_ids_never_break_inside_and_every_printed_page_is_dated(report):
    page = render_html(report)
    assert re.search(r"td\.ref \{[^}]*white-space: nowrap", page)
    assert all(f'<td class="ref">{d["id"]}</td>' in page for d in report["drifts"])
    assert re.search(r"@top-left \{ content: \"partnerkit reconciliation report 2025-03-14 \(UTC\)\"", page)
    assert page.count("<thead>") >= 3  # table headers repeat on every printed page
    assert re.search(r"\.footer \{ break-before: avoid; \}", page)  # never a page with only the footer


def test_the_page_prints_on_a4_without_splitting_a_row_or_the_chart(report):
    """What a print of the page relies on (looked at by rendering it to PDF in headless Chromium, not here)."""
    page = render_html(report)
    assert re.search(r"@page \{\s*size: A4;", page)
    printed = page[page.index("@media print"):page.index("</style>")]
    assert re.search(r"\btr, [^{]*\.chart \{ break-inside: avoid; \}", printed)
    assert "table.drifts td.detail { min-width: 30mm; }" in printed  # the detail is not squeezed to a word a line
    assert '<table class="drifts">' in page and '<td class="detail">' in page


def test_a_complete_day_without_drifts_reconciles_and_an_unfinished_one_does_not_say_so(db, ledger, config):
    good = ledger.recharge()
    ledger.debit_recharge(good)
    ledger.nightly_read(good)
    final = render_html(report_day(config, db, DAY, now=RUN))
    assert "every recharge, order and transaction of the day reconciles" in final and 'class="banner"' not in final
    early = render_html(report_day(config, db, DAY, now=at(15)))
    assert "Partial: generated before the day ended." in early
    assert "reconciles" not in early and "not yet a final reconciliation" in early


def test_the_banner_names_what_is_still_unsettled(db, ledger, config):
    for status in ("PROCESSING", "PROCESSING"):
        ledger.debit_recharge(ledger.recharge(status, hour=23), hour=23)
    ledger.debit_order(ledger.order("PENDING"), "500.00")
    page = render_html(report_day(config, db, DAY, now=at(23, 10)))
    assert "2 recharges still PROCESSING, 1 order PENDING: figures may change." in page
    assert "recharges and orders without a drift, unsettled ones included" in page


def test_a_report_stored_before_the_new_fields_still_renders_and_is_judged(report):
    old = {k: v for k, v in report.items() if k not in ("complete", "partial", "unsettled", "wallets",
                                                        "resolutions_as_of")}
    old["summary"] = {k: v for k, v in report["summary"].items() if k not in ("net_debits", "spend_as_documented")}
    old["generated_at"] = "2025-03-14T20:00:00Z"  # made during the day
    page = render_html(old)
    assert "Partial: generated before the day ended." in page and "Wallet balance per currency" not in page
    assert "726.15" in page


def test_a_re_rendered_report_says_when_its_resolutions_were_read(db, report):
    assert report["resolutions_as_of"] == report["generated_at"]
    assert "resolutions as of" not in render_html(report)
    set_resolution(db, report["drifts"][0]["id"], "resolved", note="checked", by="asha", at=RUN + timedelta(hours=6))
    with freeze_time("2025-03-15T09:30:00Z"):
        again = current_report(db, DAY)
    assert (again["generated_at"], again["resolutions_as_of"]) == ("2025-03-15T02:00:00Z", "2025-03-15T09:30:00Z")
    page = render_html(again)
    assert "Generated 2025-03-15T02:00:00Z by partnerkit; drifts and their resolutions as of 2025-03-15T09:30:00Z" in page


def test_docs_name_every_report_field(report):
    """docs/reconcile.md, "The report", names every field (the JSON is a contract that grows)."""
    docs = (Path(__file__).resolve().parents[2] / "docs" / "reconcile.md").read_text()
    section = docs[docs.index("## The report"):docs.index("## Commands")]
    fields = {*report, *report["summary"], *report["unsettled"], *next(iter(report["wallets"].values()))}
    assert sorted(f for f in fields if f"`{f}`" not in section and f"`summary.{f}`" not in section) == []


def test_the_next_report_write_removes_the_temp_files_a_killed_one_left_but_not_one_being_written(config, report,
                                                                                                  later):
    """A write killed between its temp files and their renames leaves whole copies of the report under hidden
    names; the next write removes them. One that another process is writing now is held (its lock) and stays."""
    import subprocess
    import sys

    folder = config.report_dir
    killed = folder / ".partnerkit-report-2025-03-10.json.k1ll3dx8.tmp"  # any day's: created, its writer gone
    killed.write_text('{"date": "2025-03-10", "summ')
    other_output = folder / ".notes.txt.k1ll3dx8.tmp"  # not a report's: left alone
    other_output.write_text("finance's own")
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; from pathlib import Path; from reconcile.jobs import _new_temp; "
         "fd, tmp, lock = _new_temp(Path(sys.argv[1])); print(tmp, flush=True); sys.stdin.read()",
         str(folder / report_filename("2025-03-16", "json"))],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        held = Path(holder.stdout.readline().strip())  # another process writing the report of another day
        assert held.name.startswith(".partnerkit-report-2025-03-16.json.") and held.exists()

        write_report_files(folder, later)
        assert not killed.exists()
        assert held.exists(), "a temp file another process is writing was removed"
        assert other_output.exists()
    finally:
        holder.stdin.close()  # the writer ends without renaming it: now it is a killed write's leftover
        holder.wait(timeout=30)
    write_report_files(folder, later)
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [other_output.name] + [report_filename("2025-03-14", f) for f in ("csv", "html", "json")])


def test_an_output_file_write_removes_the_temp_files_a_killed_write_of_it_left(tmp_path):
    from reconcile.jobs import write_atomic

    output = tmp_path / "out" / "day.json"
    output.parent.mkdir()
    left = output.parent / ".day.json.a1b2c3d4.tmp"
    left.write_text("half")
    other = output.parent / ".other.json.a1b2c3d4.tmp"  # another file's: not this write's to judge
    other.write_text("half")
    write_atomic(output, "{}")
    assert sorted(p.name for p in output.parent.iterdir()) == [other.name, "day.json"]


# --- a day the store has not read in full since it ended -----------------------------------------

@pytest.mark.parametrize("read_at, says", [
    (None, "No sync has read its recharges in full; no sync has read its wallet transactions in full."),
    (at(23, 50), "The last complete read of its recharges began at 2025-03-14T23:50:00Z, before the day ended; the "
                 "last complete read of its wallet transactions began at 2025-03-14T23:50:00Z, before the day ended."),
], ids=["never read", "read before it ended"])
def test_a_day_not_read_in_full_since_it_ended_never_reads_as_clean(db, ledger, config, read_at, says):
    """A worker down since before midnight: matched from what the store holds, the day's last entries are missing
    and the page must not say that everything reconciles."""
    good = ledger.recharge()
    ledger.debit_recharge(good)
    if read_at is not None:
        ledger.read_in_full(when=read_at)
    report = report_day(config, db, DAY, now=RUN)
    stamp = None if read_at is None else "2025-03-14T23:50:00Z"
    assert report["day_read_at"] == {"recharges": stamp, "transactions": stamp}
    assert (report["read_in_full"], report["partial"], report["complete"]) == (False, False, False)
    page = render_html(report)
    assert "Not read in full since the day ended: entries may be missing from these figures." in page
    assert says in page and "partnerkit reconcile --date 2025-03-14</code> reads the day" in page
    assert "reconciles" not in page and "not yet a final reconciliation" in page

    ledger.nightly_read(good)
    again = report_day(config, db, DAY, now=RUN)
    assert (again["read_in_full"], again["complete"]) == (True, True)
    assert "Not read in full" not in render_html(again) and "reconciles" in render_html(again)


def test_a_partial_report_says_partial_not_that_it_was_read_before_the_day_ended(db, ledger, config):
    ledger.read_in_full(when=at(14))
    page = render_html(report_day(config, db, DAY, now=at(15)))
    assert "Partial: generated before the day ended." in page and "Not read in full" not in page


def test_a_day_without_activity_says_so_rather_than_that_everything_reconciles(db, ledger, config):
    ledger.nightly_read()
    page = render_html(report_day(config, db, DAY, now=RUN))
    assert "No activity: no recharge, order or wallet transaction is dated this day" in page
    assert "every recharge, order and transaction of the day reconciles" not in page


# --- what finance acts on: drifts by kind, in the order of the money at risk ---------------------

def test_every_drift_kind_has_words_for_the_page_and_a_place_in_its_order():
    assert set(KIND_GUIDE) == set(KINDS) == set(KIND_ORDER) and len(KIND_ORDER) == len(KINDS)
    assert all(meaning.strip() and todo.strip() for meaning, todo in KIND_GUIDE.values())


@pytest.fixture
def busy(db, ledger, config):
    """A day with drifts of five kinds, one of them escalated and one resolved by finance."""
    ledger.recharge(ref="RCHSMALL")                                     # missing_debit 98.00
    for payable in ("10.00", "250.00"):
        failed = ledger.recharge("FAILED", payable=payable, face=payable)
        ledger.debit_recharge(failed)                                   # missing_refund, 10.00 and 250.00
    twice = ledger.recharge()
    ledger.debit_recharge(twice)
    ledger.debit_recharge(twice, minute=5)                              # duplicate_debit 98.00
    ledger.tx("-12.00", type="RECHARGE", reference_number="GHOST1")     # orphan_transaction
    credited = ledger.recharge()
    ledger.debit_recharge(credited)
    ledger.credit_recharge(credited, "20.00")                           # unexpected_refund
    report = report_day(config, db, DAY, now=RUN)
    ids = {d["kind"]: d["id"] for d in report["drifts"]}
    set_resolution(db, ids["duplicate_debit"], "escalated", note="sent to support", by="ravi", at=RUN)
    set_resolution(db, ids["unexpected_refund"], "resolved", note="customer confirmed", by="asha",
                   at=RUN + timedelta(hours=1))
    return current_report(db, DAY)


def test_the_page_counts_drifts_by_kind_and_resolution_and_says_what_each_means_and_what_to_do(busy):
    assert busy["summary"]["drifts_by_kind_and_resolution"] == {
        "duplicate_debit": {"pending": 0, "resolved": 0, "escalated": 1},
        "missing_debit": {"pending": 1, "resolved": 0, "escalated": 0},
        "missing_refund": {"pending": 2, "resolved": 0, "escalated": 0},
        "orphan_transaction": {"pending": 1, "resolved": 0, "escalated": 0},
        "unexpected_refund": {"pending": 0, "resolved": 1, "escalated": 0},
    }
    assert busy["summary"]["drifts_by_kind"] == {"duplicate_debit": 1, "missing_debit": 1, "missing_refund": 2,
                                                 "orphan_transaction": 1, "unexpected_refund": 1}
    page = render_html(busy)
    table = page[page.index('<table class="kinds">'):]
    table = table[:table.index("</table>")]
    kinds = re.findall(r'<td class="kind">(\w+)</td>', table)
    assert kinds == ["duplicate_debit", "missing_refund", "orphan_transaction", "unexpected_refund", "missing_debit"]
    for kind in kinds:
        meaning, todo = (words.replace("'", "&#39;") for words in KIND_GUIDE[kind])
        assert meaning in table and todo in table, kind
    row = table[table.index('<td class="kind">missing_refund</td>'):]
    assert re.findall(r'<td class="num[^"]*">(\d+)</td>', row)[:3] == ["2", "0", "0"]  # pending, escalated, resolved
    assert re.search(r'Open drifts</span><b>5</b><small>4 pending, 1 escalated; 1 resolved', page)


def test_the_page_lists_pending_then_escalated_then_resolved_money_at_risk_and_largest_first(busy):
    page = render_html(busy)
    table = page[page.index("<thead><tr><th>Kind</th><th>Reference</th>"):]
    references = re.findall(r'<td class="ref">([^<]*)</td>', table)[::2]  # each row: reference, then drift id
    large, small = (next(d["reference"] for d in busy["drifts"] if d["expected"] == amount)
                    for amount in ("250.00", "10.00"))  # the two missing_refund
    assert references[:2] == [large, small]
    orphan, debit = (next(d["reference"] for d in busy["drifts"] if d["kind"] == k)
                     for k in ("orphan_transaction", "missing_debit"))
    duplicate, credited = (next(d["reference"] for d in busy["drifts"] if d["kind"] == k)
                           for k in ("duplicate_debit", "unexpected_refund"))
    assert references[2:] == [orphan, debit, duplicate, credited]
    assert busy["drifts"] == sorted(busy["drifts"], key=lambda d: (d["kind"], d["reference"], d["id"]))  # JSON's own


def test_a_resolution_shows_its_note_who_and_when_the_time_unbroken(busy):
    page = render_html(busy)
    assert ('customer confirmed</span><br><span class="muted small">by asha</span><br>'
            '<span class="muted small when">2025-03-15T03:00:00Z</span>') in page
    assert re.search(r"\.when \{ white-space: nowrap; \}", page)


def test_above_the_page_size_open_drifts_of_the_riskiest_kinds_are_the_ones_shown():
    def entry(n, kind, resolution, expected):
        return {"id": f"d_{n}", "kind": kind, "reference": f"R{n}", "resolution": resolution, "expected": expected,
                "actual": "0.00"}
    drifts = [entry(1, "missing_debit", "pending", "900.00"), entry(2, "duplicate_debit", "resolved", "5.00"),
              entry(3, "missing_refund", "pending", "1.00"), entry(4, "duplicate_debit", "pending", "2.00"),
              entry(5, "missing_refund", "pending", "7.00"), entry(6, "orphan_transaction", "escalated", None)]
    assert [d["id"] for d in shown_drifts(drifts, limit=3)] == ["d_4", "d_5", "d_3"]
    assert [d["id"] for d in shown_drifts(drifts)] == ["d_4", "d_5", "d_3", "d_1", "d_6", "d_2"]


def test_the_money_table_has_a_row_for_every_currency_of_any_of_its_columns(db, ledger, config):
    """A USD recharge of the day whose debit was stamped just before midnight: spend in USD, no USD debit today."""
    usd = ledger.recharge(payable="3.00", face="3.00", currency="USD", hour=0)
    ledger.debit_recharge(usd, currency="USD", day=DAY - timedelta(days=1), hour=23, minute=59)
    ledger.debit_recharge(ledger.recharge())
    report = report_day(config, db, DAY, now=RUN)
    assert "USD" not in report["summary"]["spend"] and report["summary"]["spend_as_documented"]["USD"] == "3.00"
    page = render_html(report)
    assert re.search(r'<tr><td>USD</td><td class="num">0\.00</td><td class="num">0\.00</td><td class="num">0\.00</td>'
                     r'<td class="num">3\.00</td></tr>', page)


def test_the_wallet_table_bridges_to_the_money_table_with_top_ups_and_conversions(db, ledger, config):
    ledger.tx("1000.00", type="TOPUP", balance_after="1000.00", hour=1)
    good = ledger.recharge()
    ledger.debit_recharge(good, balance_after="902.00")
    ledger.tx("50.00", type="TOPUP", currency="USD", hour=2)  # a wallet only topped up: no row in the money table
    page = render_html(report_day(config, db, DAY, now=RUN))
    assert ("Of these, top-ups and conversions: 1,000.00 INR credits, 0.00 INR debits; the rest are the money "
            "table's credits (0.00) and gross debits (98.00).") in page
    assert "<tr><td>USD</td><td class=\"num\">" not in page.split("Money per currency")[1].split("</table>")[0]
    assert "All of these are top-ups and conversions, which the money table leaves out." in page


# The drift entry's keys in the JSON: the contract's (DESIGN.md), in their order; fields added since come after.
CONTRACT_DRIFT_KEYS = ["id", "kind", "subject", "reference", "expected", "actual", "currency", "detected_at",
                       "resolution", "resolution_note", "resolution_by", "resolution_at", "detail"]


@pytest.fixture
def linked(db, ledger, config):
    """A day whose drifts each have their own wallet transactions, and one matched recharge whose debit is nobody's
    drift; returns (the report, the transaction ids by name)."""
    tx = {}
    good = ledger.recharge()
    tx["good"] = ledger.debit_recharge(good, hour=8)                     # matched
    failed = ledger.recharge("FAILED", payable="40.00", face="40.00")
    tx["failed_debit"] = ledger.debit_recharge(failed, hour=9)
    # A part credited back, linked by its reference_number alone, under an id that sorts first: missing_refund.
    tx["failed_credit"] = ledger.tx("15.00", id="100", type="REFUND", reference_number=failed["reference_number"],
                                    hour=12)
    twice = ledger.recharge()
    tx["twice_1"] = ledger.debit_recharge(twice, hour=10, minute=1)
    tx["twice_2"] = ledger.debit_recharge(twice, id="0000777", hour=10, minute=7)  # duplicate_debit
    credited = ledger.recharge()
    tx["credited_debit"] = ledger.debit_recharge(credited, hour=10)
    tx["credited_credit"] = ledger.credit_recharge(credited, "20.00", hour=15)  # unexpected_refund
    failed_order = ledger.order("FAILED", amount="300.00")
    tx["order_debit"] = ledger.debit_order(failed_order, "300.00", hour=11)
    tx["order_refund"] = ledger.tx("100.00", type="REFUND", order_id=failed_order, hour=13)  # missing_refund
    kept = ledger.order(amount="500.00")
    tx["kept_named"] = ledger.debit_order(kept, "500.00", hour=11)
    tx["kept_extra"] = ledger.tx("-500.00", type="ORDER", order_id=kept, hour=12)  # duplicate_debit
    ledger.order(transaction_id=900_001)     # missing_debit: the transaction it names is not stored
    tx["orphan"] = ledger.tx("-12.00", type="RECHARGE", reference_number="GHOST1", currency="USD")
    ledger.tx("-7.00", type="RECHARGE", reference_number="GHOST2")    # orphans in two currencies
    short = ledger.order(quantity=3, vouchers=1)                       # voucher_shortfall: 3 paid, 1 stored
    tx["short"] = ledger.debit_order(short, "500.00", hour=11)
    return report_day(config, db, DAY, now=RUN), tx


def _by_kind(report, subject: str) -> dict[str, dict]:
    return {d["kind"]: d for d in report["drifts"] if d["subject"] == subject}


def test_each_drift_names_the_wallet_transactions_behind_its_actual_oldest_first(linked):
    report, tx = linked
    recharges, orders = _by_kind(report, "recharge"), _by_kind(report, "order")
    assert (recharges["missing_refund"]["expected"], recharges["missing_refund"]["actual"]) == ("40.00", "15.00")
    assert recharges["missing_refund"]["transaction_ids"] == [tx["failed_debit"], tx["failed_credit"]]
    assert recharges["duplicate_debit"]["transaction_ids"] == [tx["twice_1"], tx["twice_2"]]
    assert (orders["missing_refund"]["expected"], orders["missing_refund"]["actual"]) == ("300.00", "100.00")
    assert orders["missing_refund"]["transaction_ids"] == [tx["order_debit"], tx["order_refund"]]
    assert orders["duplicate_debit"]["transaction_ids"] == [tx["kept_named"], tx["kept_extra"]]
    assert orders["missing_debit"]["transaction_ids"] == []  # the id it names is no stored transaction
    assert recharges["unexpected_refund"]["transaction_ids"] == [tx["credited_debit"], tx["credited_credit"]]
    # A kind whose actual is no wallet figure names none: a voucher count, here.
    assert orders["voucher_shortfall"]["transaction_ids"] == []
    orphans = [d for d in report["drifts"] if d["kind"] == "orphan_transaction"]
    assert len(orphans) == 2 and all(d["transaction_ids"] == [] for d in orphans)  # the reference is the id
    assert not any(tx["good"] in d["transaction_ids"] for d in report["drifts"])


def test_the_json_contract_keys_stay_and_the_transaction_ids_come_after_them(linked, db):
    report, _ = linked
    assert {"date", "generated_at", "summary", "drifts", "counts_by_status"} <= set(report)
    assert {"recharges_total", "orders_total", "transactions_total", "matched", "drifted", "unmatched", "spend",
            "refunds"} <= set(report["summary"])
    for entry in report["drifts"]:
        assert list(entry) == CONTRACT_DRIFT_KEYS + ["transaction_ids"]
    assert json.loads(render_json(report)) == report
    assert current_report(db, DAY)["drifts"] == report["drifts"]  # the stored report, read again, has them too


def test_the_csv_and_the_page_carry_the_transaction_ids(linked):
    report, tx = linked
    rows = {(r["kind"], r["subject"]): r for r in csv.DictReader(io.StringIO(render_csv(report)))}
    assert list(rows[("duplicate_debit", "recharge")])[-2:] == ["unit", "transaction_ids"]
    assert rows[("duplicate_debit", "recharge")]["transaction_ids"] == f"{tx['twice_1']} 0000777"
    assert rows[("missing_refund", "order")]["transaction_ids"] == f"{tx['order_debit']} {tx['order_refund']}"
    assert rows[("orphan_transaction", "transaction")]["transaction_ids"] == ""
    page = render_html(report)
    assert "<th>Transactions</th>" in page
    assert f'<td class="ref txs">{tx["failed_debit"]}<br>{tx["failed_credit"]}</td>' in page


def test_a_figure_is_one_string_in_every_entry_that_shows_it_and_none_is_kept_after_the_table(linked):
    report, _ = linked
    shown = [d[field] for d in report["drifts"] for field in ("expected", "actual") if d[field] == "500.00"]
    assert len(shown) >= 2 and all(text is shown[0] for text in shown)  # held once, however many drifts show it
    assert _stored_amount.cache_info().currsize == 0  # a worker keeps no day's figures between reports


def test_drifts_show_and_list_give_the_transaction_ids(linked, invoke):
    report, tx = linked
    duplicate = _by_kind(report, "order")["duplicate_debit"]
    shown = invoke("drifts", "show", duplicate["id"], "--format", "json")
    assert shown.exit_code == 0, shown.output
    one = json.loads(shown.output)
    assert (one["id"], one["expected"], one["actual"], one["unit"]) == (duplicate["id"], "500.00", "1000.00", "INR")
    assert one["transaction_ids"] == [tx["kept_named"], tx["kept_extra"]]
    table = invoke("drifts", "show", duplicate["id"]).output
    assert f"transaction_ids  {tx['kept_named']},{tx['kept_extra']}" in table
    listed = {d["id"]: d for d in json.loads(invoke("drifts", "list", "--format", "json").output)}
    assert {i: d["transaction_ids"] for i, d in listed.items()} == {d["id"]: d["transaction_ids"]
                                                                   for d in report["drifts"]}
    rows = {r["id"]: r for r in csv.DictReader(io.StringIO(invoke("drifts", "list", "--format", "csv").output))}
    assert rows[duplicate["id"]]["transaction_ids"] == f"{tx['kept_named']} {tx['kept_extra']}"


def test_the_amount_at_stake_per_kind_sums_the_open_drifts_per_currency_and_counts_vouchers_apart(linked, db):
    report, _ = linked
    assert report["summary"]["drift_amount_by_kind"] == {
        "duplicate_debit": {"INR": "598.00"},     # |98.00 - 196.00| + |500.00 - 1000.00|
        "missing_debit": {"INR": "500.00"},
        "missing_refund": {"INR": "225.00"},      # |40.00 - 15.00| + |300.00 - 100.00|
        "orphan_transaction": {"INR": "7.00", "USD": "12.00"},  # no expected: counts as 0
        "unexpected_refund": {"INR": "20.00"},
        "voucher_shortfall": {"vouchers": "2"},   # 3 paid, 1 stored: a count, never added to rupees
    }
    ids = {(d["kind"], d["subject"]): d["id"] for d in report["drifts"]}
    set_resolution(db, ids[("duplicate_debit", "recharge")], "escalated", note="sent", by="ravi", at=RUN)
    set_resolution(db, ids[("missing_debit", "order")], "resolved", note="debited late", by="asha", at=RUN)
    again = current_report(db, DAY)
    at_stake = again["summary"]["drift_amount_by_kind"]
    assert at_stake["duplicate_debit"] == {"INR": "598.00"}  # escalated is still at stake
    assert "missing_debit" not in at_stake                   # resolved is not
    table = render_html(again)
    table = table[table.index('<table class="kinds">'):]
    table = table[:table.index("</table>")]
    cells = {kind: re.findall(r'<td class="num">([^<]*(?:<br>[^<]*)*)</td>', row)[-1]
             for kind, row in re.findall(r'<td class="kind">(\w+)</td>(.*?)</tr>', table)}
    assert cells == {"duplicate_debit": "598.00 INR", "missing_refund": "225.00 INR",
                     "orphan_transaction": "7.00 INR<br>12.00 USD", "voucher_shortfall": "2 vouchers",
                     "unexpected_refund": "20.00 INR", "missing_debit": "—"}
