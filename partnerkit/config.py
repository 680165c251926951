"""Configuration: one object, read from the environment (and optionally a .env-style file, named by
the CLI's --config or by PARTNERKIT_CONFIG, which `load_config()` reads alike for every entry point).

Every setting is named in DESIGN.md's configuration table. `load_config()` validates all of
them at start-up and raises `ConfigError` naming the variable; the CLI turns that into a
one-line message and exit code 2. Commands that need a setting which has no default (the API
base URL, credentials, webhook tokens) ask for it with `Config.require(...)`, so a command that
does not need it is never refused for lack of it.
"""

from __future__ import annotations

import difflib
import ipaddress
import logging
import math
import os
import re
from dataclasses import dataclass, field, fields
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Mapping
from urllib.parse import urlsplit

from partnerkit.files import warn_if_readable_by_others

log = logging.getLogger(__name__)
PREFIX = "PARTNERKIT_"


class ConfigError(ValueError):
    """A setting is missing or malformed; the message names it."""


@dataclass(frozen=True)
class WebhookToken:
    """An accepted webhook signing token, optionally bound to one X-Webhook-ID."""

    token: str
    webhook_id: str | None = None

    def __repr__(self) -> str:  # never let a token reach a log through repr()
        return f"WebhookToken(webhook_id={self.webhook_id!r}, token='***')"


@dataclass(frozen=True)
class Config:
    """All of partnerkit's settings. Build it with `load_config()`; pass it in, never import it."""

    db_path: Path = Path("./var/partnerkit.db")
    api_base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)
    api_secret: str | None = field(default=None, repr=False)
    webhook_tokens: tuple[WebhookToken, ...] = field(default=(), repr=False)
    voucher_key: str | None = field(default=None, repr=False)
    voucher_key_previous: tuple[str, ...] = field(default=(), repr=False)
    tolerance_s: int = 300
    hourly_budget: int = 1000
    order_budget_per_minute: int = 100
    poller_budget_share: Decimal = Decimal("0.5")
    due_hour_utc: int = 1
    inbox_retention_days: int = 90
    worker_stale_s: int = 900
    report_dir: Path = Path("./var/reports")
    webhook_path: str = "/webhooks/partner"
    http_timeout_s: float = 10.0
    log_level: str = "INFO"

    def require(self, *names: str) -> "Config":
        """Raise ConfigError for the first of `names` (attribute names) that is unset."""
        for name in names:
            value = getattr(self, name)
            if value in (None, "", ()):
                raise ConfigError(f"{ENV_NAMES[name]} is not set; {REQUIRED_HINTS.get(name, 'set it in the environment or the --config file')}")
        return self

    @property
    def key_file(self) -> Path:
        """Where a generated voucher key is kept when PARTNERKIT_VOUCHER_KEY is not set."""
        return self.db_path.with_name(self.db_path.name + ".voucher.key")

    @property
    def api_root(self) -> str:
        """The base URL with the document's /api/v1 prefix."""
        self.require("api_base_url")
        return self.api_base_url.rstrip("/") + "/api/v1"  # type: ignore[union-attr]


ENV_NAMES = {
    "db_path": "PARTNERKIT_DB",
    "api_base_url": "PARTNERKIT_API_BASE_URL",
    "api_key": "PARTNERKIT_API_KEY",
    "api_secret": "PARTNERKIT_API_SECRET",
    "webhook_tokens": "PARTNERKIT_WEBHOOK_TOKENS",
    "voucher_key": "PARTNERKIT_VOUCHER_KEY",
    "voucher_key_previous": "PARTNERKIT_VOUCHER_KEY_PREVIOUS",
    "tolerance_s": "PARTNERKIT_TOLERANCE_S",
    "hourly_budget": "PARTNERKIT_HOURLY_BUDGET",
    "order_budget_per_minute": "PARTNERKIT_ORDER_BUDGET_PER_MINUTE",
    "poller_budget_share": "PARTNERKIT_POLLER_BUDGET_SHARE",
    "due_hour_utc": "PARTNERKIT_DUE_HOUR_UTC",
    "inbox_retention_days": "PARTNERKIT_INBOX_RETENTION_DAYS",
    "worker_stale_s": "PARTNERKIT_WORKER_STALE_S",
    "report_dir": "PARTNERKIT_REPORT_DIR",
    "webhook_path": "PARTNERKIT_WEBHOOK_PATH",
    "http_timeout_s": "PARTNERKIT_HTTP_TIMEOUT_S",
    "log_level": "PARTNERKIT_LOG_LEVEL",
}

