"""The one alias mapping, compiled per key shape: what a sync runs over every page of transactions.

`reconcile.ledger.map_transaction` + `to_row` is the mapping as DESIGN.md writes it. `map_page`
reaches the same rows faster and keeps what the provider sent without writing it twice:

- A record's *key shape* (its keys and the type of each value) is resolved once and compiled into
  one function of plain subscripts: money to paise on its common forms (Decimal, int; strings
  through `money.to_decimal` itself), timestamps parsed once per distinct string. Anything else
  (aliases both present, a type it does not expect, a record to quarantine) makes the compiled
  function answer None, and `map_transaction` decides: every quarantine reason is written there.
- The record as received is kept exactly, but not twice. When every alias value is exactly what its
  column holds ("RCH1" stored as "RCH1", Decimal("-98.00") as -9800), the row keeps a *shape* (the
  alias keys and value types, stored once in `transaction_shapes`) and, in `raw`, only the keys
  outside the alias table (NULL when there are none); `record_json` rebuilds the record's canonical
  JSON from those. Otherwise `raw` holds the whole record's canonical JSON, as `to_row` writes it.

Rows come out in *runs*: consecutive records that are stored the same way (same shape, with or
without `raw`), in page order, so the store writes each run with one statement and a provider
record listed twice in a page still ends as its last copy. tests/reconcile/test_ledger_fast.py
checks with hypothesis that the rows and quarantines are the plain mapping's and that `record_json`
gives back `canonical_json(record)`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from decimal import Context, Decimal, DivisionByZero, Inexact, InvalidOperation, Overflow, Rounded
from json.encoder import encode_basestring_ascii
from typing import Any, Callable

from partnerkit.money import MONEY_LIMIT, MoneyError, to_decimal
from partnerkit.timeutil import iso, parse_ts
from reconcile.ledger import (ALIAS_FIELD, DIRECTIONS, INTEGER_MAX, INTEGER_MIN, Quarantined, canonical_json,
                             map_transaction, to_row)

NONE = type(None)
CENT = Decimal("0.01")
_INT_LIMIT = int(MONEY_LIMIT)  # in rupees
_PAISE_LIMIT = int(MONEY_LIMIT) * 100  # in paise
# scaleb(2) that refuses to round: a coefficient wider than the precision would otherwise be rounded
# into a whole number of paise that the plain mapping (which refuses > 2 decimals) never accepts.
_EXACT = Context(traps=[InvalidOperation, DivisionByZero, Overflow, Inexact, Rounded])
_TYPE_NAMES = {str: "str", int: "int", Decimal: "decimal", NONE: "null"}
_CACHE_LIMIT = 4096  # a day's pages move forward in time: recent seconds are the ones that repeat
_STAMPS: dict[str, str] = {}  # created_at text as received -> ISO UTC text


@dataclass
class MappedPage:
    """One page through the mapping: the rows to store, in runs, and the records quarantined.

    `runs` is a list of ((shape or None, with_raw), rows). A row is the 9 column values of
    `partnerkit.store.ledger.ROW_COLUMNS`, followed by `raw` when with_raw. `shapes` maps each shape id used to its text.
    """

    runs: list[tuple[tuple[int | None, bool], list[tuple]]] = field(default_factory=list)
    shapes: dict[int, str] = field(default_factory=dict)
    bad: list[Quarantined] = field(default_factory=list)

    @property
    def stored(self) -> int:
        """How many rows the page stores."""
        return sum(len(rows) for _, rows in self.runs)


def _timestamp(value: str) -> str | None:
    """created_at as stored text, parsed once per distinct string; None = take the slow path."""
    try:
        text = iso(parse_ts(value, field="created_at"))
    except ValueError:
        return None
    if text is not None:
        if len(_STAMPS) >= _CACHE_LIMIT:
            _STAMPS.clear()
        _STAMPS[value] = text
    return text


def _str_cents(value: str) -> int | None:
    """Paise of an amount sent as a string, read by the plain mapping's own `to_decimal`; None = slow path."""
    try:
        amount = to_decimal(value, field="amount", strict=True)
        return int(amount.scaleb(2, _EXACT))
    except (MoneyError, ArithmeticError):
        return None


def _json_writer(keys: tuple, kinds: tuple) -> Callable[[dict], str] | None:
    """canonical_json for records of this shape (keys and value types), compiled; None for other shapes."""
    if not all(type(key) is str for key in keys):
        return None
    pieces, text = [], "{"
    for key, kind in sorted(zip(keys, kinds)):
        text += ("," if text != "{" else "") + encode_basestring_ascii(key) + ":"
        if kind is NONE:
            text += "null"
            continue
        if kind is str:
            value = f"_esc(r[{key!r}])"
        elif kind is int:
            value = f"int.__repr__(r[{key!r}])"
        elif kind is Decimal:  # default=str gives the exact text, which never needs escaping
            text += '"'
            value = f"str(r[{key!r}])"
        else:
            return None
        pieces += [repr(text), value]
        text = '"' if kind is Decimal else ""
    pieces.append(repr(text + "}"))
    return eval(f"lambda r: ''.join(({', '.join(pieces)},))", {"_esc": encode_basestring_ascii})  # noqa: S307


