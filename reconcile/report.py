"""The daily report: one dict (the JSON contract), rendered as JSON, CSV (the drift table) or HTML.

Every function here is pure (but `with_drifts`, which stamps when the resolutions were read): the
report is built from a MatchResult and the day's drifts, and each rendering is a function of the report
alone, so a stored report renders the same way later. Money is a 2-decimal string everywhere in the
JSON and CSV; the HTML alone groups thousands ("13,057.20") for people to read.
"""

from __future__ import annotations

import csv
import io
import json
import re
import sys
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from itertools import chain, repeat
from json.encoder import c_make_encoder, encode_basestring_ascii  # type: ignore[attr-defined]
from operator import itemgetter
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal, InvalidOperation
from typing import Any, Iterable, Iterator, Mapping

from jinja2 import Environment, PackageLoader, select_autoescape

from partnerkit.csvcell import FORMULA_STARTS, spreadsheet_id, spreadsheet_ids, spreadsheet_safe
from partnerkit.money import CENT, fmt
from partnerkit.store.drifts import COUNT_KINDS, RESOLUTIONS, WHOLE_AMOUNT_KINDS, figure
from partnerkit.timeutil import iso, parse_ts, utcnow
from reconcile.drift_guide import KIND_GUIDE, KIND_ORDER

DRIFT_FIELDS = ("id", "kind", "subject", "reference", "expected", "actual", "currency", "detected_at",
                "resolution", "resolution_note", "resolution_by", "resolution_at", "detail")
CHART_WIDTH, CHART_HEIGHT, CHART_PAD = 720, 180, 28
HTML_DRIFT_ROWS = 2000  # an e-mailed page stays readable; JSON and CSV always carry every drift
# The page's drift table: pending first, then escalated, then resolved; within each, the kinds that put money
# at risk first (reconcile.drift_guide.KIND_ORDER), then the largest difference. One rank per pair, so that
# the cut of a day above HTML_DRIFT_ROWS costs one dict lookup per drift.
_GROUP = {(resolution, kind): n for n, (resolution, kind) in
          enumerate((r, k) for r in ("pending", "escalated", "resolved") for k in KIND_ORDER)}
_LAST_GROUP = len(_GROUP)
# Subjects whose figures may still change: a PROCESSING recharge may yet be REVERSED or FAILED (and
# credited back), a PENDING or PROCESSING order may yet fail (and be refunded).
UNSETTLED = (("recharges", "PROCESSING", "recharges_processing"), ("orders", "PENDING", "orders_pending"),
             ("orders", "PROCESSING", "orders_processing"))
# What a sync reads in full for a day (`sync_coverage`), as the report says when (`day_read_at`).
READ_ENTITIES = ("recharges", "transactions")


def _amount(value: Decimal | int | None, measure: str) -> str | None:
    if value is None:
        return None
    if measure == "count" or (type(value) is Decimal and value.same_quantum(CENT)):
        return str(value)  # what fmt gives a 2-decimal amount, without its quantize
    return fmt(value)  # type: ignore[arg-type]


@lru_cache(maxsize=1 << 14)  # emptied after each drift table (with_drifts): nothing stays between reports
def _stored_amount(stored: int, measure: str) -> str:
    """_amount of a stored figure (partnerkit.store.drifts.figure), made once per figure: a day's drifts repeat
    few amounts (a denomination, a fee), and the entries that show one hold the same string."""
    return sys.intern(_amount(figure(stored, measure), measure))  # type: ignore[arg-type]


_intern = sys.intern  # a value repeated across many drifts (a kind, a detail) is stored once


