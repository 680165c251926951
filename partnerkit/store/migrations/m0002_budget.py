"""The shared, persistent API request budget (owned by the client)."""

VERSION = 2
NAME = "budget"
STATEMENTS: tuple[str, ...] = ()