# The settings `partnerkit config` masks: a --config file holding one of them should be private to its owner.
SECRET_SETTINGS = ("PARTNERKIT_API_KEY", "PARTNERKIT_API_SECRET", "PARTNERKIT_WEBHOOK_TOKENS", "PARTNERKIT_VOUCHER_KEY",
                   "PARTNERKIT_VOUCHER_KEY_PREVIOUS")

# PARTNERKIT_CONFIG names the file itself; it is read from the environment only.
KNOWN_NAMES = frozenset(ENV_NAMES.values()) | {"PARTNERKIT_CONFIG"}
SETTINGS_TABLE = "see README's \"Configuration\" table for the known names"

REQUIRED_HINTS = {
    "api_base_url": "give the provider's base URL without /api/v1, e.g. https://api.provider.example",
    "api_key": "the API key issued by the provider",
    "api_secret": "the API secret issued by the provider",
    "webhook_tokens": "the receiver refuses to start without at least one accepted signing token "
    "(comma-separated; ID:TOKEN binds a token to one X-Webhook-ID)",
}

_LOG_LEVELS = {"DEBUG", "INFO", "WARNING", "ERROR"}
MIN_TOKEN_LENGTH = 16
MIN_VOUCHER_KEY_BYTES = 16
_BOUND_TOKEN = re.compile(r"^(\d+):(.+)$")


def _int(name: str, raw: str, low: int, high: int) -> int:
    try:
        value = int(raw.strip())
    except ValueError:
        raise ConfigError(f"{name} must be a whole number, got {raw!r}") from None
    if not low <= value <= high:
        raise ConfigError(f"{name} must be between {low} and {high}, got {value}")
    return value


def _number(name: str, raw: str, low: float, high: float) -> float:
    try:
        value = float(raw.strip())
    except ValueError:
        raise ConfigError(f"{name} must be a number, got {raw!r}") from None
    if not math.isfinite(value) or not low <= value <= high:  # nan compares False either way: said here, not by luck
        raise ConfigError(f"{name} must be between {low} and {high}, got {raw.strip()}")
    return value


def _share(name: str, raw: str) -> Decimal:
    try:
        value = Decimal(raw.strip())
    except InvalidOperation:
        raise ConfigError(f"{name} must be a fraction between 0 and 1, got {raw!r}") from None
    # NaN and sNaN parse, but any comparison with them raises InvalidOperation; Infinity is out of range anyway.
    if not value.is_finite() or not Decimal(0) < value <= Decimal(1):
        raise ConfigError(f"{name} must be a fraction greater than 0 and at most 1, got {raw.strip()}")
    return value


def _shown_url(raw: str) -> str:
    """`raw` for an error message, quoted, with whatever could be a user name and password masked: the text
    between `//` (or the start) and the last `@`, so a password is never repeated even in a URL that does
    not parse."""
    if "@" not in raw:
        return repr(raw)
    head, _, tail = raw.rpartition("@")
    scheme, slashes, _ = head.partition("//")
    return repr(f"{scheme}{slashes}***@{tail}" if slashes else f"***@{tail}")