def drift_entry(row: tuple, transaction_ids: list[str] | None = None) -> dict[str, Any]:
    """A stored drift (a row of partnerkit.store.drifts.COLUMNS, as iter_drift_rows gives it) as it appears in the
    report (expected/actual as strings: money 2 decimals, counts whole), with the ids of the wallet transactions
    linked to its recharge or order (partnerkit.store.matching.drift_transactions; an empty list where none is)."""
    (ident, kind, subject, reference, _, expected, actual, measure, currency, detail, detected_at, _, resolution,
     note, by, at) = row
    # kind, subject, detected_at and resolution are NOT NULL (the schema's): interned without a test for None.
    return {
        "id": ident, "kind": _intern(kind), "subject": _intern(subject), "reference": reference,
        "expected": None if expected is None else _stored_amount(expected, measure),
        "actual": None if actual is None else _stored_amount(actual, measure),
        "currency": None if currency is None else _intern(currency), "detected_at": _intern(detected_at),
        "resolution": _intern(resolution), "resolution_note": note, "resolution_by": by, "resolution_at": at,
        "detail": None if detail is None else _intern(detail),
        "transaction_ids": [] if transaction_ids is None else transaction_ids,
    }


# An entry's keys in order: the contract's fields, then those added since (at the end, never between).
DRIFT_ENTRY_KEYS = ("id", "kind", "subject", "reference", "expected", "actual", "currency", "detected_at",
                    "resolution", "resolution_note", "resolution_by", "resolution_at", "detail", "transaction_ids")


def _money_map(values: Mapping[str, Decimal]) -> dict[str, str]:
    return {currency or "?": fmt(amount) for currency, amount in sorted(values.items())}  # type: ignore[misc]


def unsettled(counts_by_status: Mapping[str, Mapping[str, int]]) -> dict[str, int]:
    """How many of the day's recharges are still PROCESSING and orders still PENDING or PROCESSING."""
    return {name: sum(n for status, n in counts_by_status.get(group, {}).items() if str(status).upper() == wanted)
            for group, wanted, name in UNSETTLED}


def _day_end(day: str) -> datetime:
    return datetime.combine(date.fromisoformat(day) + timedelta(days=1), time(0), tzinfo=timezone.utc)


def read_in_full(day: str, day_read_at: Mapping[str, str | None]) -> bool:
    """Whether a sync that began after the UTC day ended has read the day's recharges and wallet transactions
    in full (`sync_coverage`): only such a read saw every entry dated that day."""
    ended = _day_end(day)
    return all(at is not None and parse_ts(at, field="day_read_at") >= ended  # type: ignore[operator]
               for at in day_read_at.values())


def finality(day: str, generated_at: str, counts_by_status: Mapping[str, Mapping[str, int]],
             day_read_at: Mapping[str, str | None] | None = None) -> dict[str, Any]:
    """Whether a report's figures are final: `partial` (made before its UTC day ended), `unsettled` (the
    counts above), `read_in_full` (a sync begun after the day ended read it whole; not judged, None, for a
    report stored before partnerkit kept `day_read_at`) and `complete` (made after the day, settled, read in
    full): a report that is not complete may change when re-run."""
    partial = parse_ts(generated_at, field="generated_at") < _day_end(day)  # type: ignore[operator]
    still = unsettled(counts_by_status)
    read = None if day_read_at is None else read_in_full(day, day_read_at)
    return {"complete": not partial and read is not False and not any(still.values()), "partial": partial,
            "unsettled": still, "read_in_full": read}


def _wallet(w: Mapping[str, Any]) -> dict[str, Any]:
    """One currency's roll-forward and the provider's balance, as the report shows them (None: not known)."""
    opening, closing, credits, debits = w.get("opening"), w.get("closing"), w["credits"], w["debits"]
    provider, then = w.get("provider"), w.get("ledger_then")
    return {
        "opening_balance": fmt(opening), "credits": fmt(credits), "debits": fmt(debits),
        "closing_balance": fmt(closing),
        "roll_forward_difference": None if opening is None or closing is None
        else fmt(closing - (opening + credits - debits)),
        "provider_balance": fmt(provider), "provider_balance_at": w.get("provider_at"),
        "ledger_balance_at_provider_time": fmt(then),
        "provider_difference": None if provider is None or then is None else fmt(provider - then),
        # Added since: how the difference reads (reconcile.matcher.compare_wallet: "agrees", "timing",
        # "unexplained", "unconfirmed"; None when not compared), for "timing" the entries dated across the
        # provider's read that explain it, for "unexplained" the id of its balance_discontinuity drift.
        "provider_difference_status": w.get("verdict"),
        "provider_difference_explained_by": list(w.get("explained_by") or []),
        "provider_difference_drift": w.get("drift"),
    }


