"""`partnerkit sandbox`: the provider simulator alone, for demos and partners' own integration work.

The sandbox is an independent implementation of the provider's document; partnerkit only starts
it (dependencies flow one way: nothing in the sandbox imports partnerkit).
"""

from __future__ import annotations

import click

from partnerkit.cli.serve import check_listen


@click.command("sandbox")
@click.option("--port", type=click.IntRange(0, 65535), default=8090, show_default=True,
              help="Loopback port to listen on (0 picks a free one).")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to bind; keep it on loopback unless you know why not.")
@click.option("--speed", type=click.FloatRange(min=0, max=10000), default=1.0, show_default=True,
              help="Sandbox clock speed: 60 makes a minute of provider time pass every second "
                   "(webhook retries, recharge settlement, order fulfilment); 0 freezes the clock, which "
                   "then moves only with POST /sandbox/clock/advance.")
def sandbox_command(port: int, host: str, speed: float) -> None:
    """Run the provider simulator; prints its base URL, API key, secret and any webhook token it issues."""
    import sandbox  # imported here so that the rest of the CLI never loads the simulator

    check_listen(host, port)
    try:
        sandbox.serve(port=port, speed=speed, host=host, allow_http_webhooks=True, echo=click.echo)
    except OSError as exc:
        raise click.ClickException(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    except KeyboardInterrupt:
        click.echo("sandbox stopped", err=True)


def register(group: click.Group) -> None:
    group.add_command(sandbox_command)
