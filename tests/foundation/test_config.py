"""Configuration: DESIGN.md's table, validated at start-up, errors name the variable."""

import logging
from decimal import Decimal
from pathlib import Path

import pytest

from partnerkit.config import (ENV_NAMES, Config, ConfigError, WebhookToken, config_as_env, load_config, parse_env_text,
                               setting_origin)


def test_defaults_match_the_design_table():
    config = load_config(environ={})
    assert config.db_path == Path("./var/partnerkit.db")
    assert config.api_base_url is None
    assert config.webhook_tokens == ()
    assert config.tolerance_s == 300
    assert config.hourly_budget == 1000
    assert config.due_hour_utc == 1
    assert config.report_dir == Path("./var/reports")


def test_every_variable_is_read():
    config = load_config(environ={
        "PARTNERKIT_DB": "/tmp/x.db",
        "PARTNERKIT_API_BASE_URL": "https://partner.example.com/",
        "PARTNERKIT_API_KEY": "key",
        "PARTNERKIT_API_SECRET": "secret",
        "PARTNERKIT_WEBHOOK_TOKENS": "whsec_token_one_1, 42:whsec_token_two_2",
        "PARTNERKIT_VOUCHER_KEY": "vk-at-least-16-bytes",
        "PARTNERKIT_TOLERANCE_S": "120",
        "PARTNERKIT_HOURLY_BUDGET": "500",
        "PARTNERKIT_DUE_HOUR_UTC": "23",
        "PARTNERKIT_REPORT_DIR": "/tmp/reports",
        "PARTNERKIT_POLLER_BUDGET_SHARE": "0.25",
        "PARTNERKIT_INBOX_RETENTION_DAYS": "400",
    })
    assert config.db_path == Path("/tmp/x.db")
    assert config.api_base_url == "https://partner.example.com"
    assert config.api_root == "https://partner.example.com/api/v1"
    assert config.webhook_tokens == (WebhookToken("whsec_token_one_1"), WebhookToken("whsec_token_two_2", "42"))
    assert (config.tolerance_s, config.hourly_budget, config.due_hour_utc) == (120, 500, 23)
    assert config.poller_budget_share == Decimal("0.25")
    assert config.inbox_retention_days == 400


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("PARTNERKIT_TOLERANCE_S", "abc", "PARTNERKIT_TOLERANCE_S must be a whole number"),
        ("PARTNERKIT_TOLERANCE_S", "0", "PARTNERKIT_TOLERANCE_S must be between"),
        ("PARTNERKIT_HOURLY_BUDGET", "-5", "PARTNERKIT_HOURLY_BUDGET must be between"),
        ("PARTNERKIT_DUE_HOUR_UTC", "24", "PARTNERKIT_DUE_HOUR_UTC must be between 0 and 23"),
        ("PARTNERKIT_API_BASE_URL", "partner.example.com", "PARTNERKIT_API_BASE_URL must be an http"),
        ("PARTNERKIT_API_BASE_URL", "https://p.example.com/api/v1", "must not include the /api/v1"),
        ("PARTNERKIT_API_BASE_URL", "http://[::1", "PARTNERKIT_API_BASE_URL must be an http"),
        ("PARTNERKIT_API_BASE_URL", "http://p. example.com", "PARTNERKIT_API_BASE_URL must be an http"),
        ("PARTNERKIT_API_BASE_URL", "http://p.example.com:http", "PARTNERKIT_API_BASE_URL has an invalid port"),
        ("PARTNERKIT_API_BASE_URL", "https://p.example.com/#x", "must not carry a query or fragment"),
        ("PARTNERKIT_VOUCHER_KEY", "passphrase", "PARTNERKIT_VOUCHER_KEY must be at least 16 bytes"),
        ("PARTNERKIT_WEBHOOK_TOKENS", "a,,b", "PARTNERKIT_WEBHOOK_TOKENS has an empty entry"),
        ("PARTNERKIT_VOUCHER_KEY_PREVIOUS", "an-old-key-long-enough,,x", "PARTNERKIT_VOUCHER_KEY_PREVIOUS has an empty"),
        ("PARTNERKIT_VOUCHER_KEY_PREVIOUS", "an-old-key-long-enough, passphrase",
         "PARTNERKIT_VOUCHER_KEY_PREVIOUS entry 2 must be at least 16 bytes"),
        ("PARTNERKIT_VOUCHER_KEY_PREVIOUS", "an-old-key\nlong-enough", "PARTNERKIT_VOUCHER_KEY_PREVIOUS entry 1 holds a "
         "control character"),
        ("PARTNERKIT_WEBHOOK_TOKENS", "whsec_long_enough_1,7:short", "entry 2 is shorter than 16 characters"),
        ("PARTNERKIT_HTTP_TIMEOUT_S", "nan", "PARTNERKIT_HTTP_TIMEOUT_S must be"),
        ("PARTNERKIT_POLLER_BUDGET_SHARE", "1.5", "PARTNERKIT_POLLER_BUDGET_SHARE must be a fraction"),
        # NaN and sNaN parse as Decimals, and comparing them raised InvalidOperation: a traceback, exit 1.
        ("PARTNERKIT_POLLER_BUDGET_SHARE", "NaN", "PARTNERKIT_POLLER_BUDGET_SHARE must be a fraction greater than 0"),
        ("PARTNERKIT_POLLER_BUDGET_SHARE", "sNaN", "PARTNERKIT_POLLER_BUDGET_SHARE must be a fraction greater than 0"),
        ("PARTNERKIT_POLLER_BUDGET_SHARE", "-nan", "PARTNERKIT_POLLER_BUDGET_SHARE must be a fraction greater than 0"),
        ("PARTNERKIT_POLLER_BUDGET_SHARE", "Infinity", "PARTNERKIT_POLLER_BUDGET_SHARE must be a fraction greater"),
        ("PARTNERKIT_HTTP_TIMEOUT_S", "inf", "PARTNERKIT_HTTP_TIMEOUT_S must be between"),
        ("PARTNERKIT_HTTP_TIMEOUT_S", "-Infinity", "PARTNERKIT_HTTP_TIMEOUT_S must be between"),
        ("PARTNERKIT_WORKER_STALE_S", "60", "PARTNERKIT_WORKER_STALE_S must be between 300 and 604800"),
        ("PARTNERKIT_WORKER_STALE_S", "nan", "PARTNERKIT_WORKER_STALE_S must be a whole number"),
        ("PARTNERKIT_LOG_LEVEL", "LOUD", "PARTNERKIT_LOG_LEVEL must be one of"),
        ("PARTNERKIT_TYPO", "1", "PARTNERKIT_TYPO is not a partnerkit setting"),
    ],
)
def test_malformed_settings_are_named(name, value, message):
    with pytest.raises(ConfigError, match=message):
        load_config(environ={"PARTNERKIT_VOUCHER_KEY": "vk-at-least-16-bytes", name: value})


