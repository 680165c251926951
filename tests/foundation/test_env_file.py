"""The --config file is the file the systemd units load with EnvironmentFile=: partnerkit accepts only what
systemd and python-dotenv read alike, and refuses the rest naming the line (README, "Configuration").

`systemd_environment_file` below is systemd's own reader (src/basic/env-file.c `parse_env_file_internal`,
as `load_env_file` uses it for EnvironmentFile=, with the service manager dropping names that are not
valid), written out in Python: the tests hold partnerkit's reading to it, and to python-dotenv's.
"""

from __future__ import annotations

import io
import re

import pytest
from dotenv import dotenv_values
from hypothesis import given, settings
from hypothesis import strategies as st

from partnerkit.config import ConfigError, load_config, parse_env_text

_WHITESPACE, _NEWLINE, _COMMENTS, _SHELL_NEED_ESCAPE = " \t\n\r", "\n\r", "#;", "\"\\`$"


def systemd_environment_file(text: str, *, version: int = 252) -> dict[str, str]:
    """What a service gets from EnvironmentFile= (systemd `version`; Debian 12 ships 252)."""
    result: dict[str, str] = {}
    state, key, value = "PRE_KEY", [], []
    key_ws: int | None = None
    value_ws: int | None = None

    def push(chomp: bool) -> None:
        name = "".join(key[:key_ws] if key_ws is not None else key)
        text_value = "".join(value[:value_ws] if chomp and value_ws is not None else value)
        if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):  # env_assignment_is_valid(); others are dropped
            result[name] = text_value

    for c in text:
        if state == "PRE_KEY":
            if c in _COMMENTS:
                state = "COMMENT"
            elif c not in _WHITESPACE:
                state, key, key_ws = "KEY", [c], None
        elif state == "KEY":
            if c in _NEWLINE:
                state, key = "PRE_KEY", []
            elif c == "=":
                state, value, value_ws = "PRE_VALUE", [], None
            else:
                if c not in _WHITESPACE:
                    key_ws = None
                elif key_ws is None:
                    key_ws = len(key)
                key.append(c)
        elif state == "PRE_VALUE":
            if c in _NEWLINE:
                push(chomp=False)
                state, key = "PRE_KEY", []
            elif c == "'":
                state = "SINGLE_QUOTE_VALUE"
            elif c == '"':
                state = "DOUBLE_QUOTE_VALUE"
            elif c == "\\":
                state = "VALUE_ESCAPE"
            elif c not in _WHITESPACE:
                state = "VALUE"
                value.append(c)
        elif state == "VALUE":
            if c in _NEWLINE:
                push(chomp=True)
                state, key = "PRE_KEY", []
            elif c == "\\":
                state, value_ws = "VALUE_ESCAPE", None
            else:
                if c not in _WHITESPACE:
                    value_ws = None
                elif value_ws is None:
                    value_ws = len(value)
                value.append(c)
        elif state == "VALUE_ESCAPE":
            state = "VALUE"
            if c not in _NEWLINE:
                value.append(c)
        elif state == "SINGLE_QUOTE_VALUE":
            if c == "'":
                state = "PRE_VALUE"
            else:
                value.append(c)
        elif state == "DOUBLE_QUOTE_VALUE":
            if c == '"':
                state = "PRE_VALUE"
            elif c == "\\":
                state = "DOUBLE_QUOTE_VALUE_ESCAPE"
            else:
                value.append(c)
        elif state == "DOUBLE_QUOTE_VALUE_ESCAPE":
            state = "DOUBLE_QUOTE_VALUE"
            if c in _SHELL_NEED_ESCAPE:
                value.append(c)
            elif c != "\n":
                value.extend(("\\", c))
        elif state == "COMMENT":
            if c == "\\":
                state = "COMMENT_ESCAPE"
            elif c in _NEWLINE:
                state = "PRE_KEY"
        elif state == "COMMENT_ESCAPE":  # before 254 a backslash-newline went on with the comment
            state = "PRE_KEY" if version >= 254 and c in _NEWLINE else "COMMENT"
    if state in ("PRE_VALUE", "VALUE", "VALUE_ESCAPE", "SINGLE_QUOTE_VALUE", "DOUBLE_QUOTE_VALUE",
                 "DOUBLE_QUOTE_VALUE_ESCAPE"):
        push(chomp=state == "VALUE")
    return result


