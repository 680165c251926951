"""`PartnerApi`, the interface the jobs use, and a fork's client around `PartnerClient`.

The jobs call `check_account()`, `with_budget()`, `leaving()`, `once()` and `budget` on every client,
unconditionally: an adapter without one fails on it, before anything is recorded or sent, instead of quietly
losing the account check before a write (or a budget reserve). The sandbox on loopback, real SQLite files.
"""

from __future__ import annotations

import inspect

import pytest

from partnerkit.client import PartnerApi, PartnerClient
from partnerkit.config import Config
from partnerkit.errors import AccountMismatch
from partnerkit.ordering import place_order
from partnerkit.store import open_db
from reconcile.recharges import submit

# Every member of the Protocol but `budget` (a property on both).
MEMBERS = sorted(name for name, value in vars(PartnerApi).items() if inspect.isfunction(value) and not name.startswith("_"))


def _shape(function) -> list[tuple]:
    """Parameter names, kinds and defaults (annotations aside: the client's are partly strings)."""
    return [(p.name, p.kind, p.default) for p in inspect.signature(function).parameters.values()]


@pytest.mark.parametrize("name", MEMBERS)
def test_the_protocol_gives_partnerclients_own_signatures(name):
    assert _shape(getattr(PartnerApi, name)) == _shape(getattr(PartnerClient, name))


def test_the_protocol_names_what_the_jobs_call_besides_the_endpoints():
    assert {"check_account", "with_budget", "leaving", "once"} <= set(MEMBERS)
    assert isinstance(inspect.getattr_static(PartnerApi, "budget"), property)
    assert isinstance(inspect.getattr_static(PartnerClient, "budget"), property)


def test_a_subclass_view_is_of_the_subclass_and_shares_the_transport(tmp_path):
    class Audited(PartnerClient):
        """A fork's client: its override applies to every view a job takes."""

        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            self.audit: list[str] = []

    config = Config(db_path=tmp_path / "pk.db", api_base_url="http://127.0.0.1:9", api_key="k" * 16,
                    api_secret="s" * 16)
    with Audited(config, purpose="fork") as client:
        views = [client.with_budget("poller", wait=False, own_cap=5), client.leaving(7), client.once()]
        assert [type(view) for view in views] == [Audited] * 3
        assert all(view.audit is client.audit and view.budget is client.budget for view in views)
        assert [view._spend.purpose for view in views] == ["poller", "fork", "fork"]
        assert client._spend.keep_free == 0 and views[1]._spend.keep_free == 7  # the view's, not the client's


class OldAdapter:
    """A fork's adapter around a PartnerClient, written before the jobs asked for `check_account`: each call
    noted, then handed on; its views wrap the wrapped client's views (docs/client.md, "Wrapping the client")."""

    def __init__(self, real: PartnerClient, calls: list[str]) -> None:
        self.real, self.calls = real, calls

    @property
    def budget(self):
        return self.real.budget

    def with_budget(self, purpose, **kwargs):
        return type(self)(self.real.with_budget(purpose, **kwargs), self.calls)

    def leaving(self, keep_free):
        return type(self)(self.real.leaving(keep_free), self.calls)

    def once(self):
        return type(self)(self.real.once(), self.calls)

    def submit_recharge(self, **fields):
        self.calls.append("submit_recharge")
        return self.real.submit_recharge(**fields)

    def create_order(self, **fields):
        self.calls.append("create_order")
        return self.real.create_order(**fields)


class Adapter(OldAdapter):
    """The same adapter with the whole interface."""

    def check_account(self) -> None:
        self.calls.append("check_account")
        self.real.check_account()


def _write(kind: str, config: Config, db, client):
    if kind == "recharge":
        return submit(config, db, client, mobile_number="9811100005", operator_id=1, amount=99)
    return place_order(config, db, client, product_id=7, denomination=10, quantity=1)


def _stored(db) -> dict[str, int]:
    return {t: db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in ("recharges", "order_intents")}


@pytest.mark.parametrize("kind", ["recharge", "order"])
def test_an_adapter_without_the_account_check_is_refused_before_anything_is_recorded_or_sent(
        kind, sandbox_server, sandbox_config):
    db = open_db(sandbox_config.db_path)
    calls: list[str] = []
    with PartnerClient(sandbox_config, db) as real:
        with pytest.raises(AttributeError, match="check_account"):
            _write(kind, sandbox_config, db, OldAdapter(real, calls))
    assert calls == [] and _stored(db) == {"recharges": 0, "order_intents": 0}
    assert sum(sandbox_server.sandbox.calls.values()) == 0
    db.conn.close()


@pytest.mark.parametrize("kind", ["recharge", "order"])
def test_an_adapter_for_another_accounts_key_is_refused_before_its_intent(kind, sandbox_server, sandbox_config):
    db = open_db(sandbox_config.db_path)
    with PartnerClient(sandbox_config, db) as alpha:
        alpha.check_account()  # the database now serves alpha's account
    beta = next(c for c in sandbox_server.clients if c.name == "beta")
    other = Config(db_path=sandbox_config.db_path, api_base_url=sandbox_server.base_url, api_key=beta.key,
                   api_secret=beta.secret, http_timeout_s=5)
    calls: list[str] = []
    with PartnerClient(other, db) as real:
        with pytest.raises(AccountMismatch):
            _write(kind, other, db, Adapter(real, calls))
    assert calls == ["check_account"] and _stored(db) == {"recharges": 0, "order_intents": 0}
    assert sandbox_server.sandbox.calls == {"GET /api/v1/wallets": 2}  # alpha's read, then beta's: nothing else
    db.conn.close()


def test_every_walk_is_annotated_as_the_walk_it_returns():
    """docs/client.md, "Reading on after a stop": an iterator is a `Walk` (its `next_page`)."""
    walks = sorted(name for name in vars(PartnerClient) if name.startswith("iter_"))
    assert walks == ["iter_deliveries", "iter_orders", "iter_recharges", "iter_transactions"]
    assert {name: str(inspect.signature(getattr(PartnerClient, name)).return_annotation).split("[")[0]
            for name in walks} == dict.fromkeys(walks, "Walk")