def _is_loopback(host: str) -> bool:
    """Whether `host` (urlsplit's hostname: lower case, no brackets) is this machine: `localhost`, 127.0.0.0/8
    or ::1. A name other than `localhost` is not resolved: it could point anywhere."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _url(name: str, raw: str) -> str:
    """The provider's base URL. Error messages quote it with any user name and password masked (`_shown_url`)."""
    value = raw.strip().rstrip("/")
    shown = _shown_url(raw)
    malformed = ConfigError(f"{name} must be an http(s) URL such as https://api.provider.example, got {shown}")
    try:
        parts = urlsplit(value)  # raises on an unclosed IPv6 bracket
    except ValueError:
        raise malformed from None
    if parts.scheme not in ("http", "https") or not parts.hostname or any(c.isspace() for c in value):
        raise malformed
    if "@" in parts.netloc:
        # `partnerkit config` shows the URL, and errors quote it: a password in it would be printed. The provider
        # authenticates with the X-API-Key and X-API-Secret headers, never with credentials in the URL.
        raise ConfigError(f"{name} must not carry a user name or password (user:password@): the provider "
                          "authenticates with PARTNERKIT_API_KEY and PARTNERKIT_API_SECRET, sent as headers; "
                          f"got {shown}")
    try:
        parts.port  # noqa: B018 - raises on a port that is not a number from 0 to 65535
    except ValueError:
        raise ConfigError(f"{name} has an invalid port, got {shown}") from None
    if parts.query or parts.fragment or value.endswith(("?", "#")):
        # partnerkit appends /api/v1/... to the base URL: it would land inside the query
        raise ConfigError(f"{name} must not carry a query or fragment (partnerkit appends /api/v1), got {shown}")
    if parts.path.rstrip("/").endswith("/api/v1"):
        raise ConfigError(f"{name} must not include the /api/v1 prefix (partnerkit adds it), got {shown}")
    if parts.scheme == "http" and not _is_loopback(parts.hostname):
        raise ConfigError(f"{name} must be an https:// URL for a host other than this machine, got {shown}: the API "
                          "secret travels on every request and order details bring voucher codes and PINs back, "
                          "in clear over http (http:// is accepted on loopback only: 127.0.0.1, ::1 or localhost, "
                          "e.g. the sandbox)")
    return value


def _header_value(name: str, raw: str) -> str:
    """A credential sent as an HTTP header: no control characters (a pasted newline would otherwise
    fail the first call as a connection error). The value is never quoted: it is a secret."""
    value = raw.strip()
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise ConfigError(f"{name} holds a control character (a line break or tab pasted with it?)")
    return value


def _voucher_key(name: str, raw: str) -> str:
    """A voucher key: the same floor the cipher applies when it is first used (a base64 key of 16
    bytes or more is longer still as text), checked here so that `config`, `serve` and `worker`
    refuse it at start-up instead of failing every voucher job later. Never quoted."""
    value = raw.strip()
    if len(value.encode("utf-8")) < MIN_VOUCHER_KEY_BYTES:
        raise ConfigError(f"{name} must be at least {MIN_VOUCHER_KEY_BYTES} bytes (e.g. 32 random bytes, base64)")
    return value


def misspelled_setting(name: str, *, in_file: bool) -> str | None:
    """What to tell about `name` if it is a partnerkit setting mistyped ("did you mean X?"), or None (a known
    name, or someone else's).

    A name is taken as meant for partnerkit when it starts with PARTNERKIT_ in any case (`partnerkit_db`),
    or, in a --config file (which holds partnerkit's settings), when it is close to a known one (`PARTNERKT_DB`,
    difflib's ratio at least 0.8): ignored, its setting would silently stay at its default. An unrelated name
    (`TZ`, `PYTHONUNBUFFERED`) is not: the file may set it for the services too."""
    if name in KNOWN_NAMES:
        return None
    upper = name.upper()
    ours = upper.startswith(PREFIX)
    if upper in KNOWN_NAMES:
        return f"did you mean {upper}? (names are case-sensitive)"
    if ours:  # past the prefix they share, which alone made PARTNERKIT_FOO "close" to PARTNERKIT_DB
        close = [PREFIX + match for match in difflib.get_close_matches(
            upper[len(PREFIX):], sorted(known[len(PREFIX):] for known in KNOWN_NAMES), n=1, cutoff=0.8)]
    else:
        close = difflib.get_close_matches(upper, sorted(KNOWN_NAMES), n=1, cutoff=0.8) if in_file else []
    if close:
        return f"did you mean {close[0]}?"
    return SETTINGS_TABLE if ours else None