def _writer(keys: list, kinds: list) -> Callable[[dict], str]:
    """The canonical JSON of these keys of a record: compiled when it can be, canonical_json otherwise."""
    compiled = _json_writer(tuple(keys), tuple(kinds))
    if compiled is not None:
        return compiled
    if not keys:
        return lambda r: "{}"
    return lambda r: canonical_json({k: r[k] for k in keys})


def shape_id(text: str) -> int:
    """A stable id for a shape text (the first 7 bytes of its sha256: positive, fits SQLite's INTEGER)."""
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:7], "big")


class _Source:
    """Builds the compiled function's lines, field by field."""

    def __init__(self, sources: dict[str, tuple[Any, type]]) -> None:
        self.sources, self.lines, self.exact = sources, [], []
        self.eligible = True  # every alias value can be rebuilt from the row, if `exact` holds

    def key(self, name: str) -> tuple[Any, type]:
        return self.sources.get(name, (None, NONE))

    def add(self, *lines: str) -> None:
        self.lines.extend("    " + line for line in lines)

    def money(self, name: str, var: str, *, optional: bool) -> bool:
        """Paise of an amount field into `var`; False when the shape's type always defers."""
        key, kind = self.key(name)
        m = f"m_{var}"
        if kind is Decimal:  # 2 decimals, the usual form: whole paise at once, and the text is its column's
            self.add(f"{m} = r[{key!r}]", f"if {m}.same_quantum(CENT):", f"    {var} = int({m} * 100)",
                     f"    exact_{var} = {var} or not {m}.is_signed()", "else:",
                     "    try:", f"        s = {m}.scaleb(2, EXACT); {var} = int(s)",
                     "    except (ValueError, ArithmeticError): return None",
                     f"    if {var} != s: return None", f"    exact_{var} = False",
                     f"if not -PL < {var} < PL: return None")
            self.exact.append(f"exact_{var}")
        elif kind is int:
            self.add(f"{var} = r[{key!r}]", f"if not -IL < {var} < IL: return None", f"{var} *= 100")
        elif kind is str:
            self.eligible = False
            if optional:
                self.add(f"{m} = r[{key!r}]", f"{var} = None if {m} == '' else _str_cents({m})",
                         f"if {var} is None and {m} != '': return None")
            else:
                self.add(f"{var} = _str_cents(r[{key!r}])", f"if {var} is None: return None")
        elif kind is NONE and optional:
            self.add(f"{var} = None")
        else:
            return False
        return True

    def text(self, name: str, var: str, *, upper: bool) -> None:
        """A text field (stripped, None when empty; upper-cased for type and currency) into `var`."""
        key, kind = self.key(name)
        if kind is NONE:
            self.add(f"{var} = None")
            return
        source = f"t_{var}" if kind is str else f"str(t_{var})"
        self.add(f"t_{var} = r[{key!r}]", f"{var} = {source}.strip() or None")
        if upper:
            self.add(f"if {var}: {var} = {var}.upper()")
        if kind is str:
            self.exact.append(f"t_{var} == ({var} or '')")
        else:
            self.eligible = False

    def number(self, name: str, var: str) -> bool:
        """order_id / recharge_id: an integer, or absent (None or "")."""
        key, kind = self.key(name)
        if kind is int:  # beyond SQLite's INTEGER: the plain path quarantines it
            self.add(f"{var} = r[{key!r}]", f"if not INT_MIN <= {var} <= INT_MAX: return None")
        elif kind is NONE:
            self.add(f"{var} = None")
        elif kind is str:  # only "" reads as absent; any other text goes the plain way
            self.add(f"if r[{key!r}] != '': return None", f"{var} = None")
        else:
            return False
        return True