def test_previous_voucher_keys_are_read_beside_a_current_one_only():
    config = load_config(environ={"PARTNERKIT_VOUCHER_KEY": "vk-current-16-bytes",
                                  "PARTNERKIT_VOUCHER_KEY_PREVIOUS": " vk-old-one-16-bytes , vk-old-two-16-bytes"})
    assert config.voucher_key_previous == ("vk-old-one-16-bytes", "vk-old-two-16-bytes")
    assert "vk-old-one" not in repr(config)
    assert load_config(environ=config_as_env(config)) == config
    with pytest.raises(ConfigError, match="PARTNERKIT_VOUCHER_KEY_PREVIOUS is set but PARTNERKIT_VOUCHER_KEY is not") as info:
        load_config(environ={"PARTNERKIT_VOUCHER_KEY_PREVIOUS": "vk-old-one-16-bytes"})
    assert "vk-old-one" not in str(info.value)


@pytest.mark.parametrize("url", ["http://127.0.0.1:8090", "https://p.example.com/prefix/", "http://[::1]:8090",
                                 "http://localhost:8090/", "http://LocalHost:8090", "http://127.8.0.1"])
def test_good_base_urls_are_kept(url):
    assert load_config(environ={"PARTNERKIT_API_BASE_URL": url}).api_base_url == url.rstrip("/")


