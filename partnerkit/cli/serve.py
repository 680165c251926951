"""`partnerkit serve`: the webhook receiver under gunicorn."""

from __future__ import annotations

import os
import re
import socket
import sys

import click

from partnerkit.cli.context import AppContext, created_line, pass_app
from partnerkit.config import ConfigError

_BIND = re.compile(r"^(\[[0-9a-fA-F:]+\]|[A-Za-z0-9.-]+):(\d{1,5})$")


def bind_option(func):
    """--bind HOST:PORT, validated."""
    def check(ctx: click.Context, param: click.Parameter, value: str) -> str:
        match = _BIND.match(value)
        if not match:
            raise click.BadParameter("expected HOST:PORT, e.g. 127.0.0.1:8000")
        if not 0 < int(match.group(2)) < 65536:
            raise click.BadParameter(f"port {int(match.group(2))} is out of range: give 1 to 65535")
        return value
    return click.option("--bind", default="127.0.0.1:8000", show_default=True, callback=check,
                        help="HOST:PORT to listen on; keep it on loopback behind the shipped nginx or another "
                             "buffering TLS proxy (slow clients hold gunicorn's workers: beyond loopback, a "
                             "WARNING says so).")(func)


def workers_option(func):
    """--workers N for gunicorn."""
    return click.option("--workers", type=click.IntRange(1, 64), default=2, show_default=True,
                        help="gunicorn worker processes.")(func)


def check_listen(host: str, port: int) -> None:
    """Bind HOST:PORT once and let go: a port in use or an unknown host is one line, exit 1, at once.

    Left to gunicorn, either is five "connection failed" lines over five seconds of retries; the
    sandbox's server prints two lines of its own. The address is free again the moment this returns
    (SO_REUSEADDR, as gunicorn binds it), so only a process starting in between can still take it.
    """
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind(address)
    except OSError as exc:  # socket.gaierror included
        raise click.ClickException(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


def receiver_process(app: AppContext, bind: str, workers: int) -> tuple[list[str], dict[str, str]]:
    """Validate everything the receiver needs, then return the gunicorn master's argv and environment.

    Validation happens here, before anything forks, so a bad setting is one line and exit 2. A refused
    start leaves nothing behind: on a PARTNERKIT_DB that does not exist yet, everything that can refuse is
    checked before the database (and a generated voucher key file) is created, and a start that creates
    it says so on stderr (`created_line`).
    """
    from partnerkit.crypto import check_voucher_key, load_cipher
    from receiver.tokens import NO_TOKEN, require_some_token, require_tokens

    config = app.config
    host, port = bind.rsplit(":", 1)
    new = not config.db_path.exists()
    if new:
        # No token can be saved in a database that does not exist: only the configured ones count.
        if not config.webhook_tokens:
            raise ConfigError(NO_TOKEN)
        check_voucher_key(config)  # a configured key, or a key file left beside, that cannot be read
        check_listen(host, int(port))
    db = app.db  # first: a path that holds no database must not get a voucher key file beside it
    if app.db_created:  # said at once, as every command names the database before the voucher key file
        click.echo(f"warning: {created_line(config.db_path, origin=app.db_origin(), made=app.db_dirs_made)}", err=True)
    require_some_token(config, db)  # nor a receiver that is refused for want of a token
    cipher = load_cipher(config)  # creates the voucher key file once, before workers race for it
    require_tokens(config, db, cipher)
    if not new:
        check_listen(host, int(port))
    env = dict(os.environ)
    if app.config_file:
        env["PARTNERKIT_CONFIG"] = os.path.abspath(app.config_file)
    for name in ("PROMETHEUS_MULTIPROC_DIR", "RECEIVER_METRICS_DIR_OWNED"):
        env.pop(name, None)  # the gunicorn master makes a private one
    argv = [sys.executable, "-m", "receiver.gunicorn_app", "--bind", bind, "--workers", str(workers)]
    return argv, env


@click.command("serve")
@bind_option
@workers_option
@pass_app
def serve_command(app: AppContext, bind: str, workers: int) -> None:
    """Run the webhook receiver under gunicorn: it verifies, deduplicates and stores the provider's signed webhooks.

    It needs an accepted signing token: PARTNERKIT_WEBHOOK_TOKENS, or the one `partnerkit webhooks register`
    saved; without any it refuses to start, leaving nothing behind. A first start creates the database
    (PARTNERKIT_DB) and says so on stderr. Settings come from PARTNERKIT_* environment variables or the
    --config file, as for every command (`partnerkit config` shows them). The receiver never calls the
    provider: the vouchers its events announce are fetched by `partnerkit worker`, so run the worker too
    (or `partnerkit run` for both).
    """
    argv, env = receiver_process(app, bind, workers)
    click.echo(f"partnerkit receiver on http://{bind}{app.config.webhook_path} with {workers} workers", err=True)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, argv, env)


def register(group: click.Group) -> None:
    group.add_command(serve_command)
