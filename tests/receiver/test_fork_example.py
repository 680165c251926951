"""docs/receiver.md's fork example (docs/examples/fork_receiver.py, shown whole in the page) runs against the
sandbox: it verifies and stores the provider's signed deliveries with the documented calls and reads the
order's vouchers, so the page cannot fall behind the code it shows."""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from partnerkit.cli import cli
from tests.receiver.servers import free_port

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "examples" / "fork_receiver.py"


def test_the_page_shows_the_example_as_it_is():
    page = (ROOT / "docs" / "receiver.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", page, flags=re.S)
    assert EXAMPLE.read_text() in blocks, "docs/receiver.md must show docs/examples/fork_receiver.py whole"


def test_the_example_stores_signed_deliveries_and_reads_the_vouchers(tmp_path):
    from sandbox import SandboxServer, SandboxSettings

    with SandboxServer(SandboxSettings(allow_http_webhooks=True)) as server:
        alpha, port = server.clients[0], free_port()
        settings = tmp_path / "partnerkit.env"
        settings.write_text(f"PARTNERKIT_DB={tmp_path / 'pk.db'}\nPARTNERKIT_API_BASE_URL={server.base_url}\n"
                            f"PARTNERKIT_API_KEY={alpha.key}\nPARTNERKIT_API_SECRET={alpha.secret}\n")
        env = {k: v for k, v in os.environ.items() if not k.startswith("PARTNERKIT_")}
        registered = CliRunner().invoke(cli, ["--config", str(settings), "webhooks", "register", "--url",
                                              f"http://127.0.0.1:{port}/webhooks/partner"], env={
            k: None for k in os.environ if k.startswith("PARTNERKIT_")})
        assert registered.exit_code == 0, registered.output
        done = subprocess.run([sys.executable, str(EXAMPLE), str(settings), str(port)], env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    order_id = int(re.match(r"order (\d+): PLACED, 2 vouchers stored$", lines[0]).group(1))
    assert f"stored order.delivered of order {order_id}: accepted" in lines
    vouchers = [line for line in lines if line.startswith("voucher ")]
    assert len(vouchers) == 2 and all(re.fullmatch(r"voucher \S+: code \.\.\.\S{4}", v) for v in vouchers)
    with sqlite3.connect(tmp_path / "pk.db") as db:
        stored = db.execute("SELECT event_type, state FROM inbox WHERE order_id = ?", (order_id,)).fetchall()
        codes = db.execute("SELECT card_number FROM vouchers WHERE order_id = ?", (order_id,)).fetchall()
    assert ("order.delivered", "processed") in stored
    assert len(codes) == 2 and all(code[:2] == b"v1" for (code,) in codes)  # sealed at rest
    assert "Traceback" not in done.stderr