def parse_previous_voucher_keys(raw: str) -> tuple[str, ...]:
    """Parse `KEY,KEY,...` (keys a rotation replaced, read only); raise ConfigError naming the entry."""
    name = "PARTNERKIT_VOUCHER_KEY_PREVIOUS"
    entries = [entry.strip() for entry in raw.split(",")]
    if not all(entries):
        raise ConfigError(f"{name} has an empty entry; separate keys with single commas")
    for number, entry in enumerate(entries, start=1):
        _voucher_key(f"{name} entry {number}", entry)
        # A line break or tab inside one entry is a paste gone wrong, not part of a key.
        _header_value(f"{name} entry {number}", entry)
    return tuple(entries)


def parse_webhook_tokens(raw: str) -> tuple[WebhookToken, ...]:
    """Parse `TOKEN,ID:TOKEN,...` into accepted tokens; raise ConfigError on empty or weak entries."""
    entries = [entry.strip() for entry in raw.split(",")]
    if not all(entries):
        raise ConfigError("PARTNERKIT_WEBHOOK_TOKENS has an empty entry; separate tokens with single commas")
    tokens = []
    for number, entry in enumerate(entries, start=1):
        bound = _BOUND_TOKEN.match(entry)
        token = WebhookToken(bound.group(2), bound.group(1)) if bound else WebhookToken(entry)
        # A token is the HMAC key that authenticates every delivery; a short one can be guessed,
        # and the log redactor would not recognise it. The message never quotes the token.
        if len(token.token) < MIN_TOKEN_LENGTH:
            raise ConfigError(f"PARTNERKIT_WEBHOOK_TOKENS entry {number} is shorter than {MIN_TOKEN_LENGTH} "
                              "characters; use the signing token the provider issued")
        tokens.append(token)
    return tuple(tokens)


# What a --config file may hold: only what every reader of the same file reads alike. The systemd units
# load it with EnvironmentFile= and compose with env_file, while --config reads it here; the three differ
# on inline comments, `export`, backslashes, `$` and text after a closing quote (systemd keeps ` # note`
# as part of the value and ignores an `export` line). Anything else is refused, naming the line, so the
# services and the commands can never read two different settings from one file.
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ENV_LINE = re.compile(r"[ \t]*(?P<key>[^=]*?)[ \t]*=[ \t]*(?P<value>.*?)[ \t]*")
_AMBIGUOUS = {
    "export": "an `export ` prefix (systemd's EnvironmentFile= ignores such a line): drop the `export `",
    "comment": "a `#` after a value (systemd's EnvironmentFile= keeps it as part of the value): put the comment "
               "on its own line, or quote the value with single quotes if the `#` belongs to it",
    "after_quote": "text after the closing quote (systemd's EnvironmentFile= appends it to the value)",
    "open_quote": "a quote that does not close on its own line",
    "backslash": "a backslash (systemd, docker compose and --config each unescape it differently)",
    "dollar": "a `$` outside single quotes (docker compose expands it): quote the value with single quotes",
    "semicolon": "a line starting with `;` (systemd reads it as a comment, --config would not): use `#`",
    "comment_continued": "a comment ending in a backslash (systemd before 254 reads the next line as comment too)",
    "name": "a name that is not a shell variable name (letters, digits, `_`): systemd ignores such a line",
    "bom": "a UTF-8 byte order mark before a setting (systemd's EnvironmentFile= reads it as part of the name and "
           "ignores the line): save the file as UTF-8 without BOM, or begin it with a comment line",
    "control": "a control character other than a tab",
    "space": "whitespace other than spaces and tabs around a value (python-dotenv strips it, systemd keeps it)",
}