@pytest.mark.parametrize("url", [
    "http://api.provider.example", "http://api.provider.example:8090/", "http://10.0.0.5:8090",
    "http://0.0.0.0:8090", "http://[2001:db8::1]", "http://localhost.provider.example",
    "http://127.0.0.1.nip.io",  # a name that resolves to loopback is still a name: it could point anywhere
])
def test_plain_http_to_a_remote_host_is_refused(url):
    """The secret travels in X-API-Secret on every request, and order details bring codes and PINs back."""
    with pytest.raises(ConfigError, match=r"^PARTNERKIT_API_BASE_URL must be an https:// URL for a host other than "
                                          r"this machine, got .*: the API secret travels on every request .*voucher "
                                          r"codes and PINs.*loopback only: 127\.0\.0\.1, ::1 or localhost"):
        load_config(environ={"PARTNERKIT_API_BASE_URL": url})


@pytest.mark.parametrize("url, message", [
    ("https://user:pw-s3cr3t@api.provider.example", "must not carry a user name or password"),
    ("https://:pw-s3cr3t@api.provider.example/", "must not carry a user name or password"),
    ("http://user:pw-s3cr3t@127.0.0.1:8090", "must not carry a user name or password"),
    ("https://user:pw-s3cr3t@api.provider.example:99999", "must not carry a user name or password"),
    # The other messages quote the URL too: never with its password.
    ("http://user:pw-s3cr3t@[::1", "must be an http"),
    ("https://user:pw-s3cr3t@", "must be an http"),
    ("ftp://user:pw-s3cr3t@api.provider.example", "must be an http"),
    ("https://user:pw/s3cr3t@api.provider.example", "has an invalid port"),  # an unescaped / ends the host early
    ("https://user:pw#s3cr3t@api.provider.example", "has an invalid port"),
])
def test_a_password_in_the_base_url_is_refused_and_never_repeated(url, message):
    with pytest.raises(ConfigError, match=f"^PARTNERKIT_API_BASE_URL {message}") as info:
        load_config(environ={"PARTNERKIT_API_BASE_URL": url})
    assert "s3cr3t" not in str(info.value) and "***@" in str(info.value)


def test_require_names_the_missing_variable():
    with pytest.raises(ConfigError, match="PARTNERKIT_API_BASE_URL is not set"):
        load_config(environ={}).require("api_base_url")
    with pytest.raises(ConfigError, match="PARTNERKIT_WEBHOOK_TOKENS is not set; the receiver refuses to start"):
        load_config(environ={}).require("webhook_tokens")


def test_config_file_is_overridden_by_environment(tmp_path):
    file = tmp_path / "partnerkit.env"
    file.write_text('# comment\nPARTNERKIT_API_KEY="from-file"\nPARTNERKIT_TOLERANCE_S=60\nPARTNERKIT_DUE_HOUR_UTC=3\n')
    config = load_config(environ={"PARTNERKIT_TOLERANCE_S": "90"}, config_file=file)
    assert config.api_key == "from-file"
    assert config.tolerance_s == 90
    assert config.due_hour_utc == 3


def test_load_config_reads_the_file_partnerkit_config_names(tmp_path):
    """Every Python entry point (create_app(), a fork's own program) reads the file the CLI reads."""
    file = tmp_path / "partnerkit.env"
    file.write_text(f"PARTNERKIT_DB={tmp_path / 'configured.db'}\nPARTNERKIT_TOLERANCE_S=60\n")
    config = load_config(environ={"PARTNERKIT_CONFIG": str(file), "PARTNERKIT_TOLERANCE_S": "90"})
    assert config.db_path == tmp_path / "configured.db"
    assert config.tolerance_s == 90  # the environment overrides the file, as with --config


def test_load_config_reads_partnerkit_config_from_the_process_environment(tmp_path, monkeypatch):
    file = tmp_path / "partnerkit.env"
    file.write_text(f"PARTNERKIT_DB={tmp_path / 'configured.db'}\n")
    monkeypatch.setenv("PARTNERKIT_CONFIG", str(file))
    assert load_config().db_path == tmp_path / "configured.db"


def test_an_explicit_config_file_wins_over_partnerkit_config(tmp_path):
    """As the CLI's --config FILE wins over PARTNERKIT_CONFIG (click reads the variable only without the option)."""
    named, given = tmp_path / "named.env", tmp_path / "given.env"
    named.write_text("PARTNERKIT_DUE_HOUR_UTC=5\nPARTNERKIT_TOLERANCE_S=60\n")
    given.write_text("PARTNERKIT_DUE_HOUR_UTC=7\n")
    config = load_config(environ={"PARTNERKIT_CONFIG": str(named)}, config_file=given)
    assert config.due_hour_utc == 7
    assert config.tolerance_s == 300  # nothing of the other file is read


