"""README "Deploy": the receiver under plain gunicorn (`gunicorn -c deploy/gunicorn.conf.py
'receiver.app:create_app()'`) reads the settings the commands read, the --config file named by
PARTNERKIT_CONFIG included (finding 3: it used ./var/partnerkit.db, a new empty database with a new
voucher key, then refused to start for want of the token saved in the configured one).

Real gunicorn on a free loopback port, a real SQLite file, the real CLI in process."""

from __future__ import annotations

import requests
from click.testing import CliRunner

from partnerkit.cli import cli
from partnerkit.store import inbox, open_db
from tests.receiver.conftest import TOKEN, VOUCHER_KEY, envelope, signed_headers
from tests.receiver.servers import ServedReceiver


def test_plain_gunicorn_reads_the_database_partnerkit_config_names(tmp_path):
    data, run_dir = tmp_path / "data", tmp_path / "run"
    run_dir.mkdir()
    env_file = tmp_path / "partnerkit.env"
    env_file.write_text(f"PARTNERKIT_DB={data / 'partnerkit.db'}\nPARTNERKIT_VOUCHER_KEY={VOUCHER_KEY}\n"
                        "PARTNERKIT_LOG_LEVEL=WARNING\n")
    # The token exists only in the configured database, saved as `webhooks register` saves one: a receiver
    # reading any other database refuses to start ("no webhook token is accepted").
    saved = CliRunner().invoke(cli, ["--config", str(env_file), "webhooks", "token", "set", "12"], input=TOKEN + "\n",
                               env={"PARTNERKIT_CONFIG": None, "PARTNERKIT_DB": None})
    assert saved.exit_code == 0, saved.output

    with ServedReceiver({"PARTNERKIT_CONFIG": str(env_file)}, tmp_path / "gunicorn.log", workers=1,
                        plain_gunicorn=True, cwd=run_dir) as served:
        body = envelope("evt_plain_gunicorn")
        answer = requests.post(served.base_url + "/webhooks/partner", data=body, timeout=5,
                               headers=signed_headers(body, X_Webhook_ID="12"))
        assert (answer.status_code, answer.json()) == (200, {"status": "accepted"})

    db = open_db(data / "partnerkit.db")
    try:
        assert [row["dedup_key"] for row in inbox.listing(db)] == ["evt_plain_gunicorn"]
    finally:
        db.conn.close()
    assert list(run_dir.iterdir()) == []  # no ./var/partnerkit.db, no new voucher key beside it
