"""Every command's wrong input gives one line on stderr and a non-zero exit, never a traceback.

The command tree is walked from `partnerkit.cli.cli`, so a new command or option is covered (or
fails `test_every_command_has_valid_arguments_here` until it is added below). Usage errors are
generated from each command's own parameters (unknown option, bad choice, not a number, out of
range, missing required option or argument, surplus argument, bad date/time/bind); runtime
errors come from a table (bad settings, an unusable database path, unknown ids, an unreachable
provider, unwritable outputs). Most run in-process through CliRunner; the commands that serve or
run forever (serve, run, worker, demo, sandbox) and a sample of the rest run as real processes.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from partnerkit.cli import cli
from partnerkit.config import ENV_NAMES
from partnerkit.store import open_db
from partnerkit.store.ledger import record_sync
from tests.receiver.conftest import VOUCHER_KEY

LONG_RUNNING = {("serve",), ("run",), ("worker",), ("demo",), ("sandbox",)}
NO_CONFIG = {("demo",), ("sandbox",)}  # they ignore PARTNERKIT_* on purpose
# restore puts a file in place of the database rather than opening it: tests/ops/test_restore.py
NO_DATABASE = NO_CONFIG | {("config",), ("restore",)}


def leaves(command: click.Command = cli, path: tuple[str, ...] = ()):
    """(path, command) for every runnable command under `command`."""
    if isinstance(command, click.Group):
        for name in sorted(command.commands):
            yield from leaves(command.commands[name], path + (name,))
    else:
        yield path, command


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed again on return: connections are refused


def valid_args(path: tuple[str, ...], tmp: Path) -> list[str]:
    """Arguments that parse for each command (what happens next depends on the environment)."""
    return {
        ("account", "show"): [],
        ("account", "trust-key"): [],
        ("backup",): [str(tmp / "new-backup.db")],
        ("budget", "show"): [],
        ("budget", "unblock"): ["--class", "general"],
        ("catalog", "operators"): [],
        ("catalog", "products"): [],
        ("config",): [],
        ("demo",): ["--workdir", str(tmp / "demo")],
        ("drifts", "escalate"): ["d-unknown", "--note", "n"],
        ("drifts", "history"): ["d-unknown"],
        ("drifts", "list"): [],
        ("drifts", "resolve"): ["d-unknown", "--note", "n"],
        ("drifts", "show"): ["d-unknown"],
        ("events", "list"): [],
        ("events", "prune"): [],
        ("keys", "retire"): [],
        ("keys", "rewrap"): ["--batch-size", "10"],
        ("keys", "rotate"): [],
        ("keys", "status"): [],
        ("orders", "create"): ["--product-id", "7", "--denomination", "10", "--quantity", "1"],
        ("orders", "close"): ["424242", "--note", "n"],
        ("orders", "list"): [],
        ("orders", "show"): ["424242"],
        ("orders", "sync"): [],
        ("recharges", "close"): ["424242", "--note", "n"],
        ("recharges", "list"): [],
        ("recharges", "locate"): ["--local-id", "424242"],
        ("recharges", "quote"): ["--operator-id", "1", "--amount", "10"],
        ("recharges", "show"): ["424242"],
        ("recharges", "submit"): ["--mobile", "9876543210", "--operator-id", "1", "--amount", "10"],
        ("reconcile",): ["--date", "2024-05-01"],
        ("restore",): [str(tmp / "a-backup.db")],
        ("report",): ["--date", "2024-05-01"],
        ("run",): ["--bind", f"127.0.0.1:{closed_port()}", "--workers", "1"],
        ("sandbox",): ["--port", "0"],
        ("serve",): ["--bind", f"127.0.0.1:{closed_port()}", "--workers", "1"],
        ("status",): [],
        ("transactions", "list"): ["--date", "2024-05-01"],
        ("transactions", "show"): ["424242"],
        ("vouchers",): ["424242"],
        ("webhooks", "delete"): ["424242"],
        ("webhooks", "deliveries"): [],
        ("webhooks", "list"): [],
        ("webhooks", "register"): ["--url", "https://partner.example.invalid/webhooks/partner"],
        ("webhooks", "retry"): ["424242"],
        ("webhooks", "stats"): [],
        ("webhooks", "test"): ["424242"],
        ("webhooks", "token", "forget"): ["424242"],
        ("webhooks", "token", "set"): ["424242"],
        ("webhooks", "update"): ["424242", "--name", "renamed"],
        ("worker",): ["--once", "--no-wait"],
    }.get(path)


def environment(tmp: Path, **overrides: str) -> dict[str, str | None]:
    """A complete configuration: database in tmp, provider on a closed loopback port."""
    env: dict[str, str | None] = {k: None for k in os.environ if k.startswith("PARTNERKIT_")}
    env.update(PARTNERKIT_DB=str(tmp / "pk.db"), PARTNERKIT_API_BASE_URL=f"http://127.0.0.1:{closed_port()}",
               PARTNERKIT_API_KEY="key_cli_errors", PARTNERKIT_API_SECRET="secret_cli_errors_9f2",
               PARTNERKIT_WEBHOOK_TOKENS="whsec_cli_errors_token", PARTNERKIT_VOUCHER_KEY=VOUCHER_KEY,
               PARTNERKIT_HTTP_TIMEOUT_S="2", PARTNERKIT_REPORT_DIR=str(tmp / "reports"))
    env.update(overrides)
    return env


def assert_one_line_error(exit_code: int, stderr: str, stdout: str = "", *, code: int | None = None,
                          usage: bool = False, match: str = "") -> None:
    """Non-zero; one `Error:` line, last on stderr (after click's usage lines for a usage error, or a
    progress line the command printed before it failed); no traceback."""
    assert "Traceback" not in stderr + stdout
    assert exit_code != 0 and (code is None or exit_code == code), (exit_code, stderr)
    lines = stderr.strip().splitlines()
    errors = [line for line in lines if line.startswith("Error:")]
    assert len(errors) == 1 and lines[-1] == errors[0], stderr
    if usage:
        assert len(lines) <= 4 and lines[0].startswith("Usage:"), stderr  # Usage, Try ... -h, blank, Error
    else:
        assert len(lines) <= 2 and not any(line.startswith("Usage:") for line in lines), stderr
    assert match in errors[0], (match, errors[0])


def run_in_process(args: list[str], env: dict[str, str | None]):
    result = CliRunner().invoke(cli, args, env=env, catch_exceptions=True)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"{args}: {result.exception!r}") from result.exception
    return result.exit_code, result.stderr, result.stdout


def run_process(args: list[str], env: dict[str, str | None], *, argv_bytes: list[bytes] | None = None):
    full = {k: v for k, v in os.environ.items() if not k.startswith("PARTNERKIT_")}
    full.update({k: v for k, v in env.items() if v is not None})
    argv = [sys.executable, "-m", "partnerkit"] + (argv_bytes if argv_bytes is not None else args)
    done = subprocess.run(argv, env=full, capture_output=True, timeout=60)
    return done.returncode, done.stderr.decode("utf-8", "replace"), done.stdout.decode("utf-8", "replace")


def run(path: tuple[str, ...], args: list[str], env: dict[str, str | None]):
    """Long-running commands always as a real process: a wrong expectation must not serve in pytest."""
    return run_process(args, env) if path in LONG_RUNNING else run_in_process(args, env)


# --- the tree -----------------------------------------------------------------------------------

def test_every_command_has_valid_arguments_here(tmp_path):
    missing = [" ".join(path) for path, _ in leaves() if valid_args(path, tmp_path) is None]
    assert missing == []
    assert len(list(leaves())) >= 30


# --- usage errors, generated from each command's parameters -------------------------------------

CALLBACK_BAD_VALUES = {"day": ["2024-02-30", "13/01/2024", "0001-01-01"],
                       "since": ["yesterday", "9999-12-31T23:59:59-23:00"],
                       "bind": ["nohost", "127.0.0.1:0", "127.0.0.1:99999", "[::1"],
                       "currency": ["INRR", "IN", "1NR"], "country": ["IND", "I", "1N"]}


def _bad_values(param: click.Parameter) -> list[str]:
    """Values each parameter must refuse, from its type (and, for parsed strings, its callback)."""
    kind = param.type
    values = list(CALLBACK_BAD_VALUES.get(param.name or "", []))
    if isinstance(kind, click.Choice):
        values.append("not-a-choice")
    if isinstance(kind, (click.types.IntParamType, click.types.FloatParamType)):
        values.append("not-a-number")
    if isinstance(kind, (click.IntRange, click.FloatRange)):
        if kind.min is not None:
            values.append(str(kind.min - 1))
        if kind.max is not None:
            values.append(str(kind.max + 1))
    if isinstance(kind, click.types.IntParamType) and not isinstance(kind, click.IntRange):
        values += ["0", str(2 ** 63)]  # ids: positive, and they must fit SQLite's INTEGER
    if isinstance(kind, click.IntRange) and kind.max is None:
        values.append(str(2 ** 63))
    return values


def _without(args: list[str], param: click.Parameter) -> list[str]:
    """`args` without the parameter (valid_args puts the one positional argument first)."""
    if isinstance(param, click.Argument):
        return args[1:]
    out, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg in param.opts:
            skip = True
        else:
            out.append(arg)
    return out


def _with(args: list[str], param: click.Parameter, value: str) -> list[str]:
    if isinstance(param, click.Argument):
        return [value, *args[1:]]
    return _without(args, param) + [param.opts[0], value]


def usage_cases():
    tmp = Path("/nonexistent-cli-errors")  # never touched: parsing fails first
    for path, command in leaves():
        good = valid_args(path, tmp)
        if good is None:  # a new command without its valid arguments: test_every_command_has_valid_arguments_here names it
            continue
        name = " ".join(path)
        yield pytest.param(path, [*path, *good, "--no-such-option"], id=f"{name} unknown-option")
        yield pytest.param(path, [*path, *good, "surplus-argument"], id=f"{name} surplus-argument")
        for param in command.params:
            if isinstance(param, click.Option) and param.is_flag:
                continue
            if param.required:
                yield pytest.param(path, [*path, *_without(good, param)], id=f"{name} missing {param.name}")
            for bad in _bad_values(param):
                yield pytest.param(path, [*path, *_with(good, param, bad)], id=f"{name} {param.name}={bad}")


@pytest.mark.parametrize("path, args", list(usage_cases()))
def test_usage_errors_are_refused_while_parsing(path, args):
    """Parsing alone (no command runs) refuses the arguments with click's UsageError."""
    command = cli
    for name in path:
        command = command.commands[name]  # type: ignore[attr-defined]
    with pytest.raises(click.UsageError) as info:
        command.make_context(" ".join(path), args[len(path):])
    assert "\n" not in info.value.format_message()