def _value_problem(raw: str) -> str | None:
    """What the readers of an env file disagree on in the text after `=` (a key of _AMBIGUOUS), or None."""
    if not raw:
        return None
    if raw[0].isspace() or raw[-1].isspace():
        return "space"
    if raw[0] in "'\"":
        closing = raw.find(raw[0], 1)
        if closing < 0:
            return "open_quote"
        inner, rest = raw[1:closing], raw[closing + 1:]
        if "\\" in inner:  # first: `'a\'b'` is an escaped quote to some readers
            return "backslash"
        if rest:
            return "comment" if rest.lstrip().startswith("#") else "after_quote"
        return "dollar" if raw[0] == '"' and "$" in inner else None
    if raw.startswith("#") or re.search(r"\s#", raw):
        return "comment"
    if "\\" in raw:
        return "backslash"
    return "dollar" if "$" in raw else None


def parse_env_text(text: str, name: str = "--config file") -> dict[str, str]:
    """Parse KEY=VALUE lines (blank lines and `#` comment lines allowed; a value unquoted, or whole in single
    or double quotes) into a dict, the last of a repeated name winning.

    Only the forms that systemd's EnvironmentFile=, docker compose's env_file and python-dotenv all read
    alike are accepted; anything else is a ConfigError naming `name` and the line, never quoting it (it
    may hold a secret). A line that is not KEY=VALUE is refused too, where those readers would skip it
    and a setting would silently fall back to its default, and so is a name meant for partnerkit but
    mistyped (`misspelled_setting`), naming the line and the setting it is close to.

    A UTF-8 byte order mark (an editor's "UTF-8 with BOM") is dropped when the first line is blank or a
    comment; before a setting it is refused, since systemd reads it as part of that name and ignores the line.
    """
    values: dict[str, str] = {}
    bom = text.startswith("\ufeff")
    if bom:
        text = text[1:]
    for number, line in enumerate(text.split("\n"), start=1):
        stripped = line.strip(" \t")
        if bom and number == 1 and stripped and not stripped.startswith("#"):
            raise ConfigError(f"{name} line 1 has {_AMBIGUOUS['bom']}")
        if not stripped:
            continue
        if any(ord(c) < 32 and c != "\t" or ord(c) == 127 for c in line):
            problem = "control"
        elif stripped.startswith("#"):
            if stripped.endswith("\\"):
                problem = "comment_continued"
            else:
                continue
        elif stripped.startswith(";"):
            problem = "semicolon"
        else:
            match = _ENV_LINE.fullmatch(line)
            if match is None:
                raise ConfigError(f"{name} line {number} is not KEY=VALUE (or a comment)")
            key = match.group("key")
            if re.match(r"export[ \t]", key):
                problem = "export"
            elif not _ENV_NAME.fullmatch(key):
                problem = "name"
            elif (mistyped := misspelled_setting(key, in_file=True)) is not None:
                raise ConfigError(f"{name} line {number}: {key} is not a partnerkit setting: {mistyped}")
            else:
                raw = match.group("value")
                problem = _value_problem(raw)
                if problem is None:
                    values[key] = raw[1:-1] if raw[:1] in ("'", '"') else raw
                    continue
        raise ConfigError(f"{name} line {number} has {_AMBIGUOUS[problem]}")
    return values


def read_env_file(path: str | os.PathLike, name: str = "--config file") -> dict[str, str]:
    """Read a .env-style file (see `parse_env_text`) into a dict.

    A file that cannot be read or is not UTF-8 text is a ConfigError naming `name` (how the file was
    given: the --config option or PARTNERKIT_CONFIG) and the path.
    """
    file = Path(path)
    shown = f"{name} {str(file)!r}"
    if file.is_dir():
        raise ConfigError(f"{shown} is a directory; give the .env-style file itself")
    if not file.is_file():
        raise ConfigError(f"{shown} does not exist or is not a file")
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{shown} is not UTF-8 text") from None
    except OSError as exc:
        raise ConfigError(f"{shown} cannot be read: {exc.strerror}") from None
    return parse_env_text(text, shown)


