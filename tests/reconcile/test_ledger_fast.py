"""The fast path of the one alias mapping (`split`, `fast_row`) gives exactly what the plain path gives."""

from __future__ import annotations

from decimal import Decimal

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reconcile.ledger import ALIASES, Quarantined, canonical_json, fast_row, map_transaction, split, to_row

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
                  st.one_of(st.sampled_from(["12", " 7 ", "abc", "²", "", None, True, 1.0]),
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
    """The plain path: map_transaction, then to_row."""
    mapped = map_transaction(raw)
    if isinstance(mapped, Quarantined):
        return [], [mapped]
    return [to_row(mapped, raw, STAMP)], []


@SETTINGS
@given(records())
def test_fast_row_is_the_plain_row_or_defers(raw):
    rows, bad = reference(raw)
    fast = fast_row(raw, STAMP)
    assert fast is None or (not bad and fast == rows[0])


@SETTINGS
@given(st.lists(records(), max_size=8))
def test_split_is_the_plain_mapping(raws):
    rows, bad = split(raws, STAMP)
    expected = [reference(raw) for raw in raws]
    assert rows == [r for good, _ in expected for r in good]
    assert [(q.reason, q.raw) for q in bad] == [(q.reason, q.raw) for _, quarantined in expected for q in quarantined]


@SETTINGS
@given(st.dictionaries(st.text(max_size=4), st.one_of(st.none(), st.text(max_size=4), st.integers(), st.booleans(),
                                                       decimals, st.floats(allow_nan=False))))
def test_compiled_json_is_canonical_json(record):
    raw = {"id": "T1", "amount": "-1.00", "created_at": "2025-01-15T10:00:00Z", **record}
    row = fast_row(raw, STAMP)
    if row is not None:
        assert row[9] == canonical_json(raw)


def test_the_fast_path_takes_the_common_forms():
    forms = [{"id": "T1", "amount": Decimal("-98.00"), "created_at": "2025-01-15T10:00:00Z"},
             {"Transaction_ID": 7, "amount": "98.5", "Entry_Type": "debit", "timestamp": "2025-01-15T10:00:00+05:30",
              "currency": "inr", "balance_after": 1200, "recharge_id": 3, "reference": "RCH3"}]
    for raw in forms:
        assert fast_row(raw, STAMP) == reference(raw)[0][0]