@pytest.mark.parametrize("path, args", [c for c in usage_cases() if tuple(c.values[0]) not in LONG_RUNNING])
def test_usage_errors_exit_2_with_one_error_line(path, args, tmp_path):
    code, stderr, stdout = run_in_process(list(args), environment(tmp_path))
    assert_one_line_error(code, stderr, code=2, usage=True)
    assert stdout == ""


@pytest.mark.parametrize("args", [["serve", "--workers", "0"], ["run", "--bind", "nohost"], ["worker", "--format", "xml"],
                                  ["worker", "--format", "json"],  # only with --once: the worker prints no table
                                  ["demo", "--speed", "1"], ["sandbox", "--port", "70000"],
                                  ["reconcile", "--date", "2024-02-30"]])
def test_usage_errors_as_a_real_process(args, tmp_path):
    assert_one_line_error(*run_process(args, environment(tmp_path)), code=2, usage=True)


def test_an_argument_that_is_not_utf8_is_a_usage_error(tmp_path):
    env = environment(tmp_path)
    code, stderr, _ = run_process([], env, argv_bytes=[b"orders", b"list", b"--status", b"\xff\xfe"])
    assert_one_line_error(code, stderr, code=2, usage=True, match="is not valid UTF-8")
    code, stderr, _ = run_in_process(["drifts", "resolve", "d-1", "--note", "\udcff"], env)
    assert_one_line_error(code, stderr, code=2, usage=True, match="is not valid UTF-8")


