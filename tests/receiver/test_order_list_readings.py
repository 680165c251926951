"""The order list where the provider's document leaves room for another provider than the sandbox:
its error table gives `404 not_found No Matching Result Found!` to "Order list and order detail"
alike, so a provider may answer it for an empty list (the sandbox's `order_list_empty_404`).
"""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest
from click.testing import CliRunner

from partnerkit.cli import cli
from partnerkit.config import config_as_env, load_config
from sandbox.settings import SandboxSettings
from sandbox.testing import SandboxServer

# ---- 404 for an empty order list ------------------------------------------------------------------------

def test_a_partner_without_orders_syncs_and_reconciles_when_the_empty_list_is_a_404(tmp_path):
    today = datetime.now(timezone.utc).date()
    with SandboxServer(SandboxSettings(order_list_empty_404=True), background=False) as server:
        client = server.clients[1]  # beta: no order ever placed
        env = config_as_env(load_config(environ={
            "PARTNERKIT_DB": str(tmp_path / "partnerkit.db"), "PARTNERKIT_API_BASE_URL": server.base_url,
            "PARTNERKIT_API_KEY": client.key, "PARTNERKIT_API_SECRET": client.secret,
            "PARTNERKIT_REPORT_DIR": str(tmp_path / "reports")}))
        runner = CliRunner()
        submitted = runner.invoke(cli, ["recharges", "submit", "--mobile", "9800000010", "--operator-id", "1",
                                        "--amount", "50"], env=env)
        assert submitted.exit_code == 0, submitted.output
        synced = runner.invoke(cli, ["orders", "sync", "--format", "json"], env=env)
        assert synced.exit_code == 0, synced.output
        summary = json.loads(synced.stdout)
        assert (summary["pages"], summary["seen"], summary["stopped"]) == (1, 0, "end of list")
        reconciled = runner.invoke(cli, ["reconcile", "--date", today.isoformat()], env=env)
        assert reconciled.exit_code == 0, reconciled.output
        assert "1 recharge" in reconciled.stderr
        assert server.sandbox.calls["GET /api/v1/orders"] == 2  # each walk read the 404 once, as its empty page
        assert (tmp_path / "reports" / f"partnerkit-report-{today.isoformat()}.json").exists()