def build_report(result: Any, drifts: Iterable[tuple], *, generated_at: datetime,
                 day_read_at: Mapping[str, str | None], quarantined: Iterable[Mapping[str, Any]] = (),
                 transactions: Mapping[str, list[str]] | None = None) -> dict[str, Any]:
    """The report of one day (DESIGN.md "Report JSON (contract)") from a MatchResult and its stored drifts
    (partnerkit.store.drifts.iter_drift_rows).

    `day_read_at`: when the sync that last read the day's `recharges` and `transactions` in full began
    (None: none has), which says whether the store can vouch for the whole day (`finality`). `transactions`:
    the wallet transactions linked to each drift, by drift id (`with_drifts`)."""
    bad = [{"key": q["key"], "reason": q["reason"], "raw": q["raw"]} for q in quarantined]
    counts = {"recharges": dict(result.recharge_status), "orders": dict(result.order_status)}
    read_at = {entity: day_read_at.get(entity) for entity in READ_ENTITIES}
    report = {
        "date": result.day.isoformat(),
        "generated_at": iso(generated_at),
        "resolutions_as_of": iso(generated_at),
        **finality(result.day.isoformat(), iso(generated_at), counts, read_at),  # type: ignore[arg-type]
        "day_read_at": read_at,
        "summary": {
            "recharges_total": result.recharges_total,
            "orders_total": result.orders_total,
            "transactions_total": result.transactions_total,
            "matched": result.matched,
            "drifted": result.drifted,
            "unmatched": result.unmatched,
            "quarantined": len(bad),
            "conversions": len(result.conversions),
            "spend": _money_map(result.spend),
            "refunds": _money_map(result.refunds),
            "net_debits": _money_map({c: v - result.refunds.get(c, Decimal(0)) for c, v in result.spend.items()}),
            "spend_as_documented": _money_map(result.spend_as_documented),
        },
        "drifts": [],
        "counts_by_status": {**counts, "drifts": {}},
        "spend_by_hour": {c or "?": [fmt(v) for v in hours] for c, hours in sorted(result.spend_by_hour.items())},
        "conversions": [{**c, "order_amount": fmt(c["order_amount"]), "debited": fmt(c["debited"]),
                         "charges": fmt(c["charges"])}
                        for c in result.conversions],
        "quarantined": bad,
        "wallets": {currency or "?": _wallet(w) for currency, w in sorted(result.wallets.items())},
    }
    return with_drifts(report, drifts, as_of=generated_at, transactions=transactions)


def with_drifts(report: dict[str, Any], drifts: Iterable[tuple], *, as_of: datetime | None = None,
                transactions: Mapping[str, list[str]] | None = None) -> dict[str, Any]:
    """The report with its drift table (and drift counts) taken from the drifts' current state (rows as
    partnerkit.store.drifts.iter_drift_rows gives them), read at `as_of` (now by default: a stored report
    re-rendered shows when its resolutions were read).

    `transactions`: the ids of the wallet transactions linked to each drift, by drift id
    (partnerkit.store.matching.drift_transactions); a drift it does not name has none. The same pass sums the
    amount at stake of the open drifts per kind (`AtStake`)."""
    linked = transactions or {}
    entries, at_stake = [], AtStake()
    try:
        for row in drifts:
            entries.append(drift_entry(row, linked.get(row[0])))
            at_stake.add(row)
    finally:
        _stored_amount.cache_clear()
    entries.sort(key=_ORDER)
    # One pass over the drifts counts them by kind and resolution; the three tallies are sums of its few cells.
    counts = dict.fromkeys(RESOLUTIONS, 0)
    by_kind: dict[str, int] = {}
    table: dict[str, dict[str, int]] = {}
    for (kind, resolution), n in sorted(Counter(map(_KIND_RESOLUTION, entries)).items()):
        by_kind[kind] = by_kind.get(kind, 0) + n
        if resolution in counts:
            counts[resolution] += n
            table.setdefault(kind, dict.fromkeys(RESOLUTIONS, 0))[resolution] = n
    summary = {**report["summary"], "drifts_by_kind": by_kind, "drifts_by_kind_and_resolution": table,
               "drift_amount_by_kind": at_stake.by_kind()}
    return {**report, "resolutions_as_of": iso((as_of or utcnow()).replace(microsecond=0)), "summary": summary,
            "drifts": entries, "counts_by_status": {**report["counts_by_status"], "drifts": counts}}