# --- runtime errors -----------------------------------------------------------------------------

def config_cases():
    for path, _ in leaves():
        if path not in NO_CONFIG:
            yield pytest.param(path, id=" ".join(path))


@pytest.mark.parametrize("path", list(config_cases()))
def test_a_bad_setting_is_named_in_one_line_with_exit_2(path, tmp_path):
    env = environment(tmp_path, PARTNERKIT_TOLERANCE_S="soon")
    code, stderr, stdout = run(path, [*path, *valid_args(path, tmp_path)], env)
    assert_one_line_error(code, stderr, stdout, code=2,
                          match="PARTNERKIT_TOLERANCE_S must be a whole number, got 'soon'")


SETTING_CASES = [
    ("PARTNERKIT_API_BASE_URL", "ftp://partner.example.com", "PARTNERKIT_API_BASE_URL must be an http(s) URL"),
    ("PARTNERKIT_API_BASE_URL", "https://partner.example.com/api/v1", "must not include the /api/v1 prefix"),
    ("PARTNERKIT_API_BASE_URL", "http://[::1", "PARTNERKIT_API_BASE_URL must be an http(s) URL"),  # urlsplit raises
    ("PARTNERKIT_API_BASE_URL", "http://partner example.com", "PARTNERKIT_API_BASE_URL must be an http(s) URL"),
    ("PARTNERKIT_API_BASE_URL", "http://127.0.0.1:99999", "PARTNERKIT_API_BASE_URL has an invalid port"),
    ("PARTNERKIT_API_BASE_URL", "https://partner.example.com?x=1", "must not carry a query or fragment"),
    ("PARTNERKIT_VOUCHER_KEY", "short", "PARTNERKIT_VOUCHER_KEY must be at least 16 bytes"),
    ("PARTNERKIT_VOUCHER_KEY_PREVIOUS", "an-old-key-long-enough,short",
     "PARTNERKIT_VOUCHER_KEY_PREVIOUS entry 2 must be at least 16 bytes"),
    ("PARTNERKIT_VOUCHER_KEY_PREVIOUS", "an-old-key-long-enough,,x", "PARTNERKIT_VOUCHER_KEY_PREVIOUS has an empty entry"),
    ("PARTNERKIT_VOUCHER_KEY_PREVIOUS", "an-old-key\twith-a-tab", "PARTNERKIT_VOUCHER_KEY_PREVIOUS entry 1 holds a control"),
    # A header value cannot carry them: the first call failed as "connection error (InvalidHeader)".
    ("PARTNERKIT_API_KEY", "pk_live_12\nX-Evil: 1", "PARTNERKIT_API_KEY holds a control character"),
    ("PARTNERKIT_API_SECRET", "sk_live\t34", "PARTNERKIT_API_SECRET holds a control character"),
    ("PARTNERKIT_WEBHOOK_TOKENS", "a,,b", "PARTNERKIT_WEBHOOK_TOKENS has an empty entry"),
    ("PARTNERKIT_HOURLY_BUDGET", "0", "PARTNERKIT_HOURLY_BUDGET must be between 1 and"),
    ("PARTNERKIT_DUE_HOUR_UTC", "24", "PARTNERKIT_DUE_HOUR_UTC must be between 0 and 23"),
    ("PARTNERKIT_INBOX_RETENTION_DAYS", "7", "PARTNERKIT_INBOX_RETENTION_DAYS must be between 30 and 3650"),
    ("PARTNERKIT_POLLER_BUDGET_SHARE", "2", "PARTNERKIT_POLLER_BUDGET_SHARE must be a fraction"),
    # NaN parses as a Decimal, and comparing it raised InvalidOperation: a 40-line traceback, exit 1.
    ("PARTNERKIT_POLLER_BUDGET_SHARE", "NaN", "PARTNERKIT_POLLER_BUDGET_SHARE must be a fraction greater than 0"),
    ("PARTNERKIT_POLLER_BUDGET_SHARE", "sNaN", "PARTNERKIT_POLLER_BUDGET_SHARE must be a fraction greater than 0"),
    ("PARTNERKIT_WORKER_STALE_S", "60", "PARTNERKIT_WORKER_STALE_S must be between 300 and 604800"),
    ("PARTNERKIT_HTTP_TIMEOUT_S", "NaN", "PARTNERKIT_HTTP_TIMEOUT_S must be"),
    ("PARTNERKIT_LOG_LEVEL", "LOUD", "PARTNERKIT_LOG_LEVEL must be one of"),
    ("PARTNERKIT_WEBHOOK_PATH", "webhooks", "PARTNERKIT_WEBHOOK_PATH must be a URL path"),
    ("PARTNERKIT_ORDER_BUDGET_PER_MINUTE", "-1", "PARTNERKIT_ORDER_BUDGET_PER_MINUTE must be between 1 and"),
    ("PARTNERKIT_NOT_A_SETTING", "1", "PARTNERKIT_NOT_A_SETTING is not a partnerkit setting"),
]