def test_an_empty_partnerkit_config_names_no_file():
    assert load_config(environ={"PARTNERKIT_CONFIG": ""}) == Config()


def test_a_missing_file_named_by_partnerkit_config_is_named_so(tmp_path):
    with pytest.raises(ConfigError, match="^PARTNERKIT_CONFIG file .*nope.env' does not exist or is not a file$"):
        load_config(environ={"PARTNERKIT_CONFIG": str(tmp_path / "nope.env")})
    with pytest.raises(ConfigError, match="^PARTNERKIT_CONFIG file .* is a directory"):
        load_config(environ={"PARTNERKIT_CONFIG": str(tmp_path)})


def test_worker_stale_s_is_read():
    assert load_config(environ={}).worker_stale_s == 900
    assert load_config(environ={"PARTNERKIT_WORKER_STALE_S": "3600"}).worker_stale_s == 3600


def test_the_example_env_file_is_read_as_written():
    example = Path(__file__).resolve().parents[2] / "deploy" / "partnerkit.env.example"
    config = load_config(environ={}, config_file=example)
    assert config.db_path == Path("/var/lib/partnerkit/partnerkit.db")
    assert config.api_base_url == "https://api.provider.example"  # the provider's host, not the partner's
    assert config.api_key is None and config.voucher_key is None


def test_missing_config_file_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="--config file .* does not exist"):
        load_config(environ={}, config_file=tmp_path / "nope.env")
    # Named by where the path came from: PARTNERKIT_CONFIG users never typed --config.
    with pytest.raises(ConfigError, match="^PARTNERKIT_CONFIG file .* does not exist"):
        load_config(environ={}, config_file=tmp_path / "nope.env", config_source="PARTNERKIT_CONFIG")


def test_secrets_stay_out_of_repr():
    config = load_config(environ={"PARTNERKIT_API_SECRET": "s3cr3t", "PARTNERKIT_WEBHOOK_TOKENS": "whsec_repr_token_1",
                                  "PARTNERKIT_API_KEY": "k3y", "PARTNERKIT_VOUCHER_KEY": "vk3y-at-least-16-bytes"})
    text = repr(config)
    for secret in ("s3cr3t", "whsec_repr_token_1", "k3y", "vk3y-at-least-16-bytes"):
        assert secret not in text


def test_config_round_trips_through_the_environment():
    config = load_config(environ={"PARTNERKIT_WEBHOOK_TOKENS": "whsec_round_trip_a,7:whsec_round_trip_b",
                                  "PARTNERKIT_TOLERANCE_S": "30"})
    assert load_config(environ=config_as_env(config)) == config


def test_empty_value_means_default():
    assert load_config(environ={"PARTNERKIT_TOLERANCE_S": "  "}) == Config()


@pytest.mark.parametrize("name", sorted(ENV_NAMES.values()))
def test_every_setting_reads_an_empty_value_as_not_set(name, tmp_path):
    # One rule for all (README, Configuration): PARTNERKIT_REPORT_DIR= is ./var/reports exactly as
    # PARTNERKIT_DB= is ./var/partnerkit.db, and deploy/partnerkit.env.example's empty credentials are unset.
    assert load_config(environ={name: ""}) == Config()
    file = tmp_path / "partnerkit.env"
    file.write_text(f"{name}=\n")
    assert load_config(environ={}, config_file=file) == Config()


def test_a_short_token_is_not_quoted_in_the_error():
    with pytest.raises(ConfigError) as info:
        load_config(environ={"PARTNERKIT_WEBHOOK_TOKENS": "s3cr3t-tok"})
    assert "s3cr3t-tok" not in str(info.value)