class AtStake:
    """The amount at stake per drift kind and unit: the sum of |expected - actual| (a missing figure counts as
    0) of the open drifts (pending and escalated), money per currency ("?" when none), and for a count kind
    (COUNT_KINDS) vouchers, never added to money: the unit of the CSV's `unit` column. For a kind about a
    recharge's state (WHOLE_AMOUNT_KINDS: stuck_processing, unknown_to_provider) the larger of the two: the
    debit the wallet shows for it does not settle it (partnerkit.store.drifts.at_stake, inlined: 100k drifts on
    a bad day). Summed as stored (integer cents, counts: exact), turned into Decimal money once per kind and unit."""

    OPEN = frozenset(("pending", "escalated"))
    VOUCHERS = "vouchers"
    WHOLE = frozenset(WHOLE_AMOUNT_KINDS)

    def __init__(self) -> None:
        self.sums: dict[str, dict[str, int]] = {}

    def add(self, row: tuple) -> None:
        """Count one stored drift (a row of partnerkit.store.drifts.COLUMNS; a resolved one adds nothing)."""
        (_, kind, _, _, _, expected, actual, measure, currency, _, _, _, resolution, _, _, _) = row
        if resolution not in self.OPEN:
            return
        unit = self.VOUCHERS if measure == "count" else currency or "?"
        units = self.sums.setdefault(kind, {})
        if kind in self.WHOLE:
            units[unit] = units.get(unit, 0) + max(expected or 0, actual or 0)
        else:
            units[unit] = units.get(unit, 0) + abs((expected or 0) - (actual or 0))

    def by_kind(self) -> dict[str, dict[str, str]]:
        """{kind: {unit: amount}}, kinds and units sorted: money a 2-decimal string, vouchers a whole number."""
        def written(kind: str, unit: str, stored: int) -> str:
            total = figure(stored, "count" if unit == self.VOUCHERS else "money")  # Decimal money, or a count
            return str(total) if kind in _COUNTED else fmt(Decimal(total))  # type: ignore[arg-type,return-value]

        return {kind: {unit: written(kind, unit, stored) for unit, stored in sorted(units.items())}
                for kind, units in sorted(self.sums.items())}


_ORDER = itemgetter("kind", "reference", "id")
_KIND_RESOLUTION = itemgetter("kind", "resolution")


# json.dumps's own C encoder with json.dumps's settings, made once: json.dumps makes one per call, which was most of
# the cost of a drift's line. Without the check for a value that contains itself: an entry holds text and lists.
_encode = c_make_encoder and c_make_encoder(None, json.JSONEncoder().default, encode_basestring_ascii, None, ": ",
                                            ", ", False, False, True)


def _drift_lines(entries: Iterable[Mapping[str, Any]]) -> Iterator[str]:
    """json.dumps of each entry, one after the other (made in C: no Python call per drift)."""
    if _encode is None:  # a Python without json's C speedups
        return map(json.dumps, entries)
    return map("".join, map(_encode, entries, repeat(0)))


def render_json(report: Mapping[str, Any]) -> str:
    """The report as JSON text: indented, one drift per line (fast for days with many drifts).

    Built with one join over the pieces: a day of 100k drifts is a 35 MB text, and joining the
    lines first and wrapping them after would hold it twice more.
    """
    head = json.dumps({k: v for k, v in report.items() if k != "drifts"}, indent=2)
    opened = len(head) > 2  # "{}" has no members to follow
    if not report["drifts"]:
        body = '"drifts": []'
        return f"{head[:-2]},\n  {body}\n}}\n" if opened else f"{{{body}}}\n"
    pieces = [f"{head[:-2]},\n  " if opened else "{", '"drifts": [\n    ']
    pieces += chain.from_iterable(zip(_drift_lines(report["drifts"]), repeat(",\n    ")))  # a line, a separator
    pieces[-1] = "\n  ]"
    pieces.append("\n}\n" if opened else "}\n")
    return "".join(pieces)