@pytest.mark.parametrize("name, value, match", SETTING_CASES)
def test_each_malformed_setting_is_named(name, value, match, tmp_path):
    code, stderr, stdout = run_in_process(["status"], environment(tmp_path, **{name: value}))
    assert_one_line_error(code, stderr, stdout, code=2, match=match)
    if "KEY" in name or "SECRET" in name:
        assert value.strip() not in stderr  # a credential is never echoed


def test_every_setting_has_a_malformed_value_case():
    names = {name for name, _, _ in SETTING_CASES}
    numeric = {"PARTNERKIT_TOLERANCE_S"}  # covered for every command above
    # Free text: any value is a valid setting (the database path is checked when it is opened); the
    # tests above cover an unusable database path.
    free_text = {"PARTNERKIT_DB", "PARTNERKIT_REPORT_DIR"}
    assert set(ENV_NAMES.values()) - names - numeric - free_text == set()


@pytest.mark.parametrize("content, match", [
    (None, "does not exist"),
    (b"\xff\xfePARTNERKIT_DB=x\n", "is not UTF-8 text"),
    (b"PARTNERKIT_API_SECRET oops-no-equals-sign\n", "line 1 is not KEY=VALUE"),
    (b"PARTNERKIT_TOLERANCE_S=soon\n", "PARTNERKIT_TOLERANCE_S must be a whole number"),
    # What systemd's EnvironmentFile= reads otherwise: the services would use another value than the commands.
    (b"PARTNERKIT_DB=x.db   # shared by the receiver and the worker\n", "line 1 has a `#` after a value"),
    (b"# logging\nexport PARTNERKIT_LOG_LEVEL=DEBUG\n", "line 2 has an `export ` prefix"),
])
def test_a_bad_config_file_is_one_line_with_exit_2(content, match, tmp_path):
    file = tmp_path / "partnerkit.env"
    if content is not None:
        file.write_bytes(content)
    code, stderr, stdout = run_in_process(["--config", str(file), "events", "list"], environment(tmp_path))
    assert_one_line_error(code, stderr, stdout, code=2, match=match)
    assert "oops-no-equals-sign" not in stderr  # a malformed line is not echoed: it may hold a secret


