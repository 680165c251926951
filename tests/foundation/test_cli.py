"""The CLI edge: one-line errors, exit codes, no tracebacks."""

import json
import os
import socket
import subprocess
import sys

import pytest
import requests
from click.testing import CliRunner

from partnerkit.cli import cli


def run(*args, env=None):
    return CliRunner().invoke(cli, list(args), env=env or {}, catch_exceptions=False)


def test_help_lists_commands():
    result = run("--help")
    assert result.exit_code == 0
    assert "config" in result.output


def test_config_shows_values_with_secrets_masked():
    result = run("config", "--format", "json", env={"PARTNERKIT_API_SECRET": "s3cr3t", "PARTNERKIT_TOLERANCE_S": "42"})
    assert result.exit_code == 0
    assert "s3cr3t" not in result.output
    assert '"value": "42"' in result.output


def test_bad_setting_is_one_line_and_exit_2():
    proc = subprocess.run([sys.executable, "-m", "partnerkit.cli", "config"], capture_output=True, text=True,
                          env={"PARTNERKIT_TOLERANCE_S": "soon", "PATH": ""})
    assert proc.returncode == 2
    assert proc.stderr.strip() == "Error: PARTNERKIT_TOLERANCE_S must be a whole number, got 'soon'"
    assert "Traceback" not in proc.stderr


def test_missing_config_file_exit_2(tmp_path):
    result = run("--config", str(tmp_path / "missing.env"), "config")
    assert result.exit_code == 2
    assert "does not exist" in result.output


def test_config_option_wins_over_partnerkit_config(tmp_path):
    """README, Configuration: `--config FILE` (or PARTNERKIT_CONFIG=FILE); the option names the file when both do."""
    named, given = tmp_path / "named.env", tmp_path / "given.env"
    named.write_text(f"PARTNERKIT_DB={tmp_path / 'named.db'}\n")
    given.write_text(f"PARTNERKIT_DB={tmp_path / 'given.db'}\n")
    shown = lambda result: {row["variable"]: row["value"] for row in json.loads(result.stdout)}  # noqa: E731
    assert shown(run("config", "--format", "json", env={"PARTNERKIT_CONFIG": str(named)}))["PARTNERKIT_DB"] == \
        str(tmp_path / "named.db")
    assert shown(run("--config", str(given), "config", "--format", "json",
                     env={"PARTNERKIT_CONFIG": str(named)}))["PARTNERKIT_DB"] == str(tmp_path / "given.db")


@pytest.mark.parametrize("args", [
    ["status"], ["backup", "copy.db"], ["events", "list"], ["events", "prune"], ["orders", "list"],
    ["orders", "show", "5001"], ["vouchers", "5001"], ["recharges", "list"], ["recharges", "show", "100001"],
    ["recharges", "locate", "--local-id", "1"],  # a local intent: with a mistyped DB, "no local recharge #1"
    ["transactions", "list", "--date", "2025-03-14"], ["transactions", "show", "700001"], ["account", "show"],
])
def test_commands_that_read_the_local_store_refuse_a_database_that_does_not_exist(args, tmp_path):
    # A mistyped PARTNERKIT_DB gave a new empty database on the spot: `status` said "nothing needs
    # attention", `backup` "backed up" an empty file, the listings "no events received yet".
    missing = tmp_path / "typo" / "partnerkit.db"
    args = [str(tmp_path / a) if a == "copy.db" else a for a in args]
    result = CliRunner().invoke(cli, args, env={"PARTNERKIT_DB": str(missing)})
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr.strip() == (f"Error: cannot open database {str(missing)!r}: it does not exist "
                                     "(check PARTNERKIT_DB or --config; the worker creates it)")
    assert not missing.parent.exists() and not (tmp_path / "copy.db").exists()


