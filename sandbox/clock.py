"""SandboxClock: sandbox time, optionally faster than real time, advanceable by tests."""
from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone


class SandboxClock:
    """Aware-UTC clock running `speed` times faster than real time; advance() jumps forward."""

    def __init__(self, speed: float = 1.0, start: datetime | None = None):
        if speed < 0:
            raise ValueError("speed must be >= 0")
        start = start or datetime.now(timezone.utc)
        if start.tzinfo is None:
            raise ValueError("start must be an aware datetime")
        self._lock = threading.Lock()
        self._base = start.astimezone(timezone.utc)
        self._mono = time.monotonic()
        self._speed = float(speed)

    @property
    def speed(self) -> float:
        """Sandbox seconds per real second."""
        return self._speed

    @speed.setter
    def speed(self, value: float) -> None:
        if value < 0:
            raise ValueError("speed must be >= 0")
        with self._lock:
            self._rebase()
            self._speed = float(value)

    def _rebase(self) -> None:
        now_mono = time.monotonic()
        self._base += timedelta(seconds=(now_mono - self._mono) * self._speed)
        self._mono = now_mono

    def now(self) -> datetime:
        """Current sandbox time, aware UTC."""
        with self._lock:
            elapsed = (time.monotonic() - self._mono) * self._speed
            return self._base + timedelta(seconds=elapsed)

    def advance(self, seconds: float) -> datetime:
        """Jump sandbox time forward by `seconds`; return the new now()."""
        if seconds < 0:
            raise ValueError("the sandbox clock only moves forward")
        with self._lock:
            self._rebase()
            self._base += timedelta(seconds=seconds)
        return self.now()

    def real_seconds(self, sandbox_seconds: float) -> float:
        """How many real seconds `sandbox_seconds` of sandbox time take (frozen clock: 1:1)."""
        return sandbox_seconds / self._speed if self._speed > 0 else sandbox_seconds


def iso(dt: datetime | None) -> str | None:
    """RFC 3339 UTC with a Z suffix and millisecond precision."""
    if dt is None:
        return None
    return dt.astimezone(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