@pytest.mark.parametrize("content, message", [
    (b"\xff\xfe\x00P", "is not UTF-8 text"),
    (b"PARTNERKIT_TOLERANCE_S=30\n\nPARTNERKIT_API_SECRET hunter2-no-equals\n", "line 3 is not KEY=VALUE"),
    (b"# pasted without its name\nhunter2-bare-secret\n", "line 2 is not KEY=VALUE"),
    (b"PARTNERKIT_TOLERANCE_S=30\nPARTNERKIT_API_SECRET\n", "line 2 is not KEY=VALUE"),
])
def test_an_unreadable_config_file_is_named_without_its_content(tmp_path, content, message):
    file = tmp_path / "bad.env"
    file.write_bytes(content)
    with pytest.raises(ConfigError, match=message) as info:
        load_config(environ={}, config_file=file)
    assert "hunter2" not in str(info.value)


# --- a name meant for partnerkit but mistyped is refused, never ignored (its setting would stay at the default) ---

@pytest.mark.parametrize("line, meant", [
    ("PARTNERKT_DB=x.db", "PARTNERKIT_DB"),  # close to a known name, without the prefix
    ("partnerkit_db=x.db", "PARTNERKIT_DB"),  # the prefix in another case
    ("Partnerkit_DB=", "PARTNERKIT_DB"),  # even empty: it was meant to say "the default"
    ("PARTNERKIT_DBB=x.db", "PARTNERKIT_DB"),
    ("PARTNERKIT_API_KEYS=pk_live_1", "PARTNERKIT_API_KEY"),
    ("PARTNER_KIT_REPORT_DIR=/srv/reports", "PARTNERKIT_REPORT_DIR"),
])
def test_a_mistyped_name_in_the_file_is_named_with_its_line_and_the_setting_meant(line, meant, tmp_path):
    file = tmp_path / "partnerkit.env"
    file.write_text(f"# partnerkit\nTZ=UTC\n{line}\n", encoding="utf-8")
    name = line.partition("=")[0]
    case = " (names are case-sensitive)" if name.upper() == meant else ""
    with pytest.raises(ConfigError) as info:
        load_config(environ={}, config_file=file)
    assert str(info.value) == (f"--config file {str(file)!r} line 3: {name} is not a partnerkit setting: "
                               f"did you mean {meant}?{case}")
    assert "x.db" not in str(info.value) and "pk_live_1" not in str(info.value)  # the value is never quoted


def test_an_unknown_partnerkit_name_close_to_none_points_to_the_settings_table(tmp_path):
    file = tmp_path / "partnerkit.env"
    file.write_text("PARTNERKIT_SOMETHING_ELSE=1\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"^--config file .* line 1: PARTNERKIT_SOMETHING_ELSE is not a partnerkit "
                                          r"setting: see README's \"Configuration\" table for the known names$"):
        load_config(environ={}, config_file=file)


def test_other_programs_names_in_the_file_stay_allowed(tmp_path):
    file = tmp_path / "partnerkit.env"
    file.write_text("TZ=UTC\nPYTHONUNBUFFERED=1\nLANG=C.UTF-8\nPARTNERKIT_TOLERANCE_S=60\n", encoding="utf-8")
    assert load_config(environ={}, config_file=file).tolerance_s == 60


@pytest.mark.parametrize("name, message", [
    ("partnerkit_db", "partnerkit_db is not a partnerkit setting (set in the environment): did you mean "
                      "PARTNERKIT_DB? (names are case-sensitive)"),
    ("Partnerkit_DB", "Partnerkit_DB is not a partnerkit setting (set in the environment): did you mean "
                      "PARTNERKIT_DB? (names are case-sensitive)"),
    ("PARTNERKIT_DBB", "PARTNERKIT_DBB is not a partnerkit setting (set in the environment): did you mean "
                       "PARTNERKIT_DB?"),
    ("PARTNERKIT_REPORTDIR", "PARTNERKIT_REPORTDIR is not a partnerkit setting (set in the environment): did you "
                             "mean PARTNERKIT_REPORT_DIR?"),
    # Judged past the prefix every setting shares: nothing is close to FOO, so no name is guessed.
    ("PARTNERKIT_FOO", "PARTNERKIT_FOO is not a partnerkit setting (set in the environment): see README's "
                       "\"Configuration\" table for the known names"),
])
def test_a_mistyped_partnerkit_name_in_the_environment_is_refused_with_the_name_meant(name, message):
    with pytest.raises(ConfigError) as info:
        load_config(environ={name: "/srv/x.db"})
    assert str(info.value) == message


