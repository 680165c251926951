"""The demo's order detail reads follow the document's order polling limit (Limits: "Order polling: no faster
than every 10 seconds"), counted on the provider's clock: the sandbox's, sped up."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from partnerkit.demo.script import ORDER_POLL_S, paced

START = datetime(2026, 3, 10, 10, 0, tzinfo=timezone.utc)


def test_an_orders_detail_is_read_at_most_once_per_10_seconds_of_the_providers_clock():
    clock = [START]
    reads: list[datetime] = []

    def read() -> str:
        reads.append(clock[0])
        return "DELIVERED"

    detail = paced(read, lambda: clock[0])
    answers = []
    for _ in range(100):  # asked every 0.5 s of the provider's clock for 50 s, as the demo's wait loop asks
        answers.append(detail())
        clock[0] += timedelta(seconds=0.5)
    assert ORDER_POLL_S == 10.0
    assert reads == [START + timedelta(seconds=10 * n) for n in range(5)]
    assert answers.count("DELIVERED") == 5 and answers.count(None) == 95


def test_the_first_ask_reads_at_once_and_a_clock_that_stands_still_reads_no_more():
    clock = [START]
    reads: list[datetime] = []
    detail = paced(lambda: reads.append(clock[0]) or len(reads), lambda: clock[0])
    assert [detail() for _ in range(3)] == [1, None, None]
    clock[0] += timedelta(seconds=9.999)
    assert detail() is None
    clock[0] += timedelta(seconds=0.001)
    assert detail() == 2 and len(reads) == 2
