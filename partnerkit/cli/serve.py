"""`partnerkit serve`: the webhook receiver under gunicorn."""

from __future__ import annotations

import os
import re
import sys

import click

from partnerkit.cli.context import AppContext, pass_app

_BIND = re.compile(r"^(\[[0-9a-fA-F:]+\]|[A-Za-z0-9.-]+):(\d{1,5})$")


@click.command("serve")
@click.option("--bind", default="127.0.0.1:8000", show_default=True, help="HOST:PORT to listen on.")
@click.option("--workers", type=click.IntRange(1, 64), default=2, show_default=True, help="gunicorn worker processes.")
@pass_app
def serve_command(app: AppContext, bind: str, workers: int) -> None:
    """Run the webhook receiver (receiver.app:create_app) under gunicorn."""
    match = _BIND.match(bind)
    if not match or not 0 < int(match.group(2)) < 65536:
        raise click.BadParameter("expected HOST:PORT, e.g. 127.0.0.1:8000", param_hint="--bind")
    from partnerkit.crypto import load_cipher
    from receiver.tokens import require_tokens

    config = app.config  # validated here, before anything forks: errors are one line, exit 2
    load_cipher(config)  # creates the voucher key file once, before workers race for it
    require_tokens(config, app.db, load_cipher(config))
    env = dict(os.environ)
    if app.config_file:
        env["PARTNERKIT_CONFIG"] = os.path.abspath(app.config_file)
    for name in ("PROMETHEUS_MULTIPROC_DIR", "RECEIVER_METRICS_DIR_OWNED"):
        env.pop(name, None)  # the gunicorn master makes a private one
    click.echo(f"partnerkit receiver on http://{bind}{config.webhook_path} with {workers} workers", err=True)
    sys.stdout.flush()
    sys.stderr.flush()
    argv = [sys.executable, "-m", "receiver.gunicorn_app", "--bind", bind, "--workers", str(workers)]
    os.execve(sys.executable, argv, env)


def register(group: click.Group) -> None:
    group.add_command(serve_command)