def dotenv(text: str) -> dict[str, str]:
    """What python-dotenv (what --config used to read with) makes of the text."""
    return {k: v for k, v in dotenv_values(stream=io.StringIO(text)).items() if v is not None}


def test_the_model_reads_as_the_reviewer_measured_on_systemd_252():
    # README's table of what is refused rests on these readings (systemd/systemd#12527).
    text = "PARTNERKIT_DB=/srv/split.db   # shared by the receiver and the worker\nexport PARTNERKIT_LOG_LEVEL=DEBUG\n"
    assert systemd_environment_file(text) == {"PARTNERKIT_DB": "/srv/split.db   # shared by the receiver and the worker"}
    assert dotenv(text) == {"PARTNERKIT_DB": "/srv/split.db", "PARTNERKIT_LOG_LEVEL": "DEBUG"}


@pytest.mark.parametrize("text, line, says", [
    ("PARTNERKIT_DB=/srv/split.db   # shared by the receiver and the worker\n", 1, "a `#` after a value"),
    ("# settings\n\nPARTNERKIT_DB=/srv/a.db\t# tab before it\n", 3, "a `#` after a value"),
    ("PARTNERKIT_DB='/srv/a.db' # quoted, then a comment\n", 1, "a `#` after a value"),
    ("PARTNERKIT_DB=#not-a-comment-to-systemd\n", 1, "a `#` after a value"),
    ("PARTNERKIT_TOLERANCE_S=60\nexport PARTNERKIT_LOG_LEVEL=DEBUG\n", 2, "an `export ` prefix"),
    ("PARTNERKIT_API_SECRET='abc'def\n", 1, "text after the closing quote"),
    ('PARTNERKIT_API_SECRET="abc\n', 1, "a quote that does not close on its own line"),
    ("PARTNERKIT_API_SECRET=ab\\cd\n", 1, "a backslash"),
    ('PARTNERKIT_API_SECRET="ab\\ncd"\n', 1, "a backslash"),  # a line break to dotenv, `\n` to systemd
    ("PARTNERKIT_API_SECRET='ab\\'cd'\n", 1, "a backslash"),
    ("PARTNERKIT_DB=continued \\\n", 1, "a backslash"),
    ("PARTNERKIT_API_SECRET=ab${HOME}cd\n", 1, "a `$` outside single quotes"),
    ('PARTNERKIT_API_SECRET="ab$cd"\n', 1, "a `$` outside single quotes"),
    ("; a comment to systemd only\n", 1, "a line starting with `;`"),
    ("# a comment that goes on \\\nPARTNERKIT_DB=/srv/a.db\n", 1, "a comment ending in a backslash"),
    ("PARTNERKIT-DB=/srv/a.db\n", 1, "a name that is not a shell variable name"),
    ("\ufeffPARTNERKIT_DB=/srv/a.db\n", 1, "a UTF-8 byte order mark before a setting"),  # systemd: "\ufeffPARTNERKIT_DB"
    ("PARTNERKIT_DB=/srv/a.db\x0b\n", 1, "a control character"),
    ("PARTNERKIT_DB=\u00a0/srv/a.db\n", 1, "whitespace other than spaces and tabs"),
    ("PARTNERKIT_DB=/srv/a.db\nPARTNERKIT_API_SECRET hunter2\n", 2, "is not KEY=VALUE"),
])
def test_what_systemd_reads_otherwise_is_refused_naming_the_line(text, line, says, tmp_path):
    file = tmp_path / "partnerkit.env"
    file.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match=f"^--config file {re.escape(repr(str(file)))} line {line} (has|is) ") as info:
        load_config(environ={}, config_file=file)
    assert says in str(info.value)
    assert "hunter2" not in str(info.value) and "split.db" not in str(info.value)  # lines are never quoted
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("text, expected", [
    ("PARTNERKIT_DB=/srv/a.db\n", {"PARTNERKIT_DB": "/srv/a.db"}),
    ("  # indented comment\n\n\t\nPARTNERKIT_DB = /srv/a.db  \n", {"PARTNERKIT_DB": "/srv/a.db"}),
    ("PARTNERKIT_API_SECRET=a#b\n", {"PARTNERKIT_API_SECRET": "a#b"}),  # no space before it: not a comment
    ("PARTNERKIT_API_SECRET='a #b$c \"d'\n", {"PARTNERKIT_API_SECRET": 'a #b$c "d'}),
    ('PARTNERKIT_API_SECRET="a #b \'c"\n', {"PARTNERKIT_API_SECRET": "a #b 'c"}),
    ("PARTNERKIT_REPORT_DIR=/srv/my reports\n", {"PARTNERKIT_REPORT_DIR": "/srv/my reports"}),
    ("PARTNERKIT_API_KEY=pk_'quoted'_inside\n", {"PARTNERKIT_API_KEY": "pk_'quoted'_inside"}),
    ("PARTNERKIT_API_KEY=\nPARTNERKIT_API_SECRET=''\n", {"PARTNERKIT_API_KEY": "", "PARTNERKIT_API_SECRET": ""}),
    ("PARTNERKIT_TOLERANCE_S=30\r\nPARTNERKIT_TOLERANCE_S=60\r\n", {"PARTNERKIT_TOLERANCE_S": "60"}),  # CRLF; last wins
    ("OTHER_TOOL=value=with=equals\n", {"OTHER_TOOL": "value=with=equals"}),
    # A byte order mark ("UTF-8 with BOM") before a comment or a blank line: systemd takes it for the start of
    # a name, which ends at the line's end without `=`, so the line is dropped whole, as a comment is.
    ("\ufeff# partnerkit\nPARTNERKIT_DB=/srv/a.db\n", {"PARTNERKIT_DB": "/srv/a.db"}),
    ("\ufeff\nPARTNERKIT_DB=/srv/a.db\n", {"PARTNERKIT_DB": "/srv/a.db"}),
])
def test_what_is_accepted_reads_as_systemd_and_dotenv_read_it(text, expected, tmp_path):
    file = tmp_path / "partnerkit.env"
    file.write_bytes(text.encode("utf-8"))
    assert parse_env_text(file.read_text(encoding="utf-8")) == expected
    assert systemd_environment_file(text) == expected
    assert dotenv(text) == expected


