"""The compiled alias mapping (`map_page`, and each key shape's compiled plan alone) gives exactly what the plain
path gives, and keeps the record."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from partnerkit.store.ledger import store_transactions
from reconcile.ledger import ALIASES, Quarantined, canonical_json, map_transaction, to_row
from reconcile.ledger_fast import SHAPE_TEXTS, _json_writer, _plan_for, map_page, record_json
from tests.reconcile.reconcile_helpers import stored_record

STAMP = "2025-03-15T00:00:00Z"
SETTINGS = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def spellings(name: str) -> st.SearchStrategy[str]:
    """A key as sent: as written, upper-cased, capitalised or padded (keys are case-insensitive)."""
    return st.sampled_from([name, name.upper(), name.capitalize(), f" {name} "])


def mostly(good: st.SearchStrategy, wild: st.SearchStrategy) -> st.SearchStrategy:
    """Usually a readable value (so the fast path is exercised), sometimes anything."""
    return st.sampled_from([good] * 9 + [wild]).flatmap(lambda s: s)


plain_decimals = st.one_of(st.decimals(min_value=-10**6, max_value=10**6, places=2, allow_nan=False),
                           st.decimals(min_value=-10**6, max_value=10**6, places=0, allow_nan=False))
decimals = st.one_of(
    plain_decimals,
    st.decimals(min_value=-10**6, max_value=10**6, places=3, allow_nan=False),  # 1.500 fits, 1.505 not
    st.decimals(allow_nan=True, allow_infinity=True),  # anything, huge and NaN included
    st.sampled_from([Decimal("1E+2"), Decimal("-0.00"), Decimal("0E+20"), Decimal("1E+15"), Decimal("99999999999999.99")]),
)
money = mostly(
    st.one_of(plain_decimals, plain_decimals.map(str), st.integers(-10**6, 10**6)),
    st.one_of(decimals, decimals.map(lambda d: f" {d} "), st.integers(min_value=-10**16, max_value=10**16),
              st.sampled_from(["", " ", "ten", "1_000.50", "nan", "-Infinity", "12.345", "+5", None, True, 1.5, [1]])),
)
texts = mostly(st.sampled_from(["RCH1", " ref ", "inr", "Recharge", "x"]),
               st.one_of(st.text(max_size=6), st.sampled_from(["", None, " "]), st.integers(-5, 5), st.booleans()))
integers = mostly(st.integers(-10, 10**12),
                  st.one_of(st.sampled_from(["12", " 7 ", "abc", "²", "", None, True, 1.0,
                                             2 ** 63 - 1, 2 ** 63, -(2 ** 63), -(2 ** 63) - 1, "9" * 21]),
                            st.decimals(min_value=-10, max_value=10, places=1, allow_nan=False)))
stamps = mostly(
    st.one_of(st.datetimes().map(lambda d: d.isoformat(timespec="seconds") + "Z"),
              st.sampled_from(["2025-01-15T10:00:00Z", "2025-01-15T10:00:00+05:30", "2025-01-15T10:00:00.123456Z"])),
    st.one_of(st.datetimes().map(lambda d: d.isoformat()),  # naive: taken as UTC
              st.sampled_from(["2025-02-30T10:00:00Z", "yesterday", "", " 2025-01-15T10:00:00z ", None, 1736935200])),
)
directions = mostly(st.sampled_from(["DEBIT", "CREDIT", "debit", " Credit "]), st.sampled_from(["SIDEWAYS", "", None, 1]))
VALUES = {"id": mostly(st.one_of(st.text("T0123", min_size=1, max_size=5), st.integers(0, 10**9)), texts),
          "type": texts, "amount": money, "direction": directions, "order_id": integers,
          "reference_number": texts, "recharge_id": integers, "currency": texts, "created_at": stamps,
          "balance_after": money}


@st.composite
def records(draw) -> object:
    """A provider record over every alias and form: some fields missing, some aliases doubled, extra keys."""
    if draw(st.integers(0, 30)) == 0:
        return draw(st.sampled_from([None, "T1,-98.00", ["T1"], 7]))
    record: dict = {}
    for field, aliases in ALIASES.items():
        present = draw(st.sampled_from([0, 1, 1, 1, 1, 1, 1, 1, 2])) if field in ("id", "amount", "created_at") else \
            draw(st.sampled_from([0, 0, 1, 1, 1, 2]))
        for alias in draw(st.permutations(aliases))[:present]:
            value = draw(VALUES[field])
            if present == 2 and record and draw(st.booleans()):
                value = next(iter(record.values()))  # sometimes two aliases that agree
            record[draw(spellings(alias))] = value
    for extra in draw(st.lists(st.sampled_from(["status", "note", "meta", "Amount", 5]), max_size=2, unique=True)):
        record[extra] = draw(st.one_of(st.none(), st.text(max_size=3), st.integers(), st.booleans(), decimals,
                                       st.lists(st.integers(), max_size=2)))
    return dict(draw(st.permutations(list(record.items()))))


def reference(raw: object) -> tuple[list[tuple], list[Quarantined]]:
    """The plain path: map_transaction, then to_row (the 9 columns and the record's canonical JSON)."""
    mapped = map_transaction(raw)
    if isinstance(mapped, Quarantined):
        return [], [mapped]
    return [to_row(mapped, raw, STAMP)[:10]], []


def fast_row(raw: object) -> tuple | None:
    """(run key, row) from the record's compiled plan, as `map_page` takes it, or None when the plan defers to
    the plain path (no plan for the shape, or one that answers None)."""
    plan = _plan_for(raw) if type(raw) is dict else None
    return None if plan is None else plan(raw)


def rebuilt(key: tuple, row: tuple, shapes: dict[int, str] = SHAPE_TEXTS) -> tuple:
    """A fast row as the plain path writes it: the 9 columns and the record's canonical JSON."""
    shape, with_raw = key
    raw = row[9] if with_raw else None
    return (*row[:9], raw if shape is None else record_json(row[:9], shapes[shape], raw))


@SETTINGS
@given(records())
@example({"id": "T1", "amount": "1_000.50", "created_at": "2025-01-15T10:00:00Z"})  # Decimal() reads it, the mapping not
@example({"id": "T1", "amount": "\u0661\u0662", "created_at": "2025-01-15T10:00:00Z"})  # non-ASCII digits
@example({"id": "T1", "amount": Decimal("1.0000000000000000000000000001"), "created_at": "2025-01-15T10:00:00Z"})
@example({"id": "T1", "amount": Decimal("-0.00"), "created_at": "2025-01-15T10:00:00Z"})
def test_fast_row_is_the_plain_row_or_defers(raw):
    rows, bad = reference(raw)
    fast = fast_row(raw)
    assert fast is None or (not bad and rebuilt(*fast) == rows[0])


BENCH_FORM = {"id": "41", "type": "RECHARGE", "amount": Decimal("-98.00"), "currency": "INR",
              "created_at": "2025-01-15T10:00:00Z", "balance_after": Decimal("1200.00"), "reference_number": "RCH3",
              "recharge_id": 3}
# Forms the fast path takes, each its own key shape (run key).
COMMON_FORMS = (BENCH_FORM, {"id": "T1", "amount": Decimal("-98.00"), "created_at": "2025-01-15T10:00:00Z"},
                {"Transaction_ID": 7, "amount": "98.5", "Entry_Type": "debit",
                 "timestamp": "2025-01-15T10:00:00+05:30", "currency": "inr", "balance_after": 1200, "recharge_id": 3,
                 "reference": "RCH3"})


# A page is put together from its records' mappings (each one test_fast_row_is_the_plain_row_or_defers's): its
# rows in page order, in runs of one key, the quarantined ones apart. Drawn from records() alone, three in four
# are quarantined and no page had two runs; half of these records are forms the fast path takes, so runs begin,
# go on and alternate, and 60 pages find what 250 of the others could not (rows put in the wrong run).
@settings(SETTINGS, max_examples=60)
@given(st.lists(st.one_of(records(), st.sampled_from(COMMON_FORMS)), max_size=8))
def test_a_page_is_the_plain_mapping_in_page_order(raws):
    page = map_page(raws)
    expected = [reference(raw) for raw in raws]
    # The page's own shape texts, as the store takes them: the module's cache is emptied when it is
    # full, which can happen half-way through a page once earlier tests have compiled 256 shapes.
    assert [rebuilt(key, row, page.shapes) for key, rows in page.runs for row in rows] == [
        r for good, _ in expected for r in good]
    assert [(q.reason, q.raw) for q in page.bad] == [(q.reason, q.raw) for _, quarantined in expected for q in quarantined]
    assert set(page.shapes) == {shape for (shape, _), _ in page.runs if shape is not None}


@SETTINGS
@given(st.dictionaries(st.text(max_size=4), st.one_of(st.none(), st.text(max_size=4), st.integers(), st.booleans(),
                                                       decimals, st.floats(allow_nan=False))))
def test_compiled_json_is_canonical_json(record):
    raw = {"id": "T1", "amount": "-1.00", "created_at": "2025-01-15T10:00:00Z", **record}
    writer = _json_writer(tuple(raw), tuple(map(type, raw.values())))
    if writer is not None:
        assert writer(raw) == canonical_json(raw)


def test_the_fast_path_takes_the_common_forms():
    for raw in COMMON_FORMS:
        assert fast_row(raw) is not None and rebuilt(*fast_row(raw)) == reference(raw)[0][0]


@pytest.mark.parametrize("raw, stored_whole", [
    (BENCH_FORM, False),  # every value is its column: only the shape is kept
    ({**BENCH_FORM, "description": "Recharge of 9800000000", "meta": [1, 2]}, False),  # raw keeps the other keys
    ({**BENCH_FORM, "currency": "inr"}, True),  # stored upper-cased: the record is kept whole
    ({**BENCH_FORM, "amount": Decimal("-98.0")}, True),  # one decimal: -9800 paise would print -98.00
    ({**BENCH_FORM, "created_at": "2025-01-15T15:30:00+05:30"}, True),
    ({**BENCH_FORM, "amount": Decimal("98.00"), "direction": "DEBIT"}, True),
])
def test_the_provider_record_is_kept_exactly(db, raw, stored_whole):
    page = map_page([raw])
    store_transactions(db, page.runs, page.shapes, STAMP)
    row, shape, kept = stored_record(db, str(raw.get("id")))
    assert (shape is None) == stored_whole
    assert record_json(row, shape, kept) == canonical_json(raw)
    if not stored_whole:
        assert kept is None if set(raw) == set(BENCH_FORM) else kept == canonical_json({k: raw[k] for k in ("description", "meta")})


def test_a_record_listed_twice_ends_as_its_last_copy(db):
    # (its balance: what never changes for a transaction, its amount or time, would make it another one)
    first, last = {**BENCH_FORM, "currency": "inr"}, {**BENCH_FORM, "balance_after": Decimal("1100.00")}
    page = map_page([first, last])
    assert len(page.runs) == 2  # stored two ways, written in page order
    store_transactions(db, page.runs, page.shapes, STAMP)
    assert stored_record(db, "41")[0][8] == 110000
