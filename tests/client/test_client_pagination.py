"""Pagination headers (X-Page, X-Per-Page / X-Page-Size, X-Total-Count, X-Total-Pages, X-Has-More)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from partnerkit import errors
from partnerkit.client import page_from_headers

from tests.client import client_payloads as p


def _serve_recharges(httpserver, total, per_page, headers=True):
    ids = list(range(total, 0, -1))
    pages = [ids[i:i + per_page] for i in range(0, total, per_page)] or [[]]
    for number, chunk in enumerate(pages, start=1):
        h = {"X-Page": str(number), "X-Per-Page": str(per_page), "X-Total-Count": str(total),
             "X-Total-Pages": str(len(pages)), "X-Has-More": "true" if number < len(pages) else "false"} if headers else {}
        httpserver.expect_request("/api/v1/recharges", query_string={"page": str(number), "limit": str(per_page)}).respond_with_json(
            [p.recharge(id=i) for i in chunk], headers=h)
    return ids


def test_walks_to_the_last_page(client, httpserver):
    ids = _serve_recharges(httpserver, total=7, per_page=3)
    assert [r.id for r in client.iter_recharges(limit=3)] == ids
    assert len(httpserver.log) == 3


def test_walks_without_any_headers_stopping_on_a_short_page(client, httpserver):
    ids = _serve_recharges(httpserver, total=5, per_page=2, headers=False)
    assert [r.id for r in client.iter_recharges(limit=2)] == ids
    assert len(httpserver.log) == 3


def test_empty_page_ends_the_walk_even_if_has_more_says_true(client, httpserver):
    httpserver.expect_request("/api/v1/recharges").respond_with_json([], headers={"X-Has-More": "true"})
    assert list(client.iter_recharges(limit=2)) == [] and len(httpserver.log) == 1


def test_page_size_alias_is_sent_as_limit_with_every_filter(client, httpserver):
    httpserver.expect_request("/api/v1/recharges").respond_with_json([])
    client.list_recharges(page=2, page_size=25, status="SUCCESS", search="98765", from_date="2024-05-01", to_date="2024-05-02")
    args = httpserver.log[0][0].args
    assert dict(args) == {"page": "2", "limit": "25", "status": "SUCCESS", "search": "98765",
                          "from_date": "2024-05-01", "to_date": "2024-05-02"}


@pytest.mark.parametrize("kwargs", [dict(limit=0), dict(limit=10001), dict(limit=5, page_size=6), dict(from_date="01/05/2024")])
def test_bad_list_arguments_are_refused_before_sending(client, httpserver, kwargs):
    with pytest.raises(ValueError):
        client.list_recharges(**kwargs)
    assert httpserver.log == []


def test_orders_walk_uses_total_pages_without_has_more(client, httpserver):
    for number, ids in ((1, [3, 2]), (2, [1])):
        httpserver.expect_request("/api/v1/orders", query_string={"page": str(number), "limit": "2"}).respond_with_json(
            [p.order_summary(id=i) for i in ids], headers={"X-Page": str(number), "X-Per-Page": "2", "X-Total-Count": "3", "X-Total-Pages": "2"})
    assert [o.id for o in client.iter_orders(limit=2)] == [3, 2, 1]


def test_deliveries_body_and_page_size_header(client, httpserver):
    httpserver.expect_request("/api/v1/webhooks/deliveries", query_string={"page": "1", "limit": "2"}).respond_with_json(
        {"success": True, "data": {"deliveries": [p.delivery(id=2), p.delivery(id=1, status="failed", delivered_at=None)]}},
        headers={"X-Page": "1", "X-Page-Size": "2", "X-Total-Count": "3", "X-Total-Pages": "2"})
    httpserver.expect_request("/api/v1/webhooks/deliveries", query_string={"page": "2", "limit": "2"}).respond_with_json(
        {"success": True, "data": {"deliveries": [p.delivery(id=0)]}},
        headers={"X-Page": "2", "X-Page-Size": "2", "X-Total-Count": "3", "X-Total-Pages": "2"})
    first = client.list_deliveries(limit=2)
    assert (first.page, first.per_page, first.total_count, first.total_pages, first.has_more) == (1, 2, 3, 2, True)
    assert first.items[1].delivered_at is None and first.items[1].status == "failed"
    assert [d.id for d in client.iter_deliveries(limit=2)] == [2, 1, 0]


def test_items_repeated_across_pages_are_yielded_once(client, httpserver):
    # A new recharge arrived between page reads: id 3 shifts from page 1 onto page 2.
    httpserver.expect_request("/api/v1/recharges", query_string={"page": "1", "limit": "2"}).respond_with_json(
        [p.recharge(id=4), p.recharge(id=3)], headers={"X-Has-More": "true"})
    httpserver.expect_request("/api/v1/recharges", query_string={"page": "2", "limit": "2"}).respond_with_json(
        [p.recharge(id=3), p.recharge(id=2)], headers={"X-Has-More": "false"})
    assert [r.id for r in client.iter_recharges(limit=2)] == [4, 3, 2]


def test_has_more_from_total_count_when_pages_are_absent():
    page = page_from_headers([1, 2], {"X-Total-Count": "5", "X-Per-Page": "2", "X-Page": "2"}, page=2, limit=2)
    assert page.has_more is True and page.page == 2
    last = page_from_headers([5], {"X-Total-Count": "5", "X-Per-Page": "2", "X-Page": "3"}, page=3, limit=2)
    assert last.has_more is False


def test_malformed_item_stops_the_walk_unless_quarantined(client, httpserver):
    httpserver.expect_request("/api/v1/recharges").respond_with_json([p.recharge(id=2), p.recharge(id=1, created_at="?")])
    from partnerkit.errors import MalformedResponse
    with pytest.raises(MalformedResponse, match="created_at"):
        list(client.iter_recharges(limit=10))
    quarantined = []
    assert [r.id for r in client.iter_recharges(limit=10, on_malformed=quarantined.append)] == [2]
    assert quarantined[0].body["id"] == 1


def test_a_short_page_does_not_end_the_walk_when_the_provider_says_more(client, httpserver):
    # The provider served fewer rows than asked (a cap it did not announce in X-Per-Page) but says
    # another page exists: the walk reads on rather than dropping the rest of the range.
    httpserver.expect_request("/api/v1/recharges", query_string={"page": "1", "limit": "3"}).respond_with_json(
        [p.recharge(id=5), p.recharge(id=4)], headers={"X-Page": "1", "X-Has-More": "true"})
    httpserver.expect_request("/api/v1/recharges", query_string={"page": "2", "limit": "3"}).respond_with_json(
        [p.recharge(id=3)], headers={"X-Page": "2", "X-Has-More": "false"})
    assert [r.id for r in client.iter_recharges(limit=3)] == [5, 4, 3]


@pytest.mark.parametrize("headers, page, count, has_more", [
    ({"X-Total-Pages": "3"}, 1, 2, True),             # short, but two more pages are announced
    ({"X-Total-Pages": "3"}, 3, 1, False),
    ({"X-Total-Count": "5"}, 1, 2, True),             # 2 of 5 read (the page size is what came back)
    ({"X-Total-Count": "5"}, 2, 2, True),             # 4 of 5
    ({"X-Total-Count": "5", "X-Per-Page": "2"}, 3, 1, False),   # 5 of 5
    ({"X-Total-Count": "4"}, 2, 2, False),            # 4 of 4
])
def test_page_counts_from_the_headers_win_over_a_short_page(headers, page, count, has_more):
    assert page_from_headers(list(range(count)), headers, page=page, limit=10).has_more is has_more


def test_a_datetime_filter_is_sent_as_its_utc_day(client, httpserver):
    # from_date/to_date are UTC days: 01:00 in India on 2 May is still 1 May in UTC, and 23:00 in
    # New York on 1 May is already 2 May. The local date would start the range late / end it early.
    httpserver.expect_request("/api/v1/recharges").respond_with_json([])
    ist, new_york = timezone(timedelta(hours=5, minutes=30)), timezone(timedelta(hours=-4))
    client.list_recharges(from_date=datetime(2024, 5, 2, 1, 0, tzinfo=ist),
                          to_date=datetime(2024, 5, 1, 23, 0, tzinfo=new_york))
    args = httpserver.log[0][0].args
    assert (args["from_date"], args["to_date"]) == ("2024-05-01", "2024-05-02")


@pytest.mark.parametrize("walk", ["iter_recharges", "iter_orders", "iter_deliveries"])
def test_a_walk_refuses_a_status_filter_before_sending(client, httpserver, walk):
    # A record leaving the filter mid-walk shifts the later pages: the walk would skip a record
    # (docs/client.md, "Walking lists"). One page with list_*(status=...) is still fine.
    with pytest.raises(ValueError, match=rf"^{walk} takes no status filter: .* Walk by date and test \.status"):
        getattr(client, walk)(status="PROCESSING")
    assert httpserver.log == [] and client.budget.usage()["general"]["used"] == 0
    httpserver.expect_request("/api/v1/recharges").respond_with_json([])
    assert list(client.iter_recharges(status=None)) == []  # status=None is no filter


def test_a_walk_tells_the_page_it_stopped_before_and_none_once_it_ended():
    from partnerkit.client import iterate
    from partnerkit.errors import BudgetExhausted

    def fetch(n):
        if n == 3:
            raise BudgetExhausted("no room")
        return page_from_headers([{"id": n * 10}, {"id": n * 10 + 1}], {"X-Total-Pages": "4"}, page=n, limit=2)

    walk = iterate(fetch, start=1)
    got = []
    with pytest.raises(BudgetExhausted):
        for item in walk:
            got.append(item["id"])
    assert got == [10, 11, 20, 21] and walk.next_page == 3  # every item of pages 1-2 handed out; read on at 3
    pages = {n: page_from_headers([{"id": n}], {"X-Total-Pages": "4"}, page=n, limit=1) for n in (3, 4)}
    rest = iterate(pages.__getitem__, start=walk.next_page)
    assert [i["id"] for i in rest] == [3, 4] and rest.next_page is None


def test_the_order_lists_404_no_matching_result_is_an_empty_page(client, httpserver):
    """Errors, "Order list and order detail": 404 not_found "No Matching Result Found!" is not marked
    "(detail)": a list may answer it when nothing matches. It reads as an empty page, ending a walk."""
    httpserver.expect_request("/api/v1/orders", query_string={"page": "1", "limit": "100"}).respond_with_json(
        {"error": "not_found", "message": "No Matching Result Found!"}, status=404)
    page = client.list_orders(limit=100)
    assert (page.items, page.page, page.has_more, page.malformed) == ([], 1, False, ())
    assert list(client.iter_orders()) == []


def test_a_bare_404_from_the_order_list_stays_an_error(client, httpserver):
    """A 404 without the table's body (a wrong base URL, a proxy's page) is no "nothing matched"."""
    httpserver.expect_request("/api/v1/orders").respond_with_data("<html>Not Found</html>", status=404,
                                                                  content_type="text/html")
    with pytest.raises(errors.NotFound):
        client.list_orders()
