"""What the demo prints for the day's report: the money lines say what they count (no subprocess)."""

from __future__ import annotations

from partnerkit.demo.output import print_report

REPORT = {
    "date": "2026-11-22", "partial": True,
    "unsettled": {"recharges_processing": 1, "orders_pending": 0, "orders_processing": 2},
    "summary": {"recharges_total": 4, "orders_total": 7, "transactions_total": 16, "matched": 10, "drifted": 1,
                "unmatched": 0, "quarantined": 0, "spend": {"INR": "13057.20"}, "refunds": {"INR": "1410.16"},
                "net_debits": {"INR": "11647.04"}, "spend_as_documented": {"INR": "11157.04"}},
    "counts_by_status": {"recharges": {"SUCCESS": 2}, "orders": {"DELIVERED": 5}}, "drifts": [],
}


def lines_of(report: dict) -> list[str]:
    out: list[str] = []
    print_report(out.append, report, [])
    return out


def test_the_gross_debits_are_not_called_spend():
    out = "\n".join(lines_of(REPORT))
    assert "  debits   INR 13057.20   (gross: every debit but top-ups and conversions)" in out
    assert "  credits  INR 1410.16   (refunds and any other credit, top-ups apart)" in out
    assert "  net      INR 11647.04   (debits less credits)" in out
    assert "  spend    INR 11157.04   (SUCCESS and PROCESSING recharges" in out
    assert "spend    INR 13057.20" not in out
    assert "(wallet top-ups and conversions included)" in out


def test_an_unfinished_day_says_so():
    out = "\n".join(lines_of(REPORT))
    assert "partial: made before the day ended (UTC)" in out
    assert "unsettled: recharges processing 1, orders processing 2; figures may change" in out
    final = "\n".join(lines_of({**REPORT, "partial": False, "unsettled": {"recharges_processing": 0}}))
    assert "partial" not in final and "unsettled" not in final