@pytest.mark.parametrize("how", ["--config", "PARTNERKIT_CONFIG"])
def test_a_config_path_that_is_a_directory_is_one_line_with_exit_2(how, tmp_path):
    """Named like a missing file, not as click's usage error about '--config' (which PARTNERKIT_CONFIG
    users never typed)."""
    args, env = ["events", "list"], environment(tmp_path)
    if how == "--config":
        args = ["--config", str(tmp_path), *args]
    else:
        env["PARTNERKIT_CONFIG"] = str(tmp_path)
    code, stderr, stdout = run_in_process(args, env)
    assert_one_line_error(code, stderr, stdout, code=2, match=f"{how} file {str(tmp_path)!r} is a directory")


def existing_database(tmp_path) -> None:
    """Create the migrated database `environment(tmp_path)` names."""
    open_db(tmp_path / "pk.db").conn.close()


def database_cases():
    for path, _ in leaves():
        if path not in NO_DATABASE:
            yield pytest.param(path, id=" ".join(path))


@pytest.mark.parametrize("path", list(database_cases()))
def test_an_unusable_database_path_is_one_line_with_exit_1(path, tmp_path):
    (tmp_path / "a-file").write_text("not a directory")
    env = environment(tmp_path, PARTNERKIT_DB=str(tmp_path / "a-file" / "pk.db"))
    code, stderr, stdout = run(path, [*path, *valid_args(path, tmp_path)], env)
    assert_one_line_error(code, stderr, stdout, code=1, match="cannot open database")