def _compile(shape: tuple) -> Callable[[dict], tuple] | None:
    """For records with these keys and value types, a function giving (run key, row) or None (plain path).

    None instead of a function when the shape can never take this path: two keys feed one field (aliases
    present together may disagree; two spellings of one key keep only the last) or a required field
    has a type the plain path alone reads.
    """
    keys, kinds = shape[:len(shape) // 2], shape[len(shape) // 2:]
    sources: dict[str, tuple[Any, type]] = {}
    extras: list[tuple[Any, type]] = []
    for key, kind in zip(keys, kinds):
        if type(key) not in (str, int):  # compiled as repr(key): only the exact types whose repr is a literal
            return None
        name = ALIAS_FIELD.get(str(key).strip().lower())
        if name is None:
            extras.append((key, kind))
        elif name in sources:
            return None
        else:
            sources[name] = (key, kind)
    src = _Source(sources)
    src.eligible = all(type(k) is str for k in keys) and "direction" not in sources
    key, kind = src.key("id")
    if kind is str:
        src.add(f"t_ident = r[{key!r}]", "ident = t_ident.strip()", "if not ident: return None")
        src.exact.append("ident == t_ident")
    elif kind is int:
        src.add(f"ident = str(r[{key!r}])")
    else:
        return None
    if not src.money("amount", "paise", optional=False):
        return None
    key, kind = src.key("direction")
    if kind is str:
        src.add(f"d = r[{key!r}]", "if d != '':", "    sign = DIRECTIONS.get(d.strip().upper())",
                "    if sign is None or (paise < 0 and sign > 0): return None", "    paise = abs(paise) * sign")
    elif kind is not NONE:
        return None
    key, kind = src.key("created_at")
    if kind is not str:
        return None
    src.add(f"c = r[{key!r}]", "created = STAMPS.get(c) or _timestamp(c)", "if created is None: return None")
    src.exact.append("created == c")
    if not src.money("balance_after", "balance", optional=True):
        return None
    if not (src.number("order_id", "order_id") and src.number("recharge_id", "recharge_id")):
        return None
    src.text("type", "kind", upper=True)
    src.text("currency", "currency", upper=True)
    src.text("reference_number", "reference", upper=False)
    row = "ident, kind, paise, order_id, reference, recharge_id, currency, created, balance"
    scope = {"EXACT": _EXACT, "CENT": CENT, "INT_MIN": INTEGER_MIN, "INT_MAX": INTEGER_MAX, "PL": _PAISE_LIMIT, "IL": _INT_LIMIT, "STAMPS": _STAMPS,
             "_timestamp": _timestamp, "_str_cents": _str_cents, "DIRECTIONS": DIRECTIONS,
             "RAW_KEY": (None, True), "full_json": _writer(list(keys), list(kinds))}
    tail = ["return RAW_KEY, (" + row + ", full_json(r))"]
    if src.eligible:
        text = json.dumps(sorted([[k, _TYPE_NAMES[t]] for k, t in sources.values()]))
        ident = shape_id(text)
        SHAPE_TEXTS[ident] = text
        scope.update(EXACT_KEY=(ident, bool(extras)),
                     extra_json=_writer([k for k, _ in extras], [t for _, t in extras]))
        tail = [f"if {' and '.join(src.exact) or 'True'}:",
                f"    return EXACT_KEY, ({row}{', extra_json(r)' if extras else ''})"] + tail
    src.add(*tail)
    code = "def plan(r):\n" + "\n".join(src.lines)
    exec(compile(code, f"<transaction shape {len(keys)} keys>", "exec"), scope)  # noqa: S102 - built from repr()
    return scope["plan"]


_PLANS: dict[tuple, Callable | None] = {}
SHAPE_TEXTS: dict[int, str] = {}  # every shape compiled so far: id -> text


def _plan_for(raw: dict) -> Callable | None:
    shape = (*raw, *map(type, raw.values()))
    try:
        return _PLANS[shape]
    except KeyError:
        if len(_PLANS) >= 256:  # shapes from a misbehaving provider must not pile up
            _PLANS.clear()
            SHAPE_TEXTS.clear()
        plan = _PLANS[shape] = _compile(shape)
        return plan


def map_page(records: Any) -> MappedPage:
    """Map a page of provider records: rows in runs for the store, and the quarantined ones."""
    page = MappedPage()
    runs = page.runs
    last: tuple | None = None
    rows: list[tuple] = []
    plans = _PLANS
    for raw in records:
        result = None
        if type(raw) is dict:
            plan = plans.get((*raw, *map(type, raw.values())), False)
            if plan is False:
                plan = _plan_for(raw)
            if plan is not None:
                result = plan(raw)
        if result is None:
            mapped = map_transaction(raw)
            if isinstance(mapped, Quarantined):
                page.bad.append(mapped)
                continue
            result = (None, True), (*to_row(mapped, raw, "")[:10],)
        key, row = result
        if key is not last and key != last:
            rows = []
            runs.append((key, rows))
            if key[0] is not None:
                page.shapes[key[0]] = SHAPE_TEXTS[key[0]]  # its plan was compiled or used just now
        last = key
        rows.append(row)
    return page


def record_json(row: tuple, shape: str | None, raw: str | None) -> str:
    """The canonical JSON of the record a stored row came from (row: the values of partnerkit.store.ledger.ROW_COLUMNS).

    Without a shape, `raw` is that JSON. With one, the alias keys are rebuilt from the row by their
    recorded types, and `raw` (if any) holds the other keys.
    """
    if shape is None:
        return raw or ""
    record = json.loads(raw) if raw else {}
    ident, kind, paise, order_id, reference, recharge_id, currency, created, balance = row
    for key, type_name in json.loads(shape):
        name = ALIAS_FIELD[key.strip().lower()]
        if name == "id":
            value: Any = ident if type_name == "str" else int(ident)
        elif name in ("amount", "balance_after"):
            cents_value = paise if name == "amount" else balance
            value = (None if cents_value is None else
                     Decimal(cents_value).scaleb(-2) if type_name == "decimal" else cents_value // 100)
        elif name in ("order_id", "recharge_id"):
            number = order_id if name == "order_id" else recharge_id
            value = "" if type_name == "str" else number
        elif name == "created_at":
            value = created
        else:
            text = {"type": kind, "currency": currency, "reference_number": reference}[name]
            value = None if type_name == "null" else (text or "")
        record[key] = value
    return canonical_json(record)