def test_sandbox_speed_0_freezes_the_clock_as_docs_sandbox_md_says():
    process = subprocess.Popen([sys.executable, "-m", "partnerkit", "sandbox", "--port", "0", "--speed", "0"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = process.stdout.readline()
    finally:
        process.terminate()
        process.wait(timeout=10)
    assert first.startswith("sandbox listening on http://127.0.0.1:") and "speed x0)" in first, process.stderr.read()


@pytest.mark.parametrize("command", [["-m", "partnerkit", "sandbox"], ["-m", "sandbox"]],
                         ids=["partnerkit sandbox", "python -m sandbox"])
def test_sandbox_webhook_options_reach_its_settings(command):
    """--envelope, --chaos, --no-http-webhooks and --fixed-ids (docs/sandbox.md, "Running it"), on both entry
    points."""
    process = subprocess.Popen([sys.executable, *command, "--port", "0", "--envelope", "timestamp", "--chaos",
                                "--no-http-webhooks", "--fixed-ids"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    try:
        first = process.stdout.readline()
        assert first.startswith("sandbox listening on "), process.stderr.read()
        banner = [process.stdout.readline() for _ in range(4)][-1]
        settings = requests.get(f"{first.split()[3]}/sandbox/settings", timeout=10).json()
    finally:
        process.terminate()
        process.communicate(timeout=10)
    assert (settings["webhook_envelope"], settings["webhook_chaos"], settings["allow_http_webhooks"],
            settings["id_block"]) == ("timestamp", True, False, 0)
    assert banner.strip() == ("webhooks registered now: envelope timestamp, chaos on, plain http to loopback "
                              "refused (PATCH /sandbox/webhooks/ID switches a registered one)")


def test_the_clis_envelope_choices_are_the_sandboxs():
    from partnerkit.cli.sandbox_cmd import ENVELOPES
    from sandbox.envelopes import FORMS

    assert ENVELOPES == FORMS


@pytest.mark.parametrize("serving", [False, True], ids=["while starting", "while serving"])
def test_sandbox_stops_cleanly_on_sigterm_as_on_ctrl_c(serving):
    # systemd, docker stop and `kill` send SIGTERM: the sandbox says it stopped and exits 0, as on Ctrl-C,
    # whether the signal comes while it starts or (the usual case) once it serves: werkzeug's serve_forever
    # swallows the interrupt, and the line was lost there (a flaky test on a slow machine).
    process = subprocess.Popen([sys.executable, "-m", "partnerkit", "sandbox", "--port", "0"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = process.stdout.readline()
        assert first.startswith("sandbox listening on ")
        if serving:  # an answer proves the server loop is running
            base = first.split()[3]
            assert requests.get(f"{base}/sandbox/stats", timeout=10).status_code == 200
        process.terminate()
        out, err = process.communicate(timeout=10)
    finally:
        process.kill()
    assert process.returncode == 0, err
    assert "sandbox stopped" in out + err and "Traceback" not in err


# --- a database that does not exist: said once by a command that creates it, refused by one that sends money ---

def _clean_env(**values):
    """Only these PARTNERKIT_* variables (CliRunner overlays the test process's environment)."""
    env = {name: None for name in os.environ if name.upper().startswith("PARTNERKIT_")}
    env.update(values)
    return env


def _created(path, origin, made=()):
    dirs = ", ".join(repr(str(folder)) for folder in made)
    first = f"a first start; created director{'y' if len(made) == 1 else 'ies'} {dirs} for it, mode 0700" if made else \
        "a first start"
    return (f"warning: database {str(path)!r} ({origin}) did not exist and was created ({first}); if partnerkit "
            "already keeps its database elsewhere, check PARTNERKIT_DB or --config: the receiver, the worker and the "
            "commands must all use the same one")


@pytest.mark.parametrize("how", ["environment", "--config", "PARTNERKIT_CONFIG", "default"])
def test_a_command_that_creates_the_database_says_so_once_with_the_absolute_path_and_its_origin(
        how, sandbox_server, tmp_path, monkeypatch):
    # `--config ../var/try/partnerkit.env webhooks list` from a subdirectory created sub/var/try/partnerkit.db
    # without a word, and showed the saved webhook token as not saved.
    client = sandbox_server.clients[0]
    (tmp_path / "var" / "try").mkdir(parents=True)
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    env = _clean_env(PARTNERKIT_API_BASE_URL=sandbox_server.base_url, PARTNERKIT_API_KEY=client.key,
                     PARTNERKIT_API_SECRET=client.secret)
    args = ["webhooks", "list", "--format", "json"]
    relative = "relative to the working directory"
    made = ()  # the directories created for the database: named too (a typo in a directory's name makes one)
    if how == "environment":
        env["PARTNERKIT_DB"] = str(tmp_path / "typo.db")
        path, origin = tmp_path / "typo.db", "PARTNERKIT_DB, from the environment"
    elif how == "default":
        path, made = tmp_path / "sub" / "var" / "partnerkit.db", (tmp_path / "sub" / "var",)
        origin = f"PARTNERKIT_DB not set: the default 'var/partnerkit.db', {relative}"
    else:
        (tmp_path / "var" / "try" / "partnerkit.env").write_text("PARTNERKIT_DB=var/try/partnerkit.db\n")
        path = tmp_path / "sub" / "var" / "try" / "partnerkit.db"
        made = (tmp_path / "sub" / "var", tmp_path / "sub" / "var" / "try")
        origin = f"PARTNERKIT_DB 'var/try/partnerkit.db' from {how} file '../var/try/partnerkit.env', {relative}"
        if how == "--config":
            args = ["--config", "../var/try/partnerkit.env", *args]
        else:
            env["PARTNERKIT_CONFIG"] = "../var/try/partnerkit.env"
    first = CliRunner().invoke(cli, args, env=env)
    assert first.exit_code == 0, first.output
    assert first.stderr.splitlines()[0] == _created(path, origin, made)
    assert first.stderr.count("did not exist") == 1 and path.exists()
    again = CliRunner().invoke(cli, args, env=env)
    assert again.exit_code == 0 and "did not exist" not in again.stderr


def test_a_failed_call_on_a_new_database_still_named_it_first(sandbox_server, tmp_path):
    # A refused key (401) after the database was created: the warning came first, so the path is on screen.
    missing = tmp_path / "typo" / "pk.db"
    env = _clean_env(PARTNERKIT_DB=str(missing), PARTNERKIT_API_BASE_URL=sandbox_server.base_url,
                     PARTNERKIT_API_KEY="pk_not_issued", PARTNERKIT_API_SECRET="sk_not_issued_secret")
    result = CliRunner().invoke(cli, ["webhooks", "list"], env=env)
    assert result.exit_code == 1
    warning, error = result.stderr.splitlines()
    assert warning == _created(missing, "PARTNERKIT_DB, from the environment", [missing.parent])
    assert error.startswith("Error: ")


SENDS = [
    (["recharges", "submit", "--mobile", "9876543210", "--operator-id", "1", "--amount", "10"], "recharge"),
    (["orders", "create", "--product-id", "7", "--denomination", "10", "--quantity", "1"], "order"),
]


@pytest.mark.parametrize("args, what", SENDS, ids=["recharges submit", "orders create"])
def test_a_command_that_sends_money_refuses_a_database_that_does_not_exist(args, what, tmp_path, monkeypatch):
    # `PARTNERKIT_DB=/tmp/x/typo.db partnerkit recharges submit ...` created typo.db without a word, made a real
    # debit and recorded it where the worker never polls. Refused before any call: the provider's port is
    # closed, so a call would have been exit 1 ("connection failed").
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    env = _clean_env(PARTNERKIT_API_BASE_URL=f"http://127.0.0.1:{closed}", PARTNERKIT_API_KEY="k",
                     PARTNERKIT_API_SECRET="s")
    (tmp_path / "sub").mkdir()
    (tmp_path / "partnerkit.env").write_text("PARTNERKIT_DB=typo/partnerkit.db\n")
    monkeypatch.chdir(tmp_path / "sub")
    for extra, path, origin in [
        ({"PARTNERKIT_DB": str(tmp_path / "x" / "typo.db")}, tmp_path / "x" / "typo.db",
         "PARTNERKIT_DB, from the environment"),
        ({"PARTNERKIT_CONFIG": "../partnerkit.env"}, tmp_path / "sub" / "typo" / "partnerkit.db",
         "PARTNERKIT_DB 'typo/partnerkit.db' from PARTNERKIT_CONFIG file '../partnerkit.env', relative to the "
         "working directory"),
    ]:
        result = CliRunner().invoke(cli, args, env={**env, **extra})
        assert (result.exit_code, result.stdout) == (2, "")
        assert result.stderr.strip() == (
            f"Error: database {str(path)!r} does not exist ({origin}): no {what} was sent, as it would be recorded "
            "in a new, empty database; check PARTNERKIT_DB or --config, or, if this is a first start, create the "
            "database on purpose by starting the worker once (`partnerkit worker --once`) and run this command again")
        assert not path.parent.exists()
    # Given with --config, the advice carries it: run literally, `partnerkit worker --once` alone would read no file.
    given = CliRunner().invoke(cli, ["--config", "../partnerkit.env", *args], env=env)
    assert given.exit_code == 2
    assert given.stderr.strip().endswith(
        "create the database on purpose by starting the worker once (`partnerkit --config ../partnerkit.env worker "
        "--once`) and run this command again")


def test_a_mistyped_setting_in_the_environment_suggests_the_name_meant_even_to_partnerkit_config():
    # It said "see `partnerkit config` for the known ones": the very command that failed.
    result = CliRunner().invoke(cli, ["config"], env=_clean_env(PARTNERKIT_DBB="x.db"))
    assert result.exit_code == 2
    assert result.stderr.strip() == ("Error: PARTNERKIT_DBB is not a partnerkit setting (set in the environment): "
                                     "did you mean PARTNERKIT_DB?")


@pytest.mark.parametrize("line", ["PARTNERKT_DB=x.db", "partnerkit_db=x.db", "Partnerkit_DB="])
def test_a_mistyped_name_in_the_config_file_is_exit_2_naming_the_line(line, tmp_path):
    file = tmp_path / "partnerkit.env"
    file.write_text(f"TZ=UTC\n{line}\n")
    result = CliRunner().invoke(cli, ["--config", str(file), "config"], env=_clean_env())
    assert result.exit_code == 2 and result.stdout == ""
    assert result.stderr.startswith(f"Error: --config file {str(file)!r} line 2: {line.partition('=')[0]} is not a "
                                    "partnerkit setting: did you mean PARTNERKIT_DB?")
    assert not (tmp_path / "var").exists()