@pytest.mark.parametrize("db", ["directory", "garbage"])
def test_a_database_path_that_is_not_a_database(db, tmp_path):
    target = tmp_path / "not-a-db"
    if db == "directory":
        target.mkdir()
    else:
        target.write_bytes(b"this is not an SQLite file " * 200)
    code, stderr, stdout = run_in_process(["events", "list"], environment(tmp_path, PARTNERKIT_DB=str(target)))
    assert_one_line_error(code, stderr, stdout, code=1, match="cannot open database")


@pytest.mark.parametrize("args, match", [
    (["orders", "show", "424242"], "order 424242 is not known locally"),
    (["vouchers", "424242"], "order 424242 is not known locally"),
    (["recharges", "show", "424242"], "no recharge with id"),
    (["recharges", "show", "99999999999999999999999"], "no recharge with id"),
    (["recharges", "show", "²"], "no recharge with id"),
    (["recharges", "locate", "--local-id", "424242"], "no local recharge #424242"),
    (["recharges", "close", "424242", "--note", "n"], "no local recharge #424242"),
    (["orders", "close", "424242", "--note", "n"], "no order intent #424242"),
    (["drifts", "resolve", "d-unknown", "--note", "n"], "no drift with id 'd-unknown'"),
    (["drifts", "escalate", "d-unknown", "--note", "n"], "no drift with id 'd-unknown'"),
    (["drifts", "history", "d-unknown"], "no drift with id 'd-unknown'"),
    (["drifts", "show", "d-unknown"], "no drift with id 'd-unknown'"),
    (["transactions", "show", "424242"], "no transaction with id '424242' is stored or quarantined"),
    (["transactions", "show", " "], "no transaction with id ' ' is stored or quarantined"),
    # A day no sync has read: said so, never an empty list that reads as "no transactions".
    (["transactions", "list", "--date", "2024-05-01", "--format", "json"], "no sync has read the wallet transactions"),
    (["transactions", "list", "--date", "2024-05-01", "--quarantined"], "no sync has read the wallet transactions"),
])
def test_unknown_ids_are_one_line_with_exit_1(args, match, tmp_path):
    existing_database(tmp_path)  # an id unknown to a database that exists (finance's commands refuse a missing one)
    assert_one_line_error(*run_in_process(args, environment(tmp_path)), code=1, match=match)


def test_an_unreachable_provider_is_one_line_with_exit_1(tmp_path):
    # One write (the client retries for a few seconds first; the bad-database cases above show that
    # every provider command reaches the same edge).
    args = ["orders", "create", "--product-id", "7", "--denomination", "10", "--quantity", "1"]
    existing_database(tmp_path)  # a command that sends money refuses a missing one before any call (below)
    assert_one_line_error(*run_in_process(args, environment(tmp_path)), code=1, match="connection failed")


@pytest.mark.parametrize("path", [("recharges", "submit"), ("orders", "create")], ids=" ".join)
def test_a_command_that_sends_money_refuses_a_database_that_does_not_exist_with_exit_2(path, tmp_path):
    # Created on the spot, it would record a real debit where the worker never polls (a mistyped PARTNERKIT_DB).
    code, stderr, stdout = run_in_process([*path, *valid_args(path, tmp_path)], environment(tmp_path))
    assert_one_line_error(code, stderr, stdout, code=2, match=f"database {str(tmp_path / 'pk.db')!r} does not exist")
    assert not (tmp_path / "pk.db").exists()


