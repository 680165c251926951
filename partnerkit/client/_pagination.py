"""Pagination: build a Page from the headers, and walk every page.

Recharge list: X-Page, X-Per-Page, X-Total-Count, X-Total-Pages, X-Has-More. Order list: the
same without X-Has-More. Delivery list: X-Page-Size instead of X-Per-Page. Any of them may be
missing: then a short or empty page ends the walk.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, Mapping, TypeVar

from partnerkit.client._records import Page
from partnerkit.errors import MalformedResponse

T = TypeVar("T")


def _header_int(headers: Mapping[str, str], *names: str) -> int | None:
    for name in names:
        value = headers.get(name)
        if value is not None:
            try:
                return int(value.strip())
            except ValueError:
                return None  # a garbled header is treated as absent, never trusted
    return None


def page_from_headers(items: list[T], headers: Mapping[str, str], *, page: int, limit: int | None,
                      malformed: tuple = ()) -> Page[T]:
    """A Page whose has_more trusts X-Has-More, then X-Total-Pages, then X-Total-Count, then a full page.

    A page shorter than the limit asked for ends the walk only when no header says otherwise: a
    provider that serves fewer rows than asked (a cap it does not announce) while saying more
    exist is read on, since stopping would silently drop the rest of the range. At worst that
    costs one request for an empty page, and an empty page always ends the walk.
    """
    number = _header_int(headers, "X-Page") or page
    per_page = _header_int(headers, "X-Per-Page", "X-Page-Size")
    total_count = _header_int(headers, "X-Total-Count")
    total_pages = _header_int(headers, "X-Total-Pages")
    size = per_page or limit
    flag = (headers.get("X-Has-More") or "").strip().lower()
    count = len(items) + len(malformed)
    if not count:
        has_more = False  # an empty page ends the walk, whatever the headers claim
    elif flag in ("true", "1", "yes"):
        has_more = True
    elif flag in ("false", "0", "no"):
        has_more = False
    elif total_pages is not None:
        has_more = number < total_pages
    elif total_count is not None:
        # Without X-Per-Page the page size is what came back (a short page may be a cap).
        per = per_page or (limit if limit is not None and count >= limit else count)
        has_more = (number - 1) * per + count < total_count
    else:
        has_more = size is not None and count >= size
    return Page(items, number, per_page, total_count, total_pages, has_more, tuple(malformed))


class Walk(Iterator[T]):
    """Every item of every page from `start`, skipping ids already seen on earlier pages (`iterate`).

    `next_page` is the page the walk reads next: while it runs, and after it stopped on an error
    (the page that failed; every item of the pages before it was handed out), so a caller that
    stored those items can start a later walk there. None once the last page was read.
    """

    def __init__(self, fetch: Callable[[int], Page[T]], *, start: int = 1,
                 on_malformed: Callable[[MalformedResponse], None] | None = None, max_pages: int = 100_000) -> None:
        self.fetch, self.on_malformed, self.max_pages = fetch, on_malformed, max_pages
        self.next_page: int | None = start
        self._items = self._walk()

    def __iter__(self) -> "Walk[T]":
        return self

    def __next__(self) -> T:
        return next(self._items)

    def _walk(self) -> Iterator[T]:
        seen: set[Any] = set()
        for _ in range(self.max_pages):
            current = self.fetch(self.next_page)  # type: ignore[arg-type]
            for bad in current.malformed:
                if self.on_malformed is None:
                    raise bad
                self.on_malformed(bad)
            for item in current.items:
                key = getattr(item, "id", None) if not isinstance(item, dict) else item.get("id")
                if key is not None:
                    if key in seen:
                        continue  # new rows arriving at the head shift older ones onto the next page
                    seen.add(key)
                yield item
            if not current.has_more:
                self.next_page = None
                return
            self.next_page = current.page + 1


def iterate(
    fetch: Callable[[int], Page[T]],
    *,
    start: int = 1,
    on_malformed: Callable[[MalformedResponse], None] | None = None,
    max_pages: int = 100_000,
) -> Walk[T]:
    """Yield every item of every page from `start`, skipping ids already seen on earlier pages.

    A record that fails to parse is passed to `on_malformed` (to quarantine it); without one,
    its MalformedResponse is raised, so a bad record is never skipped silently. The walk's
    `next_page` says where it stopped (see Walk).
    """
    return Walk(fetch, start=start, on_malformed=on_malformed, max_pages=max_pages)