# The CSV's columns: a drift's fields, then (added at the end: a spreadsheet's column letters and a script's
# indexes stay) its unit: the currency of its expected and actual, or "vouchers" for a count (COUNT_KINDS), so
# that a pivot summing `expected` by unit never adds voucher counts to rupees; then its transaction_ids, the
# linked wallet transactions' ids in one cell, separated by spaces (partnerkit.csvcell.spreadsheet_ids).
CSV_FIELDS = DRIFT_FIELDS + ("unit", "transaction_ids")
_COUNTED = frozenset(COUNT_KINDS)
_KIND_COLUMN = DRIFT_FIELDS.index("kind")

# The columns that carry provider or finance text (a reference_number, a transaction id, a currency
# code, a note); the others are partnerkit's own words, ids, times and formatted amounts.
_FREE_TEXT = tuple(DRIFT_FIELDS.index(f) for f in ("reference", "currency", "resolution_note", "resolution_by",
                                                  "detail"))
_REFERENCE = DRIFT_FIELDS.index("reference")
_WRITTEN_SAFE = (*_FREE_TEXT, len(DRIFT_FIELDS))  # and the unit, a currency: checked with it
_free_text = itemgetter(*_FREE_TEXT)
# A first character that may need a cell written as text: a formula's, or a leading zero (of a reference:
# partnerkit.csvcell.spreadsheet_id); each start is one character.
_SUSPECT_CHARS = frozenset("".join(FORMULA_STARTS) + "0")


def _csv_rows(entries: Iterable[Mapping[str, Any]]) -> Iterator[Any]:
    row = itemgetter(*DRIFT_FIELDS, "currency")  # the unit: the currency, but for a count
    for entry in entries:
        try:
            values = row(entry)  # None is written as an empty field
        except KeyError:
            values = [entry.get(f) for f in (*DRIFT_FIELDS, "currency")]
        reference = values[_REFERENCE]
        suspect = reference is not None and len(reference) > 15 and reference.isdigit()
        if not suspect:
            for text in _free_text(values):  # text or None; a loop, not any(): 0.06 s instead of 0.13 per 100k drifts
                if text and text[0] in _SUSPECT_CHARS:
                    suspect = True
                    break
        if suspect:
            values = [(spreadsheet_id if i == _REFERENCE else spreadsheet_safe)(v)
                      if i in _WRITTEN_SAFE and isinstance(v, str) else v for i, v in enumerate(values)]
        if values[_KIND_COLUMN] in _COUNTED:
            values = (*values[:-1], "vouchers")
        yield (*values, spreadsheet_ids(entry.get("transaction_ids") or ()))


def render_csv(report: Mapping[str, Any]) -> str:
    """The drift table as CSV, one row per drift, columns CSV_FIELDS; text a spreadsheet would run as a
    formula, and a reference it would turn into another number, is written as text (partnerkit.csvcell).
    UTF-8 without a byte order mark, in files and on stdout alike (docs/reconcile.md, "The report": a mark
    helps Excel's double-click and breaks every reader that does not skip it, a script's `csv.DictReader` among them)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_FIELDS)
    writer.writerows(_csv_rows(report["drifts"]))
    return buffer.getvalue()


@dataclass(frozen=True)
class Bar:
    """One hour's bar of the spend chart, in SVG user units."""

    hour: int
    x: float
    y: float
    width: float
    height: float
    value: str


def chart_bars(hours: list[str]) -> tuple[list[Bar], str]:
    """Bars for 24 hourly spend figures, scaled to the largest; returns (bars, the scale's top value)."""
    values = [Decimal(v) for v in hours]
    top = max(values, default=Decimal(0)) or Decimal(1)
    plot_h = CHART_HEIGHT - 2 * CHART_PAD
    slot = (CHART_WIDTH - 2 * CHART_PAD) / 24
    bars = []
    for hour, value in enumerate(values):
        height = float(value / top) * plot_h
        bars.append(Bar(hour, round(CHART_PAD + hour * slot + 2, 1), round(CHART_PAD + plot_h - height, 1),
                        round(slot - 4, 1), round(height, 1), fmt(value) or "0.00"))
    return bars, fmt(max(values, default=Decimal(0))) or "0.00"