def test_unrelated_environment_variables_are_not_refused():
    # Only the PARTNERKIT_ prefix (in any case) marks a name as partnerkit's there: the environment holds
    # every other program's variables, and one that happens to look like a setting is not partnerkit's to judge.
    assert load_config(environ={"PARTNERKT_DB": "/srv/x.db", "TZ": "UTC", "PATH": "/bin"}) == Config()


@pytest.mark.parametrize("first", ["# partnerkit settings", "", "  "])
def test_a_byte_order_mark_before_a_comment_or_blank_line_is_dropped(first, tmp_path):
    """Notepad's "UTF-8 with BOM": every reader (systemd too) then reads the settings alike."""
    file = tmp_path / "partnerkit.env"
    file.write_bytes(f"\ufeff{first}\nPARTNERKIT_DB=/srv/a.db\n".encode("utf-8"))
    assert load_config(environ={}, config_file=file).db_path == Path("/srv/a.db")


def test_a_byte_order_mark_before_a_setting_is_named():
    # systemd's EnvironmentFile= would read the name as "\ufeffPARTNERKIT_DB" and drop the line: the services
    # would use the default database while the commands used /srv/a.db (tests/foundation/test_env_file.py).
    with pytest.raises(ConfigError, match="^--config file line 1 has a UTF-8 byte order mark before a setting .*: "
                                          "save the file as UTF-8 without BOM, or begin it with a comment line$"):
        parse_env_text("\ufeffPARTNERKIT_DB=/srv/a.db\n")


@pytest.mark.parametrize("environ, file_line, origin", [
    ({"PARTNERKIT_DB": "/srv/env.db"}, "PARTNERKIT_DB=/srv/file.db", "the environment"),
    ({}, "PARTNERKIT_DB=/srv/file.db", "--config file '{file}'"),
    ({"PARTNERKIT_DB": ""}, "PARTNERKIT_DB=/srv/file.db", None),  # empty in the environment: the default wins
    ({}, "PARTNERKIT_TOLERANCE_S=60", None),
])
def test_setting_origin_says_where_load_config_took_the_value_from(environ, file_line, origin, tmp_path):
    file = tmp_path / "partnerkit.env"
    file.write_text(file_line + "\n", encoding="utf-8")
    expected = origin.format(file=file) if origin else None
    assert setting_origin("PARTNERKIT_DB", environ=environ, config_file=file) == expected
    assert setting_origin("PARTNERKIT_DB", environ={"PARTNERKIT_CONFIG": str(file)}) == (
        f"PARTNERKIT_CONFIG file {str(file)!r}" if "file.db" in file_line else None)


# --- a --config file that holds a secret is named when other users can read it (README, "Configuration") ---

@pytest.mark.parametrize("mode, line, warned", [
    (0o644, "PARTNERKIT_API_SECRET=sk_live_1", "PARTNERKIT_API_SECRET"),
    (0o640, "PARTNERKIT_WEBHOOK_TOKENS=whsec_group_readable", "PARTNERKIT_WEBHOOK_TOKENS"),
    (0o600, "PARTNERKIT_API_SECRET=sk_live_1", None),
    (0o644, "PARTNERKIT_TOLERANCE_S=60", None),  # nothing secret in it
    (0o644, "PARTNERKIT_API_SECRET=", None),  # the example file's empty lines hold nothing yet
])
def test_a_config_file_with_a_secret_readable_by_others_is_warned_about(tmp_path, caplog, mode, line, warned):
    file = tmp_path / "partnerkit.env"
    file.write_text(f"PARTNERKIT_DB=/srv/a.db\n{line}\n")
    file.chmod(mode)
    with caplog.at_level(logging.WARNING, logger="partnerkit.config"):
        load_config(environ={}, config_file=file)
        setting_origin("PARTNERKIT_DB", environ={}, config_file=file)  # the same file read again: said once
    lines = [record.getMessage() for record in caplog.records if record.name == "partnerkit.config"]
    if warned is None:
        assert lines == []
    else:
        assert lines == [f"the --config file {file} can be read by other users; run: chmod 600 {file} "
                         f"(it holds {warned})"]
    assert "sk_live_1" not in caplog.text and "whsec_group_readable" not in caplog.text
