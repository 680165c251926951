"""The CLI edge: one-line errors, exit codes, no tracebacks."""

import json
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
