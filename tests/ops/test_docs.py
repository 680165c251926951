"""The README's command reference is the commands' own --help, and every contract command exists."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click
import pytest

from partnerkit.cli import cli
from partnerkit.cli._reference import BEGIN, END, render

README = Path(__file__).resolve().parents[2] / "README.md"

# DESIGN.md's command-line contract.
CONTRACT = [
    "serve", "worker", "run", "demo", "sandbox", "events list", "orders list", "orders show", "orders create",
    "vouchers", "recharges submit", "recharges list", "recharges show", "recharges locate", "reconcile", "report",
    "drifts list", "drifts resolve", "drifts escalate", "webhooks register", "webhooks list", "webhooks test",
    "webhooks deliveries", "webhooks stats", "webhooks retry", "status",
]


def _all_paths(command: click.Command, path=()):
    yield path
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            yield from _all_paths(sub, path + (name,))


def test_readme_reference_matches_help():
    text = README.read_text()
    block = text[text.index(BEGIN): text.index(END) + len(END)]
    assert block == render(cli), "README's command reference is stale: run `make docs`"


@pytest.mark.parametrize("command", CONTRACT)
def test_contract_command_exists(command):
    group = cli
    for part in command.split():
        assert isinstance(group, click.Group) and part in group.commands, f"`partnerkit {command}` is missing"
        group = group.commands[part]


def test_every_help_works_without_configuration(tmp_path):
    paths = [" ".join(p) for p in _all_paths(cli) if p]
    script = ("import sys\nfrom click.testing import CliRunner\nfrom partnerkit.cli import cli\n"
              "bad = []\nfor path in sys.argv[1:]:\n"
              "    r = CliRunner().invoke(cli, path.split() + ['--help'])\n"
              "    if r.exit_code != 0 or 'Usage:' not in r.output: bad.append((path, r.exit_code, r.output[-200:]))\n"
              "print(bad)\nsys.exit(1 if bad else 0)\n")
    result = subprocess.run([sys.executable, "-c", script, *paths], capture_output=True, text=True, cwd=tmp_path,
                            env={"PATH": "", "PARTNERKIT_DB": str(tmp_path / "never-created.db")}, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert not (tmp_path / "never-created.db").exists()  # --help opens no database


def test_every_option_says_what_it_does():
    # `--limit`, `--page`, `--product-id` and the deliveries filters showed only a type and a default.
    silent = []
    for path in _all_paths(cli):
        command = cli
        for part in path:
            command = command.commands[part]
        for param in command.params:
            if isinstance(param, click.Option) and not (param.help or "").strip():
                silent.append(f"partnerkit {' '.join(path)} {param.opts[0]}")
    assert silent == []


def test_the_reference_carries_every_paragraph_of_each_help():
    """Not only the first: `report` writing its three files for a day without a stored report,
    `orders sync` exiting 1 when the budget cut it short, and the like were in --help only."""
    block = " ".join(render(cli).split())
    missing = []
    for path in _all_paths(cli):
        if not path:
            continue  # the group itself: the section above the reference introduces it
        command = cli
        for part in path:
            command = command.commands[part]
        for paragraph in (command.help or "").strip().split("\n\n"):
            if " ".join(paragraph.split()) not in block:
                missing.append(f"partnerkit {' '.join(path)}: {paragraph.split()[:6]}")
    assert missing == []
