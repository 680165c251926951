"""Walking a list while records change status (docs/client.md, "Walking lists"), on the sandbox.

The recharge list is paged by offset, newest first (Endpoints, GET /api/v1/recharges). A record
that leaves a status filter between two page reads moves every later record up one place, so a
status-filtered walk skips one; a walk by date, testing the status on each record, sees each
recharge of the range exactly once.
"""

from __future__ import annotations

import pytest
import requests

from sandbox.settings import SandboxSettings

from tests.client.conftest import alpha_client
from tests.sandbox_serving import serve_sandbox

# Last digit of the mobile number (docs/sandbox.md): 0 SUCCESS at once, 8 PROCESSING until settled.
OUTCOMES = "808088"


@pytest.fixture
def server():
    with serve_sandbox(SandboxSettings(), background=False) as running:
        yield running


@pytest.fixture
def client(server, tmp_path):
    with alpha_client(server, tmp_path) as c:
        yield c


@pytest.fixture
def submitted(client):
    """Six recharges, four PROCESSING, newest first as the list shows them."""
    results = [client.submit_recharge(mobile_number=f"98765000{i}{digit}", operator_id=1, amount=10 + i)
               for i, digit in enumerate(OUTCOMES)]
    return [r.recharge for r in reversed(results)]


def _settle(server, recharge_id: int) -> None:
    r = requests.post(f"{server.base_url}/sandbox/recharges/{recharge_id}/settle", json={"status": "SUCCESS"},
                      timeout=5)
    assert r.status_code == 200, r.text


def test_a_status_filtered_page_walk_skips_a_record_when_another_settles(client, server, submitted):
    # Why the iterators refuse a status filter: the provider pages by offset.
    processing = [r.id for r in submitted if r.status == "PROCESSING"]
    assert len(processing) == 4
    first = client.list_recharges(status="PROCESSING", limit=2)
    assert [r.id for r in first] == processing[:2]
    _settle(server, processing[0])  # leaves the filter: every later record moves up one place
    second = client.list_recharges(status="PROCESSING", limit=2, page=2)
    assert [r.id for r in second] == processing[3:]  # processing[2] was on page 2 and is now on page 1
    seen = {r.id for page in (first, second) for r in page}
    assert processing[2] not in seen and not second.has_more


def test_the_documented_walk_sees_every_recharge_once_while_one_settles(client, server, submitted):
    # docs/client.md: walk by date and test the status yourself.
    day = submitted[0].created_at.date()
    walk = client.iter_recharges(from_date=day, limit=2)
    seen = [next(walk), next(walk)]  # page 1 read
    _settle(server, seen[0].id)
    seen += list(walk)
    assert [r.id for r in seen] == [r.id for r in submitted]
    still_processing = [r.id for r in seen if r.normalized_status == "PROCESSING"]
    assert still_processing == [r.id for r in submitted if r.status == "PROCESSING"]
    assert server.sandbox.calls["GET /api/v1/recharges"] == 3
