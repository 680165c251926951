"""`partnerkit --help` and each group's --help list their commands with whole first sentences, never cut short."""

import click
from click.testing import CliRunner

from partnerkit.cli import cli


def _groups(group: click.Group, path: tuple[str, ...] = ()):
    yield path, group
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            yield from _groups(command, (*path, name))


def test_no_command_summary_is_cut_short():
    runner = CliRunner()
    for path, group in _groups(cli):
        result = runner.invoke(cli, [*path, "--help"], terminal_width=80)
        assert result.exit_code == 0, result.output
        listing = result.output.split("Commands:", 1)[1]
        assert "..." not in listing, f"partnerkit {' '.join(path)} --help cuts a summary short:\n{listing}"
        for name, command in group.commands.items():
            if not command.hidden:
                assert f"  {name} " in listing, name


def test_a_summary_is_the_first_sentence_of_the_help():
    worker = cli.commands["worker"]
    assert worker.get_short_help_str() == ("Poll recharges, fetch vouchers, sync and report on schedule; one worker per"
                                           " database.")
