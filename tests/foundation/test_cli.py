"""The CLI edge: one-line errors, exit codes, no tracebacks."""

import subprocess
import sys

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


def test_sandbox_speed_0_freezes_the_clock_as_docs_sandbox_md_says():
    process = subprocess.Popen([sys.executable, "-m", "partnerkit", "sandbox", "--port", "0", "--speed", "0"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        first = process.stdout.readline()
    finally:
        process.terminate()
        process.wait(timeout=10)
    assert first.startswith("sandbox listening on http://127.0.0.1:") and "speed x0)" in first, process.stderr.read()
