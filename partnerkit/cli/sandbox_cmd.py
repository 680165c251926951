"""`partnerkit sandbox`: the provider simulator alone, for demos and partners' own integration work.

The sandbox is an independent implementation of the provider's document; partnerkit only starts
it (dependencies flow one way: nothing in the sandbox imports partnerkit).
"""

from __future__ import annotations

import click

from partnerkit.cli.serve import check_listen

# The document's three webhook envelope forms, as the sandbox names them (sandbox.envelopes.FORMS: the CLI
# does not import the simulator until the command runs).
ENVELOPES = ("standard", "order_id", "timestamp")


@click.command("sandbox")
@click.option("--port", type=click.IntRange(0, 65535), default=8090, show_default=True,
              help="Loopback port to listen on (0 picks a free one).")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to bind; keep it on loopback unless you know why not.")
@click.option("--speed", type=click.FloatRange(min=0, max=10000), default=1.0, show_default=True,
              help="Sandbox clock speed: 60 makes a minute of provider time pass every second "
                   "(webhook retries, recharge settlement, order fulfilment); 0 freezes the clock, which "
                   "then moves only with POST /sandbox/clock/advance.")
@click.option("--envelope", type=click.Choice(ENVELOPES), default="standard", show_default=True,
              help="Envelope form of the webhooks registered while it runs (`webhooks register`): the "
                   "provider's document shows three; a registered webhook is switched with `curl -X PATCH "
                   "http://HOST:PORT/sandbox/webhooks/ID -d '{\"envelope\": \"timestamp\"}'`, HOST:PORT as "
                   "--host and --port give them (127.0.0.1:8090 by default; the first line it prints names it).")
@click.option("--chaos", is_flag=True,
              help="Deliver the webhooks registered while it runs out of order and some twice (the same "
                   "event_id), as a real provider may; `-d '{\"chaos\": true}'` switches a registered one.")
@click.option("--no-http-webhooks", is_flag=True,
              help="Refuse plain-http webhook URLs, loopback included, as the provider does (https only).")
@click.option("--fixed-ids", is_flag=True,
              help="Number records from the documented first ids (recharge 100001, order 5001, ...) at every "
                   "start, as tests pin them; by default each start numbers from its start time, so a "
                   "database kept across a sandbox restart never meets an id twice.")
def sandbox_command(port: int, host: str, speed: float, envelope: str, chaos: bool, no_http_webhooks: bool,
                    fixed_ids: bool) -> None:
    """Run the provider simulator; prints its base URL, API key, secret and any webhook token it issues."""
    import sandbox  # imported here so that the rest of the CLI never loads the simulator

    check_listen(host, port)
    try:
        sandbox.serve(port=port, speed=speed, host=host, allow_http_webhooks=not no_http_webhooks, echo=click.echo,
                      webhook_envelope=envelope, webhook_chaos=chaos, fixed_ids=fixed_ids)
    except OSError as exc:
        raise click.ClickException(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    except KeyboardInterrupt:
        click.echo("sandbox stopped", err=True)


def register(group: click.Group) -> None:
    group.add_command(sandbox_command)
