"""Field readers for the records: MISSING (omitted, not null) and errors that name the field."""

from __future__ import annotations

from typing import Any, Callable

from partnerkit import money, timeutil
from partnerkit.errors import MalformedResponse


class _Missing:
    """The type of MISSING: a field the provider left out of the payload (not null)."""

    _instance = None

    def __new__(cls) -> "_Missing":
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "MISSING"

    def __bool__(self) -> bool:
        return False

    def __reduce__(self) -> str:
        return "MISSING"


MISSING: Any = _Missing()

class Reader:
    """Reads one payload's fields, raising MalformedResponse that names `Record.field`."""

    def __init__(self, raw: Any, record: str) -> None:
        if not isinstance(raw, dict):
            raise MalformedResponse(f"{record}: expected a JSON object, got {type(raw).__name__}", body=raw, field=record)
        self.raw = raw
        self.record = record

    def _bad(self, name: str, why: str) -> MalformedResponse:
        return MalformedResponse(f"{self.record}.{name}: {why}", body=self.raw, field=name)

    def _get(self, name: str, required: bool, nullable: bool) -> Any:
        if name not in self.raw:
            if required:
                raise self._bad(name, "missing")
            return MISSING
        value = self.raw[name]
        if value is None and not nullable:
            raise self._bad(name, "is null")
        return value

    def _typed(self, name: str, required: bool, nullable: bool, convert: Callable[[Any], Any]) -> Any:
        value = self._get(name, required, nullable)
        if value is MISSING or value is None:
            return value
        try:
            return convert(value)
        except (TypeError, ValueError) as exc:  # MoneyError is a ValueError
            raise self._bad(name, str(exc)) from None

    def int(self, name: str, *, required: bool = True, nullable: bool = False) -> Any:
        def convert(value: Any) -> int:
            if isinstance(value, bool) or not isinstance(value, (int, str)):
                raise TypeError(f"expected an integer, got {value!r}")
            return int(value)
        return self._typed(name, required, nullable, convert)

    def str(self, name: str, *, required: bool = True, nullable: bool = False) -> Any:
        def convert(value: Any) -> str:
            if not isinstance(value, str):
                raise TypeError(f"expected a string, got {type(value).__name__}")
            return value
        return self._typed(name, required, nullable, convert)

    def upper(self, name: str, **kwargs: Any) -> Any:
        value = self.str(name, **kwargs)
        return value.upper() if isinstance(value, str) else value

    def bool(self, name: str, *, required: bool = True, nullable: bool = False) -> Any:
        def convert(value: Any) -> bool:
            if not isinstance(value, bool):
                raise TypeError(f"expected true or false, got {value!r}")
            return value
        return self._typed(name, required, nullable, convert)

    def money(self, name: str, *, required: bool = True, nullable: bool = False) -> Any:
        return self._typed(name, required, nullable, lambda v: money.to_decimal(v, field=name, strict=True))

    def ts(self, name: str, *, required: bool = True, nullable: bool = False) -> Any:
        return self._typed(name, required, nullable, lambda v: timeutil.parse_ts(v, field=name))

    def obj(self, name: str, *, required: bool = True, nullable: bool = False) -> Any:
        def convert(value: Any) -> dict:
            if not isinstance(value, dict):
                raise TypeError(f"expected an object, got {type(value).__name__}")
            return value
        return self._typed(name, required, nullable, convert)

    def strings(self, name: str, *, required: bool = True) -> Any:
        def convert(value: Any) -> tuple[str, ...]:
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise TypeError("expected an array of strings")
            return tuple(value)
        return self._typed(name, required, False, convert)

    def records_apart(self, name: str, parse: Callable[[Any], Any]) -> tuple[tuple, tuple[MalformedResponse, ...]]:
        """Like `records`, but a bad item is kept apart (its error names `Record.name[i]`) instead of raised."""
        value = self._get(name, False, True)
        if value is MISSING or value is None:
            return (), ()
        if not isinstance(value, list):
            raise self._bad(name, "expected an array")
        good, bad = [], []
        for index, item in enumerate(value):
            try:
                good.append(parse(item))
            except MalformedResponse as exc:
                bad.append(MalformedResponse(f"{self.record}.{name}[{index}]: {exc}", body=item,
                                             field=getattr(exc, "field", None)))
        return tuple(good), tuple(bad)

    def records(self, name: str, parse: Callable[[Any], Any]) -> tuple:
        """An optional array of nested records (absent or null: empty)."""
        value = self._get(name, False, True)
        if value is MISSING or value is None:
            return ()
        if not isinstance(value, list):
            raise self._bad(name, "expected an array")
        return tuple(parse(item) for item in value)


def mask(value: Any) -> str:
    if not isinstance(value, str):
        return repr(value)
    return "'***'" if len(value) <= 4 else f"'***{value[-2:]}'"