def _gather(environ: Mapping[str, str] | None, config_file: str | os.PathLike | None,
            config_source: str) -> tuple[dict[str, str], dict[str, str]]:
    """The raw PARTNERKIT_* values `load_config` reads (the file's, overlaid by the environment's), and where
    each came from ("the environment", or "--config file 'PATH'" / "PARTNERKIT_CONFIG file 'PATH'")."""
    env = os.environ if environ is None else environ
    if config_file is None and env.get("PARTNERKIT_CONFIG"):
        config_file, config_source = env["PARTNERKIT_CONFIG"], "PARTNERKIT_CONFIG"
    source: dict[str, str] = {}
    origin: dict[str, str] = {}
    if config_file is not None:
        source.update(read_env_file(config_file, f"{config_source} file"))
        origin.update(dict.fromkeys(source, f"{config_source} file {str(config_file)!r}"))
        held = [name for name in SECRET_SETTINGS if source.get(name, "").strip()]
        if held:  # as the voucher key file is: a secret in a file others can read is no longer this user's alone
            warn_if_readable_by_others(config_file, f"the {config_source} file", log,
                                       also=f" (it holds {', '.join(held)})", once=True)
    for name, raw in env.items():
        # Only names that look like partnerkit's: the environment holds everybody else's variables too.
        if name.upper().startswith(PREFIX):
            mistyped = misspelled_setting(name, in_file=False)
            if mistyped is not None:
                raise ConfigError(f"{name} is not a partnerkit setting (set in the environment): {mistyped}")
            source[name], origin[name] = raw, "the environment"
    return source, origin


def setting_origin(name: str, environ: Mapping[str, str] | None = None,
                   config_file: str | os.PathLike | None = None, *, config_source: str = "--config") -> str | None:
    """Where `load_config` (given the same arguments) took the setting `name` (e.g. PARTNERKIT_DB) from: "the
    environment", "--config file 'PATH'" or "PARTNERKIT_CONFIG file 'PATH'"; None when it is the default
    (not set, or empty). For messages that name a path: it says which line to correct."""
    return setting_origins(environ, config_file, config_source=config_source).get(name)


def setting_origins(environ: Mapping[str, str] | None = None, config_file: str | os.PathLike | None = None, *,
                    config_source: str = "--config") -> dict[str, str]:
    """`setting_origin` of every setting that is not at its default, by name, from one reading of the file."""
    source, origin = _gather(environ, config_file, config_source)
    return {name: origin[name] for name, raw in source.items() if name in KNOWN_NAMES and raw.strip()}