@pytest.mark.parametrize("args, code, match", [
    # What the provider would refuse (a 400 of "Recharge submit") is a usage error before any call, the option named once.
    (["recharges", "submit", "--mobile", "12", "--operator-id", "1", "--amount", "10"], 2, "'12' is not a mobile number"),
    (["recharges", "submit", "--mobile", "+919876543210", "--operator-id", "1", "--amount", "10"], 2,
     "Invalid value for '--mobile': '+919876543210' is not a mobile number: 10 digits, no +91, spaces or dashes"),
    (["recharges", "submit", "--mobile", "９８７６５４３２１０", "--operator-id", "1", "--amount", "10"], 2, "mobile number"),
    (["recharges", "submit", "--mobile", "9876543210", "--operator-id", "1", "--amount", "12.5"], 2, "whole number"),
    (["recharges", "submit", "--mobile", "9876543210", "--operator-id", "1", "--amount", "199.50"], 2,
     "Invalid value for '--amount': '199.50' is not a whole number of rupees greater than zero (e.g. 199)"),
    (["recharges", "submit", "--mobile", "9876543210", "--operator-id", "1", "--amount", "0"], 2, "greater than zero"),
    (["recharges", "submit", "--mobile", "9876543210", "--operator-id", "1", "--amount", "1e999999999"], 2,
     "not an amount"),
    (["recharges", "submit", "--mobile", "9876543210", "--operator-id", "1", "--amount", "१०"], 2, "not an amount"),
    (["recharges", "submit", "--mobile", "9876543210", "--operator-id", "1", "--amount", "10",
      "--idempotency-key", "short"], 2, "Idempotency-Key must be 8 to 256 characters"),
    (["recharges", "submit", "--mobile", "9876543210", "--operator-id", "1", "--amount", "10",
      "--nickname", "x" * 41], 2, "Invalid value for '--nickname': must be letters and digits only"),
    (["recharges", "locate", "--mobile", "9876543210", "--amount", "zzz"], 2, "Invalid value for '--amount': 'zzz' is not an amount"),
    (["recharges", "locate", "--mobile", "98765", "--amount", "10"], 2, "'98765' is not a mobile number"),
    (["recharges", "locate", "--local-id", "1", "--mobile", "9876543210"], 2, "cannot be combined"),
    (["recharges", "locate"], 2, "give --local-id N"),
    (["orders", "create", "--product-id", "7", "--denomination", "10", "--quantity", "1", "--idempotency-key", "short"],
     2, "Idempotency-Key must be 8 to 256 characters"),
    (["orders", "create", "--product-id", "7", "--denomination", "10", "--quantity", "1", "--ref", " "], 2,
     "Invalid value for '--ref': must not be empty"),
    (["orders", "create", "--product-id", "7", "--denomination", "0", "--quantity", "1"], 2, "'0' is not greater than 0"),
    (["orders", "create", "--product-id", "7", "--denomination", "abc", "--quantity", "1"], 2,
     "Invalid value for '--denomination': 'abc' is not an amount"),  # named once, not "--denomination: 'abc' ..."
    (["orders", "create", "--product-id", "7", "--denomination", "1e999999", "--quantity", "1"], 2, "out of range"),
    (["orders", "create", "--product-id", "7", "--denomination", "12.345", "--quantity", "1"], 2, "2 decimal"),
    (["orders", "create", "--product-id", "7", "--denomination", "ten", "--quantity", "1"], 2, "not an amount"),
    (["orders", "sync", "--since", "yesterday"], 2, "not an ISO 8601 timestamp"),
    (["orders", "sync", "--since", "9999-12-31T23:59:59-23:00"], 2, "out of range"),
    (["webhooks", "update", "424242"], 2, "give at least one of --name, --url, --events, --active/--inactive"),
    (["transactions", "list"], 2, "give --date YYYY-MM-DD, or --reference / --order"),
    (["transactions", "list", "--type", "ORDER"], 2, "give --date YYYY-MM-DD, or --reference / --order"),
    (["transactions", "list", "--date", "2024-05-01", "--quarantined", "--order", "7"], 2, "cannot be combined"),
    (["transactions", "list", "--date", "2024-05-01", "--type", " "], 2, "must not be empty"),
    (["orders", "list", "--status", "bogus"], 2, "Invalid value for '--status': 'bogus' is not one of"),
    (["transactions", "list", "--reference", ""], 2, "must not be empty"),
    (["transactions", "list", "--date", "2999-12-31"], 2, "is in the future"),
    (["budget", "unblock", "--by", " "], 2, "must not be empty"),
    (["budget", "unblock", "--note", ""], 2, "must not be empty"),
])
def test_bad_values_are_one_line(args, code, match, tmp_path):
    existing_database(tmp_path)  # submit and create check their values after refusing a missing database
    result = run_in_process(args, environment(tmp_path))
    assert_one_line_error(*result, code=code, usage=code == 2, match=match)