_VALUE_CHARS = st.sampled_from(list("ab1 \t#'\"\\$;=_/") + ["\u00a0", "é"])
_PLAIN = st.text(st.sampled_from(list("ab1 #=_/'\"$")), max_size=8)
_VALUES = st.one_of(st.text(_VALUE_CHARS, max_size=8), _PLAIN, _PLAIN.map(lambda v: f"'{v}'"),
                    _PLAIN.map(lambda v: f'"{v}"'))
_LINES = st.one_of(
    st.tuples(st.sampled_from(["PARTNERKIT_DB", "A_1", " B", "export C", "1D", "E F", ";G", "H"]),
              st.sampled_from(["=", " = ", "=\t"]), _VALUES).map("".join),
    st.sampled_from(["", "  ", "# c", "#c\\", " ;c", "no equals sign"]),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(_LINES, max_size=6))
def test_any_file_accepted_reads_the_same_to_systemd_252_and_254_and_dotenv(lines):
    for text in ["\n".join(lines) + "\n", *(line + "\n" for line in lines)]:  # the file, and each line alone
        try:
            ours = parse_env_text(text)
        except ConfigError:
            continue  # refused, with its line named (above)
        assert ours == systemd_environment_file(text, version=252) == systemd_environment_file(text, version=254)
        assert ours == dotenv(text)
