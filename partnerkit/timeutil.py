"""Time at the wire: RFC 3339 / ISO 8601 strings become aware UTC datetimes once."""

from __future__ import annotations

import re
from datetime import date, datetime, timezone

# RFC 3339 (5.6, 5.7) allows a leap second, 23:59:60, which datetime cannot hold. It is read as the last
# microsecond of the minute it ends, so it stays on its own UTC day (and its own minute in any offset).
# How far past the longest delay a job schedules a stored due time may lie ahead of this host's clock before it is
# taken for one written while the clock ran ahead, since stepped back (NTP), and not waited for: the voucher
# fetches' (`FetchPolicy.latest_s`), the poller's (`PollSchedule.latest_s`) and the worker's timers
# (reconcile.scheduler). A minute covers two hosts' clocks a little apart; a step back of less than it delays a job
# by no more than that.
CLOCK_STEP_MARGIN_S = 60.0

_LEAP_SECOND = re.compile(r"(\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}):60(?:[.,]\d+)?")


def utcnow() -> datetime:
    """The current time, aware, in UTC (freezegun-friendly)."""
    return datetime.now(timezone.utc)


def parse_ts(value: str | None, *, field: str = "timestamp") -> datetime | None:
    """Parse an ISO 8601 / RFC 3339 string to an aware UTC datetime; a naive one is taken as UTC; a leap
    second (23:59:60) as 23:59:59.999999."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ValueError(f"{field}: expected an ISO 8601 string, got {type(value).__name__}")
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        leap = _LEAP_SECOND.sub(r"\1:59.999999", text, count=1)  # only when the text does not parse: no cost
        try:
            parsed = datetime.fromisoformat(leap) if leap != text else None
        except ValueError:
            parsed = None
        if parsed is None:
            raise ValueError(f"{field}: {value[:64]!r} is not an ISO 8601 timestamp") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=timezone.utc)
    try:
        return parsed.astimezone(timezone.utc)
    except OverflowError:  # 9999-12-31T23:59:59-23:00 is a valid text but past datetime.max in UTC
        raise ValueError(f"{field}: {value[:64]!r} is out of range") from None


def iso(moment: datetime | None) -> str | None:
    """Render an aware datetime as ISO 8601 in UTC with a Z suffix."""
    if moment is None:
        return None
    return moment.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


def same_second(one: str | datetime | None, other: str | datetime | None) -> bool:
    """Whether two moments, each a datetime or a time's text (any form parse_ts reads), fall in one UTC second: a
    provider's fact written to different precisions by two endpoints, or stored by partnerkit in its own form, is
    still the same fact. True when either is missing or is not a time: nothing to compare with (the callers tell
    an id given twice apart by what differs, never by what cannot be read)."""
    texts = [value if isinstance(value, str) else iso(value) for value in (one, other)]
    if texts[0] is None or texts[1] is None:
        return True
    if texts[0][:19] == texts[1][:19] and texts[0].endswith("Z") and texts[1].endswith("Z"):
        return True  # the usual case: both UTC text (`iso`'s or `stamp`'s, or the provider's RFC 3339 in UTC)
    try:
        moments = [value if isinstance(value, datetime) else parse_ts(value) for value in (one, other)]
    except ValueError:
        return True
    if moments[0] is None or moments[1] is None:
        return True
    return moments[0].replace(microsecond=0) == moments[1].replace(microsecond=0)


def parse_day(value: str) -> date:
    """Parse YYYY-MM-DD; raise ValueError with the expected form otherwise."""
    try:
        return date.fromisoformat(value)
    except (TypeError, ValueError):
        raise ValueError(f"expected a date as YYYY-MM-DD, got {value!r}") from None