def test_unwritable_outputs_are_one_line_with_exit_1(tmp_path):
    env = environment(tmp_path)
    existing_database(tmp_path)  # report and backup refuse a missing one before they look at their output
    (tmp_path / "a-file").write_text("x")
    assert_one_line_error(*run_in_process(["report", "--date", "2024-05-01", "--output",
                                           str(tmp_path / "a-file" / "r.html")], env), code=2, usage=True,
                          match="a-file' is not a directory")
    assert_one_line_error(*run_in_process(["backup", str(tmp_path / "a-file" / "b.db")], env), code=2, usage=True,
                          match="a-file' is not a directory")
    assert_one_line_error(*run_in_process(["backup", str(tmp_path / "a-file")], env), code=1, match="already exists")
    (tmp_path / "reports").write_text("a file where the report directory should be")
    db = open_db(tmp_path / "pk.db")  # a day a sync read in full: `report` matches it and writes its files
    for entity in ("recharges", "transactions"):
        record_sync(db, entity, from_day="2024-05-01", to_day="2024-05-01", started_at="2024-05-02T01:00:00Z",
                    count=0, days=["2024-05-01"], advance_to=None)
    db.conn.close()
    # The three files are a side effect of `report`: a report directory that cannot be written is a warning,
    # and the file asked for is still written (tests/reconcile/test_cli.py has both outputs).
    (tmp_path / "out").mkdir()
    exit_code, stderr, _ = run_in_process(["report", "--date", "2024-05-01", "--output", str(tmp_path / "out" / "r.html")],
                                          environment(tmp_path, PARTNERKIT_REPORT_DIR=str(tmp_path / "reports")))
    assert exit_code == 0 and "Traceback" not in stderr
    assert "warning: the report files were not written" in stderr and "reports is a file where a directory is needed" in stderr
    assert json.loads((tmp_path / "out" / "r.html").read_text())["date"] == "2024-05-01"  # --format json


@pytest.mark.parametrize("args", [["backup", "{missing}/b.db"],
                                  ["report", "--date", "2024-05-01", "--output", "{missing}/r.html"]])
def test_an_output_in_a_directory_that_does_not_exist_is_refused_and_nothing_is_made(args, tmp_path):
    # `partnerkit backup /tmp/x/nodir/b.db` and `report --output /nonexistent-dir/x.html` made the directories
    # (0700) and wrote there: a typo in a directory's name put the file where nobody would look for it.
    existing_database(tmp_path)
    missing = tmp_path / "nodir" / "sub"
    args = [arg.format(missing=missing) for arg in args]
    assert_one_line_error(*run_in_process(args, environment(tmp_path)), code=2, usage=True,
                          match=f"the directory {str(missing)!r} does not exist: create it first (nothing was written)")
    assert not (tmp_path / "nodir").exists()


@pytest.mark.parametrize("args, overrides, code, match", [
    (["serve", "--bind", "127.0.0.1:1"], {"PARTNERKIT_WEBHOOK_TOKENS": None}, 2, "no webhook token is accepted"),
    (["run", "--bind", "127.0.0.1:1"], {"PARTNERKIT_API_SECRET": None}, 2, "PARTNERKIT_API_SECRET is not set"),
    (["worker", "--once"], {"PARTNERKIT_API_BASE_URL": None}, 2, "PARTNERKIT_API_BASE_URL is not set"),
    # The budget is the key's (its rows are kept by the key's hash).
    (["budget", "show"], {"PARTNERKIT_API_KEY": None}, 2, "PARTNERKIT_API_KEY is not set"),
    (["budget", "unblock"], {"PARTNERKIT_API_KEY": None}, 2, "PARTNERKIT_API_KEY is not set"),
    # Named as where the path came from: no --config was given.
    (["orders", "list"], {"PARTNERKIT_CONFIG": "/nonexistent/partnerkit.env"}, 2,
     "PARTNERKIT_CONFIG file '/nonexistent/partnerkit.env' does not exist"),
])
def test_missing_settings_as_a_real_process(args, overrides, code, match, tmp_path):
    assert_one_line_error(*run_process(args, environment(tmp_path, **overrides)), code=code, match=match)