_AMOUNT = re.compile(r"(-?)(\d+)\.(\d\d)")


def grouped(value: Any) -> Any:
    """A count or a 2-decimal amount with its thousands grouped for a reader ("13,057.20"); anything else as
    it is. The HTML's only: JSON and CSV keep the plain form a program reads."""
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    found = _AMOUNT.fullmatch(value) if isinstance(value, str) else None
    return value if found is None else f"{found[1]}{int(found[2]):,}.{found[3]}"


@lru_cache(maxsize=1)
def _template() -> Any:
    env = Environment(loader=PackageLoader("reconcile", "templates"), autoescape=select_autoescape(default=True),
                      trim_blocks=True, lstrip_blocks=True)
    env.filters["grouped"] = grouped
    return env.get_template("report.html.j2")


def _plural(n: int, one: str, many: str) -> str:
    return f"{n:,} {one if n == 1 else many}"


def still_open(counts: Mapping[str, int]) -> list[str]:
    """The banner's words for what is still unsettled ("1 recharge still PROCESSING", "2 orders PENDING")."""
    words = {"recharges_processing": ("recharge still PROCESSING", "recharges still PROCESSING"),
             "orders_pending": ("order PENDING", "orders PENDING"),
             "orders_processing": ("order PROCESSING", "orders PROCESSING")}
    return [_plural(n, *words[name]) for name, n in counts.items() if n and name in words]


def _group(entry: Mapping[str, Any]) -> int:
    return _GROUP.get((entry["resolution"], entry["kind"]), _LAST_GROUP)


def _difference(entry: Mapping[str, Any]) -> Decimal:
    """What a drift entry puts at stake, as AtStake counts it (|actual - expected|, a missing figure counting as 0;
    the larger of the two for WHOLE_AMOUNT_KINDS), for ordering the page only."""
    try:
        if entry["kind"] in AtStake.WHOLE:
            return max(Decimal(entry["actual"] or 0), Decimal(entry["expected"] or 0))
        return abs(Decimal(entry["actual"] or 0) - Decimal(entry["expected"] or 0))
    except (InvalidOperation, TypeError):
        return Decimal(0)


def shown_drifts(drifts: list[Mapping[str, Any]], limit: int = HTML_DRIFT_ROWS) -> list[Mapping[str, Any]]:
    """The page's drift rows: at most `limit`, pending first, then escalated, then resolved; within each, the
    kinds that put money at risk first, then the largest difference. The JSON and CSV keep every drift in
    their own order (kind, reference, id). Above `limit` the rows are cut by group alone (one lookup per
    drift), so the largest differences of a kind with more rows than shown may be among those cut: the
    summary by kind counts them all, and the CSV has them."""
    if len(drifts) > limit:
        drifts = sorted(drifts, key=_group)[:limit]
    return sorted(drifts, key=lambda d: (_group(d), -_difference(d)))


def unread(day: str, day_read_at: Mapping[str, str | None]) -> list[str]:
    """The banner's words for what no sync has read in full since the day ended."""
    ended, words = _day_end(day), {"recharges": "recharges", "transactions": "wallet transactions"}
    lines = []
    for entity, at in day_read_at.items():
        if at is None:
            lines.append(f"no sync has read its {words.get(entity, entity)} in full")
        elif parse_ts(at, field="day_read_at") < ended:  # type: ignore[operator]
            lines.append(f"the last complete read of its {words.get(entity, entity)} began at {at}, before the "
                         "day ended")
    return lines


def _currencies(summary: Mapping[str, Any]) -> list[str]:
    """Every currency of the money table: one with only credits, or only spend, has its row too."""
    return sorted({c for key in ("spend", "refunds", "net_debits", "spend_as_documented")
                   for c in (summary.get(key) or {})})