def load_config(environ: Mapping[str, str] | None = None, config_file: str | os.PathLike | None = None, *,
                config_source: str = "--config") -> Config:
    """Build a validated Config from a .env-style file overlaid by the environment (`environ`, else os.environ).

    The file is `config_file` when given, else the one `PARTNERKIT_CONFIG` in that environment names (an
    empty value names none), exactly as the CLI's `--config FILE` wins over `PARTNERKIT_CONFIG`: so
    `receiver.app:create_app()` under plain gunicorn and a program calling `load_config()` read the
    file the commands read. `config_source` says where an explicit `config_file` came from (`--config`
    or `PARTNERKIT_CONFIG`), for errors; a file named by the variable is always called that.

    A name meant for partnerkit but mistyped is refused, never ignored (`misspelled_setting`): in the file,
    an unknown PARTNERKIT_* name, the prefix in another case, or a name close to a known one; in the
    environment, the first two (other variables there are not partnerkit's to judge)."""
    source, _ = _gather(environ, config_file, config_source)

    values: dict[str, object] = {}
    for name, raw in source.items():
        if name not in KNOWN_NAMES:
            continue  # another program's variable in the file (TZ, PYTHONUNBUFFERED): mistyped ones were refused
        if name == "PARTNERKIT_CONFIG" or raw.strip() == "":
            continue  # an empty value means "use the default", as in most .env tooling
        if name == "PARTNERKIT_DB":
            values["db_path"] = Path(raw.strip())
        elif name == "PARTNERKIT_API_BASE_URL":
            values["api_base_url"] = _url(name, raw)
        elif name == "PARTNERKIT_API_KEY":
            values["api_key"] = _header_value(name, raw)
        elif name == "PARTNERKIT_API_SECRET":
            values["api_secret"] = _header_value(name, raw)
        elif name == "PARTNERKIT_WEBHOOK_TOKENS":
            values["webhook_tokens"] = parse_webhook_tokens(raw)
        elif name == "PARTNERKIT_VOUCHER_KEY":
            values["voucher_key"] = _voucher_key(name, raw)
        elif name == "PARTNERKIT_VOUCHER_KEY_PREVIOUS":
            values["voucher_key_previous"] = parse_previous_voucher_keys(raw)
        elif name == "PARTNERKIT_TOLERANCE_S":
            values["tolerance_s"] = _int(name, raw, 1, 3600)
        elif name == "PARTNERKIT_HOURLY_BUDGET":
            values["hourly_budget"] = _int(name, raw, 1, 1_000_000)
        elif name == "PARTNERKIT_ORDER_BUDGET_PER_MINUTE":
            values["order_budget_per_minute"] = _int(name, raw, 1, 100_000)
        elif name == "PARTNERKIT_POLLER_BUDGET_SHARE":
            values["poller_budget_share"] = _share(name, raw)
        elif name == "PARTNERKIT_DUE_HOUR_UTC":
            values["due_hour_utc"] = _int(name, raw, 0, 23)
        elif name == "PARTNERKIT_INBOX_RETENTION_DAYS":
            # Never under 30: a dedup key must outlive the provider's manual retries (see inbox.RETENTION).
            values["inbox_retention_days"] = _int(name, raw, 30, 3650)
        elif name == "PARTNERKIT_WORKER_STALE_S":
            # From 5 minutes (the worker notes a job run at most once a minute) to a week (a weekly cron).
            values["worker_stale_s"] = _int(name, raw, 300, 7 * 24 * 3600)
        elif name == "PARTNERKIT_REPORT_DIR":
            values["report_dir"] = Path(raw.strip())
        elif name == "PARTNERKIT_WEBHOOK_PATH":
            path = raw.strip()
            if not path.startswith("/") or " " in path:
                raise ConfigError(f"{name} must be a URL path starting with '/', got {raw!r}")
            values["webhook_path"] = path
        elif name == "PARTNERKIT_HTTP_TIMEOUT_S":
            values["http_timeout_s"] = _number(name, raw, 0.1, 300)
        elif name == "PARTNERKIT_LOG_LEVEL":
            level = raw.strip().upper()
            if level not in _LOG_LEVELS:
                raise ConfigError(f"{name} must be one of {', '.join(sorted(_LOG_LEVELS))}, got {raw!r}")
            values["log_level"] = level
    if values.get("voucher_key_previous") and not values.get("voucher_key"):
        # With the generated key file, previous keys are its lines below the first (`partnerkit keys`).
        raise ConfigError("PARTNERKIT_VOUCHER_KEY_PREVIOUS is set but PARTNERKIT_VOUCHER_KEY is not: previous keys "
                          "are read only beside a current one (with the key file, they are its lines below the first)")
    return Config(**values)  # type: ignore[arg-type]


def config_as_env(config: Config) -> dict[str, str]:
    """The PARTNERKIT_* variables that `load_config(environ=...)` reads back as `config`, secrets in the clear
    (never log it). partnerkit's own processes do not use it (`partnerkit serve` hands gunicorn its own
    environment and PARTNERKIT_CONFIG); tests do, to run a command or a child process under a Config
    built in Python, and so may a fork."""
    env: dict[str, str] = {}
    for f in fields(config):
        value = getattr(config, f.name)
        if value in (None, ()):
            continue
        if f.name == "webhook_tokens":
            value = ",".join(f"{t.webhook_id}:{t.token}" if t.webhook_id else t.token for t in value)
        elif f.name == "voucher_key_previous":
            value = ",".join(value)
        env[ENV_NAMES[f.name]] = str(value)
    return env
