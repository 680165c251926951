"""What every command gets: the configuration (loaded once, lazily) and the store."""

from __future__ import annotations

import click

from partnerkit.config import Config, load_config
from partnerkit.store import Database, open_db


class AppContext:
    """Loads configuration and opens the store on first use, so `--help` never needs either."""

    def __init__(self, config_file: str | None) -> None:
        self.config_file = config_file
        self._config: Config | None = None
        self._db: Database | None = None

    @property
    def config(self) -> Config:
        if self._config is None:
            self._config = load_config(config_file=self.config_file)
        return self._config

    @property
    def db(self) -> Database:
        if self._db is None:
            self._db = open_db(self.config.db_path)
        return self._db


pass_app = click.make_pass_decorator(AppContext)