def _movements(report: Mapping[str, Any]) -> dict[str, tuple[str, str]]:
    """Per currency, the wallet's credits and debits that are top-ups and conversions: the wallet table's
    figures (every entry) less the money table's (every entry but those), which bridges the two tables."""
    summary, found = report["summary"], {}
    for currency, w in report.get("wallets", {}).items():
        if w["credits"] == w["debits"] == "0.00":
            continue
        credits = Decimal(w["credits"]) - Decimal(summary.get("refunds", {}).get(currency, "0"))
        debits = Decimal(w["debits"]) - Decimal(summary.get("spend", {}).get(currency, "0"))
        found[currency] = (fmt(credits), fmt(debits))
    return found  # type: ignore[return-value]


# The wallet verdicts (reconcile.matcher.compare_wallet) under which a difference stands: never beside an all-clear.
STANDING = ("unexplained", "unconfirmed")


def wallet_differences(report: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The wallets whose provider's balance differs from the ledger's and nothing explains (STANDING; a report
    stored before `provider_difference_status` existed: any difference but 0.00), in currency order: currency,
    `amount` (unsigned), `below` (the provider's balance is below the ledger's: money left the wallet), `at`
    (when the provider's balance was read), `status`, `drift` (its id, when "unexplained")."""
    found = []
    for currency, w in report.get("wallets", {}).items():
        difference, status = w.get("provider_difference"), w.get("provider_difference_status")
        if difference in (None, "0.00") or ("provider_difference_status" in w and status not in STANDING):
            continue
        found.append({"currency": currency, "amount": difference.lstrip("-"), "below": difference.startswith("-"),
                      "at": w.get("provider_balance_at"), "status": status or "unexplained",
                      "drift": w.get("provider_difference_drift")})
    return found


def render_html(report: Mapping[str, Any]) -> str:
    """One self-contained page (inline CSS, inline SVG, no script, no external resource)."""
    charts = [(currency, *chart_bars(hours)) for currency, hours in report.get("spend_by_hour", {}).items()]
    shown = shown_drifts(report["drifts"])
    # A report stored before these fields existed is judged the same way from what it has.
    fin = ({k: report.get(k) for k in ("complete", "partial", "unsettled", "read_in_full")} if "complete" in report
           else finality(report["date"], report["generated_at"], report["counts_by_status"]))
    summary = report["summary"]
    by_kind = summary.get("drifts_by_kind_and_resolution", {})
    kinds = sorted(by_kind, key=lambda k: (_KIND_RANK.get(k, len(_KIND_RANK)), k))
    # A currency the provider's snapshot lists but no entry of the day moved: its balances are not "not given
    # by the provider" (the JSON's null), there was nothing to give them.
    quiet = {currency for currency, w in report.get("wallets", {}).items()
             if w["credits"] == w["debits"] == "0.00" and w["opening_balance"] is None and w["closing_balance"] is None}
    idle = not (summary["recharges_total"] or summary["orders_total"] or summary["transactions_total"])
    return _template().render(
        r=report, drifts=shown, charts=charts, width=CHART_WIDTH, height=CHART_HEIGHT, pad=CHART_PAD,
        fin=fin, still=still_open(fin["unsettled"]), quiet=quiet, idle=idle, gaps=wallet_differences(report),
        unread=[] if fin["partial"] or fin.get("read_in_full") is not False else unread(report["date"],
                                                                                       report["day_read_at"]),
        currencies=_currencies(summary), movements=_movements(report), kinds=kinds, by_kind=by_kind,
        guide=KIND_GUIDE, count_kinds=COUNT_KINDS,  # voucher counts are not money: "2 vouchers", never "2 INR"
        at_stake=summary.get("drift_amount_by_kind", {}))


_KIND_RANK = {kind: n for n, kind in enumerate(KIND_ORDER)}


RENDERERS = {"json": render_json, "csv": render_csv, "html": render_html}


def render(report: Mapping[str, Any], fmt_name: str) -> str:
    """Render the report in one of RENDERERS' formats."""
    return RENDERERS[fmt_name](report)
