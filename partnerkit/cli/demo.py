"""`partnerkit demo`: sandbox + receiver + worker on loopback, a scripted day of traffic, then the report."""

from __future__ import annotations

import sys
from pathlib import Path

import click


@click.command("demo")
@click.option("--workdir", type=click.Path(file_okay=False, path_type=Path), default=Path("var/demo"),
              show_default=True, help="Where the demo keeps its config, database, logs and reports "
                                      "(a previous demo's state there is removed first).")
@click.option("--speed", type=click.FloatRange(min=10, max=1000), default=40.0, show_default=True,
              help="Sandbox clock speed once the day starts: 40 makes a minute of provider time pass in 1.5 s.")
@click.option("--keep-running", is_flag=True,
              help="Leave the sandbox, receiver and worker up after the report, until Ctrl-C.")
def demo_command(workdir: Path, speed: float, keep_running: bool) -> None:
    """Run the sandbox, the receiver and the worker, play a scripted day, and print the day's report.

    Ignores any PARTNERKIT_* settings: the demo writes its own config file in --workdir, which the
    commands it suggests at the end take with --config.
    """
    from partnerkit.demo import DemoError, Interrupted, run_demo  # the sandbox loads only when asked for

    try:
        run_demo(workdir, speed, keep_running, echo=lambda line: click.echo(line))
    except DemoError as exc:
        raise click.ClickException(f"demo failed: {exc}") from exc
    except Interrupted as exc:
        click.echo(f"demo stopped by {exc}; every process it started has been stopped", err=True)
        sys.exit(128 + exc.signum)


def register(group: click.Group) -> None:
    group.add_command(demo_command)
