"""What the receiver's views share: configuration, per-thread connections, tokens, metrics."""

from __future__ import annotations

import os
import threading
import time
from typing import Callable

from partnerkit.config import Config, WebhookToken
from partnerkit.crypto import Cipher
from partnerkit.store import Database
from partnerkit.store.db import connect

from receiver.metrics import Metrics
from receiver.tokens import accepted_tokens

# The provider may give up after 5 s (docs/receiver.md): a locked database must become a 503
# well before that, so the provider retries, rather than a timeout.
RECEIVER_BUSY_TIMEOUT_MS = 2000
TOKEN_REFRESH_S = 5.0  # tokens saved by `webhooks register` are picked up within this time
TOKEN_RETRY_S = 0.2    # ... or at once on a failed signature, at most this often


class Receiver:
    """One per app: opens a connection per thread (and per process after a fork)."""

    def __init__(self, config: Config, cipher: Cipher, metrics: Metrics, busy_timeout_ms: int, *,
                 on_tokens: Callable[..., None] = lambda *tokens: None) -> None:
        self.config = config
        self.cipher = cipher
        self.metrics = metrics
        self.busy_timeout_ms = busy_timeout_ms
        self._local = threading.local()
        self._tokens: tuple[WebhookToken, ...] = ()
        self._tokens_at = float("-inf")
        self._tokens_lock = threading.Lock()
        self._on_tokens = on_tokens  # e.g. the log redactor learns tokens saved at run time

    def db(self) -> Database:
        """This thread's connection, opened on first use."""
        local = self._local
        if getattr(local, "pid", None) != os.getpid():
            local.db = connect(self.config.db_path, busy_timeout_ms=self.busy_timeout_ms)
            local.pid = os.getpid()
        return local.db

    def tokens(self, *, refresh: bool = False) -> tuple[WebhookToken, ...]:
        """Accepted tokens, re-read from the database every few seconds (or now, if `refresh`)."""
        age = time.monotonic() - self._tokens_at
        if age > TOKEN_REFRESH_S or (refresh and age > TOKEN_RETRY_S):
            with self._tokens_lock:
                self._tokens = accepted_tokens(self.config, self.db(), self.cipher)
                self._on_tokens(*(t.token for t in self._tokens))
                self._tokens_at = time.monotonic()
        return self._tokens
